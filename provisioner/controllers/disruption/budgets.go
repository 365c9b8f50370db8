package disruption

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
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

// reserve reports whether nc may be disrupted for reason at now and, if
// so, counts it against the pool's budgets until release or the cache
// shows it. When not, change is the next time a budget's schedule window
// that applies opens or closes (zero: none will), when the answer may
// differ though no claim changed.
func (b *budgets) reserve(ctx context.Context, kube client.Reader, pool *v1alpha1.NodePool, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, now time.Time) (ok bool, change time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[types.UID]string{}
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingFields{cluster.IndexClaimPool: pool.Name}); err != nil {
		return false, time.Time{}, err
	}
	total, n := 0, 0
	seen := map[types.UID]bool{}
	for _, c := range claims.Items {
		if c.Spec.NodePool != pool.Name || c.Status.NodeName == "" {
			continue
		}
		seen[c.UID] = true
		total++
		// A decision stays pending until it is released or its claim is
		// gone, even once the cache shows the claim disrupting: an undo
		// lifts the taint before it releases, so a node tainted by a
		// command is counted until its taint is lifted, whatever the
		// cache shows meanwhile.
		switch {
		case isDisrupting(&c):
			n++
		case b.pending[c.UID] != "" && c.UID != nc.UID:
			n++
		}
	}
	for uid, p := range b.pending {
		if p == pool.Name && !seen[uid] {
			delete(b.pending, uid) // gone
		}
	}
	allowed, change := budgetAllowed(pool, reason, total, now)
	if n >= allowed {
		return false, change, nil
	}
	b.pending[nc.UID] = pool.Name
	return true, change, nil
}

// isDisrupting: the claim counts against its pool's budgets, being
// deleted, marked Disrupting, or waiting for its replacement before its
// node is drained.
func isDisrupting(nc *v1alpha1.NodeClaim) bool {
	return nc.Status.Phase == v1alpha1.NodeClaimDisrupting || !nc.DeletionTimestamp.IsZero() || nc.Annotations[v1alpha1.AnnotationReplacement] != ""
}

// keep counts the claim against its pool's budgets again, as reserve
// does, without asking: a claim leaving a command the cache shows (its
// replacement given up) stays counted until its taint is lifted.
func (b *budgets) keep(uid types.UID, pool string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[types.UID]string{}
	}
	b.pending[uid] = pool
}

// release forgets a decision that was not carried out.
func (b *budgets) release(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, uid)
}

// budgetAllowed is how many nodes of a pool of total may be disrupted at
// once for reason at now: the most restrictive budget that applies and is
// active wins. A scheduled budget is active within its windows; one whose
// schedule cannot be parsed always is (see v1alpha1.Budget.Window). change is the
// soonest a window of a budget for reason opens or closes (zero: never).
func budgetAllowed(pool *v1alpha1.NodePool, reason v1alpha1.DisruptionReason, total int, now time.Time) (allowed int, change time.Time) {
	allowed = total
	for _, b := range pool.Spec.Disruption.Budgets {
		if len(b.Reasons) > 0 && !containsReason(b.Reasons, reason) {
			continue
		}
		// A parse error is reported on the pool's status, not here: this
		// runs for every claim of the pool, that once per pool change.
		active, next, _ := b.Window(now)
		if !next.IsZero() && (change.IsZero() || next.Before(change)) {
			change = next
		}
		if active {
			allowed = min(allowed, budgetNodes(b.Nodes, total))
		}
	}
	return allowed, change
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
