package nodepool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func poolWithClass(name string, ref v1alpha1.NodeClassReference) *v1alpha1.NodePool {
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.NodeClassRef = ref
	return np
}

func simulatedClass(name string) v1alpha1.NodeClassReference {
	return v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: name}
}

// TestPoolIsReadyOnlyWithAServedReadyClass: the Ready condition follows
// what the cloud provider declares: the kind must be one it serves (the
// message names them), the class must exist, and the provider must read
// it as ready.
func TestPoolIsReadyOnlyWithAServedReadyClass(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ref        v1alpha1.NodeClassReference
		notReady   string // the fake provider reads this class as not ready
		wantStatus metav1.ConditionStatus
		wantReason string
		wantInMsg  string
	}{
		{name: "a class of a served kind that exists and is ready", ref: simulatedClass("default"),
			wantStatus: metav1.ConditionTrue, wantReason: "NodeClassReady", wantInMsg: "SimulatedNodeClass default is ready"},
		{name: "a class the provider reads as not ready", ref: simulatedClass("default"), notReady: "subnets not resolved",
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotReady", wantInMsg: "SimulatedNodeClass default is not ready (FakeNotReady): subnets not resolved"},
		{name: "a class that does not exist", ref: simulatedClass("missing"),
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotFound", wantInMsg: "SimulatedNodeClass missing does not exist"},
		{name: "a kind the provider does not serve", ref: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "default"},
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotSupported", wantInMsg: "which launches from SimulatedNodeClass"},
		{name: "a served kind in another group", ref: v1alpha1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "SimulatedNodeClass", Name: "default"},
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotSupported", wantInMsg: "not served by this provisioner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
			np := poolWithClass("pool", tc.ref)
			kube := testobj.Client(class, np)
			cloud := cloudfake.New()
			if tc.notReady != "" {
				cloud.SetNodeClassReady("default", false, tc.notReady)
			}
			c := NewStatusController(kube, cloud.NodeClasses(), nil)
			if _, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.NodePool
			if err := kube.Get(context.Background(), client.ObjectKey{Name: "pool"}, &got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if cond == nil {
				t.Fatal("no Ready condition")
			}
			if cond.Status != tc.wantStatus || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantInMsg) {
				t.Errorf("Ready = %s %s %q, want %s %s and a message containing %q", cond.Status, cond.Reason, cond.Message, tc.wantStatus, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

// TestClassChangeReconcilesThePoolsReferringToIt: a change to a node class
// enqueues the pools whose nodeClassRef names that kind and name, and no
// other pool.
func TestClassChangeReconcilesThePoolsReferringToIt(t *testing.T) {
	kube := testobj.Client(
		poolWithClass("uses-it", simulatedClass("a")),
		poolWithClass("other-name", simulatedClass("b")),
		poolWithClass("other-kind", v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "a"}),
	)
	c := NewStatusController(kube, cloudfake.New().NodeClasses(), nil)
	got := c.poolsOfClass("SimulatedNodeClass")(context.Background(), &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	if len(got) != 1 || got[0].Name != "uses-it" {
		t.Errorf("pools enqueued for SimulatedNodeClass a = %v, want only uses-it", got)
	}
}

// TestBadBudgetScheduleIsReportedOnThePool: a budget schedule the cron
// parser refuses makes BudgetsValid False with a message naming the
// budget, records one Warning Event however often the pool is
// reconciled, and leaves Ready alone; fixing it makes BudgetsValid True.
func TestBadBudgetScheduleIsReportedOnThePool(t *testing.T) {
	ctx := context.Background()
	np := poolWithClass("pool", simulatedClass("default"))
	np.Spec.Disruption.Budgets = []v1alpha1.Budget{
		{Nodes: "10%"},
		{Nodes: "0", Schedule: ptr.To("0 25 * * *"), Duration: &metav1.Duration{Duration: time.Hour}},
	}
	kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np)
	recorder := events.NewFakeRecorder(10)
	c := NewStatusController(kube, cloudfake.New().NodeClasses(), recorder)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}
	get := func() *v1alpha1.NodePool {
		var got v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKey{Name: "pool"}, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	for range 3 {
		if _, err := c.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	got := get()
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionBudgetsValid)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "InvalidSchedule" ||
		!strings.Contains(cond.Message, `budgets[1] schedule "0 25 * * *"`) || !strings.Contains(cond.Message, "above maximum") {
		t.Errorf("BudgetsValid = %+v; want False, InvalidSchedule, naming budgets[1] and the parse error", cond)
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v; a bad budget schedule should not make the pool unready", ready)
	}
	if n := len(recorder.Events); n != 1 {
		t.Errorf("%d Events after three reconciles; want 1", n)
	} else if e := <-recorder.Events; !strings.HasPrefix(e, "Warning "+v1alpha1.ReasonInvalidSchedule) {
		t.Errorf("Event %q; want a Warning InvalidSchedule", e)
	}
	got.Spec.Disruption.Budgets[1].Schedule = ptr.To("0 23 * * *")
	if err := kube.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(get().Status.Conditions, v1alpha1.ConditionBudgetsValid); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("BudgetsValid after the fix = %+v; want True", cond)
	}
}

// TestUnreadableRequirementsMakeThePoolUnready: a pool whose requirement
// the scheduler cannot read (NotIn with no values, as the API server
// accepted before it refused them) is Ready=False with the reason, not
// Ready while no catalog is published for it.
func TestUnreadableRequirementsMakeThePoolUnready(t *testing.T) {
	ctx := context.Background()
	np := poolWithClass("pool", simulatedClass("default"))
	np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{{Key: "node.kubernetes.io/instance-type", Operator: "NotIn"}}
	kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np)
	c := NewStatusController(kube, cloudfake.New().NodeClasses(), events.NewFakeRecorder(10))
	if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.NodePool
	if err := kube.Get(ctx, client.ObjectKey{Name: "pool"}, &got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "InvalidRequirements" || !strings.Contains(ready.Message, "requirement 0 (node.kubernetes.io/instance-type NotIn []) cannot be read") {
		t.Errorf("Ready = %+v; want False, InvalidRequirements, naming the requirement", ready)
	}
}

// TestFixedPoolShortForItsLimitsIsNotReady: a fixed-size pool whose
// ReplicasReached is False for its limits is not Ready, with the same
// reason and message; short while its nodes launch, it stays Ready.
func TestFixedPoolShortForItsLimitsIsNotReady(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		want         metav1.ConditionStatus
	}{
		{"short for its limits", v1alpha1.ReasonReplicasLimited, metav1.ConditionFalse},
		{"short while its nodes launch", v1alpha1.ReasonReplicasLaunching, metav1.ConditionTrue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			np := poolWithClass("pool", simulatedClass("default"))
			np.Spec.Replicas = ptr.To[int64](3)
			const msg = "1 of 3 replicas initialized; nodepool limits leave no room for 2 more: cpu 4 in use or launching + 2 for c7.large > limit 5"
			np.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReplicasReached, Status: metav1.ConditionFalse, Reason: tc.reason, Message: msg}}
			kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np)
			c := NewStatusController(kube, cloudfake.New().NodeClasses(), events.NewFakeRecorder(10))
			if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.NodePool
			if err := kube.Get(ctx, client.ObjectKey{Name: "pool"}, &got); err != nil {
				t.Fatal(err)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Status != tc.want {
				t.Fatalf("Ready = %+v, want %s", ready, tc.want)
			}
			if tc.want == metav1.ConditionFalse && (ready.Reason != v1alpha1.ReasonReplicasLimited || ready.Message != msg) {
				t.Errorf("Ready = %s %q, want reason %s and the ReplicasReached message", ready.Reason, ready.Message, v1alpha1.ReasonReplicasLimited)
			}
			if rr := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReplicasReached); rr == nil || rr.Reason != tc.reason {
				t.Errorf("ReplicasReached = %+v, want it kept as the replicas controller wrote it", rr)
			}
		})
	}
}

