// Package catalog publishes, for each NodePool, the instance types it may
// launch with their offerings, as InstanceTypeCatalog objects: one per
// instance-type family, named <pool>.<family>, labelled with the pool. The
// scheduler plugin decides fit from those objects alone, so the scheduler
// needs no cloud credentials and makes no cloud call. A region's whole
// offering set in one object would near etcd's size limit, and every
// offering marked unavailable would rewrite all of it; by family, each
// object stays small and a mark rewrites one object per pool.
// provisioner/cluster.InstanceTypesOf reads a pool's catalog back for the
// provisioner.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Source is where instance types come from: the cloud provider.
type Source interface {
	// Name of the provider, recorded in the catalog.
	Name() string
	// InstanceTypes lists the instance types the pool's node class can
	// launch, with their offerings.
	InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error)
}

// Republish is how often a pool's catalog is published again though
// nothing changed that the controller watches.
const Republish = 5 * time.Minute

// Controller writes each pool's catalog objects.
type Controller struct {
	client      client.Client
	source      Source
	unavailable *cloudprovider.UnavailableOfferings
	changed     chan ctrlevent.GenericEvent
	recorder    events.EventRecorder

	mu sync.Mutex
	// corrected is what was last said of each device template a node
	// corrected, by pool/type/driver.
	corrected map[string]string
}

// NewController returns a Controller publishing what source offers, with
// the offerings in unavailable marked so until they expire. A device
// template a running node contradicts is recorded on its pool through
// recorder (which may be nil).
func NewController(c client.Client, source Source, unavailable *cloudprovider.UnavailableOfferings, recorder events.EventRecorder) *Controller {
	ctrl := &Controller{client: c, source: source, unavailable: unavailable, changed: make(chan ctrlevent.GenericEvent, 1024), recorder: recorder, corrected: map[string]string{}}
	unavailable.OnChange(ctrl.RepublishAll)
	return ctrl
}

// RepublishAll queues every pool, as what the source offers changed
// without any object changing: offerings became unavailable or available
// again, or a registered node measured an instance type's memory.
func (c *Controller) RepublishAll() {
	go func() {
		var pools v1alpha1.NodePoolList
		if err := c.client.List(context.Background(), &pools); err != nil {
			return
		}
		for i := range pools.Items {
			c.changed <- ctrlevent.GenericEvent{Object: &pools.Items[i]}
		}
	}()
}

// SetupWithManager registers the controller: a pool's catalog is rewritten
// when the pool changes or one of its objects is changed by someone else,
// when a DeviceTemplate or a NodeOverlay's spec changes or one of its nodes publishes
// ResourceSlices, when offerings become unavailable or available again,
// and every Republish.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodepool.catalog").
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.InstanceTypeCatalog{}).
		Watches(&v1alpha1.DeviceTemplate{}, handler.EnqueueRequestsFromMapFunc(c.allPools)).
		Watches(&v1alpha1.NodeOverlay{}, handler.EnqueueRequestsFromMapFunc(c.allPools), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(c.poolsOfSlice)).
		WatchesRawSource(source.Channel(c.changed, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// allPools maps a change that may touch every pool's catalog (a
// DeviceTemplate's, a NodeOverlay's spec) to every pool.
func (c *Controller) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools v1alpha1.NodePoolList
	if err := c.client.List(ctx, &pools); err != nil {
		klog.FromContext(ctx).Error(err, "Listing NodePools to publish their catalogs again")
		return nil
	}
	out := make([]reconcile.Request, len(pools.Items))
	for i := range pools.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pools.Items[i])}
	}
	return out
}

// Reconcile publishes one pool's catalog: it writes the family objects
// whose content changed and deletes those of families the pool no longer
// has. A pool with no instance types has no objects.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	types, err := c.instanceTypes(ctx, &pool)
	if err != nil {
		return reconcile.Result{}, err
	}
	next := c.markUnavailable(types)
	// Published again every Republish at the latest: what a provider
	// offers changes without any object changing (spot prices, the memory
	// registered nodes reported, prices refreshed from the cloud), and an
	// unchanged catalog costs no write.
	result := reconcile.Result{RequeueAfter: Republish}
	if !next.IsZero() {
		result.RequeueAfter = min(Republish, time.Until(next)+time.Second)
	}
	want := objectsFor(&pool, c.source.Name(), types)

	// The pool's objects as they are. Each is compared with what it should
	// say and written only if it differs, so an offering marked
	// unavailable rewrites the one object that lists it.
	var have v1alpha1.InstanceTypeCatalogList
	if err := c.client.List(ctx, &have, client.MatchingLabels{v1alpha1.LabelNodePool: pool.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing catalog of nodepool %s: %w", pool.Name, err)
	}
	current := map[string]*v1alpha1.InstanceTypeCatalog{}
	for i := range have.Items {
		current[have.Items[i].Name] = &have.Items[i]
	}
	logger := klog.FromContext(ctx)
	written, deleted := 0, 0
	for _, w := range writeOrder(want, current) {
		wrote, err := c.write(ctx, &pool, w, current[w.Name])
		delete(current, w.Name)
		switch {
		case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
			//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
			result.Requeue = true // the cache has not seen an earlier write yet
		case err != nil:
			return reconcile.Result{}, err
		case wrote:
			written++
			logger.V(4).Info("Wrote catalog object", "nodePool", klog.KObj(&pool), "catalog", w.Name, "family", family(w.Spec.InstanceTypes[0].Name), "instanceTypes", len(w.Spec.InstanceTypes))
		}
	}
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	if result.Requeue {
		// An object not updated yet may still count the objects that
		// deleting now would take away; delete once all are written.
		return result, nil
	}
	// What is left are families the pool no longer has. Objects it does
	// not control are left alone: written by hand, or by an earlier pool of
	// the same name, which the garbage collector removes.
	for _, old := range current {
		if !metav1.IsControlledBy(old, &pool) {
			continue
		}
		if err := c.client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting catalog %s of nodepool %s: %w", old.Name, pool.Name, err)
		}
		deleted++
	}
	// A catalog written before catalogs were split by family is named
	// after the pool and names no pool in its spec; readers ignore it.
	legacy := &v1alpha1.InstanceTypeCatalog{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: pool.Name}, legacy); err == nil && legacy.Spec.NodePool == "" && metav1.IsControlledBy(legacy, &pool) {
		if err := c.client.Delete(ctx, legacy, client.Preconditions{UID: &legacy.UID}); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting unsplit catalog of nodepool %s: %w", pool.Name, err)
		}
		deleted++
	}
	if written > 0 || deleted > 0 {
		logger.Info("Published instance type catalog", "nodePool", klog.KObj(&pool), "instanceTypes", len(types), "objects", len(want),
			"written", written, "deleted", deleted, "provider", c.source.Name(), "unavailableUntil", next)
	}
	return result, nil
}

