package testobj

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// PoolWrapper builds a NodePool.
type PoolWrapper struct{ p v1alpha1.NodePool }

// Pool starts a NodePool named name.
func Pool(name string) *PoolWrapper {
	return &PoolWrapper{p: v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Obj returns the pool built so far.
func (w *PoolWrapper) Obj() *v1alpha1.NodePool { return w.p.DeepCopy() }

// Class sets the template's nodeClassRef to a Nodeforge node class.
func (w *PoolWrapper) Class(kind, name string) *PoolWrapper {
	w.p.Spec.Template.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: kind, Name: name}
	return w
}

// NodeLabel adds a template label, one every node of the pool gets.
func (w *PoolWrapper) NodeLabel(key, value string) *PoolWrapper {
	m := &w.p.Spec.Template.ObjectMeta.Labels
	if *m == nil {
		*m = map[string]v1alpha1.LabelValue{}
	}
	(*m)[key] = v1alpha1.LabelValue(value)
	return w
}

// NodeAnnotation adds a template annotation, one every node of the pool
// gets.
func (w *PoolWrapper) NodeAnnotation(key, value string) *PoolWrapper {
	w.p.Spec.Template.ObjectMeta.Annotations = with(w.p.Spec.Template.ObjectMeta.Annotations, key, value)
	return w
}

// Require adds a template requirement.
func (w *PoolWrapper) Require(key string, op corev1.NodeSelectorOperator, values ...string) *PoolWrapper {
	w.p.Spec.Template.Spec.Requirements = append(w.p.Spec.Template.Spec.Requirements,
		v1alpha1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values})
	return w
}

// Taints adds template taints.
func (w *PoolWrapper) Taints(taints ...v1alpha1.Taint) *PoolWrapper {
	w.p.Spec.Template.Spec.Taints = append(w.p.Spec.Template.Spec.Taints, taints...)
	return w
}

// StartupTaints adds template startup taints.
func (w *PoolWrapper) StartupTaints(taints ...v1alpha1.Taint) *PoolWrapper {
	w.p.Spec.Template.Spec.StartupTaints = append(w.p.Spec.Template.Spec.StartupTaints, taints...)
	return w
}

// Limit sets spec.limits, as Resources pairs.
func (w *PoolWrapper) Limit(pairs ...string) *PoolWrapper {
	w.p.Spec.Limits = v1alpha1.Limits(Resources(pairs...))
	return w
}

// ConsolidationPolicy sets the disruption's consolidationPolicy.
func (w *PoolWrapper) ConsolidationPolicy(p v1alpha1.ConsolidationPolicy) *PoolWrapper {
	w.p.Spec.Disruption.ConsolidationPolicy = p
	return w
}

// ConsolidateAfter sets the disruption's consolidateAfter.
func (w *PoolWrapper) ConsolidateAfter(d v1alpha1.NillableDuration) *PoolWrapper {
	w.p.Spec.Disruption.ConsolidateAfter = d
	return w
}

// Budget adds a disruption budget of nodes for reasons (all when none).
func (w *PoolWrapper) Budget(nodes string, reasons ...v1alpha1.DisruptionReason) *PoolWrapper {
	w.p.Spec.Disruption.Budgets = append(w.p.Spec.Disruption.Budgets, v1alpha1.Budget{Nodes: nodes, Reasons: reasons})
	return w
}

// ExpireAfter sets the template's expireAfter.
func (w *PoolWrapper) ExpireAfter(d v1alpha1.NillableDuration) *PoolWrapper {
	w.p.Spec.Template.Spec.ExpireAfter = d
	return w
}

// Replicas makes the pool fixed-size, of n nodes.
func (w *PoolWrapper) Replicas(n int64) *PoolWrapper {
	w.p.Spec.Replicas = &n
	return w
}
