package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestEmptyNodeIsDisruptedAfterConsolidateAfterUnlessAPodLands: an empty
// node's claim is marked Empty, left alone for consolidateAfter, then
// tainted and deleted; a pod bound to the node between the cache's view
// and the last live look, or nominated to the node or to its claim (on
// its way to being bound there), calls it off and lifts the taint.
func TestEmptyNodeIsDisruptedAfterConsolidateAfterUnlessAPodLands(t *testing.T) {
	for _, name := range []string{"stays empty", "a pod lands before the last look", "a pod is nominated to the node", "a pod is nominated to its claim"} {
		landed := name != "stays empty"
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pool := testobj.Pool("p").ConsolidateAfter("30s").Obj()
			nc := testobj.Claim("p-abcde").UID("uid-1").Pool("p").Phase(v1alpha1.NodeClaimInitialized).NodeName("n1").Obj()
			node := testobj.Node("n1").Obj()
			ds := testobj.Pod("ds").Namespace("kube-system").OwnedBy("DaemonSet", "d").Node("n1").Obj()
			kube := testobj.Client(pool, nc, node, ds)
			live := kubefake.NewClientset(ds.DeepCopy())
			now := time.Now()
			c := New(NewExecutor(kube, kube, live, events.NewFakeRecorder(10), func() time.Time { return now }), NewEmptiness(kube, live, func() time.Time { return now }), NewExpiration(func() time.Time { return now }))
			get := func() *v1alpha1.NodeClaim {
				var got v1alpha1.NodeClaim
				if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), &got); err != nil {
					return nil
				}
				return &got
			}
			if _, err := settle(c, ctx, get()); err != nil {
				t.Fatal(err)
			}
			res, err := settle(c, ctx, get())
			if err != nil || res.RequeueAfter <= 0 || get() == nil {
				t.Fatalf("disrupted before consolidateAfter: %v %v", res, err)
			}
			now = now.Add(31 * time.Second)
			if landed {
				// The cache has not seen it yet; the API server has.
				web := testobj.Pod("web")
				switch name {
				case "a pod lands before the last look":
					web.Node("n1")
				case "a pod is nominated to the node":
					web.Nominated("n1")
				default:
					web.Nominated(nc.Name)
				}
				if _, err := live.CoreV1().Pods("default").Create(ctx, web.Obj(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := settle(c, ctx, get()); err != nil {
				t.Fatal(err)
			}
			var n corev1.Node
			if err := kube.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
				t.Fatal(err)
			}
			tainted := len(n.Spec.Taints) > 0
			if landed {
				if get() == nil || get().Status.Phase == v1alpha1.NodeClaimDisrupting || tainted {
					t.Errorf("disrupted a node a pod had landed on (claim %v, taints %v)", get(), n.Spec.Taints)
				}
				return
			}
			if get() != nil {
				t.Errorf("an empty node past consolidateAfter was not disrupted: phase %s", get().Status.Phase)
			}
			if !tainted || !strings.Contains(n.Spec.Taints[0].Key, "disrupted") {
				t.Errorf("the node was not tainted before the claim was deleted: %v", n.Spec.Taints)
			}
		})
	}
}

// TestExpiredClaimIsChosenOnceItIsExpireAfterOld: a claim younger than its
// expireAfter is asked about again when it will be old enough; one older
// is chosen; Never is never chosen.
func TestExpiredClaimIsChosenOnceItIsExpireAfterOld(t *testing.T) {
	now := time.Now()
	e := NewExpiration(func() time.Time { return now })
	nc := testobj.Claim("p-abcde").Created(now.Add(-90 * time.Second)).Obj()
	for _, tc := range []struct {
		expireAfter v1alpha1.NillableDuration
		disrupt     bool
		requeue     time.Duration
	}{{"2m", false, 30 * time.Second}, {"1m", true, 0}, {v1alpha1.Never, false, 0}, {"", false, 0}} {
		nc.Spec.ExpireAfter = tc.expireAfter
		v, err := e.Candidate(context.Background(), nc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if v.Disrupt != tc.disrupt || v.RequeueAfter != tc.requeue {
			t.Errorf("expireAfter %s on a 90s-old claim: %+v; want disrupt %v, requeue after %s", tc.expireAfter, v, tc.disrupt, tc.requeue)
		}
		if v.Disrupt && !strings.Contains(v.Why, "expireAfter 1m0s") {
			t.Errorf("why = %q", v.Why)
		}
	}
}
