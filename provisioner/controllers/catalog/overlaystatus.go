package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// OverlayStatus writes each NodeOverlay's status from the published
// catalogs: the instance types that carry one of its changes, Ready, and
// ConflictFree.
type OverlayStatus struct {
	client client.Client
}

// NewOverlayStatus returns the NodeOverlay status controller.
func NewOverlayStatus(c client.Client) *OverlayStatus { return &OverlayStatus{client: c} }

// SetupWithManager registers it: every overlay's status is written when
// an overlay or a catalog changes, since one overlay's weight decides
// where another applies.
func (s *OverlayStatus) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1alpha1.NodeOverlayList
		if err := s.client.List(ctx, &list); err != nil {
			klog.FromContext(ctx).Error(err, "Listing NodeOverlays to update their status")
			return nil
		}
		out := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeoverlay.status").
		For(&v1alpha1.NodeOverlay{}).
		Watches(&v1alpha1.NodeOverlay{}, all).
		Watches(&v1alpha1.InstanceTypeCatalog{}, all).
		Complete(s)
}

// Reconcile says where the overlay applies, and whether an overlay of
// its weight conflicts with it.
func (s *OverlayStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var o v1alpha1.NodeOverlay
	if err := s.client.Get(ctx, req.NamespacedName, &o); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var overlays v1alpha1.NodeOverlayList
	if err := s.client.List(ctx, &overlays); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing NodeOverlays: %w", err)
	}
	var cats v1alpha1.InstanceTypeCatalogList
	if err := s.client.List(ctx, &cats); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing InstanceTypeCatalogs: %w", err)
	}
	var pools v1alpha1.NodePoolList
	if err := s.client.List(ctx, &pools); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing NodePools: %w", err)
	}
	w := overlayWhere(o.Name, rankOverlays(overlays.Items), v1alpha1.ByPool(cats.Items), pools.Items)
	before := o.Status.DeepCopy()
	o.Status.InstanceTypeCount = int32(len(w.carrying))
	o.Status.InstanceTypes = w.carrying[:min(len(w.carrying), v1alpha1.MaxOverlayStatusTypes)]
	ready := w.ready(o.Generation)
	if _, err := selectorOf(&o); err != nil {
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonOverlayInvalidRequirements
		ready.Message = fmt.Sprintf("its requirements cannot select anything: %v", err)
	}
	meta.SetStatusCondition(&o.Status.Conditions, ready)
	meta.SetStatusCondition(&o.Status.Conditions, w.conflictFree(o.Generation))
	if equality.Semantic.DeepEqual(before, &o.Status) {
		return reconcile.Result{}, nil
	}
	klog.FromContext(ctx).V(2).Info("NodeOverlay status", "nodeOverlay", o.Name, "instanceTypes", len(w.carrying), "conflicts", len(w.conflicts))
	return reconcile.Result{}, s.client.Status().Update(ctx, &o)
}

// where is one overlay's reach over the published catalogs.
type where struct {
	// carrying are the published types whose figures carry one of its
	// changes (their Overlays name it), sorted and counted once across
	// pools; selected, the types it selects at all.
	carrying  []string
	selected  int
	conflicts []conflict
}

// overlayWhere finds, over every pool's published catalog, the types
// that carry the named overlay's changes, the types it selects, and its
// conflicts, as planFor decides them for the catalog controller. An
// overlay changes no label, so the published types match as the
// provider's did.
func overlayWhere(name string, ranked []overlay, byPool map[string]*v1alpha1.InstanceTypeCatalog, pools []v1alpha1.NodePool) where {
	var w where
	carrying, selected := map[string]bool{}, map[string]bool{}
	for i := range pools {
		cat := byPool[pools[i].Name]
		if cat == nil {
			continue
		}
		t := nodeshape.ForPool(&pools[i])
		for j := range cat.Spec.InstanceTypes {
			it := &cat.Spec.InstanceTypes[j]
			if slices.Contains(it.Overlays, name) {
				carrying[it.Name] = true
			}
			p := planFor(t, it, ranked)
			if p.selected[name] {
				selected[it.Name] = true
			}
			for _, c := range p.conflicts {
				if (c.winner == name || c.loser == name) && !slices.Contains(w.conflicts, c) {
					w.conflicts = append(w.conflicts, c)
				}
			}
		}
	}
	for n := range carrying {
		w.carrying = append(w.carrying, n)
	}
	slices.Sort(w.carrying)
	w.selected = len(selected)
	return w
}

// ready is the overlay's Ready condition: True only while a published
// type carries one of its changes.
func (w where) ready(generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case len(w.carrying) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonOverlayApplied
		c.Message = fmt.Sprintf("%d published instance types carry its changes: %s", len(w.carrying), listSome(w.carrying, 5))
	case w.selected > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonOverlayOverridden
		c.Message = fmt.Sprintf("it selects %d published instance types, but on each an overlay of higher weight, or of the same weight and a name sorting first, sets every field it sets", w.selected)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonOverlayNoInstanceType
		c.Message = "its requirements select no offering of any pool's published catalog"
	}
	return c
}

// conflictFree is the overlay's ConflictFree condition.
func (w where) conflictFree(generation int64) metav1.Condition {
	if len(w.conflicts) == 0 {
		return metav1.Condition{Type: v1alpha1.ConditionConflictFree, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonOverlayNoConflict,
			Message: "no overlay of the same weight sets a field it sets on a type both select", ObservedGeneration: generation}
	}
	slices.SortFunc(w.conflicts, func(a, b conflict) int { return strings.Compare(a.String(), b.String()) })
	msg := w.conflicts[0].String()
	if n := len(w.conflicts) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more conflicts)", n)
	}
	return metav1.Condition{Type: v1alpha1.ConditionConflictFree, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOverlayConflict,
		Message: msg, ObservedGeneration: generation}
}

// listSome is the first n of names, then how many more.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
