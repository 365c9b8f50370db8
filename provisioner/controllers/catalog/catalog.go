// Package catalog publishes, for each NodePool, the instance types it may
// launch with their offerings, as an InstanceTypeCatalog named after the
// pool. The scheduler plugin decides fit from that object alone, so the
// scheduler needs no cloud credentials and makes no cloud call.
package catalog

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/requirements"
)

// Source is where instance types come from: the cloud provider.
type Source interface {
	// Name of the provider, recorded in the catalog.
	Name() string
	// InstanceTypes lists every instance type with its offerings.
	InstanceTypes(ctx context.Context) ([]v1alpha1.InstanceType, error)
}

// Controller writes each pool's catalog.
type Controller struct {
	client client.Client
	source Source
}

// NewController returns a Controller publishing what source offers.
func NewController(c client.Client, source Source) *Controller {
	return &Controller{client: c, source: source}
}

// SetupWithManager registers the controller: a pool's catalog is rewritten
// when the pool changes or its catalog is changed by someone else.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodepool.catalog").
		For(&v1alpha1.NodePool{}).
		Owns(&v1alpha1.InstanceTypeCatalog{}).
		Complete(c)
}

// Reconcile publishes one pool's catalog.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	all, err := c.source.InstanceTypes(ctx)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("listing instance types: %w", err)
	}
	types := requirements.FilterInstanceTypes(pool.Spec.Template.Spec.Requirements, all)
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
		return reconcile.Result{}, nil
	default:
		cat.Spec = spec
		if err := c.client.Update(ctx, cat); apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		} else if err != nil {
			return reconcile.Result{}, fmt.Errorf("updating catalog of nodepool %s: %w", pool.Name, err)
		}
	}
	klog.FromContext(ctx).Info("Published instance type catalog", "nodePool", klog.KObj(&pool), "instanceTypes", len(types), "provider", c.source.Name())
	return reconcile.Result{}, nil
}
