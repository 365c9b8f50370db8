package cluster

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// RequestOf is the ProvisioningRequest VirtualNodes made nc for
// (v1alpha1.AnnotationProvisioningRequest), if any.
func RequestOf(nc *v1alpha1.NodeClaim) (types.NamespacedName, bool) {
	v := nc.Annotations[v1alpha1.AnnotationProvisioningRequest]
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// ClaimWanted reports whether a claim made for a ProvisioningRequest or
// a CapacityBuffer, which has no nominated pod, is still wanted by it
// (RequestHolds; for a buffer, it exists and is ready), and says why not.
// A claim made for neither is not (false, "").
func ClaimWanted(ctx context.Context, c client.Reader, nc *v1alpha1.NodeClaim) (bool, string, error) {
	if key, ok := BufferOf(nc); ok {
		return bufferHolds(ctx, c, key)
	}
	return RequestHolds(ctx, c, nc)
}

// RequestHolds reports whether the ProvisioningRequest nc was made for
// still wants its capacity: it exists, has not failed, and its booking
// has not expired. It says why not. A claim made for no request holds
// nothing (false, "").
func RequestHolds(ctx context.Context, c client.Reader, nc *v1alpha1.NodeClaim) (bool, string, error) {
	key, ok := RequestOf(nc)
	if !ok {
		return false, "", nil
	}
	var pr provreqv1.ProvisioningRequest
	switch err := c.Get(ctx, key, &pr); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, "its ProvisioningRequest " + key.String() + " is gone", nil
	case err != nil:
		return false, "", err
	case !pr.DeletionTimestamp.IsZero():
		return false, "its ProvisioningRequest " + key.String() + " is being deleted", nil
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.ConditionFailed):
		return false, "its ProvisioningRequest " + key.String() + " failed", nil
	case meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.ConditionBookingExpired):
		return false, "its ProvisioningRequest " + key.String() + "'s booking expired", nil
	}
	return true, "it is booked for ProvisioningRequest " + key.String(), nil
}

// BufferOf is the CapacityBuffer VirtualNodes made nc for
// (v1alpha1.AnnotationCapacityBuffer), if any.
func BufferOf(nc *v1alpha1.NodeClaim) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(nc.Annotations[v1alpha1.AnnotationCapacityBuffer], "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// bufferHolds: the buffer exists, is not being deleted, and is ready for
// provisioning.
func bufferHolds(ctx context.Context, c client.Reader, key types.NamespacedName) (bool, string, error) {
	var b bufferv1beta1.CapacityBuffer
	switch err := c.Get(ctx, key, &b); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return false, "its CapacityBuffer " + key.String() + " is gone", nil
	case err != nil:
		return false, "", err
	case !b.DeletionTimestamp.IsZero():
		return false, "its CapacityBuffer " + key.String() + " is being deleted", nil
	case !meta.IsStatusConditionTrue(b.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning):
		return false, "its CapacityBuffer " + key.String() + " is not ready for provisioning", nil
	}
	return true, "it is launched for CapacityBuffer " + key.String(), nil
}
