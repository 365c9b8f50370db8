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
			// Marked, not deleted: the claim's own controller deletes it
			// where no launch of it is under way, so that no instance
			// launched meanwhile is left without a claim.
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationReleasedWith, nc.Name))
			if err := b.kube.Patch(ctx, other, patch); client.IgnoreNotFound(err) != nil {
				logger.Error(err, "Releasing a nodeclaim of a pod group", "nodeClaim", klog.KObj(other))
				continue
			}
			b.event(other, corev1.EventTypeWarning, v1alpha1.ReasonGroupReleased, v1alpha1.ActionDelete, note)
			b.podEvents(ctx, other, corev1.EventTypeWarning, v1alpha1.ReasonGroupReleased, v1alpha1.ActionDelete, note)
		}
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
