package catalog

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

func sliceOf(driver string, devices ...string) v1alpha1.ResourceSliceTemplate {
	t := v1alpha1.ResourceSliceTemplate{Driver: driver}
	for _, d := range devices {
		t.Devices = append(t.Devices, resourcev1.Device{Name: d})
	}
	return t
}

func template(name string, values []string, slices ...v1alpha1.ResourceSliceTemplate) v1alpha1.DeviceTemplate {
	return v1alpha1.DeviceTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.DeviceTemplateSpec{
		Requirements:   []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: values}},
		ResourceSlices: slices,
	}}
}

// TestTemplatesAddSlicesToTheTypesTheySelect: a template's slices go on
// the types whose labels its requirements select, and on no other; a
// template's slice replaces the provider's for the same driver and keeps
// the provider's of other drivers; of two templates of one driver on a
// type, the later by name wins; the types given are not changed.
func TestTemplatesAddSlicesToTheTypesTheySelect(t *testing.T) {
	types := []v1alpha1.InstanceType{
		{Name: "c7.large", Labels: map[string]string{v1alpha1.LabelInstanceFamily: "c7"}},
		{Name: "p5.2xlarge", Labels: map[string]string{v1alpha1.LabelInstanceFamily: "p5"}, ResourceSlices: []v1alpha1.ResourceSliceTemplate{sliceOf("gpu.nvidia.com", "gpu-0")}},
		{Name: "m7.large", Labels: map[string]string{v1alpha1.LabelInstanceFamily: "m7"}},
	}
	got := withTemplates(types, []v1alpha1.DeviceTemplate{
		template("b-fpga", []string{"c7", "p5"}, sliceOf("fpga.example.com", "fpga-0", "fpga-1")),
		template("a-fpga", []string{"c7"}, sliceOf("fpga.example.com", "fpga-0")),
		template("gpu", []string{"p5"}, sliceOf("gpu.nvidia.com", "gpu-0", "gpu-1")),
	})
	drivers := func(it v1alpha1.InstanceType) map[string]int {
		out := map[string]int{}
		for _, s := range it.ResourceSlices {
			out[s.Driver] = len(s.Devices)
		}
		return out
	}
	for i, want := range []map[string]int{
		{"fpga.example.com": 2},                      // b-fpga after a-fpga
		{"fpga.example.com": 2, "gpu.nvidia.com": 2}, // gpu replaces the provider's
		{},
	} {
		if d := drivers(got[i]); len(d) != len(want) || func() bool {
			for k, v := range want {
				if d[k] != v {
					return true
				}
			}
			return false
		}() {
			t.Errorf("%s: slices %v, want %v", got[i].Name, d, want)
		}
	}
	if len(types[0].ResourceSlices) != 0 || len(types[1].ResourceSlices[0].Devices) != 1 {
		t.Errorf("the provider's types were changed: %+v", types)
	}
}
