package simulated

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// FailedHolder is the holder the simulated cloud writes into the node
// lease of a node it fails. kwok renews a node's lease only while it holds
// it (or the lease has expired), and treats a node whose lease another
// holds as not its own: it stops playing its stages. So the lease stops
// being renewed and the node's status stops changing, as when a kubelet
// dies, and the node lifecycle controller marks the node Ready Unknown
// once its grace period has passed. The taking is the lease's last
// renewal: its renew time is the moment of failure. A write that changed
// the lease but not its renew time would stop the node from ever being
// marked: kube-controller-manager's node lifecycle controller (1.37,
// NodeControllerLeaseCircuitBreaker) reads the live lease of a node whose
// cached lease looks expired, and while its resourceVersion differs from
// that of the last renewal it saw, takes its cache for stale and skips the
// node. The lease is given a duration of years, so that kwok never takes
// it back.
const FailedHolder = "nodeforge-simulated-failure"

// PodOfFailedNode is the annotation ("true") the simulated cloud writes
// on every pod bound to a node it failed, at the failure and, for pods
// bound later, every round after while the node exists. The sandbox's
// kwok stages (hack/tools/kwokstages) match no pod so annotated: kwok
// neither runs nor finishes deleting them, as a dead kubelet would not.
// The lease alone should be enough, but kwok v0.8.0 checks it for pods
// only when its node lease controller happens to start before its pod
// controller, which is random (a map's order).
const PodOfFailedNode = "simulated.nodeforge.dev/node-failed"

// failedLeaseSeconds is the failed lease's duration: ten years.
const failedLeaseSeconds = 10 * 365 * 24 * 3600

// fail fails the registered nodes that a NodeFailure fault of their node
// class names and whose delay has passed, and marks the pods of the nodes
// it failed (PodOfFailedNode).
func (c *Cloud) fail(ctx context.Context) error {
	// A pod that cannot be marked does not keep other nodes from failing.
	return errors.Join(c.failDue(ctx), c.markPodsOfFailedNodes(ctx))
}

// failDue fails the nodes whose NodeFailure fault is due.
func (c *Cloud) failDue(ctx context.Context) error {
	var classes v1alpha1.SimulatedNodeClassList
	if err := c.kube.List(ctx, &classes); err != nil {
		return fmt.Errorf("listing SimulatedNodeClasses: %w", err)
	}
	faults := map[string][]v1alpha1.SimulatedFault{}
	for _, cl := range classes.Items {
		for _, f := range cl.Spec.Faults {
			if f.Kind == v1alpha1.FaultNodeFailure {
				faults[cl.Name] = append(faults[cl.Name], f)
			}
		}
	}
	if len(faults) == 0 {
		return nil
	}
	registered, err := c.labelled(ctx, labelRegistered, "true")
	if err != nil {
		return err
	}
	now := c.now()
	for _, e := range registered {
		if e.cm.Labels[labelFailed] == "true" {
			continue
		}
		f, due := failureOf(e.in, faults[e.in.NodeClass])
		if f == nil || now.Before(due) {
			continue
		}
		if err := c.failNode(ctx, e, f); err != nil {
			return err
		}
	}
	return nil
}

// failureOf is the first NodeFailure fault that names the instance's
// offering, and when it fails the instance.
func failureOf(in Record, faults []v1alpha1.SimulatedFault) (*v1alpha1.SimulatedFault, time.Time) {
	o := cloudprovider.Offer{Zone: in.Zone, CapacityType: in.CapacityType}
	o.InstanceType.Name = in.InstanceType
	for i := range faults {
		f := &faults[i]
		if !faultMatches(*f, o) {
			continue
		}
		due := in.RegisterAt
		if f.After != nil {
			due = due.Add(f.After.Duration)
		}
		return f, due
	}
	return nil, time.Time{}
}

// failNode takes the node's lease from kwok, then marks the instance
// failed; a conflict leaves both for the next round.
func (c *Cloud) failNode(ctx context.Context, e entry, f *v1alpha1.SimulatedFault) error {
	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: e.in.NodeName}
	err := c.api.Get(ctx, key, &lease)
	switch {
	case apierrors.IsNotFound(err):
		// Never renewed: the node dies before its kubelet's first lease.
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec:       coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(c.now()))},
		}
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To(FailedHolder), ptr.To(int32(failedLeaseSeconds))
		err = c.kube.Create(ctx, &lease)
	case err == nil:
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To(FailedHolder), ptr.To(int32(failedLeaseSeconds))
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(c.now()))
		err = c.kube.Update(ctx, &lease)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failing simulated node %s: %w", e.in.NodeName, err)
	}
	e.cm.Labels[labelFailed] = "true"
	if err := c.kube.Update(ctx, e.cm); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	after := time.Duration(0)
	if f.After != nil {
		after = f.After.Duration
	}
	klog.FromContext(ctx).Info("Simulated node failed: its kubelet stopped renewing its lease", "node", e.in.NodeName, "providerID", e.in.ProviderID,
		"zone", e.in.Zone, "instanceType", e.in.InstanceType, "capacityType", e.in.CapacityType, "nodeClass", e.in.NodeClass, "after", after)
	return nil
}

// markPodsOfFailedNodes marks the pods bound to the nodes of the
// instances failed so far (PodOfFailedNode), those bound since included;
// the inventory says which, so a restarted cloud goes on.
func (c *Cloud) markPodsOfFailedNodes(ctx context.Context) error {
	failed, err := c.labelled(ctx, labelFailed, "true")
	if err != nil {
		return err
	}
	for _, e := range failed {
		if err := c.markPods(ctx, e.in.NodeName); err != nil {
			return err
		}
	}
	return nil
}

// markPods annotates the pods bound to node that are not yet
// PodOfFailedNode.
func (c *Cloud) markPods(ctx context.Context, node string) error {
	var pods corev1.PodList
	if err := c.api.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return fmt.Errorf("listing the pods of failed node %s: %w", node, err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, PodOfFailedNode)))
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[PodOfFailedNode] == "true" {
			continue
		}
		if err := c.kube.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("marking pod %s/%s of failed node %s: %w", p.Namespace, p.Name, node, err)
		}
		klog.FromContext(ctx).V(2).Info("Marked pod of a failed simulated node: kwok runs it no more", "pod", klog.KObj(p), "node", node)
	}
	return nil
}
