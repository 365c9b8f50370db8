package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/controllers/disruption"
)

// finalize terminates the instance and deletes the node, then lets the
// claim go.
func (c *Controller) finalize(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		return reconcile.Result{}, nil
	}
	if nc.Status.ProviderID != "" {
		if res, err := c.drain(ctx, nc); err != nil || !res.IsZero() {
			return res, err
		}
		switch err := c.cloud.Delete(ctx, nc.Status.ProviderID); {
		case err == nil:
			klog.FromContext(ctx).Info("Terminated instance", "providerID", nc.Status.ProviderID, "instanceType", nc.Status.InstanceType)
			crashpoint.Hit(crashpoint.AfterTerminate)
		case !errors.Is(err, cloudprovider.ErrNotFound):
			return reconcile.Result{}, fmt.Errorf("terminating %s: %w", nc.Status.ProviderID, err)
		}
		node, err := c.nodeOf(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if node != nil {
			if controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerTermination) {
				if err := c.kube.Update(ctx, node); err != nil {
					return reconcile.Result{}, err
				}
			}
			if err := c.kube.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
	}
	controllerutil.RemoveFinalizer(nc, v1alpha1.FinalizerTermination)
	if err := c.kube.Update(ctx, nc); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	c.limits.Release(nc.UID)
	c.packer.forget(nc.UID)
	return reconcile.Result{}, nil
}

// ReasonTerminationGracePeriod is the Event on a pod, and on its claim,
// when the pod is deleted because the claim's terminationGracePeriod is
// running out.
const ReasonTerminationGracePeriod = "TerminationGracePeriodPassed"

// drain taints the claim's node nodeforge.dev/disrupted:NoSchedule and
// evicts its pods (daemonset pods stay) through the Eviction API, so that
// PodDisruptionBudgets hold. It returns a requeue while pods remain.
//
// A claim with a terminationGracePeriod drains for no longer than that
// from its deletion (the deadline). A pod still there is deleted rather
// than evicted, PDBs notwithstanding, once the deadline is no further off
// than the pod's own terminationGracePeriodSeconds, so that its shutdown
// ends by the deadline, not after it: a pod that needs 30s to stop is
// deleted 30s before the deadline. At the deadline the drain is over,
// whatever is still terminating, and the instance goes.
func (c *Controller) drain(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule})
		if err := c.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	now := c.now()
	deadline, capped := drainDeadline(nc)
	// A node whose kubelet does not answer never finishes a pod's
	// termination: such a pod is deleted once its grace period is over,
	// as the pod garbage collector would.
	unreachable := !ready(node)
	remaining := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if disruption.OwnedByDaemonSet(p) || disruption.IsMirror(p) || podutil.IsPodTerminal(p) {
			continue
		}
		remaining++
		if !p.DeletionTimestamp.IsZero() {
			if unreachable && !now.Before(p.DeletionTimestamp.Time) {
				if err := c.forceDelete(ctx, node, p); err != nil {
					return reconcile.Result{}, err
				}
			}
			continue
		}
		if capped && !now.Before(deadline.Add(-podGrace(p))) {
			if err := c.deleteForDeadline(ctx, nc, node, p, deadline.Sub(now)); err != nil {
				return reconcile.Result{}, err
			}
			continue
		}
		err := c.pods.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case apierrors.IsTooManyRequests(err):
			klog.FromContext(ctx).V(2).Info("Eviction refused for now (disruption budget); will retry", "pod", klog.KObj(p), "node", node.Name)
		case err != nil && !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		default:
			klog.FromContext(ctx).Info("Evicted pod", "pod", klog.KObj(p), "node", node.Name)
			crashpoint.Hit(crashpoint.MidDrain)
		}
	}
	if remaining == 0 {
		return reconcile.Result{}, nil
	}
	if capped && !now.Before(deadline) {
		klog.FromContext(ctx).Info("Drain ended: terminationGracePeriod passed", "node", node.Name, "terminationGracePeriod", nc.Spec.TerminationGracePeriod.Duration, "podsTerminating", remaining)
		return reconcile.Result{}, nil
	}
	wait := 2 * time.Second
	if capped {
		wait = min(wait, max(deadline.Sub(now), 100*time.Millisecond))
	}
	return reconcile.Result{RequeueAfter: wait}, nil
}

// drainDeadline is when the claim's drain must be over: its deletion plus
// its terminationGracePeriod; false when it has none.
func drainDeadline(nc *v1alpha1.NodeClaim) (time.Time, bool) {
	if nc.Spec.TerminationGracePeriod == nil || nc.DeletionTimestamp.IsZero() {
		return time.Time{}, false
	}
	return nc.DeletionTimestamp.Add(nc.Spec.TerminationGracePeriod.Duration), true
}

// podGrace is how long the pod asks to be given to stop; the API server
// defaults it to 30s.
func podGrace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds == nil {
		return 30 * time.Second
	}
	return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
}

// deleteForDeadline deletes p, bypassing its PDBs, with a grace period
// that ends by the deadline (left from now): the pod's own, or what is
// left of the drain if that is shorter, but at least a second unless the
// pod asks for none, since a grace of zero removes the pod from the API
// before its containers are stopped. The UID precondition spares a pod
// recreated under the same name meanwhile.
func (c *Controller) deleteForDeadline(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod, left time.Duration) error {
	grace := min(int64(podGrace(p)/time.Second), max(int64(left/time.Second), 1))
	tgp := nc.Spec.TerminationGracePeriod.Duration
	klog.FromContext(ctx).Info("Deleting pod: terminationGracePeriod passed", "pod", klog.KObj(p), "node", node.Name, "terminationGracePeriod", tgp, "gracePeriodSeconds", grace)
	err := c.pods.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod by now
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	note := fmt.Sprintf("node %s: nodeclaim %s's terminationGracePeriod %s is running out; deleting the pod (grace %ds) regardless of disruption budgets", node.Name, nc.Name, tgp, grace)
	c.recordPod(p, corev1.EventTypeWarning, ReasonTerminationGracePeriod, "Drain", note)
	c.event(nc, corev1.EventTypeWarning, ReasonTerminationGracePeriod, "Drain", fmt.Sprintf("deleted pod %s/%s: terminationGracePeriod %s is running out", p.Namespace, p.Name, tgp))
	return nil
}

// forceDelete removes a pod whose node does not answer and whose grace
// period is over: its kubelet will never confirm it stopped. The UID
// precondition spares a pod recreated under the same name.
func (c *Controller) forceDelete(ctx context.Context, node *corev1.Node, p *corev1.Pod) error {
	klog.FromContext(ctx).Info("Deleting pod on a node that is not ready: its grace period is over and its kubelet does not answer", "pod", klog.KObj(p), "node", node.Name, "deletionTimestamp", p.DeletionTimestamp, "deletionGracePeriodSeconds", p.DeletionGracePeriodSeconds)
	err := c.pods.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s from node %s that is not ready: %w", p.Namespace, p.Name, node.Name, err)
	}
	c.recordPod(p, corev1.EventTypeWarning, "NodeNotReady", "Drain", fmt.Sprintf("node %s is not ready and the pod's grace period is over; deleted, as its kubelet cannot confirm it stopped", node.Name))
	return nil
}
