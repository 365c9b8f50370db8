package eksnode

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// DriverNVIDIAGPU is the NVIDIA GPU DRA driver's name
// (kubernetes-sigs/dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu).
const DriverNVIDIAGPU = "gpu.nvidia.com"

// NVIDIAGPU is what the NVIDIA GPU DRA driver publishes of one GPU
// model, from NVML on the node: its product name, architecture, CUDA
// compute capability, and memory in MiB (less than EC2 describes).
type NVIDIAGPU struct {
	ProductName, Architecture, ComputeCapability string
	MemoryMiB                                    int64
}

// NVIDIAGPUs are the models the sandbox's NVIDIA DRA driver knows, by the
// name EC2 gives them (lower case): the figures the driver published on
// running EC2 nodes of those types, as the Karpenter AWS provider's DRA
// metadata gathers them (pkg/providers/instancetype/drametadata). A node
// with another model publishes no slice here, though a real driver
// would: the fake does not invent figures. A test holds this table equal
// to the aws provider's, whose templates must be what the node publishes.
var NVIDIAGPUs = map[string]NVIDIAGPU{
	"t4":   {"Tesla T4", "Turing", "7.5.0", 15360},
	"a10g": {"NVIDIA A10G", "Ampere", "8.6.0", 23028},
	"a100": {"NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 40320},
	"l4":   {"NVIDIA L4", "Ada Lovelace", "8.9.0", 23034},
	"h100": {"NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 81152},
}

// runsNVIDIADRA reports whether the node runs the NVIDIA GPU DRA driver:
// its kubelet plugin's DaemonSet is scheduled on the nodes labelled
// dra.nodeforge.dev/gpu.nvidia.com=true (docs/api.md tells users to
// select them so), and the device plugin's is kept off them.
func runsNVIDIADRA(labels map[string]string) bool {
	return labels[v1alpha1.LabelDRADriver(DriverNVIDIAGPU)] == "true"
}

// nvidiaDevices are the devices the NVIDIA GPU DRA driver publishes on a
// node of the type, as its kubelet plugin does (deviceinfo.go): gpu-0 …
// gpu-<n-1>, each with type "gpu", productName, brand "Nvidia",
// architecture, cudaComputeCapability, the driver's versions, and
// capacity memory; uuid and the PCI attributes are the node's own
// (Slices adds them). None for a type whose NVIDIA GPUs are of a model
// the table does not know, or of several models.
func nvidiaDevices(it ec2fake.InstanceType) []resourcev1.Device {
	var gpu NVIDIAGPU
	var count int32
	models := 0
	for _, g := range it.GPUs {
		if g.Manufacturer != "NVIDIA" {
			continue
		}
		models++
		var ok bool
		if gpu, ok = NVIDIAGPUs[strings.ToLower(g.Name)]; !ok {
			return nil
		}
		count += g.Count
	}
	if models != 1 {
		return nil
	}
	var out []resourcev1.Device
	for i := range count {
		out = append(out, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":                  {StringValue: ptr.To("gpu")},
				"productName":           {StringValue: ptr.To(gpu.ProductName)},
				"brand":                 {StringValue: ptr.To("Nvidia")},
				"architecture":          {StringValue: ptr.To(gpu.Architecture)},
				"cudaComputeCapability": {VersionValue: ptr.To(gpu.ComputeCapability)},
				"driverVersion":         {VersionValue: ptr.To("580.95.5")},
				"cudaDriverVersion":     {VersionValue: ptr.To("13.0.0")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(gpu.MemoryMiB<<20, resource.BinarySI)},
			},
		})
	}
	return out
}

// Slices are the ResourceSlices the node's DRA drivers publish once it
// runs, as their kubelet plugins publish them: one a driver, named after
// the node and the driver, with spec.nodeName the node, in a pool named
// after the node (generation 1, one slice), owned by the node so that
// they go with it; each GPU with the attributes that are the node's own
// (uuid, PCI bus ID and PCIe root).
func (n Node) Slices(node *corev1.Node) []resourcev1.ResourceSlice {
	var out []resourcev1.ResourceSlice
	for _, driver := range slices.Sorted(maps.Keys(n.DRADevices)) {
		s := resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:            node.Name + "-" + strings.ReplaceAll(driver, ".", "-"),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: driver, NodeName: ptr.To(node.Name),
				Pool: resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			},
		}
		for i, d := range n.DRADevices[driver] {
			d = *d.DeepCopy()
			if driver == DriverNVIDIAGPU {
				h := fnv.New64a()
				fmt.Fprintf(h, "%s/%d", node.Name, i)
				sum := h.Sum64()
				d.Attributes["uuid"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", sum>>32, sum>>16&0xffff, sum&0xffff, i, sum&0xffffffffffff))}
				d.Attributes["resource.kubernetes.io/pciBusID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x10+i))}
				d.Attributes["resource.kubernetes.io/pcieRoot"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", 0x10+i))}
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
		out = append(out, s)
	}
	return out
}
