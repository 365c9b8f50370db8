package nodeshape

import (
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ResourceSlices are the slices the DRA drivers of a node named node
// publish, from its instance type's templates: one a driver, on the node
// (spec.nodeName), in a pool named after the node, generation 1, one
// slice, as the NVIDIA GPU driver and DRANET name theirs. A virtual node
// carries them, so that the scheduler's DynamicResources plugin
// allocates on it as on the node it becomes.
func ResourceSlices(node string, templates []v1alpha1.ResourceSliceTemplate) []*resourcev1.ResourceSlice {
	out := make([]*resourcev1.ResourceSlice, 0, len(templates))
	for _, t := range templates {
		out = append(out, &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + strings.ReplaceAll(t.Driver, ".", "-")},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   t.Driver,
				NodeName: ptr.To(node),
				Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				Devices:  t.Devices,
			},
		})
	}
	return out
}

// SameDevices says whether two instance types' nodes publish the same
// devices: a claim whose pods plan on devices keeps only types that
// do, so that what was planned holds on whichever one launches.
func SameDevices(a, b []v1alpha1.ResourceSliceTemplate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Driver != b[i].Driver || len(a[i].Devices) != len(b[i].Devices) {
			return false
		}
		for j := range a[i].Devices {
			if !equality.Semantic.DeepEqual(a[i].Devices[j], b[i].Devices[j]) {
				return false
			}
		}
	}
	return true
}
