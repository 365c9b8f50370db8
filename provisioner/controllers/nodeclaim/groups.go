package nodeclaim

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// releaseGroups releases (AnnotationReleasedWith), for a claim given up
// (nc, which the caller deletes), the other claims whose pods belong to a
// PodGroup one of nc's pods belongs to, launched or not: the scheduler binds a group's pods
// only together, so without nc's node the others would run nothing and
// be paid for. Their pods' nominations go with them, and the scheduler
// decides the group afresh. Errors are logged: the claim given up goes
// all the same, and a group left in part is released when its next claim
// fails or is refused again by the group's cycle.
func (b base) releaseGroups(ctx context.Context, nc *v1alpha1.NodeClaim, why string) {
	logger := klog.FromContext(ctx)
	b.releaseRequest(ctx, nc, why)
	pods, err := b.nominatedPods(ctx, nc.Name)
	if err != nil {
		logger.Error(err, "Listing a given-up nodeclaim's pods to release their pod groups")
		return
	}
	seen := map[string]bool{}
	for _, p := range pods {
		g := p.Spec.SchedulingGroup
		if g == nil || g.PodGroupName == nil || seen[p.Namespace+"/"+*g.PodGroupName] {
			continue
		}
		seen[p.Namespace+"/"+*g.PodGroupName] = true
		claims, err := b.groupClaims(ctx, p.Namespace, *g.PodGroupName)
		if err != nil {
			logger.Error(err, "Finding the nodeclaims of a pod group to release", "podGroup", klog.KRef(p.Namespace, *g.PodGroupName))
			continue
		}
		for _, other := range claims {
			if other.UID == nc.UID || other.DeletionTimestamp != nil {
				continue
			}
			if _, ok := other.Annotations[v1alpha1.AnnotationReleasedWith]; ok {
				continue
			}
			note := fmt.Sprintf("released with nodeclaim %s of pod group %s/%s, which %s: the group's pods start together or not at all", nc.Name, p.Namespace, *g.PodGroupName, why)
			logger.Info("Releasing a nodeclaim of a pod group one of whose claims was given up", "nodeClaim", klog.KObj(other), "givenUp", nc.Name, "podGroup", klog.KRef(p.Namespace, *g.PodGroupName), "providerID", other.Status.ProviderID)
			b.release(ctx, other, nc, note)
		}
	}
}

// release marks other to be deleted with given-up nc, and says why on
// it and its pods. Marked, not deleted: the claim's own controller
// deletes it where no launch of it is under way, so that no instance
// launched meanwhile is left without a claim.
func (b base) release(ctx context.Context, other, nc *v1alpha1.NodeClaim, note string) {
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationReleasedWith, nc.Name))
	if err := b.kube.Patch(ctx, other, patch); client.IgnoreNotFound(err) != nil {
		klog.FromContext(ctx).Error(err, "Releasing a nodeclaim given up with another", "nodeClaim", klog.KObj(other))
		return
	}
	b.event(other, corev1.EventTypeWarning, v1alpha1.ReasonGroupReleased, v1alpha1.ActionDelete, note)
	b.podEvents(ctx, other, corev1.EventTypeWarning, v1alpha1.ReasonGroupReleased, v1alpha1.ActionDelete, note)
}

