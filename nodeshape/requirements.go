package nodeshape

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// matches reports whether a node with these labels meets every
// requirement, read the way the scheduler reads a pod's required node
// affinity (component-helpers' nodeaffinity), so the answer is the
// scheduler's. An error says which requirement it could not read (the API
// server refuses such pools).
func matches(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, labels map[string]string) (bool, error) {
	if len(reqs) == 0 {
		return true, nil // an empty term matches nothing; no requirement matches everything
	}
	term := corev1.NodeSelectorTerm{MatchExpressions: make([]corev1.NodeSelectorRequirement, len(reqs))}
	for i, q := range reqs {
		term.MatchExpressions[i] = corev1.NodeSelectorRequirement{Key: q.Key, Operator: q.Operator, Values: q.Values}
	}
	sel, err := nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}})
	if err != nil {
		return false, fmt.Errorf("reading requirements: %w", err)
	}
	return sel.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}), nil
}

// ValidateRequirements says which requirement, if any, the scheduler's
// node selector could not read: a pool with one can launch nothing. The
// API server refuses such pools; this is for pools written before it
// did, so that their status says why.
func ValidateRequirements(reqs []v1alpha1.NodeSelectorRequirementWithMinValues) error {
	for i, r := range reqs {
		if _, err := matches(reqs[i:i+1], nil); err != nil {
			return fmt.Errorf("requirement %d (%s %s %v) cannot be read: %w", i, r.Key, r.Operator, r.Values, err)
		}
	}
	return nil
}

// Accepts reports whether the node of template t launched as instance
// type it in zone with capacityType meets reqs. A requirement on a key
// that node would not carry at all (neither the template, the instance
// type, nor the well-known labels define it) says nothing about instance
// types and offerings and is not applied: it constrains labels other
// components may add to the node, not what to launch.
func Accepts(t Template, reqs []v1alpha1.NodeSelectorRequirementWithMinValues, it *v1alpha1.InstanceType, zone, capacityType string) (bool, error) {
	labels := t.NodeLabels(it, zone, capacityType)
	applicable := make([]v1alpha1.NodeSelectorRequirementWithMinValues, 0, len(reqs))
	for _, q := range reqs {
		if _, ok := labels[q.Key]; ok || wellKnown(q.Key) {
			applicable = append(applicable, q)
		}
	}
	return matches(applicable, labels)
}

// FilterInstanceTypes returns the instance types with only the offerings
// whose nodes (of template t) meet reqs (Accepts); types left with no
// offering are dropped.
func FilterInstanceTypes(t Template, reqs []v1alpha1.NodeSelectorRequirementWithMinValues, types []v1alpha1.InstanceType) ([]v1alpha1.InstanceType, error) {
	var out []v1alpha1.InstanceType
	for i := range types {
		it := &types[i]
		var offerings []v1alpha1.Offering
		for _, o := range it.Offerings {
			ok, err := Accepts(t, reqs, it, o.Zone, string(o.CapacityType))
			if err != nil {
				return nil, err
			}
			if ok {
				offerings = append(offerings, o)
			}
		}
		if len(offerings) == 0 {
			continue
		}
		kept := *it.DeepCopy()
		kept.Offerings = offerings
		out = append(out, kept)
	}
	return out, nil
}

// wellKnown labels every node Nodeforge launches carries, or (the instance
// attribute labels) carries when its type has the attribute, so a
// requirement on one applies even to a type that does not define it: a
// type without a GPU does not meet instance-gpu-count Gt 0.
func wellKnown(key string) bool {
	switch key {
	case corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, v1alpha1.LabelCapacityType, corev1.LabelArchStable, corev1.LabelOSStable:
		return true
	}
	return v1alpha1.IsInstanceLabel(key)
}

// ClaimRequirements are the requirements of a claim of a pool whose
// requirements are poolReqs, launched as one of types in zone with
// capacityType (and arch, if known): the pool's own, but on instance
// type, zone, capacity type and architecture (when known; the pool's
// stay otherwise) exactly the claim's options, keeping the pool's
// minValues on instance types. Each is within the pool's (WithinPool).
func ClaimRequirements(poolReqs []v1alpha1.NodeSelectorRequirementWithMinValues, types []string, zone, capacityType, arch string) []v1alpha1.NodeSelectorRequirementWithMinValues {
	reqs := slices.DeleteFunc(slices.Clone(poolReqs), func(r v1alpha1.NodeSelectorRequirementWithMinValues) bool {
		switch r.Key {
		case corev1.LabelInstanceTypeStable, corev1.LabelTopologyZone, v1alpha1.LabelCapacityType:
			return true
		case corev1.LabelArchStable:
			return arch != ""
		}
		return false
	})
	reqs = append(reqs,
		v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: types, MinValues: MinValuesOf(poolReqs, corev1.LabelInstanceTypeStable)},
		v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}},
		v1alpha1.NodeSelectorRequirementWithMinValues{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{capacityType}},
	)
	if arch != "" {
		reqs = append(reqs, v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{arch}})
	}
	return reqs
}

// OwnedBy is the owner reference a claim of np carries, so that deleting
// the pool deletes its claims (the garbage collector does, in the
// background; each claim's finalizer drains its node and terminates its
// instance first). None for a pool not read from the API server.
func OwnedBy(np *v1alpha1.NodePool) []metav1.OwnerReference {
	if np.UID == "" {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodePool", Name: np.Name, UID: np.UID}}
}
