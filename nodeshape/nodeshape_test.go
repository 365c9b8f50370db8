package nodeshape

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) v1alpha1.NodeSelectorRequirementWithMinValues {
	return v1alpha1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func offer(zone string, ct v1alpha1.CapacityType, price string) v1alpha1.Offering {
	return v1alpha1.Offering{Zone: zone, CapacityType: ct, Price: price, Available: true}
}

func TestFilterInstanceTypes(t *testing.T) {
	all := []v1alpha1.Offering{offer("a", "spot", "1"), offer("a", "on-demand", "1"), offer("b", "spot", "1"), offer("b", "on-demand", "1")}
	types := []v1alpha1.InstanceType{
		{Name: "c7.large", Labels: map[string]string{corev1.LabelArchStable: "amd64", "generation": "7"}, Offerings: all},
		{Name: "c7g.large", Labels: map[string]string{corev1.LabelArchStable: "arm64", "generation": "7"}, Offerings: all},
		{Name: "c6.large", Labels: map[string]string{corev1.LabelArchStable: "amd64", "generation": "6"}, Offerings: all[:2]},
	}
	names := func(its []v1alpha1.InstanceType) (out []string) {
		for _, it := range its {
			out = append(out, it.Name)
			for _, o := range it.Offerings {
				out = append(out, "  "+o.Zone+"/"+string(o.CapacityType))
			}
		}
		return out
	}
	pool := Template{Labels: map[string]string{v1alpha1.LabelNodePool: "p"}}
	web := Template{Labels: map[string]string{v1alpha1.LabelNodePool: "p", "intent": "web"}}
	for _, tc := range []struct {
		name     string
		template Template
		reqs     []v1alpha1.NodeSelectorRequirementWithMinValues
		want     []string
	}{
		{name: "arch In amd64 keeps the amd64 types", template: pool,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")},
			want: []string{"c7.large", "  a/spot", "c6.large", "  a/spot"}},
		{name: "a zone with no offering of a type drops the type", template: pool,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelTopologyZone, corev1.NodeSelectorOpNotIn, "a"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "on-demand")},
			want: []string{"c7.large", "  b/on-demand", "c7g.large", "  b/on-demand"}},
		{name: "Gt on a numeric type label", template: pool,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req("generation", corev1.NodeSelectorOpGt, "6"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpNotIn, "c7g.large"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "b"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")},
			want: []string{"c7.large", "  b/spot"}},
		{name: "a requirement on a label the node would not carry does not filter types", template: pool,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req("intent", corev1.NodeSelectorOpIn, "apps"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "c6.large")},
			want: []string{"c6.large", "  a/spot", "  a/on-demand"}},
		{name: "a requirement the pool's own labels break leaves nothing", template: web,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req("intent", corev1.NodeSelectorOpIn, "apps")},
			want: nil},
		{name: "os is linux on every node, whatever the type says", template: pool,
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelOSStable, corev1.NodeSelectorOpIn, "linux"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "c6.large"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")},
			want: []string{"c6.large", "  a/spot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FilterInstanceTypes(tc.template, tc.reqs, types)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(got)); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

func TestOffersAreCheapestFirstWithTiesByName(t *testing.T) {
	types := []v1alpha1.InstanceType{
		{Name: "m7.large", Offerings: []v1alpha1.Offering{offer("b", "spot", "0.02"), offer("a", "spot", "0.02"), offer("a", "on-demand", "0.05")}},
		{Name: "c7.large", Offerings: []v1alpha1.Offering{offer("a", "spot", "0.02"), {Zone: "c", CapacityType: "spot", Price: "0.001", Available: false}}},
	}
	got, err := Offers(Template{Labels: map[string]string{v1alpha1.LabelNodePool: "p"}}, types, []v1alpha1.NodeSelectorRequirementWithMinValues{req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range got {
		names = append(names, o.InstanceType.Name+"/"+o.Zone+"/"+o.CapacityType)
	}
	// The unavailable c7.large offering is left out though cheapest; the
	// on-demand one by the requirement; equal prices go by name, then zone.
	if diff := cmp.Diff([]string{"c7.large/a/spot", "m7.large/a/spot", "m7.large/b/spot"}, names); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
}

func TestNodeCarriesTheTemplateAndTheOffer(t *testing.T) {
	c7 := testobj.InstanceType("c7.large").Arch("arm64").Label(v1alpha1.LabelNodePool, "spoofed").Label(corev1.LabelTopologyZone, "spoofed").
		Capacity("cpu", "2", "pods", "29").Allocatable("cpu", "1930m", "pods", "29").Obj()
	it := &c7
	np := testobj.Pool("default").NodeLabel("team", "a").
		Taints(v1alpha1.Taint{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}).
		StartupTaints(v1alpha1.Taint{Key: "cni", Effect: corev1.TaintEffectNoExecute}).Obj()
	tmpl := ForPool(np)
	node := tmpl.Node("n1", it, "zone-a", "spot")
	wantLabels := map[string]string{
		"team": "a", v1alpha1.LabelNodePool: "default", v1alpha1.LabelCapacityType: "spot", v1alpha1.LabelKarpenterCapacityType: "spot",
		corev1.LabelInstanceTypeStable: "c7.large", corev1.LabelTopologyZone: "zone-a", corev1.LabelArchStable: "arm64",
		corev1.LabelOSStable: "linux", corev1.LabelHostname: "n1",
		"beta.kubernetes.io/arch": "arm64", "beta.kubernetes.io/os": "linux",
	}
	if diff := cmp.Diff(wantLabels, node.Labels); diff != "" {
		t.Errorf("labels (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}}, node.Spec.Taints); diff != "" {
		t.Errorf("taints of the ready node (-want,+got):\n%s", diff)
	}
	wantReg := []corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: "cni", Effect: corev1.TaintEffectNoExecute}, {Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}
	if diff := cmp.Diff(wantReg, tmpl.RegistrationTaints()); diff != "" {
		t.Errorf("registration taints (-want,+got):\n%s", diff)
	}
	if !node.Status.Allocatable.Cpu().Equal(resource.MustParse("1930m")) || !node.Status.Capacity.Cpu().Equal(resource.MustParse("2")) {
		t.Errorf("capacity %v, allocatable %v: not the instance type's", node.Status.Capacity, node.Status.Allocatable)
	}
	// A claim made from the pool keeps its template when the pool changes.
	nc := &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{NodePool: "default", Labels: tmpl.Labels, Taints: tmpl.Taints, StartupTaints: tmpl.StartupTaints}}
	np.Spec.Template.ObjectMeta.Labels["team"] = "b"
	if diff := cmp.Diff(node, ForClaim(nc).Node("n1", it, "zone-a", "spot")); diff != "" {
		t.Errorf("the claim's node is not the one nominated (-want,+got):\n%s", diff)
	}
}

// TestTemplateAnnotationsReachTheNode: the pool's template annotations
// are the claim's template's, and the node's.
func TestTemplateAnnotationsReachTheNode(t *testing.T) {
	np := testobj.Pool("p").NodeAnnotation("example.com/owner", "alice").Obj()
	pool := ForPool(np)
	if diff := cmp.Diff(np.Spec.Template.ObjectMeta.Annotations, pool.Annotations); diff != "" {
		t.Errorf("ForPool annotations (-want,+got):\n%s", diff)
	}
	nc := &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{NodePool: "p", Annotations: pool.Annotations}}
	node := ForClaim(nc).Node("n", &v1alpha1.InstanceType{Name: "m.large"}, "zone-a", "spot")
	if diff := cmp.Diff(map[string]string{"example.com/owner": "alice"}, node.Annotations); diff != "" {
		t.Errorf("node annotations (-want,+got):\n%s", diff)
	}
}
