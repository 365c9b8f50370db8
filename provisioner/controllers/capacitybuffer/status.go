package capacitybuffer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/cluster/bufferroom"
)

// setStatus writes what r resolved into b's status, and the conditions.
func (c *Controller) setStatus(ctx context.Context, b *bufferv1beta1.CapacityBuffer, r resolved) {
	st := &b.Status
	cond := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: b.Generation})
	}
	st.ProvisioningStrategy = ptr.To(ptr.Deref(b.Spec.ProvisioningStrategy, bufferv1beta1.StrategyActiveCapacity))
	if r.reason != "" {
		// Nothing to keep room for: no chunks until the spec is fixed.
		st.PodTemplateRef, st.PodTemplateGeneration, st.Replicas = nil, nil, nil
		cond(bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionFalse, r.reason, r.message)
		cond(bufferv1beta1.ConditionProvisioning, metav1.ConditionFalse, bufferv1beta1.ReasonNotReadyForProvisioning, "the buffer is not ready for provisioning: "+r.message)
		meta.RemoveStatusCondition(&st.Conditions, bufferv1beta1.ConditionLimitedByQuotas)
		return
	}
	st.PodTemplateRef = &bufferv1beta1.LocalObjectRef{Name: r.template.Name}
	st.PodTemplateGeneration = ptr.To(r.template.Generation)
	st.Replicas = ptr.To(r.count.Replicas)
	cond(bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionTrue, bufferv1beta1.ReasonResolved,
		fmt.Sprintf("%d chunks of PodTemplate %s", r.count.Replicas, r.template.Name))
	if r.count.Limited {
		cond(bufferv1beta1.ConditionLimitedByQuotas, metav1.ConditionTrue, bufferv1beta1.ReasonLimitsCutReplicas, fmt.Sprintf("the limits allow %d chunks", r.count.Replicas))
	} else {
		cond(bufferv1beta1.ConditionLimitedByQuotas, metav1.ConditionFalse, bufferv1beta1.ReasonWithinLimits, "the limits do not cut the number of chunks")
	}
	reason, msg := c.room(ctx, b, r.template)
	cond(bufferv1beta1.ConditionProvisioning, metav1.ConditionTrue, reason, msg)
}

// room says how many of b's chunks have room on the nodes now (placed
// by the scheduling simulator after every bound pod), and how many
// NodeClaims made for the buffer are launching.
func (c *Controller) room(ctx context.Context, b *bufferv1beta1.CapacityBuffer, tpl *corev1.PodTemplate) (reason, msg string) {
	chunks := nodeshape.BufferPods(b, tpl)
	if c.sched == nil || len(chunks) == 0 {
		return bufferv1beta1.ReasonRoomKept, fmt.Sprintf("Nodeforge keeps room for %d chunks", len(chunks))
	}
	sim, err := bufferroom.Snapshot(ctx, c.kube)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Counting the capacity buffer's room failed", "capacityBuffer", klog.KObj(b))
		return bufferv1beta1.ReasonRoomShort, fmt.Sprintf("Nodeforge keeps room for %d chunks; how many have room now could not be read", len(chunks))
	}
	fit := bufferroom.Count(ctx, c.sched, sim.Without(), chunks)
	if fit == len(chunks) {
		return bufferv1beta1.ReasonRoomKept, fmt.Sprintf("%d of %d chunks have room on the nodes now", fit, len(chunks))
	}
	msg = fmt.Sprintf("%d of %d chunks have room on the nodes now", fit, len(chunks))
	if n := c.launching(ctx, b); n > 0 {
		if n == 1 {
			return bufferv1beta1.ReasonRoomShort, msg + "; 1 NodeClaim is launching for the rest"
		}
		return bufferv1beta1.ReasonRoomShort, msg + fmt.Sprintf("; %d NodeClaims are launching for the rest", n)
	}
	return bufferv1beta1.ReasonRoomShort, msg + "; no NodeClaim is launching for the rest yet"
}

// launching counts the NodeClaims made for b whose node has not
// registered yet.
func (c *Controller) launching(ctx context.Context, b *bufferv1beta1.CapacityBuffer) int {
	var claims v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &claims); err != nil {
		klog.FromContext(ctx).Error(err, "Listing NodeClaims failed")
		return 0
	}
	n := 0
	for i := range claims.Items {
		nc := &claims.Items[i]
		if key, ok := cluster.BufferOf(nc); ok && key.Namespace == b.Namespace && key.Name == b.Name && nc.Status.NodeName == "" && nc.DeletionTimestamp.IsZero() {
			n++
		}
	}
	return n
}
