package nodeshape

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// MinValuesUnmet says which requirement of reqs with minValues the nodes
// of template t as types (in zone, with capacityType) do not span: fewer
// distinct values of its key than it asks. "" when every one is met, or
// none asks. A claim launches as one of the instance types it still has,
// so it keeps at least minValues of them open (Karpenter's meaning of the
// field): the launch may fall back among them when the cheapest has no
// capacity.
func MinValuesUnmet(t Template, reqs []v1alpha1.NodeSelectorRequirementWithMinValues, types []*v1alpha1.InstanceType, zone, capacityType string) string {
	for _, r := range reqs {
		if r.MinValues == nil {
			continue
		}
		seen := map[string]bool{}
		for _, it := range types {
			if r.Key == corev1.LabelInstanceTypeStable {
				seen[it.Name] = true
				continue
			}
			if v, ok := t.NodeLabels(it, zone, capacityType)[r.Key]; ok {
				seen[v] = true
			}
		}
		if len(seen) < int(*r.MinValues) {
			return fmt.Sprintf("requirement %s asks for at least %d distinct values (minValues) among the instance types a claim may launch as, and those that hold the pods span %d", r.Key, *r.MinValues, len(seen))
		}
	}
	return ""
}

// HasMinValues reports whether any requirement of reqs sets minValues.
func HasMinValues(reqs []v1alpha1.NodeSelectorRequirementWithMinValues) bool {
	for _, r := range reqs {
		if r.MinValues != nil {
			return true
		}
	}
	return false
}

// MinValuesOf is the minValues of reqs' requirement on key, nil if none
// sets one: what a claim's own requirement on key carries over.
func MinValuesOf(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, key string) *int32 {
	for _, r := range reqs {
		if r.Key == key && r.MinValues != nil {
			v := *r.MinValues
			return &v
		}
	}
	return nil
}
