// Package replicas keeps each fixed-size NodePool (spec.replicas) at its
// count: it makes a claim, with no pod, for each place no claim holds, of
// the pool's cheapest offering with every other type of that zone,
// capacity type and architecture as options (nodeshape.ReplicaClaim); the
// NodeClaim controller launches, registers and initializes it like any
// claim. It never makes more than the pool's limits leave room for, and
// says so in the pool's ReplicasReached condition. Removing nodes past the
// count is disruption's (its ScaledDown method, through the executor), as
// is replacing drifted, expired and unhealthy ones.
package replicas

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/limits"
)

// Retry is how often a pool short of its replicas for a reason no event
// ends (its limits, an empty catalog) is looked at again.
const Retry = 30 * time.Second

// expectWait is how long a claim this controller made counts as standing
// before the cache shows it; a create the cache never shows by then
// failed in a way the API server did not report.
const expectWait = time.Minute

// Controller makes the claims of fixed-size pools.
type Controller struct {
	kube   client.Client
	ledger *limits.Ledger
	now    func() time.Time

	mu sync.Mutex
	// made: the claims made per pool that the cache may not show yet,
	// by name, with when they were made. Counted as standing until seen,
	// so that a reconcile on a stale cache does not make them twice.
	made map[string]map[string]time.Time
}

// New returns a Controller that reads and writes through kube and checks
// the pools' limits against ledger (the launches' own).
func New(kube client.Client, ledger *limits.Ledger, now func() time.Time) *Controller {
	return &Controller{kube: kube, ledger: ledger, now: now, made: map[string]map[string]time.Time{}}
}

// SetupWithManager registers the controller, "nodepool.replicas": a pool
// is looked at when it, one of its claims or its catalog changes.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := cluster.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	byPool := func(_ context.Context, o client.Object) []reconcile.Request {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: nc.Spec.NodePool}}}
		}
		if pool := o.GetLabels()[v1alpha1.LabelNodePool]; pool != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
		}
		return nil
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodepool.replicas").
		For(&v1alpha1.NodePool{}).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(byPool)).
		Watches(&v1alpha1.InstanceTypeCatalog{}, handler.EnqueueRequestsFromMapFunc(byPool)).
		Complete(c)
}

// Reconcile makes the claims a fixed-size pool lacks and writes its
// ReplicasReached condition.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.Fixed() || !pool.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("nodePool", pool.Name))
	var claims v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &claims, client.MatchingFields{cluster.IndexClaimPool: pool.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeclaims of nodepool %s: %w", pool.Name, err)
	}
	standing := cluster.StandingOf(claims.Items, pool.Name)
	expected := c.expected(pool.Name, claims.Items)
	cond, retry, err := c.fill(ctx, &pool, standing, expected)
	if err != nil {
		return reconcile.Result{}, err
	}
	return c.setCondition(ctx, &pool, cond, retry)
}

