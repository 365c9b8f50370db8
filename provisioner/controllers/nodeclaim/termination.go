package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/limits"
)

// terminator ends the life of a claim being deleted: it drains the
// claim's node, terminates its instance and deletes the node.
type terminator struct {
	base
	pods   kubernetes.Interface // evictions and deletes
	cloud  cloudprovider.CloudProvider
	limits *limits.Ledger
	// packs is what repacks remember of the claim, forgotten with it.
	packs *packMemory
	// nodeMonitorGrace is Options.NodeMonitorGracePeriod.
	nodeMonitorGrace time.Duration
	// refusedEvictions: when each pod's refused eviction, and each
	// claim's drain held by do-not-disrupt pods, was last said.
	refusedEvictions refusedEvictions
}

// reconcile drains the node of a claim being deleted and waits for its
// volumes to detach, then terminates the instance and deletes the node,
// and lets the claim go.
func (t *terminator) reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		return reconcile.Result{}, nil
	}
	if nc.Status.ProviderID != "" {
		dead, err := t.deadNode(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if dead == "" {
			if res, err := t.drain(ctx, nc); err != nil || !res.IsZero() {
				return res, err
			}
			if res, err := t.awaitDetach(ctx, nc); err != nil || !res.IsZero() {
				return res, err
			}
		}
		switch err := t.cloud.Delete(ctx, nc.Status.ProviderID); {
		case err == nil:
			klog.FromContext(ctx).Info("Terminated instance", "providerID", nc.Status.ProviderID, "instanceType", nc.Status.InstanceType)
			crashpoint.Hit(crashpoint.AfterTerminate)
		case !errors.Is(err, cloudprovider.ErrNotFound):
			return reconcile.Result{}, fmt.Errorf("terminating %s: %w", nc.Status.ProviderID, err)
		}
		node, err := t.nodeOf(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if node != nil {
			if controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerTermination) {
				if err := t.kube.Update(ctx, node); err != nil {
					return reconcile.Result{}, err
				}
			}
			if err := t.kube.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
	}
	controllerutil.RemoveFinalizer(nc, v1alpha1.FinalizerTermination)
	if err := t.kube.Update(ctx, nc); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	t.limits.Release(nc.UID)
	t.packs.forget(nc.UID)
	return reconcile.Result{}, nil
}

// DefaultNodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period (50s since Kubernetes 1.32, 40s before).
const DefaultNodeMonitorGracePeriod = 50 * time.Second

// drain taints the claim's node nodeforge.dev/disrupted:NoSchedule and
// evicts its pods (daemonset pods stay) through the Eviction API, so that
// PodDisruptionBudgets hold. It returns a requeue while pods remain.
//
// A pod annotated do-not-disrupt is not evicted: it holds the drain until
// the claim's terminationGracePeriod runs out, or for ever without one
// (as Karpenter's termination does), and the claim gets a DrainHeld
// Event saying so.
//
// A claim with a terminationGracePeriod drains for no longer than that
// from its deletion (the deadline). A pod still there is deleted rather
// than evicted, PDBs notwithstanding, once the deadline is no further off
// than the pod's own terminationGracePeriodSeconds, so that its shutdown
// ends by the deadline, not after it: a pod that needs 30s to stop is
// deleted 30s before the deadline. At the deadline the drain is over,
// whatever is still terminating, and the instance goes.
//
// PDBs and do-not-disrupt stop holding at once when the node has not been
// Ready for longer than the node monitor grace period (its pods are
// deleted as the node lifecycle controller's eviction would: a PDB that
// counts them healthy, of pods that tolerate the unreachable taint, would
// otherwise hold an instance that is still billed for ever) or past
// repair's drain deadline (an unhealthy node's pods are not waited for).
// Each pod is then deleted with its own grace period, capped by the
// terminationGracePeriod's deadline, and the drain is over once every
// pod left has had its grace.
func (t *terminator) drain(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := t.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	if err := t.taintDisrupted(ctx, node); err != nil {
		return reconcile.Result{}, err
	}
	var pods corev1.PodList
	if err := t.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	d := t.newDrainPass(nc, node)
	for i := range pods.Items {
		if err := t.drainPod(ctx, nc, node, d, &pods.Items[i]); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(d.held) > 0 {
		t.drainHeld(ctx, nc, node, d.held)
	}
	return d.result(ctx, nc, node), nil
}

// taintDisrupted taints the node nodeforge.dev/disrupted:NoSchedule, if
// it is not yet.
func (t *terminator) taintDisrupted(ctx context.Context, node *corev1.Node) error {
	if slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == v1alpha1.TaintDisrupted }) {
		return nil
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule})
	return t.kube.Update(ctx, node)
}

