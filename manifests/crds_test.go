package manifests_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
)

// TestChartCRDsAreTheGeneratedOnes: the chart renders each CRD of crd/
// as controller-gen wrote it, only labelled and kept on uninstall, and
// none with crds.install=false.
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	objs := render(t, required...)
	files, err := fs.Glob(manifests.FS, "crd/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in crd/: %v", err)
	}
	for _, f := range files {
		raw, err := manifests.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &want); err != nil {
			t.Fatal(err)
		}
		var got apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "CustomResourceDefinition", want.Name).Object, &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
			t.Errorf("the chart's %s differs from %s (-want,+got):\n%s", want.Name, f, diff)
		}
		if got.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s: annotations %v, want helm.sh/resource-policy: keep", want.Name, got.Annotations)
		}
		if got.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: labels %v lack the chart's", want.Name, got.Labels)
		}
	}
	for _, o := range render(t, append(required, "crds.install=false")...) {
		if o.GetKind() == "CustomResourceDefinition" {
			t.Errorf("crds.install=false rendered CRD %s", o.GetName())
		}
	}
}

// previousChart writes this chart as releases before CRDs were templates
// shipped it: the CRDs in crds/, which Helm installs once and never
// upgrades, and no CRD template. The NodePool CRD lacks spec.weight, a
// field standing for one a later release adds.
func previousChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nodeforge")
	err := fs.WalkDir(manifests.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if path == "crd" || strings.HasPrefix(path, "crd/") {
			target = filepath.Join(dir, "crds"+strings.TrimPrefix(path, "crd"))
		}
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if path == "templates/crds.yaml" {
			return nil
		}
		raw, err := manifests.FS.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, raw, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	old := withoutWeight(t)
	raw, err := yaml.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crds", "nodeforge.dev_nodepools.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withoutWeight is the NodePool CRD without spec.weight.
func withoutWeight(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	raw, err := manifests.FS.ReadFile("crd/nodeforge.dev_nodepools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	crd.APIVersion, crd.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	for i, v := range crd.Spec.Versions {
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if _, ok := spec.Properties["weight"]; !ok {
			t.Fatalf("the NodePool CRD's version %s has no spec.weight to leave out", v.Name)
		}
		delete(spec.Properties, "weight")
		// The rules that name it came after it.
		spec.XValidations = slices.DeleteFunc(spec.XValidations, func(r apiextensionsv1.ValidationRule) bool { return strings.Contains(r.Rule, "weight") })
		crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		crd.Spec.Versions[i].AdditionalPrinterColumns = nil
	}
	return &crd
}

// servedNodePoolCRD reads the NodePool CRD from the API server (the
// client's scheme has no apiextensions types: read as unstructured).
func servedNodePoolCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "nodepools.nodeforge.dev"}, u); err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// hasWeight reports whether the served NodePool CRD has spec.weight.
func hasWeight(t *testing.T) bool {
	t.Helper()
	_, ok := servedNodePoolCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["weight"]
	return ok
}

// TestHelmUpgradeUpgradesCRDs walks docs/install.md's upgrade with helm
// against a real API server. A cluster of the previous release: its CRDs
// applied from crds/ (here the NodePool CRD lacks a field the new release
// has, spec.weight), a NodePool, the release installed from the previous
// chart. helm upgrade to this chart with --take-ownership and, the CRDs'
// fields being kubectl's, --force-conflicts, as the guide says for that
// first upgrade with Helm 4, must serve the new field, keep the
// NodePool readable, and store a weight written afterwards; a later
// helm upgrade needs no flag; helm uninstall leaves the CRDs and the
// NodePool.
//
// The package's control plane already holds the CRDs and the RBAC, applied
// by the sandbox as the manifests in this directory: the install takes them
// over too, and the uninstall removes the RBAC, which later tests of this
// package (renders and dry runs) do not need.
func TestHelmUpgradeUpgradesCRDs(t *testing.T) {
	ctx := context.Background()
	// The previous release's CRDs, as its guide applied them:
	// kubectl apply --server-side -f manifests/crds/.
	old := withoutWeight(t)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	if hasWeight(t) {
		t.Fatal("the previous NodePool CRD still serves spec.weight")
	}
	values := []string{"--set", "provisioner.clusterName=demo", "--set", "image.repository=" + repository}
	if _, err := runHelm(t, append([]string{"install", "nodeforge", previousChart(t), "--namespace", "nf-upgrade", "--create-namespace", "--take-ownership", "--force-conflicts"}, values...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = runHelm(t, "uninstall", "nodeforge", "--namespace", "nf-upgrade") })

	pool := &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "upgrade"},
		Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{
			NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
		}}, Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"}},
	}
	if err := kube.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(ctx, pool) })
	setWeight := func() *int32 {
		t.Helper()
		var np v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), &np); err != nil {
			t.Fatalf("reading NodePool %s: %v", pool.Name, err)
		}
		np.Spec.Weight = ptr.To[int32](7)
		if err := kube.Update(ctx, &np); err != nil {
			t.Fatalf("updating NodePool %s: %v", pool.Name, err)
		}
		return np.Spec.Weight
	}
	if w := setWeight(); w != nil && *w == 7 {
		t.Fatal("the previous CRD stored spec.weight: it would not tell an upgraded CRD from an old one")
	}

	// The first upgrade to a chart whose CRDs are templates. Without
	// --force-conflicts server-side apply refuses: kubectl owns the
	// CRDs' spec.versions.
	if _, err := runHelm(t, append([]string{"upgrade", "nodeforge", ".", "--namespace", "nf-upgrade", "--take-ownership", "--server-side=true", "--force-conflicts"}, values...)...); err != nil {
		t.Fatal(err)
	}
	if !hasWeight(t) {
		t.Error("after helm upgrade the NodePool CRD does not serve spec.weight")
	}
	if w := setWeight(); w == nil || *w != 7 {
		t.Errorf("after helm upgrade a NodePool's spec.weight reads back %v, want 7", w)
	}
	if crd := servedNodePoolCRD(t); crd.Annotations["meta.helm.sh/release-name"] != "nodeforge" || crd.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the NodePool CRD's annotations after helm upgrade: %v, want the release's and keep", crd.Annotations)
	}

	// Later upgrades need nothing more.
	if _, err := runHelm(t, append([]string{"upgrade", "nodeforge", ".", "--namespace", "nf-upgrade"}, values...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := runHelm(t, "uninstall", "nodeforge", "--namespace", "nf-upgrade"); err != nil {
		t.Fatal(err)
	}
	var np v1alpha1.NodePool
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), &np); err != nil {
		t.Errorf("after helm uninstall NodePool %s: %v; want it and its CRD kept", pool.Name, err)
	} else if np.Spec.Weight == nil || *np.Spec.Weight != 7 {
		t.Errorf("after helm uninstall NodePool %s has weight %v, want 7", pool.Name, np.Spec.Weight)
	}
}
