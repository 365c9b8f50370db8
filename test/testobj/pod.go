package testobj

import (
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// PodWrapper builds a Pod.
type PodWrapper struct{ p corev1.Pod }

// Pod starts a pod named name in namespace default.
func Pod(name string) *PodWrapper {
	return &PodWrapper{p: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault}}}
}

// Obj returns the pod built so far.
func (w *PodWrapper) Obj() *corev1.Pod { return w.p.DeepCopy() }

// Namespace sets the pod's namespace.
func (w *PodWrapper) Namespace(ns string) *PodWrapper { w.p.Namespace = ns; return w }

// UID sets the pod's UID.
func (w *PodWrapper) UID(uid string) *PodWrapper { w.p.UID = types.UID(uid); return w }

// Finalizer adds a finalizer.
func (w *PodWrapper) Finalizer(f string) *PodWrapper {
	w.p.Finalizers = append(w.p.Finalizers, f)
	return w
}

// Created sets the creation timestamp.
func (w *PodWrapper) Created(t time.Time) *PodWrapper {
	w.p.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Label adds a label.
func (w *PodWrapper) Label(key, value string) *PodWrapper {
	w.p.Labels = with(w.p.Labels, key, value)
	return w
}

// Annotation adds an annotation.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	w.p.Annotations = with(w.p.Annotations, key, value)
	return w
}

// Req adds requests, as Resources pairs, to the pod's first container
// (named "main" if the pod has none yet).
func (w *PodWrapper) Req(pairs ...string) *PodWrapper {
	c := w.container()
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	maps.Copy(c.Resources.Requests, Resources(pairs...))
	return w
}

// HostPort adds a TCP container port bound to the same port on the host
// to the pod's first container.
func (w *PodWrapper) HostPort(port int32) *PodWrapper {
	c := w.container()
	c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	return w
}

func (w *PodWrapper) container() *corev1.Container {
	if len(w.p.Spec.Containers) == 0 {
		w.p.Spec.Containers = []corev1.Container{{Name: "main"}}
	}
	return &w.p.Spec.Containers[0]
}

// Node binds the pod to a node (spec.nodeName).
func (w *PodWrapper) Node(name string) *PodWrapper { w.p.Spec.NodeName = name; return w }

// Nominated sets status.nominatedNodeName: a claim's name or a node's.
func (w *PodWrapper) Nominated(name string) *PodWrapper {
	w.p.Status.NominatedNodeName = name
	return w
}

// Phase sets status.phase.
func (w *PodWrapper) Phase(phase corev1.PodPhase) *PodWrapper { w.p.Status.Phase = phase; return w }

// OwnedBy adds a controller owner reference to the object of kind named
// name, its UID the name: a Node (a static pod's mirror), a Job, or an
// apps/v1 kind (DaemonSet, ReplicaSet, StatefulSet).
func (w *PodWrapper) OwnedBy(kind, name string) *PodWrapper {
	apiVersion := "apps/v1"
	switch kind {
	case "Node":
		apiVersion = "v1"
	case "Job":
		apiVersion = "batch/v1"
	}
	w.p.OwnerReferences = append(w.p.OwnerReferences, metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(name), Controller: ptr.To(true)})
	return w
}

// Priority sets spec.priority.
func (w *PodWrapper) Priority(p int32) *PodWrapper { w.p.Spec.Priority = ptr.To(p); return w }

// Grace sets spec.terminationGracePeriodSeconds.
func (w *PodWrapper) Grace(seconds int64) *PodWrapper {
	w.p.Spec.TerminationGracePeriodSeconds = ptr.To(seconds)
	return w
}

// with returns m, made if nil, with key set to value.
func with(m map[string]string, key, value string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	return m
}
