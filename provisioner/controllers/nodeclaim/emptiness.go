package nodeclaim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// conditionEmpty is True while the claim's node runs no pod but daemonset
// pods; its LastTransitionTime is when it became empty.
const conditionEmpty = "Empty"

// removeWhenEmpty deletes the claim (and so terminates its instance) once
// its node has been empty for the pool's consolidateAfter, within the
// pool's disruption budget.
func (c *Controller) removeWhenEmpty(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	after, ok, err := pool.Spec.Disruption.ConsolidateAfter.Duration()
	if err != nil || !ok {
		return reconcile.Result{}, err
	}
	if nc.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
		return reconcile.Result{}, nil
	}
	empty, err := c.nodeEmpty(ctx, nc.Status.NodeName)
	if err != nil {
		return reconcile.Result{}, err
	}
	status := metav1.ConditionFalse
	if empty {
		status = metav1.ConditionTrue
	}
	if meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: conditionEmpty, Status: status, Reason: conditionEmpty, ObservedGeneration: nc.Generation}) {
		return reconcile.Result{Requeue: true}, c.kube.Status().Update(ctx, nc)
	}
	if !empty {
		return reconcile.Result{}, nil
	}
	since := meta.FindStatusCondition(nc.Status.Conditions, conditionEmpty).LastTransitionTime.Time
	if wait := after - c.now().Sub(since); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if allowed, err := c.budgetAllows(ctx, &pool, v1alpha1.DisruptionReason("Empty")); err != nil || !allowed {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	klog.FromContext(ctx).Info("Deleting empty node", "node", nc.Status.NodeName, "emptyFor", c.now().Sub(since).Round(time.Second), "consolidateAfter", after)
	c.event(nc, corev1.EventTypeNormal, "Disrupting", "Empty", fmt.Sprintf("node %s empty for %s (consolidateAfter %s)", nc.Status.NodeName, c.now().Sub(since).Round(time.Second), after))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "Empty").Inc()
	nc.Status.Phase = v1alpha1.NodeClaimDisrupting
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

// nodeEmpty: no pod on the node but daemonset pods and finished pods.
func (c *Controller) nodeEmpty(ctx context.Context, node string) (bool, error) {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node}); err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || ownedByDaemonSet(&p) {
			continue
		}
		return false, nil
	}
	return true, nil
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// budgetAllows reports whether one more node of the pool may be disrupted
// for reason: the most restrictive budget that applies wins. Scheduled
// budgets count as active at all times: a conservative reading until
// schedules are evaluated.
func (c *Controller) budgetAllows(ctx context.Context, pool *v1alpha1.NodePool, reason v1alpha1.DisruptionReason) (bool, error) {
	var claims v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &claims); err != nil {
		return false, err
	}
	total, disrupting := 0, 0
	for _, nc := range claims.Items {
		if nc.Spec.NodePool != pool.Name || nc.Status.NodeName == "" {
			continue
		}
		total++
		if nc.Status.Phase == v1alpha1.NodeClaimDisrupting || !nc.DeletionTimestamp.IsZero() {
			disrupting++
		}
	}
	allowed := total
	for _, b := range pool.Spec.Disruption.Budgets {
		if len(b.Reasons) > 0 && !containsReason(b.Reasons, reason) {
			continue
		}
		allowed = min(allowed, budgetNodes(b.Nodes, total))
	}
	return disrupting < allowed, nil
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
