package nodeclaim

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// newPackScheduler is the simulator with kube-scheduler's default profile.
func newPackScheduler(ctx context.Context, t *testing.T) *simulator.Scheduler {
	t.Helper()
	s, err := simulator.DefaultScheduler(ctx, kubefake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// packSteps is newSteps with repacking on, "large" priced below two
// "small" (0.03 against 0.02 each), and two closed claims, each holding
// one pod of 1500m on "small": one "large" holds both for less.
func packSteps(t *testing.T) (*steps, *v1alpha1.NodeClaim, *v1alpha1.NodeClaim) {
	t.Helper()
	ctx := context.Background()
	var claims []*v1alpha1.NodeClaim
	var objs []client.Object
	for i, name := range []string{"pool-aaaaa", "pool-bbbbb"} {
		nc := poolClaim().Name(name).UID(fmt.Sprint("uid-claim-", i)).NominatedPods(1).Phase(v1alpha1.NodeClaimLaunching).Obj()
		p := fmt.Sprint("p", i)
		pod := testobj.Pod(p).UID("uid-pod-"+p).Nominated(name).Req("cpu", "1500m", "memory", "1Gi").Obj()
		claims = append(claims, nc)
		objs = append(objs, nc, pod)
	}
	s := newSteps(t, objs...)
	s.opts.Repack = newPackScheduler(ctx, t)
	s.build()
	var cat v1alpha1.InstanceTypeCatalog
	if err := s.kube.Get(ctx, client.ObjectKey{Name: "pool"}, &cat); err != nil {
		t.Fatal(err)
	}
	cat.Spec.InstanceTypes[1].Offerings[0].Price = "0.03"
	if err := s.kube.Update(ctx, &cat); err != nil {
		t.Fatal(err)
	}
	var pool v1alpha1.NodePool
	if err := s.kube.Get(ctx, client.ObjectKey{Name: "pool"}, &pool); err != nil {
		t.Fatal(err)
	}
	hash, err := nodeshape.PoolHash(&pool)
	if err != nil {
		t.Fatal(err)
	}
	for i, nc := range claims {
		got := s.get(t, nc)
		got.Annotations = map[string]string{v1alpha1.AnnotationNodePoolHash: hash}
		if err := s.kube.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		got.Status = nc.Status
		if err := s.kube.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		claims[i] = got
	}
	return s, claims[0], claims[1]
}

// podsOn counts the pods nominated to each claim.
func (s *steps) podsOn(t *testing.T) map[string]int {
	t.Helper()
	var pods corev1.PodList
	if err := s.kube.List(context.Background(), &pods); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		out[p.Status.NominatedNodeName]++
	}
	return out
}

// TestRepackMovesPodsAndLaunchesOnlyThePlan: the first launch of the
// batch repacks it: both pods move to one claim, which may launch only
// "large" now and is marked Packed; the other claim is deleted with
// where its pod went, and nothing is launched for it, even when asked to
// launch it from a cache that has not seen it go.
func TestRepackMovesPodsAndLaunchesOnlyThePlan(t *testing.T) {
	ctx := context.Background()
	s, a, b := packSteps(t)
	if _, err := s.c.launcher.reconcile(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n := s.cloud.Creates(); n != 0 {
		t.Fatalf("%d instances launched while repacking; want none before a claim is packed", n)
	}
	var kept, gone *v1alpha1.NodeClaim
	for _, nc := range []*v1alpha1.NodeClaim{a, b} {
		var got v1alpha1.NodeClaim
		err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &got)
		switch {
		case apierrors.IsNotFound(err) || err == nil && !got.DeletionTimestamp.IsZero():
			gone = nc
		case err != nil:
			t.Fatal(err)
		default:
			kept = &got
		}
	}
	if kept == nil || gone == nil {
		t.Fatalf("want one claim kept and one deleted; kept %v, deleted %v", kept != nil, gone != nil)
	}
	if on := s.podsOn(t); on[kept.Name] != 2 {
		t.Errorf("pods per claim %v; want both on %s", on, kept.Name)
	}
	cond := meta.FindStatusCondition(kept.Status.Conditions, v1alpha1.ConditionPacked)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "Repacked" {
		t.Errorf("kept claim's Packed condition %+v; want True, Repacked", cond)
	}
	if its := instanceTypes(kept); len(its) != 1 || its[0] != "large" || kept.Spec.NominatedPods != 2 {
		t.Errorf("kept claim may launch %v with %d pods; want large alone, 2 pods", its, kept.Spec.NominatedPods)
	}
	// The deleted claim, as a cache that lags would still show it.
	if _, err := s.c.launcher.reconcile(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.launcher.reconcile(ctx, kept); err != nil {
		t.Fatal(err)
	}
	in, err := s.cloud.List(ctx)
	if err != nil || s.cloud.Creates() != 1 || len(in) != 1 || in[0].InstanceType != "large" {
		t.Errorf("%d creates, instances %+v (%v); want one large", s.cloud.Creates(), in, err)
	}
}

// TestRepackFinishesAPlanLeftUnfinished: a provisioner that wrote a plan
// and stopped before moving anything (a crash) is replaced by one that
// remembers nothing; asked to launch the claim the plan empties, it
// finishes the plan instead: the pod moves, the claim goes, nothing
// launches for it.
func TestRepackFinishesAPlanLeftUnfinished(t *testing.T) {
	ctx := context.Background()
	s, a, b := packSteps(t)
	plan := packPlan{
		Claims:  map[string]packedClaim{b.Name: {InstanceTypes: []string{"large"}, Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}, Pods: 2}},
		Moves:   map[string]map[types.UID]string{a.Name: {"uid-pod-p0": b.Name}},
		Emptied: []string{a.Name}, How: "afresh", Before: 0.04, After: 0.03,
	}
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	b.Annotations[v1alpha1.AnnotationRepackPlan] = string(raw)
	if err := s.kube.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(a), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("the emptied claim is still there (%v)", err)
	}
	if on := s.podsOn(t); on[b.Name] != 2 {
		t.Errorf("pods per claim %v; want both on %s", on, b.Name)
	}
	got := s.get(t, b)
	if !isPacked(got) || instanceTypes(got)[0] != "large" {
		t.Errorf("the plan's claim: packed %v, instance types %v; want packed, large", isPacked(got), instanceTypes(got))
	}
	if n := s.cloud.Creates(); n != 0 {
		t.Errorf("%d instances launched; want none yet", n)
	}
}

