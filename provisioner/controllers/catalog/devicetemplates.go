package catalog

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// selects says whether a DeviceTemplate's requirements hold for an
// instance type's labels (its name as node.kubernetes.io/instance-type).
func selects(t *v1alpha1.DeviceTemplate, it *v1alpha1.InstanceType) (bool, error) {
	sel, err := nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: t.Spec.Requirements}}})
	if err != nil {
		return false, err
	}
	labels := map[string]string{corev1.LabelInstanceTypeStable: it.Name}
	for k, v := range it.Labels {
		labels[k] = v
	}
	return sel.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}), nil
}

// withTemplates returns types with the slices of the templates that
// select each added, a template's slice replacing the provider's (or an
// earlier template's, by name) for the same driver. Types no template
// selects are returned as they are; the others are copies.
func withTemplates(types []v1alpha1.InstanceType, templates []v1alpha1.DeviceTemplate) []v1alpha1.InstanceType {
	if len(templates) == 0 {
		return types
	}
	templates = slices.SortedFunc(slices.Values(templates), func(a, b v1alpha1.DeviceTemplate) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]v1alpha1.InstanceType, len(types))
	for i := range types {
		out[i] = types[i]
		for j := range templates {
			ok, err := selects(&templates[j], &types[i])
			if err != nil || !ok {
				continue
			}
			merged := slices.Clone(out[i].ResourceSlices)
			for _, s := range templates[j].Spec.ResourceSlices {
				merged = slices.DeleteFunc(merged, func(have v1alpha1.ResourceSliceTemplate) bool { return have.Driver == s.Driver })
				merged = append(merged, *s.DeepCopy())
			}
			slices.SortFunc(merged, func(a, b v1alpha1.ResourceSliceTemplate) int { return cmp.Compare(a.Driver, b.Driver) })
			out[i].ResourceSlices = merged
		}
	}
	return out
}

// TemplateStatus writes each DeviceTemplate's status from the published
// catalogs: how many instance types carry its slices, and Ready.
type TemplateStatus struct {
	client client.Client
}

// NewTemplateStatus returns the DeviceTemplate status controller.
func NewTemplateStatus(c client.Client) *TemplateStatus { return &TemplateStatus{client: c} }

// SetupWithManager registers it: a template's status is written when it
// changes and whenever a catalog is written.
func (s *TemplateStatus) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("devicetemplate.status").
		For(&v1alpha1.DeviceTemplate{}).
		Watches(&v1alpha1.InstanceTypeCatalog{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
			var list v1alpha1.DeviceTemplateList
			if err := s.client.List(ctx, &list); err != nil {
				return nil
			}
			out := make([]reconcile.Request, len(list.Items))
			for i := range list.Items {
				out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
			}
			return out
		})).
		Complete(s)
}

// Reconcile counts the published instance types that carry the
// template's slices, and says Ready, or why not.
func (s *TemplateStatus) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var t v1alpha1.DeviceTemplate
	if err := s.client.Get(ctx, req.NamespacedName, &t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var cats v1alpha1.InstanceTypeCatalogList
	if err := s.client.List(ctx, &cats); err != nil {
		return reconcile.Result{}, err
	}
	carrying := map[string]bool{}
	for _, cat := range cats.Items {
		for i := range cat.Spec.InstanceTypes {
			it := &cat.Spec.InstanceTypes[i]
			if ok, err := selects(&t, it); err == nil && ok && carries(it, &t) {
				carrying[it.Name] = true
			}
		}
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Published",
		Message: fmt.Sprintf("%d published instance types carry its slices", len(carrying)), ObservedGeneration: t.Generation}
	if len(carrying) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, "NoInstanceType"
		cond.Message = "no published instance type carries its slices: no pool's catalog has a type its requirements select, or another template of the same driver, earlier by name, is applied to them"
	}
	before := t.Status.DeepCopy()
	t.Status.InstanceTypes = int32(len(carrying))
	meta.SetStatusCondition(&t.Status.Conditions, cond)
	if equality.Semantic.DeepEqual(before, &t.Status) {
		return reconcile.Result{}, nil
	}
	klog.FromContext(ctx).V(2).Info("DeviceTemplate status", "deviceTemplate", t.Name, "instanceTypes", len(carrying), "ready", cond.Status)
	return reconcile.Result{}, s.client.Status().Update(ctx, &t)
}

// carries says whether it has each of the template's slices as is.
func carries(it *v1alpha1.InstanceType, t *v1alpha1.DeviceTemplate) bool {
	for _, want := range t.Spec.ResourceSlices {
		if !slices.ContainsFunc(it.ResourceSlices, func(have v1alpha1.ResourceSliceTemplate) bool {
			return equality.Semantic.DeepEqual(have, want)
		}) {
			return false
		}
	}
	return true
}
