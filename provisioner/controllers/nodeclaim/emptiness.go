package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	allowed, err := c.budgets.reserve(ctx, c.kube, &pool, nc, v1alpha1.DisruptionReason("Empty"))
	if err != nil || !allowed {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	// Taint first, then look again at the live pods (not the cache): a pod
	// bound meanwhile aborts the deletion, and none is bound after.
	if empty, err := c.taintAndRecheck(ctx, nc.Status.NodeName); err != nil || !empty {
		c.budgets.release(nc.UID)
		if err == nil {
			klog.FromContext(ctx).Info("Not deleting node: a pod landed on it while it was being disrupted", "node", nc.Status.NodeName)
		}
		return reconcile.Result{Requeue: true}, err
	}
	klog.FromContext(ctx).Info("Deleting empty node", "node", nc.Status.NodeName, "emptyFor", c.now().Sub(since).Round(time.Second), "consolidateAfter", after)
	c.event(nc, corev1.EventTypeNormal, "Disrupting", "Empty", fmt.Sprintf("node %s empty for %s (consolidateAfter %s)", nc.Status.NodeName, c.now().Sub(since).Round(time.Second), after))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "Empty").Inc()
	nc.Status.Phase = v1alpha1.NodeClaimDisrupting
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		// Not disrupting after all (this time): the node takes pods again.
		c.budgets.release(nc.UID)
		return reconcile.Result{}, errors.Join(err, c.untaint(ctx, nc.Status.NodeName))
	}
	return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

// taintAndRecheck puts nodeforge.dev/disrupted:NoSchedule on the node and
// lists its pods from the API server itself: whether it is still empty.
// When it is not, the taint is taken off again.
func (c *Controller) taintAndRecheck(ctx context.Context, name string) (bool, error) {
	var node corev1.Node
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return false, err
	}
	if !slices.ContainsFunc(node.Spec.Taints, isDisruptedTaint) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule})
		if err := c.kube.Update(ctx, &node); err != nil {
			return false, err
		}
	}
	pods, err := c.pods.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return false, fmt.Errorf("listing pods of node %s: %w", name, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || ownedByDaemonSet(p) {
			continue
		}
		return false, c.untaint(ctx, name)
	}
	return true, nil
}

// untaint lifts nodeforge.dev/disrupted from a node whose disruption was
// called off.
func (c *Controller) untaint(ctx context.Context, name string) error {
	var node corev1.Node
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return client.IgnoreNotFound(err)
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isDisruptedTaint)
	if len(taints) == len(node.Spec.Taints) {
		return nil
	}
	node.Spec.Taints = taints
	return c.kube.Update(ctx, &node)
}

func isDisruptedTaint(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }

// budgets makes "may one more node of this pool be disrupted?" and the
// decision to disrupt it one step, across the controller's workers. A
// decision counts from the moment it is taken until the cache shows the
// claim disrupting or gone, so two workers reading the same cache can
// never both pass a budget of one.
type budgets struct {
	mu      sync.Mutex
	pending map[types.UID]string // claim → pool
}

// reserve reports whether nc may be disrupted for reason now and, if so,
// counts it against the pool's budgets until release or the cache shows it.
func (b *budgets) reserve(ctx context.Context, kube client.Reader, pool *v1alpha1.NodePool, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == nil {
		b.pending = map[types.UID]string{}
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return false, err
	}
	total, disrupting := 0, 0
	seen := map[types.UID]bool{}
	for _, c := range claims.Items {
		if c.Spec.NodePool != pool.Name || c.Status.NodeName == "" {
			continue
		}
		seen[c.UID] = true
		total++
		switch {
		case c.Status.Phase == v1alpha1.NodeClaimDisrupting || !c.DeletionTimestamp.IsZero():
			disrupting++
			delete(b.pending, c.UID) // the cache has caught up
		case b.pending[c.UID] != "" && c.UID != nc.UID:
			disrupting++
		}
	}
	for uid, p := range b.pending {
		if p == pool.Name && !seen[uid] {
			delete(b.pending, uid) // gone
		}
	}
	if disrupting >= budgetAllowed(pool, reason, total) {
		return false, nil
	}
	b.pending[nc.UID] = pool.Name
	return true, nil
}

// release forgets a decision that was not carried out.
func (b *budgets) release(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, uid)
}

// nodeEmpty: no pod on the node but daemonset pods and finished pods, and
// none nominated to it (handed to the scheduler to bind, their volumes
// perhaps still being provisioned).
func (c *Controller) nodeEmpty(ctx context.Context, node string) (bool, error) {
	var handed corev1.PodList
	if err := c.kube.List(ctx, &handed, client.MatchingFields{indexNominated: node}); err != nil {
		return false, err
	}
	if len(handed.Items) > 0 {
		return false, nil
	}
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

// budgetAllowed is how many nodes of a pool of total may be disrupted at
// once for reason: the most restrictive budget that applies wins.
// Scheduled budgets count as active at all times: a conservative reading
// until schedules are evaluated.
func budgetAllowed(pool *v1alpha1.NodePool, reason v1alpha1.DisruptionReason, total int) int {
	allowed := total
	for _, b := range pool.Spec.Disruption.Budgets {
		if len(b.Reasons) > 0 && !containsReason(b.Reasons, reason) {
			continue
		}
		allowed = min(allowed, budgetNodes(b.Nodes, total))
	}
	return allowed
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
