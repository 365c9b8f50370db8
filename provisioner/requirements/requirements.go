// Package requirements applies NodePool and NodeClaim requirements to
// instance types and their offerings: which of them a pool may launch.
package requirements

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

// Matches reports whether a label value (present or not) meets r.
func Matches(r v1alpha1.NodeSelectorRequirementWithMinValues, value string, present bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return present && slices.Contains(r.Values, value)
	case corev1.NodeSelectorOpNotIn:
		return !present || !slices.Contains(r.Values, value)
	case corev1.NodeSelectorOpExists:
		return present
	case corev1.NodeSelectorOpDoesNotExist:
		return !present
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !present || len(r.Values) != 1 {
			return false
		}
		v, err1 := strconv.ParseInt(value, 10, 64)
		limit, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return v > limit
		}
		return v < limit
	}
	return false
}

// FilterInstanceTypes returns the instance types that meet every
// requirement, each with only the offerings that do. Requirements on keys
// that are neither a property of the instance type (its name, its labels)
// nor of an offering (zone, capacity type) constrain the pool's own labels
// and are not applied here. Types left with no offering are dropped.
func FilterInstanceTypes(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, types []v1alpha1.InstanceType) []v1alpha1.InstanceType {
	var out []v1alpha1.InstanceType
	for _, it := range types {
		if !typeMatches(reqs, it) {
			continue
		}
		var offerings []v1alpha1.Offering
		for _, o := range it.Offerings {
			if offeringMatches(reqs, o) {
				offerings = append(offerings, o)
			}
		}
		if len(offerings) == 0 {
			continue
		}
		it = *it.DeepCopy()
		it.Offerings = offerings
		out = append(out, it)
	}
	return out
}

func typeMatches(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, it v1alpha1.InstanceType) bool {
	for _, r := range reqs {
		switch r.Key {
		case corev1.LabelInstanceTypeStable:
			if !Matches(r, it.Name, true) {
				return false
			}
		case corev1.LabelTopologyZone, v1alpha1.LabelCapacityType:
		default:
			if v, ok := it.Labels[r.Key]; ok || isTypeLabel(r.Key) {
				if !Matches(r, v, ok) {
					return false
				}
			}
		}
	}
	return true
}

// isTypeLabel: well-known labels every instance type defines, so a
// requirement on them applies even when a type lacks the label.
func isTypeLabel(key string) bool {
	return key == corev1.LabelArchStable || key == corev1.LabelOSStable
}

func offeringMatches(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, o v1alpha1.Offering) bool {
	for _, r := range reqs {
		switch r.Key {
		case corev1.LabelTopologyZone:
			if !Matches(r, o.Zone, true) {
				return false
			}
		case v1alpha1.LabelCapacityType:
			if !Matches(r, string(o.CapacityType), true) {
				return false
			}
		}
	}
	return true
}
