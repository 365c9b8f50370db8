package disruption

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// repairFleet is nodes of pool p: per zone, how many are Ready and how
// many had their Ready condition Unknown since `down` before now.
type repairFleet struct {
	objs []client.Object
	n    int
}

func (f *repairFleet) add(zone string, ready, unknown int, down time.Duration, now time.Time, cond ...corev1.NodeCondition) {
	for i := range ready + unknown {
		f.n++
		name := fmt.Sprintf("n%02d", f.n)
		st := corev1.ConditionTrue
		since := now.Add(-24 * time.Hour)
		if i >= ready {
			st, since = corev1.ConditionUnknown, now.Add(-down)
		}
		conds := append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, LastTransitionTime: metav1.NewTime(since)}}, cond...)
		f.objs = append(f.objs,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone}}, Status: corev1.NodeStatus{Conditions: conds}},
			testobj.Claim("p-"+name).UID("uid-"+name).Pool("p").Phase(v1alpha1.NodeClaimInitialized).NodeName(name).Zone(zone).Obj())
	}
}

// runRepair runs repair rounds at the given offsets from now and returns
// the nodes whose claims went, in order, and the Events.
func runRepair(t *testing.T, objs []client.Object, pool *v1alpha1.NodePool, now time.Time, rounds ...time.Duration) ([]string, string) {
	t.Helper()
	ctx := context.Background()
	if pool == nil {
		pool = testobj.Pool("p").Budget("100%").Obj()
	}
	kube := testobj.Client(append(slices.Clone(objs), pool)...)
	rec := events.NewFakeRecorder(200)
	at := now
	clock := func() time.Time { return at }
	r := NewRepair(NewExecutor(kube, kube, kubefake.NewClientset(), rec, clock), kube, clock)
	var gone []string
	for _, d := range append([]time.Duration{0}, rounds...) {
		at = now.Add(d)
		if err := r.Round(ctx); err != nil {
			t.Fatal(err)
		}
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			nc, ok := o.(*v1alpha1.NodeClaim)
			if !ok || slices.Contains(gone, nc.Status.NodeName) {
				continue
			}
			if !slices.ContainsFunc(claims.Items, func(c v1alpha1.NodeClaim) bool { return c.Name == nc.Name }) {
				gone = append(gone, nc.Status.NodeName)
			}
		}
	}
	return gone, drain(rec)
}