// releaseRequest releases, for a claim given up that was made for a
// ProvisioningRequest, the request's other claims not yet initialized:
// the request is launched whole or not at all
// (best-effort-atomic-scale-up), and VirtualNodes decides it afresh,
// counting the nodes already up as room.
func (b base) releaseRequest(ctx context.Context, nc *v1alpha1.NodeClaim, why string) {
	key, ok := cluster.RequestOf(nc)
	if !ok {
		return
	}
	var claims v1alpha1.NodeClaimList
	if err := b.kube.List(ctx, &claims); err != nil {
		klog.FromContext(ctx).Error(err, "Listing the nodeclaims of a ProvisioningRequest to release", "provisioningRequest", key)
		return
	}
	for i := range claims.Items {
		other := &claims.Items[i]
		if other.UID == nc.UID || other.DeletionTimestamp != nil || other.Annotations[v1alpha1.AnnotationProvisioningRequest] != key.String() {
			continue
		}
		if other.Status.Phase == v1alpha1.NodeClaimInitialized {
			// Its node is up, and may run pods by now (booked room is not
			// fenced): it stays, and the request, decided again, counts
			// it as room.
			continue
		}
		if _, ok := other.Annotations[v1alpha1.AnnotationReleasedWith]; ok {
			continue
		}
		klog.FromContext(ctx).Info("Releasing a nodeclaim of a ProvisioningRequest one of whose claims was given up", "nodeClaim", klog.KObj(other), "givenUp", nc.Name, "provisioningRequest", key, "providerID", other.Status.ProviderID)
		b.release(ctx, other, nc, fmt.Sprintf("released with nodeclaim %s of ProvisioningRequest %s, which %s: the request's capacity is launched whole or not at all", nc.Name, key, why))
	}
}

// deleteReleased deletes a claim released with another of its pods'
// PodGroup (AnnotationReleasedWith), no launch of it being under way.
func (b base) deleteReleased(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	klog.FromContext(ctx).Info("Deleting nodeclaim released with another of its pod group's", "releasedWith", nc.Annotations[v1alpha1.AnnotationReleasedWith], "providerID", nc.Status.ProviderID)
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, v1alpha1.ReasonGroupReleased).Inc()
	return client.IgnoreNotFound(b.kube.Delete(ctx, nc))
}

// groupClaims are the claims the pods of PodGroup namespace/name are
// nominated to: by the claim's name while it has no node, by its node's
// name once the pod was handed to the scheduler.
func (b base) groupClaims(ctx context.Context, namespace, name string) ([]*v1alpha1.NodeClaim, error) {
	var pods corev1.PodList
	if err := b.kube.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	var out []*v1alpha1.NodeClaim
	for i := range pods.Items {
		p := &pods.Items[i]
		g := p.Spec.SchedulingGroup
		to := p.Status.NominatedNodeName
		if g == nil || g.PodGroupName == nil || *g.PodGroupName != name || to == "" || p.Spec.NodeName != "" {
			continue
		}
		var nc v1alpha1.NodeClaim
		err := b.kube.Get(ctx, client.ObjectKey{Name: to}, &nc)
		if err != nil {
			var byNode v1alpha1.NodeClaimList
			if err := b.kube.List(ctx, &byNode, client.MatchingFields{indexClaimNode: to}); err != nil || len(byNode.Items) == 0 {
				continue
			}
			nc = byNode.Items[0]
		}
		if !slices.ContainsFunc(out, func(c *v1alpha1.NodeClaim) bool { return c.UID == nc.UID }) {
			out = append(out, &nc)
		}
	}
	return out, nil
}

// requestWanted reports whether nc was made for a ProvisioningRequest or
// a CapacityBuffer that still wants it. A claim whose request or buffer
// no longer does (deleted, failed, booking expired, not ready) is deleted
// before launch, and done says so, unless pods are nominated to it.
func (b base) requestWanted(ctx context.Context, nc *v1alpha1.NodeClaim, pods int) (wanted, done bool, err error) {
	_, request := cluster.RequestOf(nc)
	_, buffer := cluster.BufferOf(nc)
	if !request && !buffer {
		return false, false, nil
	}
	holds, why, err := cluster.ClaimWanted(ctx, b.kube, nc)
	if err != nil || holds || pods > 0 {
		// Pods the scheduler nominated to it since want it all the same:
		// it launches for them as any claim.
		return holds, false, err
	}
	klog.FromContext(ctx).Info("Deleting nodeclaim its ProvisioningRequest or CapacityBuffer no longer wants", "reason", why)
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NoPods").Inc()
	b.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonDeleted, v1alpha1.ActionNoPods, why+"; not launched")
	return false, true, client.IgnoreNotFound(b.kube.Delete(ctx, nc))
}
