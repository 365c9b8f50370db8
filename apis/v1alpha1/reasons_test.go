package v1alpha1

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestBudgetReasonsAreTheConstants: the reasons a budget accepts (the
// CRD's enum, from the kubebuilder marker) are exactly the reason
// constants of the methods a budget holds back, so a method named in code
// can always be named in a budget, and no budget names a method that does
// not exist.
func TestBudgetReasonsAreTheConstants(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crd", "nodeforge.dev_nodepools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	reasons := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["disruption"].Properties["budgets"].Items.Schema.Properties["reasons"].Items.Schema
	var enum []DisruptionReason
	for _, v := range reasons.Enum {
		var s string
		if err := yaml.Unmarshal(v.Raw, &s); err != nil {
			t.Fatal(err)
		}
		enum = append(enum, DisruptionReason(s))
	}
	want := []DisruptionReason{DisruptionReasonEmpty, DisruptionReasonUnderutilized, DisruptionReasonDrifted, DisruptionReasonExpired, DisruptionReasonUnhealthy}
	if !slices.Equal(enum, want) {
		t.Errorf("the CRD's budget reasons are %v, the constants %v", enum, want)
	}
	if slices.Contains(enum, DisruptionReasonInterrupted) {
		t.Error("a budget accepts Interrupted, which no budget can hold back")
	}
}
