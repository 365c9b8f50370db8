// Package nodeclaim runs a NodeClaim's life after the scheduler has
// nominated pods to it: it closes the claim when the batch window ends,
// launches its instance, adopts the node that registers, binds the
// nominated pods to it, and when the claim goes drains the node (within
// the claim's terminationGracePeriod, if it has one) and terminates the
// instance.
package nodeclaim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/simulator"
)

// Field indexes the controller reads through (cluster.RegisterIndexes).
const (
	indexNominated       = cluster.IndexPodNominated
	indexPodNode         = cluster.IndexPodNode
	indexProviderID      = cluster.IndexNodeProviderID
	indexClaimNode       = cluster.IndexClaimNode
	indexClaimProviderID = cluster.IndexClaimProviderID
	indexClaimPool       = cluster.IndexClaimPool
	indexClaimClass      = cluster.IndexClaimClass
)

// Options are the batching and registration settings.
type Options struct {
	// BatchIdle: a claim launches once no pod was nominated to it for this long...
	BatchIdle time.Duration
	// BatchMax: ...or once it has been open this long.
	BatchMax time.Duration
	// RegistrationTTL: a launched claim whose node has not registered by
	// then is deleted and its instance terminated.
	RegistrationTTL time.Duration
	// LaunchTTL: a claim not launched this long after it was made (every
	// launch failed) is deleted, its offerings avoided for a while, and
	// its pods get another claim.
	LaunchTTL time.Duration
	// InitializationTTL: a registered node not ready for its pods this
	// long after registering (not Ready, a startup taint still on, an
	// extended resource its instance type promises not in allocatable) is
	// given up the same way, its instance terminated.
	InitializationTTL time.Duration
	// Gate says whether the scheduler would accept a pod on a node as the
	// cluster is now (simulator.Gate: the scheduler profile's PreFilter and
	// Filter plugins). Only pods it accepts are bound.
	Gate Gate
	// Repack, when set, is the scheduling simulator that repacks each
	// batch of closed claims before launch (pack.go); nil launches each
	// claim as VirtualNodes packed it.
	Repack *simulator.Scheduler
	// Claims reads the claims of a batch to repack: the API server, so
	// that claims closed together a moment ago are seen closed (the
	// cache may lag); nil reads the cache.
	Claims client.Reader
	// Workers is how many claims are reconciled at once, so one slow cloud
	// call does not hold up every other claim's launch, bind or drain.
	Workers int
	// LaunchWorkers, when more than 0, is how many claims are launched
	// at once by a controller of their own (nodeclaim.launch), apart from
	// the Workers: a launch waits on the cloud, whose throttled calls the
	// SDK retries for minutes, and must not hold up registration, binding
	// or draining. 0 launches in the Workers.
	LaunchWorkers int
	// Limits is the ledger launches reserve against; nil makes one. The
	// provisioner shares it with disruption's replacements.
	Limits *limits.Ledger
	// NodeMonitorGracePeriod: a node not Ready for longer than this,
	// from its Ready condition's lastTransitionTime, is drained as the
	// node lifecycle controller treats a node it cannot reach: its pods
	// are deleted, PodDisruptionBudgets notwithstanding (termination.go).
	// Set it to kube-controller-manager's --node-monitor-grace-period; 0
	// is DefaultNodeMonitorGracePeriod.
	NodeMonitorGracePeriod time.Duration
}

// Gate is the scheduler's verdict on pods for a node, and what only its
// binding cycle would do for a pod there; see simulator.Gate.
type Gate interface {
	// Session begins judging pods for node, onNode counted on it: the
	// cluster is read once for all of them.
	Session(node *corev1.Node, onNode []*corev1.Pod) (*simulator.GateSession, error)
}

// Controller reconciles NodeClaims: each claim is handed to the step its
// phase is at (step), a type of its own each, holding what it uses.
type Controller struct {
	base
	// workers and launchWorkers are the Options of those names.
	workers, launchWorkers int

	batcher     *batcher
	launcher    *launcher
	registrar   *registrar
	initializer *initializer
	terminator  *terminator
}

// NewController returns the NodeClaim lifecycle controller.
func NewController(kube client.Client, cs kubernetes.Interface, cloud cloudprovider.CloudProvider, unavailable *cloudprovider.UnavailableOfferings, recorder events.EventRecorder, opts Options) *Controller {
	return newController(kube, cs, cloud, unavailable, recorder, opts, time.Now)
}

// newController is NewController reading the time from now.
func newController(kube client.Client, cs kubernetes.Interface, cloud cloudprovider.CloudProvider, unavailable *cloudprovider.UnavailableOfferings, recorder events.EventRecorder, opts Options, now func() time.Time) *Controller {
	ledger := opts.Limits
	if ledger == nil {
		ledger = limits.NewLedger(kube, cloud)
	}
	b := base{kube: kube, recorder: recorder, unavailable: unavailable, now: now}
	c := &Controller{base: b, workers: opts.Workers, launchWorkers: opts.LaunchWorkers}
	c.batcher = &batcher{base: b, batchIdle: opts.BatchIdle, batchMax: opts.BatchMax, repacking: opts.Repack != nil}
	packs := newPackMemory()
	c.launcher = &launcher{base: b, cloud: cloud, limits: ledger, launchTTL: opts.LaunchTTL, registrationTTL: opts.RegistrationTTL,
		repacker: &repacker{base: b, sim: opts.Repack, claims: opts.Claims, batchIdle: opts.BatchIdle, packs: packs}}
	c.registrar = &registrar{base: b, cloud: cloud, ttl: opts.RegistrationTTL}
	c.initializer = &initializer{base: b, pods: cs, gate: opts.Gate, ttl: opts.InitializationTTL}
	c.terminator = &terminator{base: b, pods: cs, cloud: cloud, limits: ledger, packs: packs, nodeMonitorGrace: opts.NodeMonitorGracePeriod}
	return c
}

