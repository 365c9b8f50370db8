package requirements

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) v1alpha1.NodeSelectorRequirementWithMinValues {
	return v1alpha1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func TestFilterInstanceTypes(t *testing.T) {
	offer := func(zone string, ct v1alpha1.CapacityType) v1alpha1.Offering {
		return v1alpha1.Offering{Zone: zone, CapacityType: ct, Price: "1", Available: true}
	}
	all := []v1alpha1.Offering{offer("a", "spot"), offer("a", "on-demand"), offer("b", "spot"), offer("b", "on-demand")}
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
	for _, tc := range []struct {
		name string
		reqs []v1alpha1.NodeSelectorRequirementWithMinValues
		want []string
	}{
		{name: "arch In amd64 keeps the amd64 types",
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")},
			want: []string{"c7.large", "  a/spot", "c6.large", "  a/spot"}},
		{name: "a zone with no offering of a type drops the type",
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelTopologyZone, corev1.NodeSelectorOpNotIn, "a"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "on-demand")},
			want: []string{"c7.large", "  b/on-demand", "c7g.large", "  b/on-demand"}},
		{name: "Gt on a numeric type label",
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req("generation", corev1.NodeSelectorOpGt, "6"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpNotIn, "c7g.large"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "b"), req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")},
			want: []string{"c7.large", "  b/spot"}},
		{name: "a requirement on a pool label does not filter types",
			reqs: []v1alpha1.NodeSelectorRequirementWithMinValues{req("intent", corev1.NodeSelectorOpIn, "apps"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "c6.large")},
			want: []string{"c6.large", "  a/spot", "  a/on-demand"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(FilterInstanceTypes(tc.reqs, types))); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}