// TestDueClaimClosesItsIdleBatchWithIt: when a claim's window ends, the
// open claims of its group idle for half the window close with it (its
// batch, repacked together); one nominated to a moment ago stays open,
// as does one of another zone.
func TestDueClaimClosesItsIdleBatchWithIt(t *testing.T) {
	ctx := context.Background()
	var objs []client.Object
	var claims []*v1alpha1.NodeClaim
	for i, name := range []string{"pool-due", "pool-idle", "pool-busy", "pool-zoneb"} {
		nc := poolClaim().Name(name).UID("uid-" + name).Phase(v1alpha1.NodeClaimNominating).Obj()
		if name == "pool-zoneb" {
			nc.Spec.Requirements[1].Values = []string{"zone-b"}
		}
		claims = append(claims, nc)
		objs = append(objs, nc, nominated(fmt.Sprint("p", i), name))
	}
	s := newSteps(t, objs...)
	s.opts.Repack = newPackScheduler(ctx, t)
	s.build()
	// Last nominations: due 1.1s ago, idle 0.6s, busy 0.1s, zone-b 1.1s
	// (due too, but another group: its own window closes it).
	for i, ago := range []float64{1.1, 0.6, 0.1, 1.1} {
		got := s.get(t, claims[i])
		got.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now.Add(-time.Duration(ago * float64(time.Second)))}
		if err := s.kube.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, claims[0])); err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.NodeClaimPhase{v1alpha1.NodeClaimLaunching, v1alpha1.NodeClaimLaunching, v1alpha1.NodeClaimNominating, v1alpha1.NodeClaimNominating}
	for i, nc := range claims {
		if got := s.get(t, nc).Status.Phase; got != want[i] {
			t.Errorf("claim %s is %s, want %s", nc.Name, got, want[i])
		}
	}
}

// TestClaimARepackEmptiedNeverLaunches: a claim annotated with where a
// repack moved its pods, found by a provisioner that remembers nothing
// (with repacking on, and off), is deleted, not launched.
func TestClaimARepackEmptiedNeverLaunches(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("repack=%v", on), func(t *testing.T) {
			ctx := context.Background()
			s, a, b := packSteps(t)
			if !on {
				s.opts.Repack = nil
				s.build()
			}
			a.Annotations[v1alpha1.AnnotationRepackedInto] = fmt.Sprintf(`{"uid-pod-p0":%q}`, b.Name)
			if err := s.kube.Update(ctx, a); err != nil {
				t.Fatal(err)
			}
			if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
				t.Fatal(err)
			}
			if err := s.kube.Get(ctx, client.ObjectKeyFromObject(a), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
				t.Errorf("the emptied claim is still there (%v)", err)
			}
			if n := s.cloud.Creates(); n != 0 {
				t.Errorf("%d instances launched for an emptied claim", n)
			}
		})
	}
}

