// Package catalog publishes, for each NodePool, the instance types it may
// launch with their offerings, as an InstanceTypeCatalog named after the
// pool. The scheduler plugin decides fit from that object alone, so the
// scheduler needs no cloud credentials and makes no cloud call.
package catalog

import (
	"context"
	"errors"
	"fmt"

	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/nodeshape"
)

// Source is where instance types come from: the cloud provider.
type Source interface {
	// Name of the provider, recorded in the catalog.
	Name() string
	// InstanceTypes lists the instance types the pool's node class can
	// launch, with their offerings.
	InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error)
}

// Controller writes each pool's catalog.
type Controller struct {
	client      client.Client
	source      Source
	unavailable *cloudprovider.UnavailableOfferings
	changed     chan event.GenericEvent
}

// NewController returns a Controller publishing what source offers, with
// the offerings in unavailable marked so until they expire.
func NewController(c client.Client, source Source, unavailable *cloudprovider.UnavailableOfferings) *Controller {
	ctrl := &Controller{client: c, source: source, unavailable: unavailable, changed: make(chan event.GenericEvent, 1024)}
	unavailable.OnChange(ctrl.republishAll)
	return ctrl
}

// republishAll queues every pool, as offerings became unavailable.
func (c *Controller) republishAll() {
	go func() {
		var pools v1alpha1.NodePoolList
		if err := c.client.List(context.Background(), &pools); err != nil {
			return
		}
		for i := range pools.Items {
			c.changed <- event.GenericEvent{Object: &pools.Items[i]}
		}
	}()
}

// SetupWithManager registers the controller: a pool's catalog is rewritten
// when the pool changes or its catalog is changed by someone else.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodepool.catalog").
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.InstanceTypeCatalog{}).
		WatchesRawSource(source.Channel(c.changed, &handler.EnqueueRequestForObject{})).
		Complete(c)
}

// Reconcile publishes one pool's catalog.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	all, err := c.source.InstanceTypes(ctx, &pool)
	var notReady *cloudprovider.NodeClassNotReadyError
	if errors.As(err, &notReady) {
		// Publish an empty catalog: the plugin then tells the pods this
		// pool has nothing to launch, and the pool's status says why.
		klog.FromContext(ctx).Info("Node class not ready; publishing no instance types", "nodePool", klog.KObj(&pool), "reason", notReady.Reason)
		all, err = nil, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("listing instance types: %w", err)
	}
	types, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(&pool), pool.Spec.Template.Spec.Requirements, all)
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("applying the requirements of nodepool %s: %w", pool.Name, err))
	}
	var next time.Time // when the first unavailable offering comes back
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
	result := reconcile.Result{}
	if !next.IsZero() {
		result.RequeueAfter = time.Until(next) + time.Second
	}
	spec := v1alpha1.InstanceTypeCatalogSpec{Provider: c.source.Name(), InstanceTypeCount: int32(len(types)), InstanceTypes: types}

	cat := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: pool.Name}}
	err = c.client.Get(ctx, client.ObjectKeyFromObject(cat), cat)
	switch {
	case apierrors.IsNotFound(err):
		cat.Spec = spec
		if err := controllerutil.SetControllerReference(&pool, cat, c.client.Scheme()); err != nil {
			return reconcile.Result{}, err
		}
		if err := c.client.Create(ctx, cat); apierrors.IsAlreadyExists(err) {
			return reconcile.Result{Requeue: true}, nil // the cache has not seen it yet
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("creating catalog of nodepool %s: %w", pool.Name, err)
		}
	case err != nil:
		return reconcile.Result{}, err
	case equality.Semantic.DeepEqual(cat.Spec, spec):
		return result, nil
	default:
		cat.Spec = spec
		if err := c.client.Update(ctx, cat); apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("updating catalog of nodepool %s: %w", pool.Name, err)
		}
	}
	klog.FromContext(ctx).Info("Published instance type catalog", "nodePool", klog.KObj(&pool), "instanceTypes", len(types), "provider", c.source.Name(), "unavailableUntil", next)
	return result, nil
}