// TestPoolWithoutLimitsSaysSo: a pool without spec.limits gets LimitsSet
// False, reason NoLimits, with a message saying any pod can buy what its
// requirements allow, and stays Ready; a pool with limits gets LimitsSet
// True naming them.
func TestPoolWithoutLimitsSaysSo(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		limits      v1alpha1.Limits
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{name: "no limits", wantStatus: metav1.ConditionFalse, wantReason: "NoLimits",
			wantMessage: "any pod with schedulerName nodeforge-scheduler, in any namespace, can make this pool launch capacity up to what its requirements allow, without bound"},
		{name: "cpu and memory limits", limits: v1alpha1.Limits{corev1.ResourceMemory: resource.MustParse("400Gi"), corev1.ResourceCPU: resource.MustParse("100")},
			wantStatus: metav1.ConditionTrue, wantReason: "LimitsSet", wantMessage: "nothing is launched past cpu 100, memory 400Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := poolWithClass("pool", simulatedClass("default"))
			np.Spec.Limits = tc.limits
			kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np)
			c := NewStatusController(kube, cloudfake.New().NodeClasses(), events.NewFakeRecorder(10))
			if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.NodePool
			if err := kube.Get(ctx, client.ObjectKey{Name: "pool"}, &got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionLimitsSet)
			if cond == nil || cond.Status != tc.wantStatus || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantMessage) {
				t.Errorf("LimitsSet = %+v; want %s, %s, a message containing %q", cond, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
			if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %+v; want True whatever the limits", ready)
			}
		})
	}
}

