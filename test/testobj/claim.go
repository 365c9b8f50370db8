package testobj

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ClaimWrapper builds a NodeClaim.
type ClaimWrapper struct{ c v1alpha1.NodeClaim }

// Claim starts a NodeClaim named name.
func Claim(name string) *ClaimWrapper {
	return &ClaimWrapper{c: v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Obj returns the claim built so far.
func (w *ClaimWrapper) Obj() *v1alpha1.NodeClaim { return w.c.DeepCopy() }

// Name renames the claim.
func (w *ClaimWrapper) Name(name string) *ClaimWrapper { w.c.Name = name; return w }

// UID sets the claim's UID.
func (w *ClaimWrapper) UID(uid string) *ClaimWrapper { w.c.UID = types.UID(uid); return w }

// Label adds a label to the claim itself.
func (w *ClaimWrapper) Label(key, value string) *ClaimWrapper {
	w.c.Labels = with(w.c.Labels, key, value)
	return w
}

// Annotation adds an annotation to the claim itself.
func (w *ClaimWrapper) Annotation(key, value string) *ClaimWrapper {
	w.c.Annotations = with(w.c.Annotations, key, value)
	return w
}

// Finalizer adds a finalizer.
func (w *ClaimWrapper) Finalizer(f string) *ClaimWrapper {
	w.c.Finalizers = append(w.c.Finalizers, f)
	return w
}

// Created sets the creation timestamp.
func (w *ClaimWrapper) Created(t time.Time) *ClaimWrapper {
	w.c.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Deleting marks the claim deleted at t, held by the termination
// finalizer (a fake client refuses a deleted object with no finalizer).
func (w *ClaimWrapper) Deleting(t time.Time) *ClaimWrapper {
	w.c.DeletionTimestamp = &metav1.Time{Time: t}
	if len(w.c.Finalizers) == 0 {
		w.c.Finalizers = []string{v1alpha1.FinalizerTermination}
	}
	return w
}

// Pool sets spec.nodePool.
func (w *ClaimWrapper) Pool(name string) *ClaimWrapper { w.c.Spec.NodePool = name; return w }

// Class sets spec.nodeClassRef to a Nodeforge node class.
func (w *ClaimWrapper) Class(kind, name string) *ClaimWrapper {
	w.c.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: kind, Name: name}
	return w
}

// Require adds a requirement.
func (w *ClaimWrapper) Require(key string, op corev1.NodeSelectorOperator, values ...string) *ClaimWrapper {
	w.c.Spec.Requirements = append(w.c.Spec.Requirements, v1alpha1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values})
	return w
}

// MinValues sets minValues on the requirement of key.
func (w *ClaimWrapper) MinValues(key string, n int32) *ClaimWrapper {
	for i := range w.c.Spec.Requirements {
		if w.c.Spec.Requirements[i].Key == key {
			w.c.Spec.Requirements[i].MinValues = ptr.To(n)
		}
	}
	return w
}

// NodeLabel adds a label the claim's node gets (spec.labels).
func (w *ClaimWrapper) NodeLabel(key, value string) *ClaimWrapper {
	w.c.Spec.Labels = with(w.c.Spec.Labels, key, value)
	return w
}

// StartupTaint adds a startup taint the claim's node gets.
func (w *ClaimWrapper) StartupTaint(key string, effect corev1.TaintEffect) *ClaimWrapper {
	w.c.Spec.StartupTaints = append(w.c.Spec.StartupTaints, corev1.Taint{Key: key, Effect: effect})
	return w
}

// Requests sets spec.resources.requests, as Resources pairs.
func (w *ClaimWrapper) Requests(pairs ...string) *ClaimWrapper {
	w.c.Spec.Resources.Requests = Resources(pairs...)
	return w
}

// NominatedPods sets spec.nominatedPods.
func (w *ClaimWrapper) NominatedPods(n int32) *ClaimWrapper { w.c.Spec.NominatedPods = n; return w }

// ExpireAfter sets spec.expireAfter.
func (w *ClaimWrapper) ExpireAfter(d v1alpha1.NillableDuration) *ClaimWrapper {
	w.c.Spec.ExpireAfter = d
	return w
}

// Phase sets status.phase.
func (w *ClaimWrapper) Phase(p v1alpha1.NodeClaimPhase) *ClaimWrapper { w.c.Status.Phase = p; return w }

// NodeName sets status.nodeName.
func (w *ClaimWrapper) NodeName(name string) *ClaimWrapper { w.c.Status.NodeName = name; return w }

// ProviderID sets status.providerID.
func (w *ClaimWrapper) ProviderID(id string) *ClaimWrapper { w.c.Status.ProviderID = id; return w }

// Launched sets what was launched: status.instanceType, zone and
// capacityType.
func (w *ClaimWrapper) Launched(instanceType, zone, capacityType string) *ClaimWrapper {
	w.c.Status.InstanceType, w.c.Status.Zone, w.c.Status.CapacityType = instanceType, zone, capacityType
	return w
}

// Zone sets status.zone alone.
func (w *ClaimWrapper) Zone(zone string) *ClaimWrapper { w.c.Status.Zone = zone; return w }

// Capacity sets status.capacity and allocatable both, as Resources pairs.
func (w *ClaimWrapper) Capacity(pairs ...string) *ClaimWrapper {
	w.c.Status.Capacity, w.c.Status.Allocatable = Resources(pairs...), Resources(pairs...)
	return w
}

// Allocatable sets status.allocatable alone, as Resources pairs.
func (w *ClaimWrapper) Allocatable(pairs ...string) *ClaimWrapper {
	w.c.Status.Allocatable = Resources(pairs...)
	return w
}

// Condition sets a status condition, its transition now.
func (w *ClaimWrapper) Condition(t string, status metav1.ConditionStatus, reason string) *ClaimWrapper {
	return w.ConditionAt(t, status, reason, time.Time{})
}

// ConditionAt sets a status condition that changed at at (now if zero).
func (w *ClaimWrapper) ConditionAt(t string, status metav1.ConditionStatus, reason string, at time.Time) *ClaimWrapper {
	meta.SetStatusCondition(&w.c.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)})
	return w
}