// SetupWithManager registers the controller, and the indexes it reads
// through if no other controller has.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := cluster.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodeclaim.lifecycle").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, c.workers)}).
		// A claim disruption owns (Initialized, not being deleted) changes
		// with disruption's own writes; the steps have nothing to do for
		// it until it is deleted, and its node's deletion comes through
		// the node watch.
		For(&v1alpha1.NodeClaim{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
			return !cluster.Disrupted(e.ObjectNew.(*v1alpha1.NodeClaim))
		}})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.claimOfPod)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(cluster.ClaimOfNode(c.kube, nil)))
	if err := b.Complete(c); err != nil {
		return err
	}
	if c.launchWorkers == 0 {
		return nil
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeclaim.launch").
		WithOptions(controller.Options{MaxConcurrentReconciles: c.launchWorkers}).
		For(&v1alpha1.NodeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.(*v1alpha1.NodeClaim).Status.Phase == v1alpha1.NodeClaimLaunching
		}))).
		Complete(reconcile.Func(c.reconcileLaunch))
}

// reconcileLaunch launches a Launching claim, for the launch workers.
// Every other phase, and a claim being deleted, is the lifecycle
// controller's; so each claim is in one controller's hands at a time.
func (c *Controller) reconcileLaunch(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var nc v1alpha1.NodeClaim
	if err := c.kube.Get(ctx, req.NamespacedName, &nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if nc.Status.Phase != v1alpha1.NodeClaimLaunching || !nc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("nodePool", nc.Spec.NodePool))
	res, err := c.launcher.reconcile(ctx, &nc)
	if apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

// claimOfPod: the claim a pod is nominated to, or the claim of its node.
// Pod events are the most frequent the controller sees, so the lookup is
// an index, not a scan of every claim.
func (c *Controller) claimOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	pod := o.(*corev1.Pod)
	if pod.Status.NominatedNodeName != "" && pod.Spec.NodeName == "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pod.Status.NominatedNodeName}}}
	}
	// The pods of an Initialized node are disruption's concern, not a
	// step's: its claim is queued here only once it is being deleted.
	return cluster.ClaimsWhere(ctx, c.kube, indexClaimNode, pod.Spec.NodeName, func(nc *v1alpha1.NodeClaim) bool { return !cluster.Disrupted(nc) })
}

// Reconcile moves one claim a step forward.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var nc v1alpha1.NodeClaim
	if err := c.kube.Get(ctx, req.NamespacedName, &nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("nodePool", nc.Spec.NodePool))
	res, err := c.step(ctx, &nc)
	// Each step writes; the cache may lag a write, and the next step then
	// meets a conflict. That is no error: read again.
	if apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

// step moves the claim a step forward: termination once it is being
// deleted, else the step of its phase.
func (c *Controller) step(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !nc.DeletionTimestamp.IsZero() {
		return c.terminator.reconcile(ctx, nc)
	}
	if _, ok := nc.Annotations[v1alpha1.AnnotationReleasedWith]; ok && nc.Status.Phase != v1alpha1.NodeClaimLaunching {
		// Not launching: its instance, if any, is recorded.
		return reconcile.Result{}, c.deleteReleased(ctx, nc)
	}
	if len(nc.OwnerReferences) == 0 && nc.Status.Phase == v1alpha1.NodeClaimInitialized {
		// Claims made before claims named their pool as owner (those
		// left are running nodes): name it now. A pool not found is not
		// taken as deleted: a cache that has not seen a new pool yet
		// must not delete its claims.
		var pool v1alpha1.NodePool
		err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool)
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		if owners := nodeshape.OwnedBy(&pool); err == nil && owners != nil {
			nc.OwnerReferences = owners
			//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
			return reconcile.Result{Requeue: true}, c.kube.Update(ctx, nc)
		}
	}
	if nc.Status.NodeName != "" {
		// A Node deleted by a user (it waits on Nodeforge's finalizer):
		// its claim goes too, which drains it and terminates its instance.
		node, err := c.nodeOf(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if node != nil && !node.DeletionTimestamp.IsZero() {
			klog.FromContext(ctx).Info("Node deleted; deleting its nodeclaim, which drains it and terminates its instance", "node", node.Name, "providerID", nc.Status.ProviderID)
			metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NodeDeleted").Inc()
			c.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonNodeDeleted, v1alpha1.ActionDelete, fmt.Sprintf("node %s was deleted; draining it and terminating instance %s", node.Name, nc.Status.ProviderID))
			return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
		}
	}
	switch nc.Status.Phase {
	case "", v1alpha1.NodeClaimNominating:
		return c.batcher.reconcile(ctx, nc)
	case v1alpha1.NodeClaimLaunching:
		if c.launchWorkers > 0 {
			return reconcile.Result{}, nil // reconcileLaunch's
		}
		return c.launcher.reconcile(ctx, nc)
	case v1alpha1.NodeClaimLaunched:
		return c.registrar.reconcile(ctx, nc)
	case v1alpha1.NodeClaimRegistered:
		return c.initializer.reconcile(ctx, nc)
	}
	// Initialized and Disrupting claims are disruption's
	// (disruption.Controller, a controller of its own).
	return reconcile.Result{}, nil
}
