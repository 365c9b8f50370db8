package aws

import (
	"math"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// rootVolumeGiB is the size of the root volume: the mapping marked root,
// else the first, else the default 20 GiB.
func rootVolumeGiB(bdm []v1alpha1.BlockDeviceMapping) int64 {
	for _, m := range bdm {
		if m.RootVolume {
			return int64(m.EBS.VolumeSize)
		}
	}
	if len(bdm) > 0 {
		return int64(bdm[0].EBS.VolumeSize)
	}
	return defaultRootVolumeGiB
}

const defaultRootVolumeGiB = 20

// ResourceGPU is the resource NVIDIA's device plugin advertises.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// MaxPods is how many pods the VPC CNI can address on the type without
// prefix delegation: each ENI's addresses but its primary one, plus two
// host-network pods (the published EKS eni-max-pods formula).
func MaxPods(info ec2types.InstanceTypeInfo) int64 {
	if info.NetworkInfo == nil {
		return 110
	}
	enis := int64(aws.ToInt32(info.NetworkInfo.MaximumNetworkInterfaces))
	ips := int64(aws.ToInt32(info.NetworkInfo.Ipv4AddressesPerInterface))
	return enis*(ips-1) + 2
}

// Capacity is what a node of the type reports: its vCPUs, its memory less
// the hypervisor's overhead, max pods, the root volume and NVIDIA GPUs.
func Capacity(info ec2types.InstanceTypeInfo, kubelet *v1alpha1.KubeletConfiguration, rootGiB int64, vmOverhead float64) corev1.ResourceList {
	var vcpus int64
	if info.VCpuInfo != nil {
		vcpus = int64(aws.ToInt32(info.VCpuInfo.DefaultVCpus))
	}
	var mib int64
	if info.MemoryInfo != nil {
		mib = aws.ToInt64(info.MemoryInfo.SizeInMiB)
	}
	mib -= int64(math.Ceil(float64(mib) * vmOverhead))
	pods := MaxPods(info)
	if kubelet != nil && kubelet.MaxPods != nil {
		pods = int64(*kubelet.MaxPods)
	}
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(vcpus, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mib<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(rootGiB<<30, resource.BinarySI),
	}
	if info.GpuInfo != nil {
		var gpus int64
		for _, g := range info.GpuInfo.Gpus {
			if aws.ToString(g.Manufacturer) == "NVIDIA" {
				gpus += int64(aws.ToInt32(g.Count))
			}
		}
		if gpus > 0 {
			rl[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
		}
	}
	return rl
}

// Allocatable is capacity less kube-reserved, system-reserved and the hard
// eviction thresholds. Unset kube-reserved CPU and memory follow the EKS
// AMI's formulas (as nodeadm applies them): CPU 6% of the first core, 1% of
// the second, 0.5% of the third and fourth and 0.25% of every further one;
// memory 255 MiB plus 11 MiB per pod; ephemeral storage 1 GiB. Unset
// eviction thresholds are kubelet's: memory.available 100Mi and
// nodefs.available 10%.
func Allocatable(capacity corev1.ResourceList, kubelet *v1alpha1.KubeletConfiguration) corev1.ResourceList {
	kubeReserved := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(kubeReservedMilliCPU(capacity.Cpu().Value()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity((255+11*capacity.Pods().Value())<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	var systemReserved corev1.ResourceList
	eviction := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}
	if kubelet != nil {
		for k, v := range kubelet.KubeReserved {
			if q, err := resource.ParseQuantity(string(v)); err == nil {
				kubeReserved[corev1.ResourceName(k)] = q
			}
		}
		systemReserved = corev1.ResourceList{}
		for k, v := range kubelet.SystemReserved {
			if q, err := resource.ParseQuantity(string(v)); err == nil {
				systemReserved[corev1.ResourceName(k)] = q
			}
		}
		for k, v := range kubelet.EvictionHard {
			eviction[k] = string(v)
		}
	}
	out := capacity.DeepCopy()
	for _, reserved := range []corev1.ResourceList{kubeReserved, systemReserved} {
		for name, q := range reserved {
			if v, ok := out[name]; ok {
				v.Sub(q)
				out[name] = v
			}
		}
	}
	for signal, resourceName := range map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage} {
		v, ok := out[resourceName]
		if !ok {
			continue
		}
		v.Sub(threshold(eviction[signal], capacity[resourceName]))
		out[resourceName] = v
	}
	for name, v := range out {
		if v.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, v.Format)
		}
	}
	return out
}

// threshold reads an eviction threshold: a quantity, or a percentage of
// the capacity.
func threshold(value string, capacity resource.Quantity) resource.Quantity {
	if value == "" {
		return resource.Quantity{}
	}
	if value[len(value)-1] == '%' {
		pct, err := strconv.ParseFloat(value[:len(value)-1], 64)
		if err != nil {
			return resource.Quantity{}
		}
		return *resource.NewQuantity(int64(math.Ceil(float64(capacity.Value())*pct/100)), capacity.Format)
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return resource.Quantity{}
	}
	return q
}

// kubeReservedMilliCPU is the EKS formula for the CPU kube-reserved on a
// node with the given cores, in whole millicores (rounded down).
func kubeReservedMilliCPU(cores int64) int64 {
	var tenths int64 // tenths of a millicore
	for c := int64(1); c <= cores; c++ {
		switch {
		case c == 1:
			tenths += 600 // 6%
		case c == 2:
			tenths += 100 // 1%
		case c <= 4:
			tenths += 50 // 0.5%
		default:
			tenths += 25 // 0.25%
		}
	}
	return tenths / 10
}
