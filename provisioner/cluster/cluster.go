// Package cluster is what the provisioner's controllers read of the
// cluster in common: the field indexes of the manager's cache, a pool's
// published instance types, and which pods belong to their node (daemonset
// and mirror pods). It sits below the controllers, so that none of them
// imports another.
package cluster

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Field indexes of the manager's cache (see RegisterIndexes).
const (
	// IndexPodNominated: pending pods by status.nominatedNodeName.
	IndexPodNominated = "status.nominatedNodeName"
	// IndexPodNode: pods by spec.nodeName.
	IndexPodNode = "spec.nodeName"
	// IndexSliceNode: ResourceSlices by spec.nodeName (none for a slice
	// not of one node).
	IndexSliceNode = "resourceslice.spec.nodeName"
	// IndexNodeProviderID: nodes by spec.providerID.
	IndexNodeProviderID = "spec.providerID"
	// IndexClaimNode: NodeClaims by status.nodeName.
	IndexClaimNode = "status.nodeName"
	// IndexClaimProviderID: NodeClaims by status.providerID.
	IndexClaimProviderID = "status.providerID"
	// IndexClaimPool: NodeClaims by spec.nodePool.
	IndexClaimPool = "spec.nodePool"
	// IndexClaimClass: NodeClaims by their node class, "kind/name".
	IndexClaimClass = "spec.nodeClassRef"
)

// Index is one field index: the field's name on the kind of obj, and the
// function that reads it.
type Index struct {
	Object  client.Object
	Field   string
	Extract client.IndexerFunc
}

// Indexes are every field index the controllers read through, for a
// manager (RegisterIndexes) or a fake client (WithIndex).
func Indexes() []Index {
	return []Index{
		{&corev1.Pod{}, IndexPodNominated, func(o client.Object) []string {
			if p := o.(*corev1.Pod); p.Status.NominatedNodeName != "" && p.Spec.NodeName == "" {
				return []string{p.Status.NominatedNodeName}
			}
			return nil
		}},
		{&corev1.Pod{}, IndexPodNode, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }},
		{&resourcev1.ResourceSlice{}, IndexSliceNode, func(o client.Object) []string {
			if n := o.(*resourcev1.ResourceSlice).Spec.NodeName; n != nil {
				return []string{*n}
			}
			return nil
		}},
		{&corev1.Node{}, IndexNodeProviderID, func(o client.Object) []string { return []string{o.(*corev1.Node).Spec.ProviderID} }},
		{&v1alpha1.NodeClaim{}, IndexClaimNode, func(o client.Object) []string { return []string{o.(*v1alpha1.NodeClaim).Status.NodeName} }},
		{&v1alpha1.NodeClaim{}, IndexClaimProviderID, func(o client.Object) []string { return []string{o.(*v1alpha1.NodeClaim).Status.ProviderID} }},
		{&v1alpha1.NodeClaim{}, IndexClaimPool, ClaimPool},
		{&v1alpha1.NodeClaim{}, IndexClaimClass, func(o client.Object) []string {
			ref := o.(*v1alpha1.NodeClaim).Spec.NodeClassRef
			return []string{ref.Kind + "/" + ref.Name}
		}},
	}
}

// ClaimPool is IndexClaimPool's function.
func ClaimPool(o client.Object) []string {
	return []string{o.(*v1alpha1.NodeClaim).Spec.NodePool}
}

// registered holds the indexers RegisterIndexes has registered with.
var registered sync.Map

// RegisterIndexes adds Indexes to a manager's cache, once: each controller
// that reads through them calls it in its own set-up, so that any of them
// can run alone, and a second call with the same indexer does nothing.
func RegisterIndexes(ctx context.Context, idx client.FieldIndexer) error {
	if _, done := registered.LoadOrStore(idx, struct{}{}); done {
		return nil
	}
	for _, i := range Indexes() {
		if err := idx.IndexField(ctx, i.Object, i.Field, i.Extract); err != nil {
			registered.Delete(idx)
			return fmt.Errorf("indexing %T by %s: %w", i.Object, i.Field, err)
		}
	}
	return nil
}

// InstanceTypesOf returns the instance types of a pool's published
// catalog, merged from its objects (v1alpha1.ByPool) and sorted by name.
// It returns none when the pool has published none: no catalog yet, or
// nothing the pool may launch (its node class is not ready, say). Objects
// are found by the label nodeforge.dev/nodepool and kept only if their
// spec.nodePool names the pool, whatever their names.
func InstanceTypesOf(ctx context.Context, c client.Reader, pool string) ([]v1alpha1.InstanceType, error) {
	var list v1alpha1.InstanceTypeCatalogList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		return nil, fmt.Errorf("listing catalog of nodepool %s: %w", pool, err)
	}
	if cat := v1alpha1.ByPool(list.Items)[pool]; cat != nil {
		return cat.Spec.InstanceTypes, nil
	}
	return nil, nil
}

// DaemonSets lists every DaemonSet, for simulator.DaemonSetPods.
func DaemonSets(ctx context.Context, c client.Reader) ([]*appsv1.DaemonSet, error) {
	var list appsv1.DaemonSetList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	out := make([]*appsv1.DaemonSet, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// OwnedByDaemonSet: a daemonset pod neither keeps a node nor is drained
// from it; its daemonset runs it wherever there is a node.
func OwnedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// IsMirror: a static pod's mirror is the kubelet's; it goes with its node
// and cannot be evicted.
func IsMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// ClaimsWhere returns a request for each NodeClaim whose indexed field
// equals value and that keep keeps (nil keeps all), none for an empty
// value or a failed List. A controller passes keep to leave out the
// claims that are another controller's, so that a frequent event (a pod's)
// does not queue a claim it would only read and drop.
func ClaimsWhere(ctx context.Context, c client.Reader, index, value string, keep func(*v1alpha1.NodeClaim) bool) []reconcile.Request {
	if value == "" {
		return nil
	}
	var claims v1alpha1.NodeClaimList
	if err := c.List(ctx, &claims, client.MatchingFields{index: value}); err != nil {
		klog.FromContext(ctx).Error(err, "Listing nodeclaims to reconcile", "index", index, "value", value)
		return nil
	}
	out := make([]reconcile.Request, 0, len(claims.Items))
	for i := range claims.Items {
		if keep == nil || keep(&claims.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: claims.Items[i].Name}})
		}
	}
	return out
}

// ClaimOfNode maps a Node to its claim, by provider ID, if keep keeps it
// (nil keeps all).
func ClaimOfNode(c client.Reader, keep func(*v1alpha1.NodeClaim) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return ClaimsWhere(ctx, c, IndexClaimProviderID, o.(*corev1.Node).Spec.ProviderID, keep)
	}
}

// Disrupted says whether a claim is disruption's to judge: Initialized
// or Disrupting, and not being deleted. Every other claim is the
// NodeClaim lifecycle controller's.
func Disrupted(nc *v1alpha1.NodeClaim) bool {
	return nc.DeletionTimestamp.IsZero() &&
		(nc.Status.Phase == v1alpha1.NodeClaimInitialized || nc.Status.Phase == v1alpha1.NodeClaimDisrupting)
}

// HashChanged lets through creations, deletions, and updates that change
// what hash hashes.
func HashChanged(hash func(client.Object) (string, error)) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool {
		before, err1 := hash(e.ObjectOld)
		after, err2 := hash(e.ObjectNew)
		return err1 != nil || err2 != nil || before != after
	}}
}
