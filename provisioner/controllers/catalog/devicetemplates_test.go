package catalog

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/test/testobj"
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

// gpuSliceOn is the slice of driver gpu.nvidia.com a node publishes:
// devices with a productName, a memory capacity and a per-node uuid, in
// a pool of count slices at generation.
func gpuSliceOn(node string, generation, count int64, devices ...string) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", node, generation)}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: count}}}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d,
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"productName": {StringValue: ptr.To("H100")}, "uuid": {StringValue: ptr.To(node + d)}},
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}})
	}
	return s
}

// TestARunningNodeCorrectsItsTypesDeviceTemplate: p5.2xlarge's template
// says two GPUs, and its node n1 publishes one (a newer generation of its
// pool than the one with two): the pool's catalog then says one GPU, with
// the template's attribute and capacity and not the node's uuid, and the
// pool gets one DevicesCorrected Event however often it is published.
// n2, of the same type, has not published its whole pool and corrects
// nothing; p5.4xlarge's node publishes what its template says, so its
// template stands; a type with no node keeps its template.
func TestARunningNodeCorrectsItsTypesDeviceTemplate(t *testing.T) {
	tmpl := func(devices ...string) []v1alpha1.ResourceSliceTemplate {
		s := gpuSliceOn("x", 1, 1, devices...)
		for i := range s.Spec.Devices {
			delete(s.Spec.Devices[i].Attributes, "uuid")
		}
		return []v1alpha1.ResourceSliceTemplate{{Driver: "gpu.nvidia.com", Devices: s.Spec.Devices}}
	}
	p5 := func(name string, devices ...string) v1alpha1.InstanceType {
		return v1alpha1.InstanceType{Name: name, Labels: map[string]string{v1alpha1.LabelInstanceFamily: "p5"}, ResourceSlices: tmpl(devices...),
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}, Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
			Offerings: []v1alpha1.Offering{{Zone: "zone-a", CapacityType: "on-demand", Price: "1", Available: true}}}
	}
	node := func(name, instanceType string) *corev1.Node {
		return testobj.Node(name).Label(v1alpha1.LabelNodePool, "gpus").Label(corev1.LabelInstanceTypeStable, instanceType).Obj()
	}
	pool := nodePool("gpus")
	kube, _ := newKube(t, pool, node("n1", "p5.2xlarge"), node("n2", "p5.2xlarge"), node("n3", "p5.4xlarge"),
		gpuSliceOn("n1", 1, 1, "gpu-0", "gpu-1"), gpuSliceOn("n1", 2, 1, "gpu-0"),
		gpuSliceOn("n2", 1, 2),
		gpuSliceOn("n3", 1, 1, "gpu-1", "gpu-0"))
	rec := events.NewFakeRecorder(10)
	c := NewController(kube, staticSource{p5("p5.2xlarge", "gpu-0", "gpu-1"), p5("p5.4xlarge", "gpu-0", "gpu-1"), p5("p5.8xlarge", "gpu-0", "gpu-1")},
		cloudprovider.NewUnavailableOfferings(time.Minute), rec)
	reconcileAll(t, c, pool, pool)
	got, err := cluster.InstanceTypesOf(context.Background(), kube, "gpus")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]v1alpha1.ResourceSliceTemplate{"p5.2xlarge": tmpl("gpu-0"), "p5.4xlarge": tmpl("gpu-0", "gpu-1"), "p5.8xlarge": tmpl("gpu-0", "gpu-1")}
	for _, it := range got {
		if !equality.Semantic.DeepEqual(it.ResourceSlices, want[it.Name]) {
			t.Errorf("%s publishes %+v, want %+v", it.Name, it.ResourceSlices, want[it.Name])
		}
	}
	close(rec.Events)
	var said []string
	for e := range rec.Events {
		said = append(said, e)
	}
	if len(said) != 1 || !strings.Contains(said[0], "DevicesCorrected node n1 of type p5.2xlarge publishes 1 device (gpu-0) of DRA driver gpu.nvidia.com where the template said 2 devices (gpu-0, gpu-1)") {
		t.Errorf("events %q, want one DevicesCorrected naming n1, p5.2xlarge and both device lists", said)
	}
}
