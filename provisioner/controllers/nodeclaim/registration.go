package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// register adopts the node once it registers, or gives up after the TTL.
func (c *Controller) register(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		launched := meta.FindStatusCondition(nc.Status.Conditions, "Launched")
		if launched != nil && c.now().Sub(launched.LastTransitionTime.Time) > c.opts.RegistrationTTL {
			return c.giveUp(ctx, nc, "RegistrationTimeout", "Register", fmt.Sprintf("no node registered within %s", c.opts.RegistrationTTL), launchedOffer(nc))
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The providerID in the claim's status is only trusted once the cloud
	// says the instance was launched for this claim: whoever can write
	// nodeclaims/status must not be able to make the provisioner adopt,
	// bind pods to and later drain a node that is not ours.
	in, err := c.launchedFor(ctx, nc)
	if err != nil || in == nil {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	// Adopt the node: the finalizer keeps it until its instance is gone,
	// and the labels the claim stands for are there even when the node's
	// boot configuration did not set them all.
	adopted := adopt(node, nc, in.Labels)
	if !controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerTermination) {
		controllerutil.AddFinalizer(node, v1alpha1.FinalizerTermination)
		adopted = true
	}
	if adopted {
		if err := c.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimRegistered
	nc.Status.NodeName = node.Name
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: "Registered", Status: metav1.ConditionTrue, Reason: "Registered", Message: node.Name})
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).Info("Registered node", "node", klog.KObj(node), "providerID", nc.Status.ProviderID)
	c.event(nc, corev1.EventTypeNormal, "Registered", "Register", "node "+node.Name+" registered")
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: true}, nil
}

// launchedFor returns the cloud's instance for the claim's providerID if
// it was launched for this claim, by the claim name the instance carries
// (a tag on EC2), and nil otherwise. A mismatch is logged and recorded as
// an Event.
func (c *Controller) launchedFor(ctx context.Context, nc *v1alpha1.NodeClaim) (*cloudprovider.Instance, error) {
	in, err := c.cloud.Get(ctx, nc.Status.ProviderID)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return nil, nil // the garbage collector deletes claims whose instance is gone
	}
	if err != nil {
		return nil, fmt.Errorf("looking up instance %s: %w", nc.Status.ProviderID, err)
	}
	if in.NodeClaim != nc.Name {
		klog.FromContext(ctx).Error(nil, "Not adopting node: its instance was not launched for this nodeclaim", "providerID", nc.Status.ProviderID, "instanceNodeClaim", in.NodeClaim)
		c.event(nc, corev1.EventTypeWarning, "ProviderIDMismatch", "Register", fmt.Sprintf("instance %s was launched for nodeclaim %q, not this one; its node is not adopted", nc.Status.ProviderID, in.NodeClaim))
		return nil, nil
	}
	return in, nil
}

// adopt sets the labels of the node the claim stands for (nodeshape: its
// template's, its pool, instance type with the type's own labels
// (typeLabels, the instance attribute labels among them), zone and
// capacity type) and its
// template's annotations where the node lacks them, and says whether it
// changed anything. Labels and annotations the node has are left as they
// are: its kubelet's word on them stands. Annotations are set here, not
// at boot, because a kubelet cannot register its node with annotations
// of the provisioner's choosing.
func adopt(node *corev1.Node, nc *v1alpha1.NodeClaim, typeLabels map[string]string) bool {
	template := nodeshape.ForClaim(nc)
	want := template.NodeLabels(&v1alpha1.InstanceType{Name: nc.Status.InstanceType, Labels: typeLabels}, nc.Status.Zone, nc.Status.CapacityType)
	changed := false
	for k, v := range template.Annotations {
		if _, ok := node.Annotations[k]; ok {
			continue
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[k] = v
		changed = true
	}
	for k, v := range want {
		if _, ok := node.Labels[k]; ok || v == "" {
			continue
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[k] = v
		changed = true
	}
	return changed
}
