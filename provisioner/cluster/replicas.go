package cluster

import (
	"cmp"
	"slices"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Standing says whether a claim can hold one of its fixed-size pool's
// places: it is not being deleted and not being disrupted. StandingOf
// also leaves out a claim whose replacement (AnnotationReplacement) is
// among the claims: the replacement is counted instead, so a drift keeps
// the count and a scale-down never takes the replacement for a spare.
func Standing(nc *v1alpha1.NodeClaim) bool {
	return nc.DeletionTimestamp.IsZero() && nc.Status.Phase != v1alpha1.NodeClaimDisrupting
}

// StandingOf returns the claims of claims that hold a place in pool. A
// claim whose replacement is named but not seen yet (the executor names
// it before creating it) still holds its place, so the count never dips
// while the replacement is on its way.
func StandingOf(claims []v1alpha1.NodeClaim, pool string) []*v1alpha1.NodeClaim {
	seen := make(map[string]bool, len(claims))
	for i := range claims {
		seen[claims[i].Name] = true
	}
	var out []*v1alpha1.NodeClaim
	for i := range claims {
		nc := &claims[i]
		if nc.Spec.NodePool != pool || !Standing(nc) {
			continue
		}
		if rep := nc.Annotations[v1alpha1.AnnotationReplacement]; rep != "" && seen[rep] {
			continue
		}
		out = append(out, nc)
	}
	return out
}

// Emptiest orders a fixed-size pool's initialized claims for a scale-down:
// fewest pods first (pods counts the pods each claim's node runs that a
// drain evicts), then the newest, then by name, so that every replica of
// the provisioner picks the same ones.
func Emptiest(claims []*v1alpha1.NodeClaim, pods map[string]int) []*v1alpha1.NodeClaim {
	out := slices.Clone(claims)
	slices.SortStableFunc(out, func(a, b *v1alpha1.NodeClaim) int {
		return cmp.Or(cmp.Compare(pods[a.Name], pods[b.Name]),
			b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return out
}