// instanceTypes are the types the pool publishes: the source's within
// its requirements, with the DeviceTemplates' slices and those running
// nodes correct (reported as Events), then the NodeOverlays' prices and
// capacity; none while its node class is not ready.
func (c *Controller) instanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	all, err := c.source.InstanceTypes(ctx, pool)
	var notReady *cloudprovider.NodeClassNotReadyError
	if errors.As(err, &notReady) {
		// Publish no instance types (the pool's objects go): the plugin
		// then tells the pods this pool has nothing to launch, and the
		// pool's status says why.
		klog.FromContext(ctx).Info("Node class not ready; publishing no instance types", "nodePool", klog.KObj(pool), "reason", notReady.Reason)
		all, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing instance types: %w", err)
	}
	types, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(pool), pool.Spec.Template.Spec.Requirements, all)
	if err != nil {
		return nil, reconcile.TerminalError(fmt.Errorf("applying the requirements of nodepool %s: %w", pool.Name, err))
	}
	var templates v1alpha1.DeviceTemplateList
	if err := c.client.List(ctx, &templates); err != nil {
		return nil, fmt.Errorf("listing DeviceTemplates: %w", err)
	}
	types, fixes, err := c.withObserved(ctx, pool, withTemplates(types, templates.Items))
	if err != nil {
		return nil, err
	}
	c.reportCorrections(ctx, pool, fixes)
	var overlays v1alpha1.NodeOverlayList
	if err := c.client.List(ctx, &overlays); err != nil {
		return nil, fmt.Errorf("listing NodeOverlays: %w", err)
	}
	return withOverlays(nodeshape.ForPool(pool), types, overlays.Items), nil
}

// write creates the object want, or updates cur to say what want says;
// it reports whether it wrote. Owner references of an existing object are
// left as they are, as the garbage collector acts on them.
func (c *Controller) write(ctx context.Context, pool *v1alpha1.NodePool, want, cur *v1alpha1.InstanceTypeCatalog) (bool, error) {
	if cur == nil {
		err := c.client.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			// Usually an object this controller made that the cache has not
			// seen yet; but the name may be another pool's.
			var other v1alpha1.InstanceTypeCatalog
			if c.client.Get(ctx, client.ObjectKeyFromObject(want), &other) == nil && other.Spec.NodePool != pool.Name {
				return false, fmt.Errorf("creating catalog %s of nodepool %s: the name is taken by a catalog of nodepool %q", want.Name, pool.Name, other.Spec.NodePool)
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating catalog %s of nodepool %s: %w", want.Name, pool.Name, err)
		}
		return err == nil, err
	}
	if cur.Spec.NodePool != pool.Name {
		// spec.nodePool is immutable: the object was labelled by hand.
		return false, fmt.Errorf("catalog %s is labelled for nodepool %s but is part of nodepool %q's catalog", cur.Name, pool.Name, cur.Spec.NodePool)
	}
	if equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		return false, nil
	}
	cur.Spec = want.Spec
	if err := c.client.Update(ctx, cur); err != nil {
		if apierrors.IsConflict(err) {
			return false, err
		}
		return false, fmt.Errorf("updating catalog %s of nodepool %s: %w", cur.Name, pool.Name, err)
	}
	return true, nil
}

// markUnavailable marks the offerings of types that are unavailable for
// now, and returns when the first of them comes back (zero: none).
func (c *Controller) markUnavailable(types []v1alpha1.InstanceType) time.Time {
	var next time.Time
	for i := range types {
		for j := range types[i].Offerings {
			o := &types[i].Offerings[j]
			if gone, until := c.unavailable.Unavailable(types[i].Name, o.Zone, string(o.CapacityType)); gone && o.Available {
				o.Available = false
				if next.IsZero() || until.Before(next) {
					next = until
				}
			}
		}
	}
	return next
}

// writeOrder puts new objects first, then changed ones; deletions come
// after both. Readers take a catalog as published once it has as many
// objects as every one of them counts (v1alpha1.ByPool), and in this order
// it always has, whether the count grows or shrinks.
func writeOrder(want []v1alpha1.InstanceTypeCatalog, current map[string]*v1alpha1.InstanceTypeCatalog) []*v1alpha1.InstanceTypeCatalog {
	order := make([]*v1alpha1.InstanceTypeCatalog, 0, len(want))
	for i := range want {
		if current[want[i].Name] == nil {
			order = append(order, &want[i])
		}
	}
	for i := range want {
		if current[want[i].Name] != nil {
			order = append(order, &want[i])
		}
	}
	return order
}
