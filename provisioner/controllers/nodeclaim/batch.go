package nodeclaim

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// batcher closes an open claim to nominations once its batch window has
// passed, and with it the idle claims of its batch when they are repacked
// together before launch.
type batcher struct {
	base
	// batchIdle and batchMax are the Options of those names.
	batchIdle, batchMax time.Duration
	// repacking says whether a batch is repacked (Options.Repack is set).
	repacking bool
}

// reconcile closes the claim to nominations once the batch window has
// passed: no new nomination for BatchIdle, or open for BatchMax. The
// status update carries the resourceVersion read, so a nomination the
// scheduler writes meanwhile makes it fail and the window is judged again.
func (b *batcher) reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	// A replacement for a node being disrupted has no nominated pods:
	// the pods come when that node is drained, once this one is up.
	// Nor has a claim made to keep a fixed-size pool at its count.
	replacement := nc.Annotations[v1alpha1.AnnotationReplaces] != "" || nc.Annotations[v1alpha1.AnnotationReplica] != ""
	now := b.now()
	idle, open := now.Sub(lastNomination(nc)), now.Sub(nc.CreationTimestamp.Time)
	if idle < b.batchIdle && open < b.batchMax && !replacement {
		return reconcile.Result{RequeueAfter: min(b.batchIdle-idle, b.batchMax-open)}, nil
	}
	pods, err := b.nominatedPods(ctx, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	// A claim made for a ProvisioningRequest or a CapacityBuffer has the
	// request's pods or the buffer's chunks nominated to it, which are not
	// API objects: it launches while they want it, as a replacement does.
	requested, done, err := b.requestWanted(ctx, nc, len(pods))
	if err != nil || done {
		return reconcile.Result{}, err
	}
	podless := replacement || requested
	if ahead := schedulerAhead(nc, len(pods)); ahead && open < b.batchMax && !podless {
		// More pods name the claim than the scheduler's last write
		// counts: it has nominated since, and its next write (every
		// 200 ms) brings the spec that holds them. Closing now would
		// launch for the spec without them.
		return reconcile.Result{RequeueAfter: b.batchIdle / 4}, nil
	}
	if behind := schedulerBehind(nc, len(pods)); behind && open < b.batchMax && !podless {
		// The claim counts pods none of which is seen naming it yet:
		// the scheduler wrote the claim before those pods' nominations
		// reached this cache. With SchedulerAsyncAPICalls the scheduler
		// writes a pod's nomination from its API dispatcher, after the
		// scheduling cycle, and the claim's write (every 200 ms) can
		// come first. Deleting it now would undo the nominations on
		// their way; a claim whose pods are really gone is deleted once
		// it has been open BatchMax.
		return reconcile.Result{RequeueAfter: b.batchIdle / 4}, nil
	}
	if len(pods) == 0 && !podless {
		klog.FromContext(ctx).Info("Deleting nodeclaim with no nominated pods left")
		metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NoPods").Inc()
		b.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonDeleted, v1alpha1.ActionNoPods, "no nominated pods left; not launched")
		return reconcile.Result{}, client.IgnoreNotFound(b.kube.Delete(ctx, nc))
	}
	if err := b.closeClaim(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	if !podless && b.repacking {
		b.closeWithBatch(ctx, nc)
	}
	switch {
	case requested:
		klog.FromContext(ctx).Info("Launching for a ProvisioningRequest or CapacityBuffer", "provisioningRequest", nc.Annotations[v1alpha1.AnnotationProvisioningRequest],
			"capacityBuffer", nc.Annotations[v1alpha1.AnnotationCapacityBuffer], "pods", len(pods), "instanceTypeOptions", nc.Status.InstanceTypeOptions)
	case nc.Annotations[v1alpha1.AnnotationReplica] != "":
		klog.FromContext(ctx).Info("Launching a replica of a fixed-size nodepool", "instanceTypeOptions", nc.Status.InstanceTypeOptions)
	case replacement:
		klog.FromContext(ctx).Info("Launching a replacement", "replaces", nc.Annotations[v1alpha1.AnnotationReplaces], "instanceTypeOptions", nc.Status.InstanceTypeOptions)
	default:
		klog.FromContext(ctx).Info("Found provisionable pods", "pods", len(pods), "instanceTypeOptions", nc.Status.InstanceTypeOptions, "openFor", open.Round(time.Millisecond))
	}
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: true}, nil
}

