package nodeshape

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Fits reports whether a node with allocatable alloc can hold the
// requested resources of podCount pods: the test NodeResourcesFit applies
// (every requested resource within allocatable, and the pod count within
// allocatable pods).
func Fits(alloc, req *framework.Resource, podCount int) bool {
	return FitsBeside(alloc, nil, req, podCount)
}

// nothing is no request; FitsBeside reads it, never writes it.
var nothing framework.Resource

// FitsBeside is Fits for req added to used (what the node's pods already
// request), podCount pods in all, without summing the two: packing asks it
// once per pod and node tried.
func FitsBeside(alloc, used, req *framework.Resource, podCount int) bool {
	if used == nil {
		used = &nothing
	}
	if int64(podCount) > int64(alloc.AllowedPodNumber) || used.MilliCPU+req.MilliCPU > alloc.MilliCPU || used.Memory+req.Memory > alloc.Memory ||
		used.EphemeralStorage+req.EphemeralStorage > alloc.EphemeralStorage {
		return false
	}
	for name, q := range used.ScalarResources {
		if n := q + req.ScalarResources[name]; n > 0 && n > alloc.ScalarResources[name] {
			return false
		}
	}
	for name, q := range req.ScalarResources {
		if n := used.ScalarResources[name] + q; n > 0 && n > alloc.ScalarResources[name] {
			return false
		}
	}
	return true
}

// Holds reports whether node's allocatable holds pods, as Fits counts
// them: their requests together (Requested) and their number.
func Holds(node *corev1.Node, pods []*corev1.Pod) bool {
	return Fits(framework.NewResource(node.Status.Allocatable), Requested(pods), len(pods))
}

// Requested is what pods request together, as the scheduler counts it
// (NodeResourcesFit: each pod's requests with its overhead, the larger
// of init and regular containers).
func Requested(pods []*corev1.Pod) *framework.Resource {
	return framework.NewNodeInfo(pods...).Requested
}

// RequestList is what a claim's node must hold for pods: Requested as a
// ResourceList, with the pod count as "pods". A claim's
// spec.resources.requests is this.
func RequestList(pods []*corev1.Pod) corev1.ResourceList {
	return ResourceList(Requested(pods), len(pods))
}

// ResourceList is r, and podCount as "pods", as a ResourceList.
func ResourceList(r *framework.Resource, podCount int) corev1.ResourceList {
	out := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(r.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(r.Memory, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(podCount), resource.DecimalSI),
	}
	if r.EphemeralStorage > 0 {
		out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(r.EphemeralStorage, resource.BinarySI)
	}
	for name, q := range r.ScalarResources {
		out[name] = *resource.NewQuantity(q, resource.DecimalSI)
	}
	return out
}
