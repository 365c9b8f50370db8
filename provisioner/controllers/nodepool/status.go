// Package nodepool keeps NodePool status current: how many nodes the pool
// has, the capacity they and the pool's launching claims add up to (the
// figure spec.limits is checked against; it and the limits are exported
// as nodeforge_nodepool_usage and nodeforge_nodepool_limit), whether the
// pool is Ready, which it is when its node class exists and is ready,
// whether its disruption budgets' schedules can be read (BudgetsValid),
// and whether it has limits at all (LimitsSet). A fixed-size pool whose
// limits leave no room for its replicas (its ReplicasReached condition,
// written by package replicas, False with reason LimitsReached) is not
// Ready either.
package nodepool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// CountsInterval is the least time between two status writes of a pool
// that change only its counts (status.nodes and status.resources): a
// scale-up changes them with every claim launched and node registered,
// a write every few hundred milliseconds per pool otherwise. Nothing
// decides on them (limits are checked against the claims and nodes
// themselves, package limits; the nodeforge_nodepool_usage gauge is set on
// every reconcile), so they may lag this long. Nor may anything wait on
// them: the catalogs learn a node's measured memory from the provider
// itself (aws.Provider.OnMeasured). A change of condition is written at
// once.
const CountsInterval = 5 * time.Second

// StatusController reconciles NodePool status.
type StatusController struct {
	client client.Client
	// classes the provisioner's cloud provider launches from, by kind.
	classes  []cloudprovider.NodeClass
	recorder events.EventRecorder
	// now is the clock; tests set it.
	now func() time.Time

	mu sync.Mutex
	// written is when each pool's status was last written, by name.
	written map[string]time.Time
}

// NewStatusController returns a StatusController using c, for pools whose
// node classes are of a kind classes declares (the cloud provider's
// NodeClasses); pools referring to another kind are not Ready. A pool
// whose budgets turn invalid gets an Event through recorder (which may be
// nil).
func NewStatusController(c client.Client, classes []cloudprovider.NodeClass, recorder events.EventRecorder) *StatusController {
	return &StatusController{client: c, classes: classes, recorder: recorder, now: time.Now, written: map[string]time.Time{}}
}

// SetupWithManager registers the controller: a pool is reconciled when it,
// one of its nodes or claims, or its node class changes.
func (c *StatusController) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodepool.status").
		For(&v1alpha1.NodePool{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(poolOfLabel)).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.NodeClaim).Spec.NodePool}}}
		}))
	for _, class := range c.classes {
		b = b.Watches(class.New(), handler.EnqueueRequestsFromMapFunc(c.poolsOfClass(class.Kind)))
	}
	return b.Complete(c)
}

func poolOfLabel(_ context.Context, o client.Object) []reconcile.Request {
	if pool := o.GetLabels()[v1alpha1.LabelNodePool]; pool != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
	}
	return nil
}

// poolsOfClass maps a change to a node class of kind to the pools that
// refer to it.
func (c *StatusController) poolsOfClass(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var pools v1alpha1.NodePoolList
		if err := c.client.List(ctx, &pools); err != nil {
			// A List from the manager's cache fails only when it cannot
			// sync; the pools are read again on their next change or on
			// the manager's periodic resync.
			klog.FromContext(ctx).Error(err, "Listing nodepools for a node class change", "kind", kind, "nodeClass", o.GetName())
			return nil
		}
		var out []reconcile.Request
		for _, p := range pools.Items {
			ref := p.Spec.Template.Spec.NodeClassRef
			if ref.Group == v1alpha1.Group && ref.Kind == kind && ref.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
			}
		}
		return out
	}
}