// closeWithBatch closes, with nc, the open claims of its pool and group
// that have taken no nomination for half the idle window at least: they
// are the batch nc is repacked with before launch. A claim still being
// filled stays open. A claim that cannot be closed now (the scheduler
// wrote to it meanwhile) is left to its own window.
func (b *batcher) closeWithBatch(ctx context.Context, nc *v1alpha1.NodeClaim) {
	var claims v1alpha1.NodeClaimList
	if err := b.kube.List(ctx, &claims, client.MatchingFields{indexClaimPool: nc.Spec.NodePool}); err != nil {
		klog.FromContext(ctx).Error(err, "Listing the claims of the batch; closing this one alone")
		return
	}
	now := b.now()
	for i := range claims.Items {
		k := &claims.Items[i]
		if !idleInBatchOf(k, nc, now, b.batchIdle) {
			continue
		}
		last := lastNomination(k)
		pods, err := b.nominatedPods(ctx, k.Name)
		if err != nil || len(pods) == 0 || schedulerAhead(k, len(pods)) {
			continue // its own window deletes it when its pods are gone, or closes it once written
		}
		if err := b.closeClaim(ctx, k); err != nil {
			continue
		}
		klog.FromContext(ctx).Info("Closed nodeclaim with its batch", "nodeClaim", k.Name, "batchOf", nc.Name, "pods", len(pods), "idle", now.Sub(last).Round(time.Millisecond))
	}
}

// idleInBatchOf says whether k is an open claim of nc's batch (its pool,
// group, not a replacement, not going) that has taken no nomination for
// half the idle window (batchIdle): one that closes with nc.
func idleInBatchOf(k, nc *v1alpha1.NodeClaim, now time.Time, batchIdle time.Duration) bool {
	return k.UID != nc.UID && (k.Status.Phase == "" || k.Status.Phase == v1alpha1.NodeClaimNominating) && k.DeletionTimestamp.IsZero() &&
		k.Annotations[v1alpha1.AnnotationReplaces] == "" && k.Spec.NodePool == nc.Spec.NodePool && batchKeyOf(k) == batchKeyOf(nc) &&
		now.Sub(lastNomination(k)) >= batchIdle/2
}

// schedulerAhead says whether more pods are seen nominated to an open
// claim than its spec counts: the scheduler has nominated pods its
// last write of the claim does not include. Its pods' nominations are
// written in its scheduling cycle, its claims every writeInterval. A
// claim whose spec counts no pod was not written by the scheduler's
// plugin (or not yet): nothing to compare with.
func schedulerAhead(nc *v1alpha1.NodeClaim, seen int) bool {
	return (nc.Status.Phase == "" || nc.Status.Phase == v1alpha1.NodeClaimNominating) &&
		nc.Spec.NominatedPods > 0 && int32(seen) > nc.Spec.NominatedPods
}

// schedulerBehind says whether an open claim counts nominated pods of
// which none is seen naming it: the scheduler's write of the claim reached
// the cache before its writes of the pods' nominations.
func schedulerBehind(nc *v1alpha1.NodeClaim, seen int) bool {
	return (nc.Status.Phase == "" || nc.Status.Phase == v1alpha1.NodeClaimNominating) &&
		nc.Spec.NominatedPods > 0 && seen == 0
}

// lastNomination is when a pod was last nominated to the claim, or when it
// was made.
func lastNomination(nc *v1alpha1.NodeClaim) time.Time {
	if nc.Spec.LastNominationTime != nil {
		return nc.Spec.LastNominationTime.Time
	}
	return nc.CreationTimestamp.Time
}

// closeClaim closes the claim to nominations (phase Launching), with the
// termination finalizer on first. The status update carries the
// resourceVersion read: a nomination written meanwhile makes it fail.
func (b *batcher) closeClaim(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		controllerutil.AddFinalizer(nc, v1alpha1.FinalizerTermination)
		if err := b.kube.Update(ctx, nc); err != nil {
			return err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunching
	if nc.Status.InstanceTypeOptions == 0 {
		// The scheduler writes only the spec, whose instance-type
		// requirement lists the types still open.
		nc.Status.InstanceTypeOptions = int32(len(instanceTypes(nc)))
	}
	return b.kube.Status().Update(ctx, nc)
}