// fill makes the claims the pool lacks, within its limits, and returns
// its ReplicasReached condition and when to look again.
func (c *Controller) fill(ctx context.Context, pool *v1alpha1.NodePool, standing []*v1alpha1.NodeClaim, expected int) (metav1.Condition, time.Duration, error) {
	want := *pool.Spec.Replicas
	have := int64(len(standing) + expected)
	initialized := int64(0)
	launching := expected
	for _, nc := range standing {
		if nc.Status.Phase == v1alpha1.NodeClaimInitialized {
			initialized++
		}
		if nc.Status.ProviderID == "" {
			launching++
		}
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionReplicasReached, ObservedGeneration: pool.Generation}
	count := fmt.Sprintf("%d of %d replicas initialized, %d claims standing", initialized, want, len(standing)+expected)
	short := Short(want, have)
	if short == 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, v1alpha1.ReasonReplicasReached, count
		if initialized < want {
			cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonReplicasLaunching
		}
		return cond, 0, nil
	}
	if launching > 0 {
		// Launches in flight may end on other types than they reserved,
		// and the limits are judged on what they end as: the rest wait
		// for them (each one's progress requeues the pool).
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonReplicasLaunching, count
		return cond, 0, nil
	}
	its, err := cluster.InstanceTypesOf(ctx, c.kube, pool.Name)
	if err != nil {
		return cond, 0, err
	}
	offers, err := nodeshape.Offers(nodeshape.ForPool(pool), its, pool.Spec.Template.Spec.Requirements)
	if err != nil || len(offers) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonReplicasNoInstanceTypes
		cond.Message = count + "; the pool's catalog offers no instance type to launch"
		if err != nil {
			cond.Message += ": " + err.Error()
		}
		return cond, Retry, nil
	}
	used, err := c.ledger.Usage(ctx, pool.Name)
	if err != nil {
		return cond, 0, err
	}
	made := 0
	for range short {
		within, why := WithinLimits(pool.Spec.Limits, used, offers)
		if len(within) == 0 {
			cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonReplicasLimited
			cond.Message = fmt.Sprintf("%s; nodepool limits leave no room for %d more: %s", count, short-int64(made), why)
			klog.FromContext(ctx).Info("Fixed-size nodepool short of its replicas: its limits leave no room", "replicas", want, "standing", have+int64(made), "reason", why)
			return cond, Retry, nil
		}
		nc := nodeshape.ReplicaClaim(pool, pool.Name+"-"+utilrand.String(5), within)
		if err := c.kube.Create(ctx, nc); err != nil {
			return cond, 0, fmt.Errorf("creating nodeclaim for nodepool %s's replicas: %w", pool.Name, err)
		}
		c.expect(pool.Name, nc.Name)
		used = quota.Add(used, within[0].InstanceType.Capacity)
		made++
		klog.FromContext(ctx).Info("Made nodeclaim to keep the pool at its replicas", "nodeClaim", klog.KObj(nc), "replicas", want, "standing", have+int64(made),
			"instanceType", within[0].InstanceType.Name, "zone", within[0].Zone, "capacityType", within[0].CapacityType)
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonReplicasLaunching
	cond.Message = fmt.Sprintf("%d of %d replicas initialized, %d claims standing", initialized, want, have+int64(made))
	return cond, 0, nil
}

// Short is how many claims a pool of want replicas with have standing
// lacks; never negative (a pool with more is disruption's to scale down).
func Short(want, have int64) int64 { return max(0, want-have) }

// WithinLimits returns the offers (cheapest first) a new node may launch
// as without taking a pool whose usage is used past limits, and when
// there are none, which limit the cheapest would cross.
func WithinLimits(lim v1alpha1.Limits, used corev1.ResourceList, offers []nodeshape.Offer) ([]nodeshape.Offer, string) {
	if len(lim) == 0 {
		return offers, ""
	}
	within := slices.DeleteFunc(slices.Clone(offers), func(o nodeshape.Offer) bool {
		return !nodeshape.WithinLimits(lim, used, o.InstanceType.Capacity)
	})
	if len(within) == 0 && len(offers) > 0 {
		return nil, nodeshape.ExceedsLimits(lim, used, offers[0].InstanceType.Capacity, offers[0].InstanceType.Name)
	}
	return within, ""
}

// setCondition writes the pool's ReplicasReached condition when it
// changed; a conflict is read again.
func (c *Controller) setCondition(ctx context.Context, pool *v1alpha1.NodePool, cond metav1.Condition, retry time.Duration) (reconcile.Result, error) {
	before := meta.FindStatusCondition(pool.Status.Conditions, cond.Type)
	if before != nil && before.Status == cond.Status && before.Reason == cond.Reason && before.Message == cond.Message && before.ObservedGeneration == cond.ObservedGeneration {
		return reconcile.Result{RequeueAfter: retry}, nil
	}
	meta.SetStatusCondition(&pool.Status.Conditions, cond)
	if err := c.kube.Status().Update(ctx, pool); apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("updating status of nodepool %s: %w", pool.Name, err)
	}
	return reconcile.Result{RequeueAfter: retry}, nil
}

// expect records a claim made for pool.
func (c *Controller) expect(pool, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made[pool] == nil {
		c.made[pool] = map[string]time.Time{}
	}
	c.made[pool][name] = c.now()
}

// expected drops the claims made for pool that claims (the cache) shows,
// or that were made too long ago, and returns how many are left.
func (c *Controller) expected(pool string, claims []v1alpha1.NodeClaim) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for i := range claims {
		delete(c.made[pool], claims[i].Name)
	}
	for name, at := range c.made[pool] {
		if now.Sub(at) > expectWait {
			delete(c.made[pool], name)
		}
	}
	return len(c.made[pool])
}

func (c *Controller) forget(pool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.made, pool)
}
