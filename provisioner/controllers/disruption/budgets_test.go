package disruption

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func TestBudgetNodes(t *testing.T) {
	for _, tc := range []struct {
		nodes string
		total int
		want  int
	}{
		{"10%", 5, 1}, {"10%", 20, 2}, {"10%", 21, 3}, {"0%", 10, 0}, {"100%", 7, 7}, {"3", 10, 3}, {"0", 10, 0},
	} {
		if got := budgetNodes(tc.nodes, tc.total); got != tc.want {
			t.Errorf("budgetNodes(%q, %d) = %d, want %d", tc.nodes, tc.total, got, tc.want)
		}
	}
}

// TestBudgetOfOneHoldsAcrossWorkers: ten workers ask at once to disrupt
// ten nodes of a pool whose budget is one node: exactly one may, and the
// budget stays spent until that claim is gone from the cache.
func TestBudgetOfOneHoldsAcrossWorkers(t *testing.T) {
	ctx := context.Background()
	pool := testobj.Pool("p").Budget("1").Obj()
	var claims []*v1alpha1.NodeClaim
	var objs []client.Object
	for i := range 10 {
		nc := testobj.Claim(fmt.Sprintf("c%d", i)).UID(fmt.Sprintf("uid-%d", i)).Pool("p").NodeName(fmt.Sprintf("n%d", i)).Obj()
		claims, objs = append(claims, nc), append(objs, nc)
	}
	kube := testobj.Client(objs...)
	var b budgets
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for _, nc := range claims {
		wg.Go(func() {
			if ok, _, err := b.reserve(ctx, kube, pool, nc, "Empty", time.Now()); err != nil {
				t.Error(err)
			} else if ok {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if allowed.Load() != 1 {
		t.Fatalf("%d of 10 concurrent disruptions passed a budget of one node", allowed.Load())
	}
	var chosen *v1alpha1.NodeClaim
	for _, nc := range claims {
		if b.pending[nc.UID] != "" {
			chosen = nc
		}
	}
	// The cache catches up: the chosen claim is Disrupting. Still spent.
	chosen.Status.Phase = v1alpha1.NodeClaimDisrupting
	if err := kube.Status().Update(ctx, chosen); err != nil {
		t.Fatal(err)
	}
	other := claims[0]
	if other == chosen {
		other = claims[1]
	}
	if ok, _, _ := b.reserve(ctx, kube, pool, other, "Empty", time.Now()); ok {
		t.Error("a second node was disrupted while the first is still disrupting")
	}
	// The chosen claim is gone: the budget is free again.
	if err := kube.Delete(ctx, chosen); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := b.reserve(ctx, kube, pool, other, "Empty", time.Now()); !ok {
		t.Error("the budget stayed spent after the disrupted claim was gone")
	}
}

// FuzzBudgetNodes: for every budget the API accepts (pattern and length
// as in the CRD) and any pool size, the count is a whole number of nodes,
// a percentage never more than the pool, rounded up.
func FuzzBudgetNodes(f *testing.F) {
	for _, seed := range []string{"10%", "0%", "100%", "3", "0", "99999999", "101%", "1e3", "-1"} {
		f.Add(seed, 7)
	}
	accepted := regexp.MustCompile(`^((100|[0-9]{1,2})%|[0-9]+)$`)
	f.Fuzz(func(t *testing.T, nodes string, total int) {
		if len(nodes) > 8 || !accepted.MatchString(nodes) || total < 0 || total > 1_000_000 {
			return
		}
		got := budgetNodes(nodes, total)
		if pct, isPct := strings.CutSuffix(nodes, "%"); isPct {
			n, _ := strconv.Atoi(pct)
			if got < 0 || got > total || got*100 < n*total || (got-1)*100 >= n*total && got > 0 {
				t.Errorf("budgetNodes(%q, %d) = %d, want %d%% of %d rounded up", nodes, total, got, n, total)
			}
			return
		}
		if n, _ := strconv.Atoi(nodes); got != n {
			t.Errorf("budgetNodes(%q, %d) = %d, want %d", nodes, total, got, n)
		}
	})
}

// settle reconciles the claim and waits for the command it submitted, if
// any, to end: the executor runs commands in the background.
func settle(c *Controller, ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	res, err := c.reconcileClaim(ctx, nc)
	c.Executor().Wait()
	return res, err
}
