package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// These tests hold or hurry an expiring node: a budget's schedule window,
// a pod's do-not-disrupt annotation, the pool's terminationGracePeriod.
// Each pool's nodes expire 30s after their claim is made; the pods are
// bare (no controller makes them again), so a node that goes takes its
// pod with it and nothing is launched in its place.

// expiringPool is a copy of the sandbox's default pool whose nodes carry
// team=name and expire after the least a pool may say (1h); consolidation
// is off. Tests shorten the claim they watch (shortenClaim).
func expiringPool(t *testing.T, kube client.Client, name string, edit func(*v1alpha1.NodePool)) {
	t.Helper()
	poolFromDefault(t, kube, name, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(name)}
		np.Spec.Template.Spec.ExpireAfter = "1h"
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		if edit != nil {
			edit(np)
		}
	})
}

// shortenClaim sets a claim's expireAfter, and its terminationGracePeriod
// when tgp is set, below what a pool may say: the API server refuses a
// pool's expireAfter under 1h and terminationGracePeriod under 1m, but a
// claim, which copies its pool's values when it is made, has no floor,
// and its expiry counts from its creation. Tests shorten the claim they
// watch rather than wait an hour.
func shortenClaim(t *testing.T, kube client.Client, nc *v1alpha1.NodeClaim, expireAfter string, tgp time.Duration) {
	t.Helper()
	spec := map[string]any{"expireAfter": expireAfter}
	if tgp > 0 {
		spec["terminationGracePeriod"] = tgp.String()
	}
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Patch(context.Background(), nc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("shortening nodeclaim %s: %v", nc.Name, err)
	}
}

// barePod is a pod for the pool named team, stopping at once when deleted.
func barePod(t *testing.T, cs kubernetes.Interface, name, team string, annotations map[string]string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}, Annotations: annotations}, Spec: corev1.PodSpec{
		SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
		NodeSelector: map[string]string{"team": team},
		Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
	}}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimRunning waits for pod to be Running and returns the one claim of pool.
func claimRunning(t *testing.T, cs kubernetes.Interface, kube client.Client, pod, pool string) v1alpha1.NodeClaim {
	t.Helper()
	ctx := context.Background()
	poll(t, "pod "+pod+" Running", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil || len(claims.Items) != 1 {
		t.Fatalf("want one nodeclaim of pool %s, got %d (err %v)", pool, len(claims.Items), err)
	}
	return claims.Items[0]
}

func claimGone(kube client.Client, nc *v1alpha1.NodeClaim) func() (bool, error) {
	return func() (bool, error) {
		err := kube.Get(context.Background(), client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
}

// claimEvents lists the reasons and notes of the Events regarding a claim.
func claimEvents(ctx context.Context, cs kubernetes.Interface, name string) (reasons, notes []string, err error) {
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + name})
	if err != nil {
		return nil, nil, err
	}
	for _, e := range evs.Items {
		reasons, notes = append(reasons, e.Reason), append(notes, e.Note)
	}
	return reasons, notes, nil
}

// TestScheduledBudgetHoldsExpirationOnlyInItsWindow: two pools whose
// nodes expire alike, each with a budget of zero nodes for Expired. One
// budget's window (a daily schedule an hour ago, for two hours) covers
// now: its node stays past its expiry. The other's (twelve hours off, for
// an hour) does not: its node goes.
func TestScheduledBudgetHoldsExpirationOnlyInItsWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	daily := func(at time.Time) string { at = at.UTC(); return fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()) }
	budget := func(schedule string, d time.Duration) func(*v1alpha1.NodePool) {
		return func(np *v1alpha1.NodePool) {
			np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0", Reasons: []v1alpha1.DisruptionReason{"Expired"},
				Schedule: ptr.To(schedule), Duration: &metav1.Duration{Duration: d}}}
		}
	}
	now := time.Now()
	expiringPool(t, kube, "in-window", budget(daily(now.Add(-time.Hour)), 2*time.Hour))
	expiringPool(t, kube, "out-of-window", budget(daily(now.Add(12*time.Hour)), time.Hour))
	barePod(t, cs, "in-window", "in-window", nil)
	barePod(t, cs, "out-of-window", "out-of-window", nil)
	held := claimRunning(t, cs, kube, "in-window", "in-window")
	open := claimRunning(t, cs, kube, "out-of-window", "out-of-window")
	shortenClaim(t, kube, &held, "30s", 0)
	shortenClaim(t, kube, &open, "30s", 0)

	poll(t, "the node outside its budget's window expired and gone", claimGone(kube, &open))
	// The held claim is as old as the one that went; it was expired as
	// long. Watch it a while longer than a reconcile takes.
	until := held.CreationTimestamp.Add(40 * time.Second)
	for time.Now().Before(until) {
		if gone, err := claimGone(kube, &held)(); err != nil || gone {
			t.Fatalf("the node within its zero budget's window was disrupted (gone %v, err %v)", gone, err)
		}
		time.Sleep(time.Second)
	}
	for _, nc := range []v1alpha1.NodeClaim{held, open} {
		var pool v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
			t.Fatal(err)
		}
		if c := findCondition(pool.Status.Conditions, "BudgetsValid"); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("pool %s: BudgetsValid = %+v, want True", pool.Name, c)
		}
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	if i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == typ }); i >= 0 {
		return &conds[i]
	}
	return nil
}

