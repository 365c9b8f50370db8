package disruption

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// taintCounter is a fake client that counts the updates that put the
// disruption taint on a node that did not have it.
type taintCounter struct {
	client.Client
	taints atomic.Int32
}

func newTaintCounter(objs ...client.Object) *taintCounter {
	tc := &taintCounter{}
	tc.Client = interceptor.NewClient(testobj.Client(objs...), interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if n, ok := obj.(*corev1.Node); ok && slices.ContainsFunc(n.Spec.Taints, isDisruptedTaint) {
			var before corev1.Node
			if err := c.Get(ctx, client.ObjectKeyFromObject(n), &before); err == nil && !slices.ContainsFunc(before.Spec.Taints, isDisruptedTaint) {
				tc.taints.Add(1)
			}
		}
		return c.Update(ctx, obj, opts...)
	}})
	return tc
}

// everyFiveSeconds reconciles the claim as its node's updates would
// requeue it, every five seconds of fake time for a minute, and returns
// the requeues asked for.
func everyFiveSeconds(ctx context.Context, t *testing.T, c *Controller, kube client.Client, claim string, now *time.Time) []time.Duration {
	t.Helper()
	var asked []time.Duration
	for range 12 {
		if nc := getClaim(ctx, t, kube, claim); nc != nil {
			res, err := settle(c, ctx, nc)
			if err != nil {
				t.Fatal(err)
			}
			asked = append(asked, res.RequeueAfter)
		}
		*now = now.Add(5 * time.Second)
	}
	return asked
}

// TestDriftAtTheLimitIsNeverTainted: pool p's limit is the 8 cpus of its
// two nodes, so no replacement can run beside a drifted node. Reconciled
// every five seconds for a minute, as the node's updates requeue it, the
// node is never tainted (the limits are checked before the taint), and
// the claim says why. Before, it was tainted and untainted on every
// reconcile: 12 times in the minute.
func TestDriftAtTheLimitIsNeverTainted(t *testing.T) {
	ctx := context.Background()
	objs := expiredFixture(cpuType("c7.large", 2, "on-demand", 0.085))
	for _, o := range objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Spec.ExpireAfter = "Never"
			nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
			nc.Status.ProviderID = "fake:///zone-a/" + nc.Name
		}
	}
	pool := replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)
	pool.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("8")}
	kube := newTaintCounter(append(objs, pool)...)
	rec := events.NewFakeRecorder(100)
	now := time.Now()
	e := NewExecutor(kube, kube, kubefake.NewClientset(), rec, func() time.Time { return now })
	e.SetReplacer(NewReplacer(kube, kube, newScheduler(ctx, t), limits.NewLedger(kube, cloudfake.New())))
	c := New(e, alwaysDrifted{})
	asked := everyFiveSeconds(ctx, t, c, kube, "p-n1", &now)
	if n := kube.taints.Load(); n != 0 {
		t.Errorf("a drifted node at its pool's limit was tainted %d times in a minute, want never", n)
	}
	if evs := drain(rec); !strings.Contains(evs, "limits leave no room") {
		t.Errorf("no Event says the limits keep the node; events:\n%s", evs)
	}
	for _, d := range asked {
		if d < 5*time.Second {
			t.Errorf("asked to look again after %s (requeues %v): a busy loop", d, asked)
			break
		}
	}
}

// changesMind chooses every claim and calls it off at the last look.
type changesMind struct{ chosen atomic.Int32 }

func (*changesMind) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonDrifted }
func (m *changesMind) Candidate(context.Context, *v1alpha1.NodeClaim, *v1alpha1.NodePool) (Verdict, error) {
	m.chosen.Add(1)
	return Verdict{Disrupt: true, Why: "drifted: test"}, nil
}
func (*changesMind) StillCandidate(context.Context, *v1alpha1.NodeClaim) (bool, error) {
	return false, nil
}

// TestACalledOffDisruptionWaitsForTheRetry: a method whose last look
// always calls the disruption off, reconciled every five seconds for a
// minute, taints the node at most twice (at once, and after
// ReplacementRetry; the next retry is twice as long), not on every
// reconcile.
func TestACalledOffDisruptionWaitsForTheRetry(t *testing.T) {
	ctx := context.Background()
	kube := newTaintCounter(append(replacementFixture("on-demand"), replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	now := time.Now()
	e := NewExecutor(kube, kube, kubefake.NewClientset(), events.NewFakeRecorder(100), func() time.Time { return now })
	m := &changesMind{}
	c := New(e, m)
	asked := everyFiveSeconds(ctx, t, c, kube, "p-n1", &now)
	if n := kube.taints.Load(); n == 0 || n > 2 {
		t.Errorf("tainted %d times in a minute of call-offs, want 1 or 2 (ReplacementRetry %s, doubling)", n, DefaultTimers.ReplacementRetry)
	}
	if n := m.chosen.Load(); n > 2 {
		t.Errorf("the method was asked %d times in a minute of call-offs, want at most 2", n)
	}
	if nodeTainted(ctx, t, kube, "n1") {
		t.Error("the node kept its taint after the call-off")
	}
	if asked[1] <= 0 || asked[1] > DefaultTimers.ReplacementRetry {
		t.Errorf("after a call-off the claim asked to be looked at again after %s, want within the retry (%s)", asked[1], DefaultTimers.ReplacementRetry)
	}
}

// TestATaintedNodeIsCountedUntilItsTaintIsLifted: pool p allows one node
// disrupted at once. A command on n1 is called off at its last look; as
// n1's taint is being lifted, a command on n2 asks the budget. n1 is
// still tainted, so n2 must wait: an undo lifts the taint before it
// releases the budget. Before, it released first, and for a moment two
// nodes of a budget of one were tainted.
func TestATaintedNodeIsCountedUntilItsTaintIsLifted(t *testing.T) {
	ctx := context.Background()
	pool := replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)
	pool.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	var e *Executor
	var other atomic.Int32 // 1: n2 was allowed while n1 was tainted; 2: refused
	kube := interceptor.NewClient(testobj.Client(append(replacementFixture("on-demand"), pool)...), interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
		if n, ok := obj.(*corev1.Node); ok && n.Name == "n1" && !slices.ContainsFunc(n.Spec.Taints, isDisruptedTaint) && other.Load() == 0 {
			var nc v1alpha1.NodeClaim
			if err := c.Get(ctx, client.ObjectKey{Name: "p-n2"}, &nc); err != nil {
				return err
			}
			ok, _, err := e.budgets.reserve(ctx, c, pool, &nc, v1alpha1.DisruptionReasonDrifted, time.Now())
			if err != nil {
				return err
			}
			if ok {
				other.Store(1)
			} else {
				other.Store(2)
			}
		}
		return c.Update(ctx, obj, opts...)
	}})
	e = NewExecutor(kube, kube, kubefake.NewClientset(), events.NewFakeRecorder(100), time.Now)
	c := New(e, &changesMind{})
	if _, err := settle(c, ctx, getClaim(ctx, t, kube, "p-n1")); err != nil {
		t.Fatal(err)
	}
	switch other.Load() {
	case 0:
		t.Fatal("n1 was never untainted: the command was not called off")
	case 1:
		t.Error("the budget of one let n2 be disrupted while n1 was still tainted")
	}
}
