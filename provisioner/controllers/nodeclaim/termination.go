package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
		dead, err := c.deadNode(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if dead == "" {
			if res, err := c.drain(ctx, nc); err != nil || !res.IsZero() {
				return res, err
			}
			if res, err := c.awaitDetach(ctx, nc); err != nil || !res.IsZero() {
				return res, err
			}
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
		// The UID precondition spares a pod recreated under the same
		// name meanwhile, as the deletes below do.
		err := c.pods.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))}})
		switch {
		case apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause):
			c.evictionRefused(ctx, nc, node, p)
		case apierrors.IsTooManyRequests(err):
			// The API server is busy, not a budget: try again.
			klog.FromContext(ctx).V(2).Info("Eviction refused for now (the API server is busy); will retry", "pod", klog.KObj(p), "node", node.Name)
		case apierrors.IsConflict(err):
			// The UID precondition: another pod by that name now.
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
		klog.FromContext(ctx).Info("Drain ended: its deadline passed", "node", node.Name, "deadline", drainLimit(nc), "podsTerminating", remaining)
		return reconcile.Result{}, nil
	}
	wait := 2 * time.Second
	if capped {
		wait = min(wait, max(deadline.Sub(now), 100*time.Millisecond))
	}
	return reconcile.Result{RequeueAfter: wait}, nil
}

// drainDeadline is when the claim's drain must be over: its deletion plus
// its terminationGracePeriod, or its AnnotationDrainDeadline if sooner;
// false when it has neither.
func drainDeadline(nc *v1alpha1.NodeClaim) (time.Time, bool) {
	var deadline time.Time
	if nc.Spec.TerminationGracePeriod != nil && !nc.DeletionTimestamp.IsZero() {
		deadline = nc.DeletionTimestamp.Add(nc.Spec.TerminationGracePeriod.Duration)
	}
	if by, err := time.Parse(time.RFC3339, nc.Annotations[v1alpha1.AnnotationDrainDeadline]); err == nil && (deadline.IsZero() || by.Before(deadline)) {
		deadline = by
	}
	return deadline, !deadline.IsZero()
}

// drainLimit says what sets the claim's drain deadline, for logs and
// Events: "terminationGracePeriod 1h0m0s", or "drain deadline
// 2026-11-27T07:00:00Z (set by repair)".
func drainLimit(nc *v1alpha1.NodeClaim) string {
	if by := nc.Annotations[v1alpha1.AnnotationDrainDeadline]; by != "" {
		if d, _ := drainDeadline(nc); nc.Spec.TerminationGracePeriod == nil || d.Format(time.RFC3339) == by {
			return "drain deadline " + by + " (an unhealthy node's pods are not waited for)"
		}
	}
	if nc.Spec.TerminationGracePeriod == nil {
		return "no drain deadline"
	}
	return "terminationGracePeriod " + nc.Spec.TerminationGracePeriod.Duration.String()
}

// deadNode says why the claim's node is not drained at all, or "": it is
// not Ready and the cloud says its instance is gone or going. No kubelet
// there will ever stop a pod, and an eviction a PodDisruptionBudget
// refuses (it counts the pods as healthy) would hold the instance for
// ever; the pods are removed with the Node by the pod garbage collector,
// as for any node that is gone (Karpenter's termination does the same).
func (c *Controller) deadNode(ctx context.Context, nc *v1alpha1.NodeClaim) (string, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil || node == nil || ready(node) {
		return "", err
	}
	in, err := c.cloud.Get(ctx, nc.Status.ProviderID)
	var why string
	switch {
	case errors.Is(err, cloudprovider.ErrNotFound):
		why = "its instance is gone"
	case err != nil:
		return "", fmt.Errorf("asking the cloud about the instance of node %s, which is not Ready: %w", node.Name, err)
	case in.Stopping:
		why = "its instance is stopping or stopped"
	default:
		return "", nil
	}
	klog.FromContext(ctx).Info("Not draining node: it is not Ready and "+why, "node", node.Name, "providerID", nc.Status.ProviderID)
	return why, nil
}

