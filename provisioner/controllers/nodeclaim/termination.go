package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/controllers/disruption"
	"github.com/nodeforge/nodeforge/provisioner/crashpoint"
)

// finalize terminates the instance and deletes the node, then lets the
// claim go.
func (c *Controller) finalize(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		return reconcile.Result{}, nil
	}
	if nc.Status.ProviderID != "" {
		if res, err := c.drain(ctx, nc); err != nil || !res.IsZero() {
			return res, err
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
	return reconcile.Result{}, nil
}

// drain taints the claim's node nodeforge.dev/disrupted:NoSchedule and
// evicts its pods (daemonset pods stay) through the Eviction API, so that
// PodDisruptionBudgets hold. It returns a requeue while pods remain.
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
	remaining := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if disruption.OwnedByDaemonSet(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		remaining++
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		err := c.pods.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case apierrors.IsTooManyRequests(err):
			klog.FromContext(ctx).V(2).Info("Eviction refused for now (disruption budget); will retry", "pod", klog.KObj(p), "node", node.Name)
		case err != nil && !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		default:
			klog.FromContext(ctx).Info("Evicted pod", "pod", klog.KObj(p), "node", node.Name)
			crashpoint.Hit(crashpoint.MidDrain)
		}
	}
	if remaining > 0 {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}
