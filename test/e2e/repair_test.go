package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestFailedNodeIsRepaired: kwok stops running one node (its annotation
// taken away and kwok started again, as if the node's kubelet died), so
// kube-controller-manager's node lifecycle controller marks it Ready
// Unknown once its lease runs out.
// The pool tolerates that for 10s; then the node is repaired: a
// replacement is launched for its pod (which fits no other node), the
// pod runs there, and the failed node, its claim and its instance are
// gone, though no kubelet will ever confirm the pod stopped. The claim's
// Event names the rule that allowed the repair.
func TestFailedNodeIsRepaired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	const pool = "repairing"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Repair = &v1alpha1.Repair{Policies: []v1alpha1.RepairPolicy{
			{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionUnknown), TolerationDuration: metav1.Duration{Duration: 10 * time.Second}},
			{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionFalse), TolerationDuration: metav1.Duration{Duration: 10 * time.Second}},
		}}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment(pool, pool, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the pod Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+pool)
		return n == 1, err
	})
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil || len(claims) != 1 {
		t.Fatalf("want one claim of pool %s, got %v (err %v)", pool, claimTypes(claims), err)
	}
	old := claims[0]
	// The node's kubelet dies: kwok, started again, no longer runs it
	// (a running kwok keeps the leases of the nodes it took on).
	patch := []byte(`{"metadata":{"annotations":{"kwok.x-k8s.io/node":null}}}`)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, old.Status.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.KillAndRestart(ctx, "kwok"); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	// The lease runs out (40s) and the node lifecycle controller's grace
	// period passes before the node is Unknown; then the toleration.
	pollFor(t, 4*time.Minute, "the failed node's claim gone and the pod Running on its replacement", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&old), &v1alpha1.NodeClaim{}); err == nil {
			return false, nil
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, old.Status.NodeName, metav1.GetOptions{}); err == nil {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		p := pods.Items[0]
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != old.Status.NodeName, nil
	})
	t.Logf("repaired %s after the kubelet died", time.Since(failed).Round(time.Second))
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + old.Name})
	if err != nil {
		t.Fatal(err)
	}
	found := ""
	for _, e := range evs.Items {
		if (e.Reason == v1alpha1.ReasonReplacing || e.Reason == v1alpha1.ReasonDisrupting) && e.Action == string(v1alpha1.DisruptionReasonUnhealthy) {
			found = e.Note
		}
	}
	if !strings.Contains(found, "condition Ready has been Unknown") || !strings.Contains(found, "repairing at 0.1/s") {
		t.Errorf("no Event on %s saying the node was unhealthy and which rule allowed the repair; last: %q", old.Name, found)
	}
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	oneInstancePerClaim(t, ctx, kube, all.Items)
}