// Reconcile recomputes one pool's status.
func (c *StatusController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			c.mu.Lock()
			delete(c.written, req.Name)
			c.mu.Unlock()
			metrics.Nodes.DeleteLabelValues(req.Name)
			metrics.PoolUsage.Delete(req.Name)
			metrics.PoolLimit.Delete(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var nodes corev1.NodeList
	// Read only: the cache's own objects, not copies (a pool is
	// reconciled on every change to its nodes and claims).
	if err := c.client.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes of nodepool %s: %w", pool.Name, err)
	}
	var claims v1alpha1.NodeClaimList
	if err := c.client.List(ctx, &claims, client.MatchingFields{cluster.IndexClaimPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeclaims of nodepool %s: %w", pool.Name, err)
	}

	status := pool.Status.DeepCopy()
	status.Nodes = int64(len(nodes.Items))
	metrics.Nodes.WithLabelValues(pool.Name).Set(float64(status.Nodes))
	status.Resources = corev1.ResourceList{}
	for _, n := range nodes.Items {
		status.Resources = quota.Add(status.Resources, n.Status.Capacity)
	}
	// Claims that launched but whose node has not registered yet count
	// too: their capacity is committed.
	for _, nc := range claims.Items {
		if nc.Spec.NodePool == pool.Name && nc.Status.NodeName == "" {
			status.Resources = quota.Add(status.Resources, nc.Status.Capacity)
		}
	}
	metrics.PoolUsage.Set(pool.Name, status.Resources)
	metrics.PoolLimit.Set(pool.Name, corev1.ResourceList(pool.Spec.Limits))
	ready, reason, message, err := c.nodeClassReady(ctx, pool.Spec.Template.Spec.NodeClassRef)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := nodeshape.ValidateRequirements(pool.Spec.Template.Spec.Requirements); err != nil {
		// The catalog publishes nothing for it: the pool is not Ready,
		// and says why.
		ready, reason, message = metav1.ConditionFalse, "InvalidRequirements", err.Error()+"; no instance types are published for this pool until it is fixed"
	}
	if rc := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReplicasReached); ready == metav1.ConditionTrue && pool.Fixed() &&
		rc != nil && rc.Status == metav1.ConditionFalse && rc.Reason == v1alpha1.ReasonReplicasLimited {
		// The replicas controller (package replicas) found the limits
		// too tight for the count: a fixed-size pool short of its
		// replicas for good is not Ready.
		ready, reason, message = metav1.ConditionFalse, v1alpha1.ReasonReplicasLimited, rc.Message
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: ready, Reason: reason, Message: message, ObservedGeneration: pool.Generation,
	})
	budgets := metav1.Condition{Type: v1alpha1.ConditionBudgetsValid, Status: metav1.ConditionTrue, Reason: "SchedulesValid", ObservedGeneration: pool.Generation}
	if err := v1alpha1.ValidateSchedules(&pool); err != nil {
		budgets.Status, budgets.Reason = metav1.ConditionFalse, "InvalidSchedule"
		budgets.Message = err.Error() + "; such a budget applies at all times until its schedule is fixed"
	}
	// The Event goes with the change of condition, not every reconcile:
	// pools are reconciled on every change to their nodes and claims.
	if before := meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionBudgetsValid); budgets.Status == metav1.ConditionFalse &&
		(before == nil || before.Status != budgets.Status || before.Message != budgets.Message) {
		klog.FromContext(ctx).Info("Disruption budget schedule cannot be parsed; the budget applies at all times", "nodePool", klog.KObj(&pool), "err", budgets.Message)
		if c.recorder != nil {
			c.recorder.Eventf(&pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonInvalidSchedule, v1alpha1.ActionValidateBudgets, "%s", budgets.Message)
		}
	}
	meta.SetStatusCondition(&status.Conditions, budgets)
	meta.SetStatusCondition(&status.Conditions, limitsSet(&pool))
	if equality.Semantic.DeepEqual(status, &pool.Status) {
		return reconcile.Result{}, nil
	}
	if wait := c.countsWait(pool.Name, &pool.Status, status); wait > 0 {
		// Written once the interval is over, whatever changes meanwhile.
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	pool.Status = *status
	if err := c.client.Status().Update(ctx, &pool); apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil // a newer pool than the cache had: read it again
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("updating status of nodepool %s: %w", pool.Name, err)
	}
	c.mu.Lock()
	c.written[pool.Name] = c.now()
	c.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Updated nodepool status", "nodePool", klog.KObj(&pool), "nodes", status.Nodes, "ready", ready, "reason", reason)
	return reconcile.Result{}, nil
}

// countsWait is how long to wait before writing status over was when the
// two differ only in their counts: until CountsInterval after the pool's
// last write. Zero when a condition changed, or the interval is over.
func (c *StatusController) countsWait(pool string, was, status *v1alpha1.NodePoolStatus) time.Duration {
	if !equality.Semantic.DeepEqual(was.Conditions, status.Conditions) {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.written[pool]
	if !ok {
		return 0
	}
	return max(0, CountsInterval-c.now().Sub(last))
}

// limitsSet is the pool's LimitsSet condition.
func limitsSet(pool *v1alpha1.NodePool) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionLimitsSet, ObservedGeneration: pool.Generation}
	if len(pool.Spec.Limits) == 0 {
		c.Status, c.Reason = metav1.ConditionFalse, "NoLimits"
		c.Message = "spec.limits is empty: any pod with schedulerName nodeforge-scheduler, in any namespace, can make this pool launch capacity up to what its requirements allow, without bound; set limits on cpu and memory"
		return c
	}
	var caps []string
	for _, name := range slices.Sorted(maps.Keys(pool.Spec.Limits)) {
		q := pool.Spec.Limits[name]
		caps = append(caps, fmt.Sprintf("%s %s", name, q.String()))
	}
	c.Status, c.Reason = metav1.ConditionTrue, "LimitsSet"
	c.Message = "nothing is launched past " + strings.Join(caps, ", ") + " (its nodes and launching claims counted)"
	return c
}

// nodeClassReady reports whether the pool's node class can be used: its
// kind is one the cloud provider serves, it exists, and the provider reads
// it as ready.
func (c *StatusController) nodeClassReady(ctx context.Context, ref v1alpha1.NodeClassReference) (metav1.ConditionStatus, string, string, error) {
	i := slices.IndexFunc(c.classes, func(nc cloudprovider.NodeClass) bool { return nc.Kind == ref.Kind })
	if ref.Group != v1alpha1.Group || i < 0 {
		return metav1.ConditionFalse, "NodeClassNotSupported", fmt.Sprintf("node class %s.%s is not served by this provisioner, which launches from %s (group %s)",
			ref.Kind, ref.Group, cloudprovider.ServedKinds(c.classes), v1alpha1.Group), nil
	}
	declared := c.classes[i]
	class := declared.New()
	if err := c.client.Get(ctx, types.NamespacedName{Name: ref.Name}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return metav1.ConditionFalse, "NodeClassNotFound", fmt.Sprintf("%s %s does not exist", ref.Kind, ref.Name), nil
		}
		return "", "", "", fmt.Errorf("getting %s %s: %w", ref.Kind, ref.Name, err)
	}
	if ready, reason, message := declared.Ready(class); !ready {
		return metav1.ConditionFalse, "NodeClassNotReady", fmt.Sprintf("%s %s is not ready (%s): %s", ref.Kind, ref.Name, reason, message), nil
	}
	return metav1.ConditionTrue, "NodeClassReady", fmt.Sprintf("%s %s is ready", ref.Kind, ref.Name), nil
}