// awaitDetach waits, after the drain, for the node's volumes to be
// detached before its instance is terminated: a volume still attached to
// a terminated instance keeps its pod's replacement waiting on EBS
// multi-attach for minutes. Volumes of pods that stay (daemonset and
// static pods) are not waited for. The wait ends at the drain deadline,
// if the claim has one.
func (c *Controller) awaitDetach(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	var attachments storagev1.VolumeAttachmentList
	if err := c.kube.List(ctx, &attachments); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing volume attachments: %w", err)
	}
	var attached []string
	for _, va := range attachments.Items {
		if va.Spec.NodeName == node.Name && va.Spec.Source.PersistentVolumeName != nil {
			attached = append(attached, *va.Spec.Source.PersistentVolumeName)
		}
	}
	if len(attached) == 0 {
		return reconcile.Result{}, nil
	}
	staying, err := c.volumesOfStayingPods(ctx, node.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	attached = slices.DeleteFunc(attached, func(pv string) bool { return staying[pv] })
	if len(attached) == 0 {
		return reconcile.Result{}, nil
	}
	now := c.now()
	if deadline, capped := drainDeadline(nc); capped && !now.Before(deadline) {
		klog.FromContext(ctx).Info("Terminating with volumes still attached: the drain deadline passed", "node", node.Name, "volumes", attached, "deadline", deadline)
		return reconcile.Result{}, nil
	}
	klog.FromContext(ctx).V(1).Info("Waiting for the node's volumes to detach before terminating its instance", "node", node.Name, "volumes", attached)
	return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
}

// volumesOfStayingPods names the persistent volumes of the pods a drain
// leaves on the node.
func (c *Controller) volumesOfStayingPods(ctx context.Context, node string) (map[string]bool, error) {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !disruption.OwnedByDaemonSet(p) && !disruption.IsMirror(p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			var pvc corev1.PersistentVolumeClaim
			if err := c.kube.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &pvc); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, err
			}
			out[pvc.Spec.VolumeName] = true
		}
	}
	return out, nil
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
	tgp := drainLimit(nc)
	klog.FromContext(ctx).Info("Deleting pod: the drain's deadline is running out", "pod", klog.KObj(p), "node", node.Name, "deadline", tgp, "gracePeriodSeconds", grace)
	err := c.pods.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod by now
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	note := fmt.Sprintf("node %s: nodeclaim %s's %s is running out; deleting the pod (grace %ds) regardless of disruption budgets", node.Name, nc.Name, tgp, grace)
	c.recordPod(p, corev1.EventTypeWarning, ReasonTerminationGracePeriod, "Drain", note)
	c.event(nc, corev1.EventTypeWarning, ReasonTerminationGracePeriod, "Drain", fmt.Sprintf("deleted pod %s/%s: %s is running out", p.Namespace, p.Name, tgp))
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

// evictionRefusedEvery is how often a pod whose eviction a
// PodDisruptionBudget keeps refusing gets the Event again.
const evictionRefusedEvery = time.Minute

// evictionRefused records, at most every evictionRefusedEvery for each
// pod, an Event on the pod and its claim naming the PodDisruptionBudget
// that refused its eviction: the drain waits on it, and an operator
// reading kubectl describe sees what to change.
func (c *Controller) evictionRefused(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod) {
	if !c.refusedEvictions.news(p.UID, c.now()) {
		return
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := c.kube.List(ctx, &pdbs, client.InNamespace(p.Namespace)); err != nil {
		klog.FromContext(ctx).V(2).Info("Listing PodDisruptionBudgets to name the one refusing an eviction failed", "reason", err.Error())
	}
	by := "a PodDisruptionBudget"
	for i := range pdbs.Items {
		pdb := &pdbs.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(p.Labels)) {
			by = fmt.Sprintf("PodDisruptionBudget %s (%d disruptions allowed, %d of %d healthy)", klog.KObj(pdb), pdb.Status.DisruptionsAllowed, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy)
			break
		}
	}
	note := fmt.Sprintf("node %s is being drained (nodeclaim %s); eviction refused by %s; retrying", node.Name, nc.Name, by)
	if deadline, capped := drainDeadline(nc); capped {
		note += fmt.Sprintf(" until %s, when the pod is deleted regardless", deadline.UTC().Format(time.RFC3339))
	}
	klog.FromContext(ctx).Info("Eviction refused", "pod", klog.KObj(p), "node", node.Name, "by", by)
	c.recordPod(p, corev1.EventTypeWarning, "EvictionBlocked", "Drain", note)
	c.event(nc, corev1.EventTypeWarning, "EvictionBlocked", "Drain", fmt.Sprintf("pod %s/%s: eviction refused by %s", p.Namespace, p.Name, by))
}

// refusedEvictions remembers when each pod's refused eviction was last
// said, across the controller's workers.
type refusedEvictions struct {
	mu   sync.Mutex
	last map[types.UID]time.Time
}

// news reports whether a refusal of pod's eviction at now is worth an
// Event; entries older than evictionRefusedEvery are dropped on the way.
func (r *refusedEvictions) news(pod types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[types.UID]time.Time{}
	}
	if at, ok := r.last[pod]; ok && now.Sub(at) < evictionRefusedEvery {
		return false
	}
	for k, at := range r.last {
		if now.Sub(at) >= evictionRefusedEvery {
			delete(r.last, k)
		}
	}
	r.last[pod] = now
	return true
}
