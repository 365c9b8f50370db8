package catalog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// overlayOf is an overlay named name selecting family (any family if
// ""), changed by edit.
func overlayOf(name, family string, edit func(*v1alpha1.NodeOverlaySpec)) v1alpha1.NodeOverlay {
	o := v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if family != "" {
		o.Spec.Requirements = []v1alpha1.LabelRequirement{{Key: v1alpha1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{family}}}
	}
	edit(&o.Spec)
	return o
}

func adjust(a string) func(*v1alpha1.NodeOverlaySpec) {
	return func(s *v1alpha1.NodeOverlaySpec) { s.PriceAdjustment = ptr.To(a) }
}

// overlayTypes: c7.large and m7.large, each on demand and spot in one
// zone, with 4Gi of memory.
func overlayTypes() []v1alpha1.InstanceType {
	mk := func(name, family, od, spot string) v1alpha1.InstanceType {
		return testobj.InstanceType(name).Label(v1alpha1.LabelInstanceFamily, family).Capacity("cpu", "2", "memory", "4Gi", "pods", "29").
			Offering("zone-a", v1alpha1.CapacityTypeOnDemand, od).Offering("zone-a", v1alpha1.CapacityTypeSpot, spot).Obj()
	}
	return []v1alpha1.InstanceType{mk("c7.large", "c7", "0.0416", "0.02"), mk("m7.large", "m7", "0.096", "0.04")}
}

// figures is what a test reads of a type: its prices (on-demand, spot),
// the resources an overlay may touch, and the overlays it names.
type figures struct {
	Prices          [2]string
	FPGA, Hugepages string
	AllocMemory     string
	Overlays        []string
}

func figuresOf(it v1alpha1.InstanceType) figures {
	q := func(l corev1.ResourceList, n corev1.ResourceName) string {
		if v, ok := l[n]; ok {
			return v.String()
		}
		return ""
	}
	return figures{Prices: [2]string{it.Offerings[0].Price, it.Offerings[1].Price}, FPGA: q(it.Allocatable, "example.com/fpga"),
		Hugepages: q(it.Allocatable, "hugepages-2Mi"), AllocMemory: q(it.Allocatable, corev1.ResourceMemory), Overlays: it.Overlays}
}