func TestRepair(t *testing.T) {
	now := time.Now().Truncate(time.Second) // as the API keeps condition times
	for _, tc := range []struct {
		name   string
		fleet  func(f *repairFleet)
		pool   *v1alpha1.NodePool
		rounds []time.Duration
		want   int    // nodes repaired
		event  string // an Event containing this
	}{{
		name:  "a node not Ready past the default toleration (30m) is repaired, saying which rule allowed it",
		fleet: func(f *repairFleet) { f.add("a", 5, 1, 31*time.Minute, now); f.add("b", 5, 0, 0, now) },
		want:  1, event: "unhealthy: condition Ready has been Unknown for 31m0s (toleration 30m0s); zone a is Normal (1 of 6 nodes not Ready): repairing at 0.1/s",
	}, {
		name:  "within its toleration a node is left alone",
		fleet: func(f *repairFleet) { f.add("a", 5, 1, 29*time.Minute, now) },
		want:  0,
	}, {
		name: "two unhealthy nodes of a Normal zone are repaired 10s apart (0.1/s), not at once",
		fleet: func(f *repairFleet) {
			f.add("a", 8, 2, 40*time.Minute, now)
			f.add("b", 10, 0, 0, now)
		},
		rounds: []time.Duration{5 * time.Second},
		want:   1, event: "the zone's last repair was too recent",
	}, {
		name: "the second one is repaired once 10s have passed",
		fleet: func(f *repairFleet) {
			f.add("a", 8, 2, 40*time.Minute, now)
			f.add("b", 10, 0, 0, now)
		},
		rounds: []time.Duration{5 * time.Second, 10 * time.Second},
		want:   2,
	}, {
		name: "3 of 4 nodes of a small zone not Ready: PartialDisruption, none repaired",
		fleet: func(f *repairFleet) {
			f.add("a", 1, 3, 40*time.Minute, now)
			f.add("b", 6, 0, 0, now)
			f.add("c", 6, 0, 0, now)
		},
		want: 0, event: "zone a is in PartialDisruption (3 of 4 nodes not Ready) and has no more than 50 nodes: not repairing",
	}, {
		name: "every zone fully down: nothing is repaired",
		fleet: func(f *repairFleet) {
			f.add("a", 0, 1, 40*time.Minute, now)
			f.add("b", 0, 1, 40*time.Minute, now)
		},
		pool: testobj.Pool("p").Budget("100%").Obj(),
		want: 0, event: "every zone is in FullDisruption",
	}, {
		name: "more than 20% of a pool unhealthy (4 of 12; 20% rounds up to 3): none repaired",
		fleet: func(f *repairFleet) {
			f.add("a", 3, 1, 40*time.Minute, now)
			f.add("b", 3, 1, 40*time.Minute, now)
			f.add("c", 2, 2, 40*time.Minute, now)
		},
		want: 0, event: "nodepool p has 4 of 12 nodes unhealthy, more than 20% (3)",
	}, {
		name: "a pool of one node may have it repaired: 20% of 1 rounds up to 1",
		fleet: func(f *repairFleet) {
			f.add("a", 0, 1, 40*time.Minute, now)
			f.objs = append(f.objs, testobj.Node("other").Label(corev1.LabelTopologyZone, "b").Ready().Obj())
		},
		want: 1, event: "zone a is in FullDisruption (none of 1 nodes Ready) while other zones are not: repairing at 0.1/s",
	}, {
		name: "a pool's own policy replaces the defaults: a GPU condition is repaired, Ready Unknown is not",
		fleet: func(f *repairFleet) {
			f.add("a", 1, 0, 0, now, corev1.NodeCondition{Type: "example.com/GPUHealthy", Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Minute))})
			f.add("a", 4, 0, 0, now)
			f.add("b", 9, 1, 40*time.Minute, now)
		},
		pool: &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.NodePoolSpec{
			Repair:     &v1alpha1.Repair{Policies: []v1alpha1.RepairPolicy{{ConditionType: "example.com/GPUHealthy", ConditionStatus: "False", TolerationDuration: metav1.Duration{Duration: time.Minute}}}},
			Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}}},
		want: 1, event: "condition example.com/GPUHealthy has been False for 2m0s (toleration 1m0s)",
	}, {
		name:  "a pool with repair and no policies: never repaired",
		fleet: func(f *repairFleet) { f.add("a", 9, 1, 40*time.Minute, now) },
		pool: &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.NodePoolSpec{Repair: &v1alpha1.Repair{},
			Disruption: v1alpha1.Disruption{Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}}},
		want: 0,
	}, {
		name:  "a budget of 0 for Unhealthy holds repair",
		fleet: func(f *repairFleet) { f.add("a", 9, 1, 40*time.Minute, now) },
		pool:  testobj.Pool("p").Budget("0", Unhealthy).Obj(),
		want:  0, event: "disruption budget for Unhealthy is spent",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &repairFleet{}
			tc.fleet(f)
			gone, evs := runRepair(t, f.objs, tc.pool, now, tc.rounds...)
			if len(gone) != tc.want {
				t.Errorf("repaired %v, want %d nodes; events:\n%s", gone, tc.want, evs)
			}
			if tc.event != "" && !strings.Contains(evs, tc.event) {
				t.Errorf("no Event saying %q; events:\n%s", tc.event, evs)
			}
		})
	}
}

// TestOneFailedRepairDoesNotEndTheRound: two unhealthy nodes in two
// zones, each zone with a repair token; the first node's taint is
// refused. The round undoes that repair, still repairs the other node,
// and returns the error naming the first. Before, the first error ended
// the round and the other node waited.
func TestOneFailedRepairDoesNotEndTheRound(t *testing.T) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	f := &repairFleet{}
	f.add("a", 5, 1, 40*time.Minute, now) // n06 unhealthy, for longer
	f.add("b", 5, 1, 35*time.Minute, now) // n12 unhealthy
	pool := testobj.Pool("p").Budget("100%").Obj()
	kube := newTaintCounter(append(slices.Clone(f.objs), pool)...)
	refusing := interceptedUpdate{Client: kube, refuse: "n06"}
	clock := func() time.Time { return now }
	r := NewRepair(NewExecutor(refusing, refusing, kubefake.NewClientset(), events.NewFakeRecorder(100), clock), refusing, clock)
	err := r.Round(ctx)
	if err == nil || !strings.Contains(err.Error(), "n06") {
		t.Errorf("Round = %v, want the error of node n06's repair", err)
	}
	if nc := getClaim(ctx, t, kube, "p-n12"); nc != nil {
		t.Errorf("node n12 was not repaired in the round in which n06's repair failed")
	}
	if nc := getClaim(ctx, t, kube, "p-n06"); nc == nil || !nc.DeletionTimestamp.IsZero() {
		t.Errorf("node n06's failed repair was not undone: %+v", nc)
	}
}

// interceptedUpdate refuses updates of the node named refuse.
type interceptedUpdate struct {
	client.Client
	refuse string
}

func (c interceptedUpdate) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if _, ok := obj.(*corev1.Node); ok && obj.GetName() == c.refuse {
		return apierrors.NewForbidden(corev1.Resource("nodes"), c.refuse, fmt.Errorf("injected"))
	}
	return c.Client.Update(ctx, obj, opts...)
}
