package cloudprovider

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// DriverNVIDIAGPU is the NVIDIA GPU DRA driver's name
// (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin).
const DriverNVIDIAGPU = "gpu.nvidia.com"

// NVIDIAGPU is what the NVIDIA GPU DRA driver says of one GPU model, as
// its device attributes and capacity carry it on a running node:
// productName is NVML's name of the model, architecture its generation,
// computeCapability its CUDA compute capability, and MemoryMiB the memory
// NVML reports, which is less than the figure EC2 describes (a T4 has
// 16,384 MiB by DescribeInstanceTypes, 15,360 by NVML).
type NVIDIAGPU struct {
	ProductName, Architecture, ComputeCapability string
	MemoryMiB                                    int64
}

// NVIDIAGPUs are the GPU models whose DRA attributes are known, by the
// lower-case name the instance labels give them (EC2's GpuInfo name,
// lower case). The figures are what the NVIDIA DRA driver published on
// running EC2 nodes of those types, as gathered in the Karpenter AWS
// provider's DRA metadata (pkg/providers/instancetype/drametadata); a
// model not listed here gets no template, so its types are not offered
// to DRA claims rather than offered with figures the node would not have.
var NVIDIAGPUs = map[string]NVIDIAGPU{
	"t4":   {"Tesla T4", "Turing", "7.5.0", 15360},
	"a10g": {"NVIDIA A10G", "Ampere", "8.6.0", 23028},
	"a100": {"NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 40320},
	"l4":   {"NVIDIA L4", "Ada Lovelace", "8.9.0", 23034},
	"h100": {"NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 81152},
}

// NVIDIAGPUSlice is the ResourceSlice template of a node with count GPUs
// of the model named (a key of NVIDIAGPUs), in the shape the NVIDIA GPU DRA driver publishes (its deviceinfo.go): devices
// gpu-0 … gpu-<count-1>, each with the attributes type "gpu",
// productName, brand "Nvidia", architecture and cudaComputeCapability,
// and the capacity memory. The attributes that differ from node to node
// (uuid, driverVersion, cudaDriverVersion, the PCI bus ID and PCIe root)
// are left out: a node not yet launched has none, so a claim selecting on
// them is not provisioned for.
func NVIDIAGPUSlice(model string, count int) (v1alpha1.ResourceSliceTemplate, error) {
	gpu, ok := NVIDIAGPUs[strings.ToLower(model)]
	if !ok {
		return v1alpha1.ResourceSliceTemplate{}, fmt.Errorf("NVIDIA GPU model %q: its DRA attributes are not known", model)
	}
	out := v1alpha1.ResourceSliceTemplate{Driver: DriverNVIDIAGPU}
	for i := range count {
		out.Devices = append(out.Devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":                  {StringValue: ptr.To("gpu")},
				"productName":           {StringValue: ptr.To(gpu.ProductName)},
				"brand":                 {StringValue: ptr.To("Nvidia")},
				"architecture":          {StringValue: ptr.To(gpu.Architecture)},
				"cudaComputeCapability": {VersionValue: ptr.To(gpu.ComputeCapability)},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(gpu.MemoryMiB<<20, resource.BinarySI)},
			},
		})
	}
	return out, nil
}
