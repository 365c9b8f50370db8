package disruption

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

// budgets makes "may one more node of this pool be disrupted?" and the
// decision to disrupt it one step, across the controller's workers. A
// decision counts from the moment it is taken until the cache shows the
// claim disrupting or gone, so two workers reading the same cache can
// never both pass a budget of one.
type budgets struct {
	mu      sync.Mutex
	pending map[types.UID]string // claim → pool
}

// reserve reports whether nc may be disrupted for reason now and, if so,
// counts it against the pool's budgets until release or the cache shows it.
func (b *budgets) reserve(ctx context.Context, kube client.Reader, pool *v1alpha1.NodePool, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[types.UID]string{}
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return false, err
	}
	total, disrupting := 0, 0
	seen := map[types.UID]bool{}
	for _, c := range claims.Items {
		if c.Spec.NodePool != pool.Name || c.Status.NodeName == "" {
			continue
		}
		seen[c.UID] = true
		total++
		switch {
		case c.Status.Phase == v1alpha1.NodeClaimDisrupting || !c.DeletionTimestamp.IsZero():
			disrupting++
			delete(b.pending, c.UID) // the cache has caught up
		case b.pending[c.UID] != "" && c.UID != nc.UID:
			disrupting++
		}
	}
	for uid, p := range b.pending {
		if p == pool.Name && !seen[uid] {
			delete(b.pending, uid) // gone
		}
	}
	if disrupting >= budgetAllowed(pool, reason, total) {
		return false, nil
	}
	b.pending[nc.UID] = pool.Name
	return true, nil
}

// release forgets a decision that was not carried out.
func (b *budgets) release(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, uid)
}

// budgetAllowed is how many nodes of a pool of total may be disrupted at
// once for reason: the most restrictive budget that applies wins.
// Scheduled budgets count as active at all times: a conservative reading
// until schedules are evaluated.
func budgetAllowed(pool *v1alpha1.NodePool, reason v1alpha1.DisruptionReason, total int) int {
	allowed := total
	for _, b := range pool.Spec.Disruption.Budgets {
		if len(b.Reasons) > 0 && !containsReason(b.Reasons, reason) {
			continue
		}
		allowed = min(allowed, budgetNodes(b.Nodes, total))
	}
	return allowed
}

func containsReason(rs []v1alpha1.DisruptionReason, r v1alpha1.DisruptionReason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// budgetNodes turns "10%" or "3" into a node count; percentages round up.
func budgetNodes(s string, total int) int {
	var n int
	if _, err := fmt.Sscanf(s, "%d%%", &n); err == nil && len(s) > 0 && s[len(s)-1] == '%' {
		return (n*total + 99) / 100
	}
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil {
		return n
	}
	return 0
}