// TestPoolUsageAndLimitsAreExported: a pool's status.resources and
// spec.limits are its nodeforge_nodepool_usage and
// nodeforge_nodepool_limit series, in cores and bytes; a deleted pool
// has none.
func TestPoolUsageAndLimitsAreExported(t *testing.T) {
	ctx := context.Background()
	np := poolWithClass("metered", simulatedClass("default"))
	np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("100")}
	node := testobj.Node("n").Label(v1alpha1.LabelNodePool, "metered").Capacity("cpu", "4", "memory", "16Gi").Obj()
	launching := testobj.Claim("launching").Pool("metered").Capacity("cpu", "2").Obj()
	kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np, node, launching)
	c := NewStatusController(kube, cloudfake.New().NodeClasses(), nil)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "metered"}}
	if _, err := c.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		gauge    *metrics.ResourceGauges
		resource string
		want     float64
	}{
		{"usage", metrics.PoolUsage, "cpu", 6}, // the node's 4 and the launching claim's 2
		{"usage", metrics.PoolUsage, "memory", 16 << 30},
		{"limit", metrics.PoolLimit, "cpu", 100},
	} {
		if got := testutil.ToFloat64(tc.gauge.WithLabelValues("metered", tc.resource)); got != tc.want {
			t.Errorf("%s of %s = %v, want %v", tc.name, tc.resource, got, tc.want)
		}
	}
	if err := kube.Delete(ctx, np); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*metrics.ResourceGauges{"usage": metrics.PoolUsage, "limit": metrics.PoolLimit} {
		if g.DeleteLabelValues("metered", "cpu") {
			t.Errorf("a deleted pool still has a cpu %s series", name)
		}
	}
}

// TestCountsAreWrittenAtMostOnceAnInterval: a pool whose node count
// changes again within CountsInterval of its last status write is written
// when the interval is over (the reconcile asks to come back then), with
// the newest counts; its gauge follows at once. A change of condition is
// written at once.
func TestCountsAreWrittenAtMostOnceAnInterval(t *testing.T) {
	ctx := context.Background()
	np := poolWithClass("counted", simulatedClass("default"))
	kube := testobj.Client(&v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, np)
	c := NewStatusController(kube, cloudfake.New().NodeClasses(), nil)
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "counted"}}
	addNode := func(name string) {
		t.Helper()
		if err := kube.Create(ctx, testobj.Node(name).Label(v1alpha1.LabelNodePool, "counted").Capacity("cpu", "2").Obj()); err != nil {
			t.Fatal(err)
		}
	}
	reconcileAt := func(at time.Duration) (reconcile.Result, v1alpha1.NodePoolStatus) {
		t.Helper()
		now = now.Add(at)
		res, err := c.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var got v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKeyFromObject(np), &got); err != nil {
			t.Fatal(err)
		}
		return res, got.Status
	}
	if res, st := reconcileAt(0); res.RequeueAfter != 0 || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady) == nil {
		t.Fatalf("first reconcile: %+v, status %+v; want it written at once", res, st)
	}
	addNode("a")
	res, st := reconcileAt(time.Second)
	if st.Nodes != 0 || res.RequeueAfter != CountsInterval-time.Second {
		t.Fatalf("a node 1s after the last write: status nodes %d, requeue after %v; want 0 and %v", st.Nodes, res.RequeueAfter, CountsInterval-time.Second)
	}
	if got := testutil.ToFloat64(metrics.Nodes.WithLabelValues("counted")); got != 1 {
		t.Errorf("nodes gauge %v, want 1 at once", got)
	}
	addNode("b")
	if res, st := reconcileAt(CountsInterval - time.Second); res.RequeueAfter != 0 || st.Nodes != 2 {
		t.Fatalf("at the interval's end: requeue after %v, status nodes %d; want written with 2", res.RequeueAfter, st.Nodes)
	}
	// A condition change does not wait.
	if err := kube.Delete(ctx, &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	if res, st := reconcileAt(time.Second); res.RequeueAfter != 0 || meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("class deleted 1s after a write: requeue after %v, conditions %+v; want Ready False written at once", res.RequeueAfter, st.Conditions)
	}
}
