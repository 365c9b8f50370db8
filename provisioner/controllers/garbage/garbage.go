// Package garbage keeps the cloud and the cluster consistent: instances of
// ours that no NodeClaim accounts for are terminated after a grace period
// (a crash between launch and recording the claim's status can leave one),
// and NodeClaims whose instance vanished (not listed, not found by ID, and
// launched longer ago than the grace period) are deleted, as are the Nodes
// of our pools whose instance is gone and that no claim accounts for.
package garbage

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Collector runs the garbage collection every Interval.
type Collector struct {
	kube     client.Client
	cloud    cloudprovider.CloudProvider
	Interval time.Duration
	// Grace is how old an instance must be before it counts as an orphan:
	// a launch records the claim's providerID a moment after Create.
	Grace time.Duration
	now   func() time.Time
}

// New returns a Collector with a 30s interval and a 2m grace period.
func New(kube client.Client, cloud cloudprovider.CloudProvider) *Collector {
	return &Collector{kube: kube, cloud: cloud, Interval: 30 * time.Second, Grace: 2 * time.Minute, now: time.Now}
}

// Start runs until ctx ends; as a manager Runnable it runs in the leader only.
func (g *Collector) Start(ctx context.Context) error {
	t := time.NewTicker(g.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := g.Collect(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Garbage collection failed; will retry")
			}
		}
	}
}

// Collect makes one pass.
func (g *Collector) Collect(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	instances, err := g.cloud.List(ctx)
	if err != nil {
		return err
	}
	var claims v1alpha1.NodeClaimList
	if err := g.kube.List(ctx, &claims); err != nil {
		return err
	}
	byName := map[string]*v1alpha1.NodeClaim{}
	for i := range claims.Items {
		byName[claims.Items[i].Name] = &claims.Items[i]
	}
	live, terminated := map[string]bool{}, map[string]bool{}
	var errs []error
	for _, in := range instances {
		live[in.ProviderID] = true
		nc := byName[in.NodeClaim]
		owned := nc != nil && (nc.Status.ProviderID == "" || nc.Status.ProviderID == in.ProviderID) || mayServe(in, byName)
		if owned || g.now().Sub(in.Launched) < g.Grace {
			continue
		}
		logger.Info("Terminating instance no nodeclaim accounts for", "providerID", in.ProviderID, "nodeClaim", in.NodeClaim, "instanceType", in.InstanceType, "age", g.now().Sub(in.Launched).Round(time.Second))
		if err := g.cloud.Delete(ctx, in.ProviderID); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(live, in.ProviderID)
		terminated[in.ProviderID] = true
		crashpoint.Hit(crashpoint.AfterCollectTerminate)
		metrics.ClaimsDeleted.WithLabelValues(in.NodePool, "OrphanInstance").Inc()
	}
	errs = append(errs, g.deleteNodesWithoutInstance(ctx, live, terminated, byName))
	for _, nc := range claims.Items {
		if nc.Status.ProviderID == "" || live[nc.Status.ProviderID] || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		// The instance list was taken before the claims were read, and a
		// cloud's list may lag a launch (EC2's Describe is eventually
		// consistent): a claim launched within the grace period, or whose
		// instance the cloud still finds when asked by ID, is kept.
		since := nc.CreationTimestamp.Time
		if launched := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionLaunched); launched != nil {
			since = launched.LastTransitionTime.Time
		}
		if g.now().Sub(since) < g.Grace {
			continue
		}
		if _, err := g.cloud.Get(ctx, nc.Status.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
			if err != nil {
				errs = append(errs, fmt.Errorf("looking up instance %s of nodeclaim %s: %w", nc.Status.ProviderID, nc.Name, err))
			}
			continue
		}
		logger.Info("Deleting nodeclaim whose instance is gone", "nodeClaim", nc.Name, "providerID", nc.Status.ProviderID)
		metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "InstanceGone").Inc()
		errs = append(errs, client.IgnoreNotFound(g.kube.Delete(ctx, &nc)))
	}
	return errors.Join(errs...)
}

// mayServe: the instance was launched for several claims (one of EC2's
// fleets of several), and one of them took it or may still take it: it
// names it in its status, or is still being launched.
func mayServe(in *cloudprovider.Instance, claims map[string]*v1alpha1.NodeClaim) bool {
	for _, name := range in.NodeClaims {
		if nc := claims[name]; nc != nil && (nc.Status.ProviderID == "" || nc.Status.ProviderID == in.ProviderID) {
			return true
		}
	}
	return false
}

// deleteNodesWithoutInstance deletes the Nodes of our pools whose instance
// is gone and that no claim accounts for: the Node of an orphan just
// terminated, and one left behind when a crash fell between terminating an
// instance and deleting its Node (the instance is then in no list, so only
// the Node tells). A Node a claim names is left to that claim's own
// termination; one younger than the grace period, or whose instance the
// cloud still finds by ID, is kept, as a cloud's list may lag a launch.
func (g *Collector) deleteNodesWithoutInstance(ctx context.Context, live, terminated map[string]bool, claims map[string]*v1alpha1.NodeClaim) error {
	var nodes corev1.NodeList
	if err := g.kube.List(ctx, &nodes); err != nil {
		return err
	}
	claimed := map[string]bool{}
	for _, nc := range claims {
		claimed[nc.Status.ProviderID] = true
		claimed[nc.Status.NodeName] = true
	}
	var errs []error
	for i := range nodes.Items {
		node := &nodes.Items[i]
		id := node.Spec.ProviderID
		_, ours := node.Labels[v1alpha1.LabelNodePool]
		if id == "" || live[id] || (!terminated[id] && (!ours || claimed[id] || claimed[node.Name] || g.now().Sub(node.CreationTimestamp.Time) < g.Grace)) {
			continue
		}
		if !terminated[id] {
			if _, err := g.cloud.Get(ctx, id); !errors.Is(err, cloudprovider.ErrNotFound) {
				if err != nil {
					errs = append(errs, fmt.Errorf("looking up instance %s of node %s: %w", id, node.Name, err))
				}
				continue
			}
		}
		klog.FromContext(ctx).Info("Deleting node whose instance is gone", "node", klog.KObj(node), "providerID", id, "nodePool", node.Labels[v1alpha1.LabelNodePool])
		// The termination finalizer waits for an instance that is gone and
		// a claim that no longer exists: nothing else would lift it.
		if controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerTermination) {
			if err := g.kube.Update(ctx, node); err != nil {
				errs = append(errs, client.IgnoreNotFound(err))
				continue
			}
		}
		if node.DeletionTimestamp.IsZero() {
			errs = append(errs, client.IgnoreNotFound(g.kube.Delete(ctx, node)))
		}
	}
	return errors.Join(errs...)
}
