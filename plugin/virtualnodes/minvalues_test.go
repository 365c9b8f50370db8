package virtualnodes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// minValuesPool is the bench catalog's pool, its instance types held to
// at least n distinct ones per claim.
func minValuesPool(t *testing.T, n int32) *pool {
	t.Helper()
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	types := benchCatalog()
	names := make([]string, len(types))
	for i, it := range types {
		names[i] = it.Name
	}
	// As the API server admits it: operator In, with at least n values.
	np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: names, MinValues: ptr.To(n)}}
	cat := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: types}}
	pl, err := newPool(np, cat)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// TestMinValuesKeepsEnoughInstanceTypesOpen: with minValues 70 on
// instance types, a claim keeps at least 70 options though the plugin
// keeps 60 by default, the claim's requirement carries minValues to the
// launch, a pod only 50 types can hold is refused with a reason naming
// minValues, and one that joins a claim never narrows it below 70.
func TestMinValuesKeepsEnoughInstanceTypesOpen(t *testing.T) {
	h := newHarness(t, []*pool{minValuesPool(t, 70)})
	ctx := context.Background()
	c, s := h.schedule(ctx, testPod("small", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if len(c.options) < 70 {
		t.Errorf("claim keeps %d instance types, want at least minValues 70", len(c.options))
	}
	for _, r := range c.object().Spec.Requirements {
		if r.Key == corev1.LabelInstanceTypeStable && (r.MinValues == nil || *r.MinValues != 70 || len(r.Values) < 70) {
			t.Errorf("claim's instance-type requirement %+v does not carry minValues 70 with at least 70 values", r)
		}
	}
	// The catalog's types have 1..400 cpu: a 350-cpu pod fits 50 of them.
	_, s = h.schedule(ctx, testPod("big", "350", "1Gi"))
	if s.IsSuccess() {
		t.Fatal("a pod only 50 instance types hold was nominated under minValues 70")
	}
	if !strings.Contains(s.Message(), "minValues") {
		t.Errorf("refusal %q does not name minValues", s.Message())
	}
	// 329 cpu, with or without the small pod's 1, fits at least 70
	// types: nominated, to a claim that keeps 70 or more.
	if got, s := h.schedule(ctx, testPod("fits", "329", "1Gi")); !s.IsSuccess() || len(got.options) < 70 {
		t.Fatalf("a pod 70 types hold was refused or narrowed its claim below 70: %v", s.Message())
	}
}