// drainPass is one pass of a drain over the node's pods: what holds for
// each of them, and what the pass found.
type drainPass struct {
	now time.Time
	// deadline is the terminationGracePeriod's (drainDeadline), if capped.
	deadline time.Time
	capped   bool
	// override and why say why PodDisruptionBudgets and do-not-disrupt
	// hold no longer (budgetsOverridden); "" while they hold.
	override, why string
	// A node whose kubelet does not answer never finishes a pod's
	// termination: such a pod is deleted once its grace period is over,
	// as the pod garbage collector would.
	unreachable bool
	// remaining counts the pods the drain waits for; inGrace, those not
	// yet deleted or deleted with grace still left.
	remaining, inGrace int
	// held names the do-not-disrupt pods not evicted.
	held []string
}

func (t *terminator) newDrainPass(nc *v1alpha1.NodeClaim, node *corev1.Node) *drainPass {
	now := t.now()
	deadline, capped := drainDeadline(nc)
	override, why := t.budgetsOverridden(nc, node, now)
	return &drainPass{now: now, deadline: deadline, capped: capped, override: override, why: why, unreachable: !ready(node)}
}

// drainPod moves one pod of the node towards gone, as drain says, and
// counts it in d. Daemonset, static and finished pods stay.
func (t *terminator) drainPod(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, d *drainPass, p *corev1.Pod) error {
	if cluster.OwnedByDaemonSet(p) || cluster.IsMirror(p) || podutil.IsPodTerminal(p) {
		return nil
	}
	d.remaining++
	if !p.DeletionTimestamp.IsZero() {
		switch {
		case d.now.Before(p.DeletionTimestamp.Time):
			d.inGrace++
		case d.unreachable:
			return t.forceDelete(ctx, node, p)
		}
		return nil
	}
	d.inGrace++
	switch {
	case d.override != "":
		grace := podGrace(p)
		if d.capped {
			grace = min(grace, max(d.deadline.Sub(d.now), time.Second))
		}
		return t.deleteRegardless(ctx, nc, node, p, grace, d.override, d.why)
	case d.capped && !d.now.Before(d.deadline.Add(-podGrace(p))):
		return t.deleteForDeadline(ctx, nc, node, p, d.deadline.Sub(d.now))
	}
	if key := v1alpha1.DoNotDisrupt(p.Annotations); key != "" {
		d.held = append(d.held, klog.KObj(p).String()+" ("+key+")")
		return nil
	}
	return t.evict(ctx, nc, node, p)
}

// evict asks the Eviction API to evict p, so that its
// PodDisruptionBudgets hold. A refusal is no error: the drain asks again.
func (t *terminator) evict(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod) error {
	// The UID precondition spares a pod recreated under the same name
	// meanwhile, as the deletes do.
	err := t.pods.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))}})
	switch {
	case apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause):
		t.evictionRefused(ctx, nc, node, p)
	case apierrors.IsTooManyRequests(err):
		// The API server is busy, not a budget: try again.
		klog.FromContext(ctx).V(2).Info("Eviction refused for now (the API server is busy); will retry", "pod", klog.KObj(p), "node", node.Name)
	case apierrors.IsConflict(err):
		// The UID precondition: another pod by that name now.
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
	default:
		klog.FromContext(ctx).Info("Evicted pod", "pod", klog.KObj(p), "node", node.Name)
		crashpoint.Hit(crashpoint.MidDrain)
	}
	return nil
}

