package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
)

// crdSchema checks objects against a CRD of manifests/crd as the API
// server checks a create: the OpenAPI schema, then the CEL rules. It does
// not default or prune; the objects checked are complete.
type crdSchema struct {
	crd        *apiextensions.CustomResourceDefinition
	openAPI    apiservervalidation.SchemaValidator
	structural *structuralschema.Structural
	rules      *cel.Validator
}

func loadCRD(t testing.TB, file string) *crdSchema {
	t.Helper()
	raw, err := manifests.FS.ReadFile("crd/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var v1 apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &v1); err != nil {
		t.Fatal(err)
	}
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &crd, nil); err != nil {
		t.Fatal(err)
	}
	// With one version, the internal form holds its schema at the top.
	props := crd.Spec.Validation.OpenAPIV3Schema
	openAPI, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	structural, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	return &crdSchema{crd: &crd, openAPI: openAPI, structural: structural, rules: cel.NewValidator(structural, true, celconfig.PerCallLimit)}
}

// validate returns what the API server would refuse obj for. As there,
// the CEL rules are not run on an object whose schema errors block them
// (a value too long, a required field missing, a wrong type).
func (s *crdSchema) validate(obj map[string]any) field.ErrorList {
	return s.validateUpdate(obj, nil)
}

// validateUpdate returns what the API server would refuse an update of
// old to obj for: validate's checks, and the rules that compare with the
// object as it was (oldSelf). A nil old is a create.
func (s *crdSchema) validateUpdate(obj, old map[string]any) field.ErrorList {
	errs := apiservervalidation.ValidateCustomResource(nil, obj, s.openAPI)
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return errs
		}
	}
	var oldObj any
	if old != nil {
		oldObj = old
	}
	celErrs, _ := s.rules.Validate(context.Background(), nil, s.structural, obj, oldObj, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDsPassTheAPIServersChecks: the API server would install every
// CRD: among its checks, each CEL rule's estimated cost is within the
// per-rule and per-CRD limits, which long rules over lists (a pool's 50
// budgets, each with six schedule rules) can exceed.
func TestCRDsPassTheAPIServersChecks(t *testing.T) {
	entries, err := manifests.FS.ReadDir("crd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			s := loadCRD(t, e.Name())
			s.crd.Status.StoredVersions = []string{s.crd.Spec.Versions[0].Name}
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), s.crd); len(errs) > 0 {
				t.Errorf("the API server would refuse %s:\n%v", e.Name(), errs.ToAggregate())
			}
		})
	}
}

// TestPoolDurationFloors: a pool's expireAfter and terminationGracePeriod
// are refused below v1alpha1.MinExpireAfter and
// v1alpha1.MinTerminationGracePeriod, in any units, and accepted from
// them; the message names the field and the floor.
func TestPoolDurationFloors(t *testing.T) {
	crd := loadCRD(t, "nodeforge.dev_nodepools.yaml")
	short := func(d time.Duration) string { // 1h0m0s as 1h
		return strings.TrimSuffix(strings.TrimSuffix(d.String(), "0s"), "0m")
	}
	for _, tc := range []struct {
		field string
		floor time.Duration
		also  []string // other spellings, accepted
	}{
		{"expireAfter", v1alpha1.MinExpireAfter, []string{"Never", "720h"}},
		{"terminationGracePeriod", v1alpha1.MinTerminationGracePeriod, []string{"48h"}},
	} {
		for value, ok := range map[string]bool{
			tc.floor.String():                        true,
			short(tc.floor):                          true,
			fmt.Sprintf("%ds", tc.floor/time.Second): true,
			(tc.floor - time.Second).String():        false,
			"0s":                                     false,
			"1s":                                     false,
		} {
			pool := budgetPool("@daily")
			tmpl, _, _ := unstructured.NestedMap(pool, "spec", "template", "spec")
			tmpl[tc.field] = value
			_ = unstructured.SetNestedMap(pool, tmpl, "spec", "template", "spec")
			errs := crd.validate(pool)
			want := fmt.Sprintf("%s must be at least %s", tc.field, short(tc.floor))
			switch {
			case ok && len(errs) > 0:
				t.Errorf("%s %s refused: %v", tc.field, value, errs.ToAggregate())
			case !ok && (len(errs) != 1 || errs[0].Field != "spec.template.spec."+tc.field || !strings.HasPrefix(errs[0].Detail, want)):
				t.Errorf("%s %s: refused with %v; want one error on the field saying %q", tc.field, value, errs.ToAggregate(), want)
			}
		}
		for _, value := range tc.also {
			pool := budgetPool("@daily")
			_ = unstructured.SetNestedField(pool, value, "spec", "template", "spec", tc.field)
			if errs := crd.validate(pool); len(errs) > 0 {
				t.Errorf("%s %s refused: %v", tc.field, value, errs.ToAggregate())
			}
		}
	}
}