// TestOverlaysChangeTheTypesTheySelect: each field of a type (its
// offerings' prices, each capacity name) takes the value of the overlay
// of highest weight that sets it, of those that select it; an overlay's
// other fields still apply where it loses one; equal weights go to the
// name that sorts first and are a conflict unless they agree; prices
// never fall below zero; huge pages come out of allocatable memory.
func TestOverlaysChangeTheTypesTheySelect(t *testing.T) {
	fpga := func(n string) func(*v1alpha1.NodeOverlaySpec) {
		return func(s *v1alpha1.NodeOverlaySpec) {
			s.Capacity = corev1.ResourceList{"example.com/fpga": testobj.Resources("x", n)["x"]}
		}
	}
	untouchedM7 := figures{Prices: [2]string{"0.096", "0.04"}, AllocMemory: "4Gi"}
	for _, tc := range []struct {
		name      string
		overlays  []v1alpha1.NodeOverlay
		want      map[string]figures
		conflicts []string
	}{
		{
			name:     "halving a family's price halves each of its offerings and no other type's",
			overlays: []v1alpha1.NodeOverlay{overlayOf("half", "m7", adjust("-50%"))},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0416", "0.02"}, AllocMemory: "4Gi"},
				"m7.large": {Prices: [2]string{"0.048", "0.02"}, AllocMemory: "4Gi", Overlays: []string{"half"}},
			},
		},
		{
			name: "a price on spot offerings changes only them",
			overlays: []v1alpha1.NodeOverlay{overlayOf("spot", "", func(s *v1alpha1.NodeOverlaySpec) {
				s.Requirements = []v1alpha1.LabelRequirement{{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}
				s.Price = ptr.To("0.01")
			})},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0416", "0.01"}, AllocMemory: "4Gi", Overlays: []string{"spot"}},
				"m7.large": {Prices: [2]string{"0.096", "0.01"}, AllocMemory: "4Gi", Overlays: []string{"spot"}},
			},
		},
		{
			name: "the higher weight sets the price and the lower's capacity still applies",
			overlays: []v1alpha1.NodeOverlay{
				overlayOf("a-low", "c7", func(s *v1alpha1.NodeOverlaySpec) { adjust("-10%")(s); fpga("1")(s) }),
				overlayOf("b-high", "c7", func(s *v1alpha1.NodeOverlaySpec) { s.Weight = ptr.To[int32](10); adjust("+0.01")(s) }),
			},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0516", "0.03"}, FPGA: "1", AllocMemory: "4Gi", Overlays: []string{"a-low", "b-high"}},
				"m7.large": untouchedM7,
			},
		},
		{
			name: "equal weights that both set a price conflict, and the name sorting first applies",
			overlays: []v1alpha1.NodeOverlay{
				overlayOf("b", "c7", adjust("-50%")),
				overlayOf("a", "c7", func(s *v1alpha1.NodeOverlaySpec) { s.Price = ptr.To("1") }),
			},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"1", "1"}, AllocMemory: "4Gi", Overlays: []string{"a"}},
				"m7.large": untouchedM7,
			},
			conflicts: []string{"a and b, of the same weight, both set the price of c7.large; a applies, its name sorting first"},
		},
		{
			name:     "equal weights that set a price alike do not conflict",
			overlays: []v1alpha1.NodeOverlay{overlayOf("a", "c7", adjust("-50%")), overlayOf("b", "", adjust("-50%"))},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0208", "0.01"}, AllocMemory: "4Gi", Overlays: []string{"a"}},
				"m7.large": {Prices: [2]string{"0.048", "0.02"}, AllocMemory: "4Gi", Overlays: []string{"b"}},
			},
		},
		{
			name:     "equal weights that set one capacity name to different amounts conflict",
			overlays: []v1alpha1.NodeOverlay{overlayOf("one", "c7", fpga("1")), overlayOf("two", "", fpga("2"))},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0416", "0.02"}, FPGA: "1", AllocMemory: "4Gi", Overlays: []string{"one"}},
				"m7.large": {Prices: [2]string{"0.096", "0.04"}, FPGA: "2", AllocMemory: "4Gi", Overlays: []string{"two"}},
			},
			conflicts: []string{"one and two, of the same weight, both set capacity example.com/fpga of c7.large; one applies, its name sorting first"},
		},
		{
			name:     "a price falls to zero and no further",
			overlays: []v1alpha1.NodeOverlay{overlayOf("free", "c7", adjust("-0.03"))},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0116", "0"}, AllocMemory: "4Gi", Overlays: []string{"free"}},
				"m7.large": untouchedM7,
			},
		},
		{
			name: "huge pages are taken from allocatable memory",
			overlays: []v1alpha1.NodeOverlay{overlayOf("huge", "c7", func(s *v1alpha1.NodeOverlaySpec) {
				s.Capacity = testobj.Resources("hugepages-2Mi", "1Gi")
			})},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0416", "0.02"}, Hugepages: "1Gi", AllocMemory: "3Gi", Overlays: []string{"huge"}},
				"m7.large": untouchedM7,
			},
		},
		{
			name: "the pool's label selects by pool",
			overlays: []v1alpha1.NodeOverlay{
				overlayOf("other-pool", "", func(s *v1alpha1.NodeOverlaySpec) {
					s.Requirements = []v1alpha1.LabelRequirement{{Key: v1alpha1.LabelNodePool, Operator: corev1.NodeSelectorOpIn, Values: []string{"batch"}}}
					s.Price = ptr.To("9")
				}),
				overlayOf("this-pool", "m7", func(s *v1alpha1.NodeOverlaySpec) {
					s.Requirements = append(s.Requirements, v1alpha1.LabelRequirement{Key: "team", Operator: corev1.NodeSelectorOpIn, Values: []string{"web"}})
					s.Price = ptr.To("0.5")
				}),
			},
			want: map[string]figures{
				"c7.large": {Prices: [2]string{"0.0416", "0.02"}, AllocMemory: "4Gi"},
				"m7.large": {Prices: [2]string{"0.5", "0.5"}, AllocMemory: "4Gi", Overlays: []string{"this-pool"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testobj.Pool("web").NodeLabel("team", "web").Obj()
			types := overlayTypes()
			got := withOverlays(nodeshape.ForPool(pool), types, tc.overlays)
			for _, it := range got {
				if diff := cmp.Diff(tc.want[it.Name], figuresOf(it)); diff != "" {
					t.Errorf("%s (-want,+got):\n%s", it.Name, diff)
				}
			}
			if diff := cmp.Diff(overlayTypes(), types); diff != "" {
				t.Errorf("the types given were changed (-want,+got):\n%s", diff)
			}
			var said []string
			ranked := rankOverlays(tc.overlays)
			for i := range types {
				for _, c := range planFor(nodeshape.ForPool(pool), &types[i], ranked).conflicts {
					said = append(said, c.String())
				}
			}
			if diff := cmp.Diff(tc.conflicts, said); diff != "" {
				t.Errorf("conflicts (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestOverlayStatusSaysWhereItApplies: through the catalog controller and
// the status controller, an overlay that changes a published type is
// Ready and names it; one whose requirements select nothing is not Ready
// (NoInstanceType); one that loses every field it sets is not Ready
// (Overridden); one whose requirements do not parse (which the API
// server refuses) is not Ready (InvalidRequirements) and changes nothing;
// two of one weight that set one price are each ConflictFree=False,
// naming the other and which applies.
func TestOverlayStatusSaysWhereItApplies(t *testing.T) {
	pool := nodePool("web")
	overlays := []v1alpha1.NodeOverlay{
		overlayOf("half-c7", "c7", adjust("-50%")),
		overlayOf("z-c7", "c7", adjust("-10%")),
		overlayOf("nothing", "x9", adjust("-10%")),
		overlayOf("beaten", "m7", adjust("-10%")),
		overlayOf("winner", "m7", func(s *v1alpha1.NodeOverlaySpec) { s.Weight = ptr.To[int32](5); s.Price = ptr.To("0.01") }),
		overlayOf("broken", "", func(s *v1alpha1.NodeOverlaySpec) {
			s.Requirements = []v1alpha1.LabelRequirement{{Key: v1alpha1.LabelInstanceCPU, Operator: corev1.NodeSelectorOpGt, Values: []string{"many"}}}
			s.Price = ptr.To("0")
		}),
	}
	objs := []client.Object{pool}
	for i := range overlays {
		objs = append(objs, &overlays[i])
	}
	kube, _ := newKube(t, objs...)
	reconcileAll(t, NewController(kube, staticSource(overlayTypes()), cloudprovider.NewUnavailableOfferings(time.Minute), nil), pool)
	s := NewOverlayStatus(kube)
	type cond struct{ Ready, ReadyReason, ConflictFree, Message string }
	want := map[string]cond{
		"half-c7": {"True", v1alpha1.ReasonOverlayApplied, "False", "half-c7 and z-c7, of the same weight, both set the price of c7.large; half-c7 applies, its name sorting first"},
		"z-c7":    {"False", v1alpha1.ReasonOverlayOverridden, "False", "half-c7 and z-c7, of the same weight, both set the price of c7.large; half-c7 applies, its name sorting first"},
		"nothing": {"False", v1alpha1.ReasonOverlayNoInstanceType, "True", "no overlay of the same weight sets a field it sets on a type both select"},
		"beaten":  {"False", v1alpha1.ReasonOverlayOverridden, "True", "no overlay of the same weight sets a field it sets on a type both select"},
		"winner":  {"True", v1alpha1.ReasonOverlayApplied, "True", "no overlay of the same weight sets a field it sets on a type both select"},
		"broken":  {"False", v1alpha1.ReasonOverlayInvalidRequirements, "True", "no overlay of the same weight sets a field it sets on a type both select"},
	}
	for name, w := range want {
		if _, err := s.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
		var o v1alpha1.NodeOverlay
		if err := kube.Get(context.Background(), client.ObjectKey{Name: name}, &o); err != nil {
			t.Fatal(err)
		}
		ready, free := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionReady), meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionConflictFree)
		if ready == nil || free == nil {
			t.Fatalf("%s: conditions %+v, want Ready and ConflictFree", name, o.Status.Conditions)
		}
		if diff := cmp.Diff(w, cond{string(ready.Status), ready.Reason, string(free.Status), free.Message}); diff != "" {
			t.Errorf("%s (-want,+got):\n%s", name, diff)
		}
		if ready.Status == metav1.ConditionTrue && (o.Status.InstanceTypeCount != 1 || len(o.Status.InstanceTypes) != 1 || !strings.HasSuffix(o.Status.InstanceTypes[0], ".large")) {
			t.Errorf("%s: status names %d types %v, want the one it changes", name, o.Status.InstanceTypeCount, o.Status.InstanceTypes)
		}
	}
}
