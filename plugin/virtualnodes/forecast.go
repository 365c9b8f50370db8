package virtualnodes

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	quota "k8s.io/apiserver/pkg/quota/v1"

	"github.com/nodeforge/nodeforge/nodeshape"
)

// The limits forecast: which options a pool's limits leave, counting what
// the provisioner has closed and what the plugin holds open. The
// provisioner's Ledger checks again before each launch; this keeps pods it
// would refuse from being nominated at all.

// withinLimits drops the options that would take the pool past its limits
// (see poolUsage), except claim except's own share when it grows.
func (d *decider) withinLimits(pl *pool, opts []*option, except *claim) []*option {
	limits := pl.np.Spec.Limits
	if len(limits) == 0 {
		return opts
	}
	used := d.book.poolUsage(pl, except)
	return slices.DeleteFunc(slices.Clone(opts), func(o *option) bool {
		return !nodeshape.WithinLimits(limits, used, o.it.Capacity)
	})
}

// poolUsage forecasts the pool's capacity in use or on its way, in the
// units the provisioner's hard ceiling counts (capacity, not allocatable):
// every claim the provisioner has closed, at its launched capacity or,
// before launch, at its cheapest option; and every open claim held here,
// at its cheapest option. Claims are matched to the pool by name, so a
// pool rebuilt from a changed NodePool or catalog still counts the claims
// made before. The provisioner checks again before each launch; this
// forecast keeps pods it would refuse from being nominated at all.
func (b *book) poolUsage(pl *pool, except *claim) corev1.ResourceList {
	b.mu.Lock()
	defer b.mu.Unlock()
	committed, ok := b.committedUsage[pl.np.Name]
	if !ok {
		committed = corev1.ResourceList{}
		for _, nc := range b.committed {
			if nc.Spec.NodePool != pl.np.Name {
				continue
			}
			if len(nc.Status.Capacity) > 0 {
				committed = quota.Add(committed, nc.Status.Capacity)
				continue
			}
			for _, r := range nc.Spec.Requirements {
				if r.Key == corev1.LabelInstanceTypeStable && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 {
					// Options are written cheapest first.
					committed = quota.Add(committed, pl.capacity[r.Values[0]])
					break
				}
			}
		}
		b.committedUsage[pl.np.Name] = committed
	}
	used := committed.DeepCopy()
	for _, c := range b.open {
		if c.group.pool.np.Name != pl.np.Name || c == except {
			continue
		}
		used = quota.Add(used, c.options[0].it.Capacity)
	}
	return used
}

// limitReason says which limits a new node (the cheapest that would hold
// the pod, o) would cross: only those, not every limit the pool sets,
// worded as the provisioner words them.
func (d *decider) limitReason(pl *pool, o *option) string {
	return "limits reached: " + nodeshape.ExceedsLimits(pl.np.Spec.Limits, d.book.poolUsage(pl, nil), o.it.Capacity, o.name)
}