// result is what the drain returns after the pass: nothing once it is
// over, else when to look again.
func (d *drainPass) result(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node) reconcile.Result {
	switch {
	case d.remaining == 0:
		return reconcile.Result{}
	case d.capped && !d.now.Before(d.deadline):
		klog.FromContext(ctx).Info("Drain ended: its deadline passed", "node", node.Name, "deadline", drainLimit(nc), "podsTerminating", d.remaining)
		return reconcile.Result{}
	case d.override != "" && d.inGrace == 0:
		klog.FromContext(ctx).Info("Drain ended: every pod left has had its grace period", "node", node.Name, "reason", d.override, "why", d.why, "podsTerminating", d.remaining)
		return reconcile.Result{}
	}
	wait := 2 * time.Second
	if d.capped {
		wait = min(wait, max(d.deadline.Sub(d.now), 100*time.Millisecond))
	}
	return reconcile.Result{RequeueAfter: wait}
}

// budgetsOverridden says why PodDisruptionBudgets and do-not-disrupt no
// longer hold the claim's pods at now, with the Event reason, or "" when
// they do: its node has not been Ready for longer than the node monitor
// grace period, or repair's drain deadline has passed.
func (t *terminator) budgetsOverridden(nc *v1alpha1.NodeClaim, node *corev1.Node, now time.Time) (reason, why string) {
	grace := t.nodeMonitorGrace
	if grace <= 0 {
		grace = DefaultNodeMonitorGracePeriod
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type != corev1.NodeReady || cond.Status == corev1.ConditionTrue || cond.LastTransitionTime.IsZero() {
			continue
		}
		if since := now.Sub(cond.LastTransitionTime.Time); since > grace {
			return v1alpha1.ReasonNodeUnreachable, fmt.Sprintf("node %s has been Ready=%s for %s, longer than the node monitor grace period (%s)",
				node.Name, cond.Status, since.Round(time.Second), grace)
		}
	}
	if by, ok := repairDeadline(nc); ok && !now.Before(by) {
		return v1alpha1.ReasonNodeUnhealthy, repairLimit(nc) + " has passed"
	}
	return "", ""
}

// drainDeadline is when the claim's drain must be over: its deletion plus
// its terminationGracePeriod; false when it has none. Repair's
// AnnotationDrainDeadline does not end the drain (repairDeadline).
func drainDeadline(nc *v1alpha1.NodeClaim) (time.Time, bool) {
	if nc.Spec.TerminationGracePeriod == nil || nc.DeletionTimestamp.IsZero() {
		return time.Time{}, false
	}
	return nc.DeletionTimestamp.Add(nc.Spec.TerminationGracePeriod.Duration), true
}

// repairDeadline is the claim's AnnotationDrainDeadline, which repair
// sets: from then on its pods are deleted, each with its own grace
// period, PodDisruptionBudgets notwithstanding; false when it has none.
func repairDeadline(nc *v1alpha1.NodeClaim) (time.Time, bool) {
	by, err := time.Parse(time.RFC3339, nc.Annotations[v1alpha1.AnnotationDrainDeadline])
	return by, err == nil
}

// repairLimit names repair's drain deadline, for logs and Events.
func repairLimit(nc *v1alpha1.NodeClaim) string {
	return "repair's drain deadline " + nc.Annotations[v1alpha1.AnnotationDrainDeadline] +
		" (an unhealthy node's pods are deleted with their own grace periods, not waited for)"
}

// drainLimit says what limits the claim's drain, for logs and Events:
// "terminationGracePeriod 1h0m0s", repair's drain deadline
// ("repair's drain deadline 2026-11-27T07:00:00Z (an unhealthy node's
// pods are ...)"), both, or "no drain deadline".
func drainLimit(nc *v1alpha1.NodeClaim) string {
	var bounds []string
	if nc.Spec.TerminationGracePeriod != nil {
		bounds = append(bounds, "terminationGracePeriod "+nc.Spec.TerminationGracePeriod.Duration.String())
	}
	if _, ok := repairDeadline(nc); ok {
		bounds = append(bounds, repairLimit(nc))
	}
	if len(bounds) == 0 {
		return "no drain deadline"
	}
	return strings.Join(bounds, " and ")
}

