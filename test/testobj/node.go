package testobj

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeWrapper builds a Node.
type NodeWrapper struct{ n corev1.Node }

// Node starts a node named name.
func Node(name string) *NodeWrapper {
	return &NodeWrapper{n: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Obj returns the node built so far.
func (w *NodeWrapper) Obj() *corev1.Node { return w.n.DeepCopy() }

// Label adds a label.
func (w *NodeWrapper) Label(key, value string) *NodeWrapper {
	w.n.Labels = with(w.n.Labels, key, value)
	return w
}

// Annotation adds an annotation.
func (w *NodeWrapper) Annotation(key, value string) *NodeWrapper {
	w.n.Annotations = with(w.n.Annotations, key, value)
	return w
}

// Finalizer adds a finalizer.
func (w *NodeWrapper) Finalizer(f string) *NodeWrapper {
	w.n.Finalizers = append(w.n.Finalizers, f)
	return w
}

// Created sets the creation timestamp.
func (w *NodeWrapper) Created(t time.Time) *NodeWrapper {
	w.n.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Capacity sets capacity and allocatable both, as Resources pairs.
func (w *NodeWrapper) Capacity(pairs ...string) *NodeWrapper {
	w.n.Status.Capacity, w.n.Status.Allocatable = Resources(pairs...), Resources(pairs...)
	return w
}

// Allocatable sets allocatable alone, as Resources pairs.
func (w *NodeWrapper) Allocatable(pairs ...string) *NodeWrapper {
	w.n.Status.Allocatable = Resources(pairs...)
	return w
}

// Taints adds taints.
func (w *NodeWrapper) Taints(taints ...corev1.Taint) *NodeWrapper {
	w.n.Spec.Taints = append(w.n.Spec.Taints, taints...)
	return w
}

// Ready adds the condition Ready True.
func (w *NodeWrapper) Ready() *NodeWrapper {
	return w.Condition(corev1.NodeReady, corev1.ConditionTrue)
}

// Condition adds a condition.
func (w *NodeWrapper) Condition(t corev1.NodeConditionType, status corev1.ConditionStatus) *NodeWrapper {
	w.n.Status.Conditions = append(w.n.Status.Conditions, corev1.NodeCondition{Type: t, Status: status})
	return w
}

// ProviderID sets spec.providerID.
func (w *NodeWrapper) ProviderID(id string) *NodeWrapper { w.n.Spec.ProviderID = id; return w }