// TestTerminationGracePeriodDeletesAPodAPDBHolds: a pod whose PDB
// (maxUnavailable 0) refuses every eviction keeps its expired node
// draining only for its claim's terminationGracePeriod (the pool's 1m,
// shortened to 30s on the claim); then the pod is deleted, with an Event
// saying why, and the node goes.
func TestTerminationGracePeriodDeletesAPodAPDBHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	expiringPool(t, kube, "graceful", func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Minute}
	})
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	barePod(t, cs, "guarded", "graceful", nil)
	nc := claimRunning(t, cs, kube, "guarded", "graceful")
	if nc.Spec.TerminationGracePeriod == nil || nc.Spec.TerminationGracePeriod.Duration != time.Minute {
		t.Fatalf("the claim's terminationGracePeriod is %v, not the pool's 1m", nc.Spec.TerminationGracePeriod)
	}
	shortenClaim(t, kube, &nc, "30s", 30*time.Second)
	pod, err := cs.CoreV1().Pods("default").Get(ctx, "guarded", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the expired node gone though a PDB holds its pod", claimGone(kube, &nc))
	poll(t, "the pod deleted", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "guarded", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.UID != pod.UID, client.IgnoreNotFound(err)
	})
	reasons, err := podEventReasons(ctx, cs, "default", "guarded")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reasons, v1alpha1.ReasonTerminationGracePeriodPassed) {
		t.Errorf("the pod's Events %v have no TerminationGracePeriodPassed: was it deleted for the grace period?", reasons)
	}
	claimReasons, _, err := claimEvents(ctx, cs, nc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(claimReasons, v1alpha1.ReasonTerminationGracePeriodPassed) {
		t.Errorf("the claim's Events %v have no TerminationGracePeriodPassed", claimReasons)
	}
}

// TestDoNotDisruptPodHoldsTheDrainOfItsExpiredNode: expiry is forceful
// (Karpenter's v1 semantics), so a pod annotated
// nodeforge.dev/do-not-disrupt=true does not keep its node from being
// chosen once expired: the claim is deleted. But the drain does not evict
// the pod: with no terminationGracePeriod it holds the drain, the pod
// keeps running, and the claim says so (DrainHeld naming the pod); once
// the annotation is removed, the pod is evicted and the node goes.
func TestDoNotDisruptPodHoldsTheDrainOfItsExpiredNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	expiringPool(t, kube, "keeper", nil)
	barePod(t, cs, "keeper", "keeper", map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"})
	nc := claimRunning(t, cs, kube, "keeper", "keeper")
	shortenClaim(t, kube, &nc, "30s", 0)

	want := "default/keeper"
	poll(t, "a DrainHeld Event on the expired claim naming the pod", func() (bool, error) {
		reasons, notes, err := claimEvents(ctx, cs, nc.Name)
		for i := range reasons {
			if reasons[i] == v1alpha1.ReasonDrainHeld && strings.Contains(notes[i], want) {
				return true, nil
			}
		}
		return false, err
	})
	var held v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &held); err != nil || held.DeletionTimestamp.IsZero() {
		t.Fatalf("the expired claim is not being deleted (err %v): expiry is forceful", err)
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "keeper", metav1.GetOptions{}); err != nil || !p.DeletionTimestamp.IsZero() || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the do-not-disrupt pod was evicted or stopped (err %v)", err)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, v1alpha1.AnnotationDoNotDisrupt))
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "keeper", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the expired node gone once the annotation is removed", claimGone(kube, &nc))
}