// deadNode says why the claim's node is not drained at all, or "": it is
// not Ready and the cloud says its instance is gone or going. No kubelet
// there will ever stop a pod, and an eviction a PodDisruptionBudget
// refuses (it counts the pods as healthy) would hold the instance for
// ever; the pods are removed with the Node by the pod garbage collector,
// as for any node that is gone (Karpenter's termination does the same).
func (t *terminator) deadNode(ctx context.Context, nc *v1alpha1.NodeClaim) (string, error) {
	node, err := t.nodeOf(ctx, nc)
	if err != nil || node == nil || ready(node) {
		return "", err
	}
	in, err := t.cloud.Get(ctx, nc.Status.ProviderID)
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
// if the claim has one, and there is none on a node whose pods were not
// waited for either (budgetsOverridden).
func (t *terminator) awaitDetach(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := t.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	var attachments storagev1.VolumeAttachmentList
	if err := t.kube.List(ctx, &attachments); err != nil {
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
	staying, err := t.volumesOfStayingPods(ctx, node.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	attached = slices.DeleteFunc(attached, func(pv string) bool { return staying[pv] })
	if len(attached) == 0 {
		return reconcile.Result{}, nil
	}
	now := t.now()
	if deadline, capped := drainDeadline(nc); capped && !now.Before(deadline) {
		klog.FromContext(ctx).Info("Terminating with volumes still attached: the drain deadline passed", "node", node.Name, "volumes", attached, "deadline", deadline)
		return reconcile.Result{}, nil
	}
	if reason, why := t.budgetsOverridden(nc, node, now); reason != "" {
		klog.FromContext(ctx).Info("Terminating with volumes still attached: the node is not waited for", "node", node.Name, "volumes", attached, "reason", reason, "why", why)
		return reconcile.Result{}, nil
	}
	klog.FromContext(ctx).V(1).Info("Waiting for the node's volumes to detach before terminating its instance", "node", node.Name, "volumes", attached)
	return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
}

// volumesOfStayingPods names the persistent volumes of the pods a drain
// leaves on the node.
func (t *terminator) volumesOfStayingPods(ctx context.Context, node string) (map[string]bool, error) {
	var pods corev1.PodList
	if err := t.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !cluster.OwnedByDaemonSet(p) && !cluster.IsMirror(p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			var pvc corev1.PersistentVolumeClaim
			if err := t.kube.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, &pvc); err != nil {
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
// that ends by the terminationGracePeriod's deadline (left from now):
// the pod's own, or what is left of the drain if that is shorter, but at
// least a second unless the pod asks for none.
func (t *terminator) deleteForDeadline(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod, left time.Duration) error {
	why := fmt.Sprintf("nodeclaim %s's %s is running out", nc.Name, drainLimit(nc))
	return t.deleteRegardless(ctx, nc, node, p, min(podGrace(p), max(left, time.Second)), v1alpha1.ReasonTerminationGracePeriodPassed, why)
}

// deleteRegardless deletes p, bypassing its PDBs and do-not-disrupt, with
// grace (whole seconds, rounded down), and says why in a Warning Event of
// reason on the pod and the claim. A grace of zero is only the pod's own
// asking: it removes the pod from the API before its containers are
// stopped. The UID precondition spares a pod recreated under the same
// name meanwhile.
func (t *terminator) deleteRegardless(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod, grace time.Duration, reason, why string) error {
	seconds := int64(grace / time.Second)
	klog.FromContext(ctx).Info("Deleting pod, PodDisruptionBudgets notwithstanding", "pod", klog.KObj(p), "node", node.Name, "reason", reason, "why", why, "gracePeriodSeconds", seconds)
	err := t.pods.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &seconds, Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod by now
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	note := fmt.Sprintf("node %s: %s; deleting the pod (grace %ds) regardless of disruption budgets", node.Name, why, seconds)
	t.recordPod(p, corev1.EventTypeWarning, reason, v1alpha1.ActionDrain, note)
	t.event(nc, corev1.EventTypeWarning, reason, v1alpha1.ActionDrain, fmt.Sprintf("deleted pod %s/%s (grace %ds) on node %s: %s", p.Namespace, p.Name, seconds, node.Name, why))
	return nil
}

// forceDelete removes a pod whose node does not answer and whose grace
// period is over: its kubelet will never confirm it stopped. The UID
// precondition spares a pod recreated under the same name.
func (t *terminator) forceDelete(ctx context.Context, node *corev1.Node, p *corev1.Pod) error {
	klog.FromContext(ctx).Info("Deleting pod on a node that is not ready: its grace period is over and its kubelet does not answer", "pod", klog.KObj(p), "node", node.Name, "deletionTimestamp", p.DeletionTimestamp, "deletionGracePeriodSeconds", p.DeletionGracePeriodSeconds)
	err := t.pods.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s from node %s that is not ready: %w", p.Namespace, p.Name, node.Name, err)
	}
	t.recordPod(p, corev1.EventTypeWarning, v1alpha1.ReasonNodeNotReady, v1alpha1.ActionDrain, fmt.Sprintf("node %s is not ready and the pod's grace period is over; deleted, as its kubelet cannot confirm it stopped", node.Name))
	return nil
}

// evictionRefusedEvery is how often a pod whose eviction a
// PodDisruptionBudget keeps refusing gets the Event again.
const evictionRefusedEvery = time.Minute

// evictionRefused records, at most every evictionRefusedEvery for each
// pod, an Event on the pod and its claim naming the PodDisruptionBudget
// that refused its eviction: the drain waits on it, and an operator
// reading kubectl describe sees what to change.
func (t *terminator) evictionRefused(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, p *corev1.Pod) {
	if !t.refusedEvictions.news(p.UID, t.now()) {
		return
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := t.kube.List(ctx, &pdbs, client.InNamespace(p.Namespace)); err != nil {
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
	t.recordPod(p, corev1.EventTypeWarning, v1alpha1.ReasonEvictionBlocked, v1alpha1.ActionDrain, note)
	t.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonEvictionBlocked, v1alpha1.ActionDrain, fmt.Sprintf("pod %s/%s: eviction refused by %s", p.Namespace, p.Name, by))
}

// drainHeld records, at most every evictionRefusedEvery for each claim,
// a Warning Event on the claim naming the do-not-disrupt pods its drain
// waits for, and until when.
func (t *terminator) drainHeld(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, pods []string) {
	if !t.refusedEvictions.news(nc.UID, t.now()) {
		return
	}
	names := strings.Join(pods[:min(len(pods), 5)], ", ")
	if len(pods) > 5 {
		names += fmt.Sprintf(" and %d more", len(pods)-5)
	}
	until := "for as long as they run: the nodeclaim has no terminationGracePeriod (delete the pods, or remove the annotation)"
	if deadline, capped := drainDeadline(nc); capped {
		until = "until " + deadline.UTC().Format(time.RFC3339) + " (terminationGracePeriod), when they are deleted regardless"
	}
	klog.FromContext(ctx).Info("Drain held by do-not-disrupt pods", "node", node.Name, "pods", pods, "until", until)
	t.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonDrainHeld, v1alpha1.ActionDrain, fmt.Sprintf("node %s: pods %s are not evicted; the drain waits for them %s", node.Name, names, until))
}

// refusedEvictions remembers when each pod's refused eviction, and each
// claim's drain held by do-not-disrupt pods, was last said, across the
// controller's workers (pod and claim UIDs never meet).
type refusedEvictions struct {
	mu   sync.Mutex
	last map[types.UID]time.Time
}

// news reports whether a note about uid (a pod's refused eviction, a
// claim's held drain) at now is worth an Event; entries older than
// evictionRefusedEvery are dropped on the way.
func (r *refusedEvictions) news(uid types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[types.UID]time.Time{}
	}
	if at, ok := r.last[uid]; ok && now.Sub(at) < evictionRefusedEvery {
		return false
	}
	for k, at := range r.last {
		if now.Sub(at) >= evictionRefusedEvery {
			delete(r.last, k)
		}
	}
	r.last[uid] = now
	return true
}
