package nodeshape

import "k8s.io/kubernetes/pkg/scheduler/framework"

// Fits reports whether a node with allocatable alloc can hold the
// requested resources of podCount pods: the test NodeResourcesFit applies
// (every requested resource within allocatable, and the pod count within
// allocatable pods).
func Fits(alloc, req *framework.Resource, podCount int) bool {
	if req.MilliCPU > alloc.MilliCPU || req.Memory > alloc.Memory || req.EphemeralStorage > alloc.EphemeralStorage || int64(podCount) > int64(alloc.AllowedPodNumber) {
		return false
	}
	for name, q := range req.ScalarResources {
		if q > 0 && q > alloc.ScalarResources[name] {
			return false
		}
	}
	return true
}