// TestClaimAloneShrinksToTheTypeItsPodsNeed: a claim left with one pod of
// 1500m but narrowed to "large" (a pod left it while it was open) is
// repacked alone onto "small", half the price, before it launches.
func TestClaimAloneShrinksToTheTypeItsPodsNeed(t *testing.T) {
	ctx := context.Background()
	s, a, b := packSteps(t)
	if err := s.kube.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	a.Spec.Requirements[0].Values = []string{"large"}
	if err := s.kube.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
		t.Fatal(err)
	}
	got := s.get(t, a)
	if !isPacked(got) || instanceTypes(got)[0] != "small" {
		t.Fatalf("packed %v, instance types %v; want packed, small first", isPacked(got), instanceTypes(got))
	}
	if _, err := s.c.launcher.reconcile(ctx, got); err != nil {
		t.Fatal(err)
	}
	if in, err := s.cloud.List(ctx); err != nil || len(in) != 1 || in[0].InstanceType != "small" {
		t.Errorf("instances %+v (%v); want one small", in, err)
	}
}

// TestClaimWaitsForTheClaimClosingWithIt: two claims of a batch fall due
// at one moment and two workers close them; the first to reach the repack
// finds the other still open (its close not yet written), idle and holding
// a pod. It waits instead of taking itself for alone: nothing launches,
// and once the other is closed the two are repacked onto one node. A
// claim that never closes is waited for no longer than closingWait.
func TestClaimWaitsForTheClaimClosingWithIt(t *testing.T) {
	ctx := context.Background()
	reopen := func(s *steps, nc *v1alpha1.NodeClaim) {
		t.Helper()
		got := s.get(t, nc)
		got.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now.Add(-s.opts.BatchIdle)}
		if err := s.kube.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		got.Status.Phase = v1alpha1.NodeClaimNominating
		if err := s.kube.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("the other closes", func(t *testing.T) {
		s, a, b := packSteps(t)
		reopen(s, b)
		res, err := s.c.launcher.reconcile(ctx, s.get(t, a))
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter == 0 || s.cloud.Creates() != 0 || meta.FindStatusCondition(s.get(t, a).Status.Conditions, v1alpha1.ConditionPacked) != nil {
			t.Fatalf("with its batch's other claim closing, the claim was decided (requeue %v, %d creates, Packed %+v); want it to wait",
				res.RequeueAfter, s.cloud.Creates(), meta.FindStatusCondition(s.get(t, a).Status.Conditions, v1alpha1.ConditionPacked))
		}
		got := s.get(t, b)
		got.Status.Phase = v1alpha1.NodeClaimLaunching
		if err := s.kube.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		s.now = s.now.Add(100 * time.Millisecond)
		if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
			t.Fatal(err)
		}
		if on := s.podsOn(t); on[a.Name]+on[b.Name] != 2 || on[a.Name] != 2 && on[b.Name] != 2 {
			t.Errorf("pods per claim %v; want both on one claim (the batch repacked)", on)
		}
	})
	t.Run("the other never closes", func(t *testing.T) {
		s, a, b := packSteps(t)
		reopen(s, b)
		if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
			t.Fatal(err)
		}
		s.now = s.now.Add(closingWait)
		if _, err := s.c.launcher.reconcile(ctx, s.get(t, a)); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(s.get(t, a).Status.Conditions, v1alpha1.ConditionPacked)
		if cond == nil || cond.Reason != "Kept" {
			t.Errorf("after waiting %s the claim's Packed condition is %+v; want it decided alone (Kept)", closingWait, cond)
		}
	})
}

// TestRepackLeavesOutAClaimOutsideItsPool: a claim of the batch that asks
// for more than its pool makes (a label of its own) is not repacked with
// the others: no pod moves onto it or off it, and the claim launched
// first launches as it was nominated.
func TestRepackLeavesOutAClaimOutsideItsPool(t *testing.T) {
	ctx := context.Background()
	s, a, b := packSteps(t)
	b.Spec.Labels = map[string]string{"team": "then", "example.com/trusted": "true"}
	if err := s.kube.Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.launcher.reconcile(ctx, a); err != nil {
		t.Fatal(err)
	}
	if on := s.podsOn(t); on[a.Name] != 1 || on[b.Name] != 1 {
		t.Errorf("pods per claim %v; want one on each, as nominated", on)
	}
	got := s.get(t, a)
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionPacked); cond == nil || cond.Reason != "Kept" {
		t.Errorf("the claim within its pool: Packed condition %+v; want True, Kept", cond)
	}
	if got.Status.Phase != v1alpha1.NodeClaimLaunched {
		t.Errorf("the claim within its pool: phase %s, want Launched", got.Status.Phase)
	}
}
