package nodeshape

import (
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Group is what every option of one claim shares: a claim launches in
// one zone, with one capacity type, on one architecture, and its options
// are the instance types of its pool that offer exactly that. The plugin
// groups a pool's offers by it, the provisioner batches claims by it, and
// a replacement is made within one.
type Group struct {
	Zone, CapacityType, Arch string
}

// Group is the offer's group.
func (o Offer) Group() Group {
	return Group{Zone: o.Zone, CapacityType: o.CapacityType, Arch: o.InstanceType.Labels[corev1.LabelArchStable]}
}

// ClaimGroup is the group a claim's requirements pin, each field the one
// value an In requirement on its label allows, or "" where none pins one
// (a claim made before the architecture was pinned has no Arch).
func ClaimGroup(nc *v1alpha1.NodeClaim) Group {
	return Group{Zone: pinned(nc, corev1.LabelTopologyZone), CapacityType: pinned(nc, v1alpha1.LabelCapacityType), Arch: pinned(nc, corev1.LabelArchStable)}
}

// Has reports whether o is of group g; a group with no Arch has offers
// of any architecture.
func (g Group) Has(o Offer) bool {
	return o.Zone == g.Zone && o.CapacityType == g.CapacityType && (g.Arch == "" || o.InstanceType.Labels[corev1.LabelArchStable] == g.Arch)
}

// pinned is the one value a claim's requirement In on key allows, or "".
func pinned(nc *v1alpha1.NodeClaim, key string) string {
	for _, r := range nc.Spec.Requirements {
		if r.Key == key && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			return r.Values[0]
		}
	}
	return ""
}
