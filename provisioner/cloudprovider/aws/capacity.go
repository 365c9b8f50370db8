package aws

import (
	"maps"
	"math"
	"strconv"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
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
const ResourceGPU = v1alpha1.ResourceNVIDIAGPU

// defaultCardENIs is how many network interfaces the type's default
// network card takes. The VPC CNI attaches its interfaces to that card
// only, so a type with several cards (p5.48xlarge: 32 cards of 2) gives
// pods the addresses of one: nodeadm reads the same figure
// (nodeadm/internal/util/ec2.go, awslabs/amazon-eks-ami).
func defaultCardENIs(info ec2types.InstanceTypeInfo) int64 {
	n := info.NetworkInfo
	for _, card := range n.NetworkCards {
		if sdkaws.ToInt32(card.NetworkCardIndex) == sdkaws.ToInt32(n.DefaultNetworkCardIndex) {
			return int64(sdkaws.ToInt32(card.MaximumNetworkInterfaces))
		}
	}
	// DescribeInstanceTypes lists a card for every current type; an
	// answer without one has a single card, the type's.
	return int64(sdkaws.ToInt32(n.MaximumNetworkInterfaces))
}

// ENILimitedPods is how many pods the VPC CNI can address on the type
// without prefix delegation: every address of the default card's
// interfaces but each interface's primary one, the reserved interfaces
// left out, plus the two host-network pods (aws-node and kube-proxy).
// With no reserved interface this is nodeadm's standard max pods
// (calculateStandardMaxPods, nodeadm/internal/kubelet/eni_max_pods.go).
func ENILimitedPods(info ec2types.InstanceTypeInfo, reservedENIs int64) int64 {
	if info.NetworkInfo == nil {
		return 110 // the kubelet's default
	}
	ips := int64(sdkaws.ToInt32(info.NetworkInfo.Ipv4AddressesPerInterface))
	return max(defaultCardENIs(info)-reservedENIs, 0)*(ips-1) + 2
}

// MaxPods is the type's max pods with no class settings: ENILimitedPods
// with no interface reserved.
func MaxPods(info ec2types.InstanceTypeInfo) int64 { return ENILimitedPods(info, 0) }

// Pods is a node's max pods under the class's kubelet settings, in two
// figures that differ only with podsPerCore:
//   - nodeadm is what nodeadm computes (kubelet.maxPods, else the
//     ENI-limited figure) and writes as the kubelet's maxPods; it reserves
//     kube-reserved memory for that many pods (UserData writes the class's
//     settings as nodeadm's maxPodsExpression so that this holds).
//   - capacity is what the node reports: the kubelet lowers maxPods to
//     podsPerCore × its logical CPUs (k8s.io/kubernetes
//     pkg/kubelet/nodestatus/setters.go, MachineInfo).
func Pods(info ec2types.InstanceTypeInfo, kubelet *v1alpha1.KubeletConfiguration) (nodeadm, capacity int64) {
	var reserved int64
	if kubelet != nil && kubelet.ReservedENIs != nil {
		reserved = int64(*kubelet.ReservedENIs)
	}
	nodeadm = ENILimitedPods(info, reserved)
	if kubelet != nil && kubelet.MaxPods != nil {
		nodeadm = int64(*kubelet.MaxPods)
	}
	capacity = nodeadm
	if kubelet != nil && kubelet.PodsPerCore != nil && info.VCpuInfo != nil {
		capacity = min(capacity, int64(*kubelet.PodsPerCore)*int64(sdkaws.ToInt32(info.VCpuInfo.DefaultVCpus)))
	}
	return nodeadm, capacity
}

// Capacity is what a node of the type reports: its vCPUs, its memory less
// the hypervisor's overhead (vmOverhead, a fraction), max pods, the root
// volume, and the devices and interfaces Devices lists.
func Capacity(info ec2types.InstanceTypeInfo, kubelet *v1alpha1.KubeletConfiguration, rootGiB int64, vmOverhead float64) corev1.ResourceList {
	var vcpus int64
	if info.VCpuInfo != nil {
		vcpus = int64(sdkaws.ToInt32(info.VCpuInfo.DefaultVCpus))
	}
	var mib int64
	if info.MemoryInfo != nil {
		mib = sdkaws.ToInt64(info.MemoryInfo.SizeInMiB)
	}
	mib -= int64(math.Ceil(float64(mib) * vmOverhead))
	_, pods := Pods(info, kubelet)
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(vcpus, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mib<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(rootGiB<<30, resource.BinarySI),
	}
	for name, n := range Devices(info) {
		rl[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return rl
}

// Devices are the extended resources a node of the type advertises, as
// their device plugins count them:
//   - nvidia.com/gpu, amd.com/gpu and habana.ai/gaudi: the type's GPUs of
//     each manufacturer (GpuInfo);
//   - aws.amazon.com/neuron: its Neuron devices, and
//     aws.amazon.com/neuroncore: their cores (NeuronInfo; the Neuron device
//     plugin registers both, "k8s neuron device plugin", AWS Neuron docs);
//   - vpc.amazonaws.com/efa: its EFA interfaces (EfaInfo); Create attaches
//     them to the instances of claims that ask for EFA;
//   - vpc.amazonaws.com/pod-eni: the branch interfaces of a trunk-capable
//     type (podeni.txt), which the VPC resource controller advertises where
//     security groups for pods are enabled.
func Devices(info ec2types.InstanceTypeInfo) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	if info.GpuInfo != nil {
		for _, g := range info.GpuInfo.Gpus {
			switch strings.ToLower(sdkaws.ToString(g.Manufacturer)) {
			case "nvidia":
				out[v1alpha1.ResourceNVIDIAGPU] += int64(sdkaws.ToInt32(g.Count))
			case "amd":
				out[v1alpha1.ResourceAMDGPU] += int64(sdkaws.ToInt32(g.Count))
			case "habana":
				out[v1alpha1.ResourceHabanaGaudi] += int64(sdkaws.ToInt32(g.Count))
			}
		}
	}
	if info.NeuronInfo != nil {
		for _, d := range info.NeuronInfo.NeuronDevices {
			n := int64(sdkaws.ToInt32(d.Count))
			out[v1alpha1.ResourceNeuron] += n
			if d.CoreInfo != nil {
				out[v1alpha1.ResourceNeuronCore] += n * int64(sdkaws.ToInt32(d.CoreInfo.Count))
			}
		}
	}
	if n := info.NetworkInfo; n != nil && n.EfaInfo != nil && sdkaws.ToBool(n.EfaSupported) {
		out[v1alpha1.ResourceEFA] = int64(sdkaws.ToInt32(n.EfaInfo.MaximumEfaInterfaces))
	}
	if branches := branchENIs(string(info.InstanceType)); branches > 0 {
		out[v1alpha1.ResourcePodENI] = branches
	}
	maps.DeleteFunc(out, func(_ corev1.ResourceName, n int64) bool { return n <= 0 })
	return out
}

// Allocatable is capacity less kube-reserved, system-reserved and the hard
// eviction thresholds. Unset kube-reserved CPU and memory follow nodeadm's
// formulas (withDefaultReservedResources, nodeadm/internal/kubelet/config.go):
// CPU 6% of the first core, 1% of the second, 0.5% of the third and fourth
// and 0.25% of every further one; memory 255 MiB plus 11 MiB for each of
// reservedPods, nodeadm's max pods (Pods), which the kubelet may lower with
// podsPerCore without nodeadm reserving less; ephemeral storage 1 GiB.
// Unset eviction thresholds are kubelet's: memory.available 100Mi and
// nodefs.available 10%.
func Allocatable(capacity corev1.ResourceList, reservedPods int64, kubelet *v1alpha1.KubeletConfiguration) corev1.ResourceList {
	kubeReserved := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(kubeReservedMilliCPU(capacity.Cpu().Value()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity((255+11*reservedPods)<<20, resource.BinarySI),
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
// the capacity, rounded down as the kubelet does (GetThresholdQuantity,
// pkg/kubelet/eviction/api).
func threshold(value string, capacity resource.Quantity) resource.Quantity {
	if value == "" {
		return resource.Quantity{}
	}
	if value[len(value)-1] == '%' {
		// The kubelet parses the percentage as a float32 (parsePercentage,
		// pkg/kubelet/eviction/helpers.go): 10% is 0.100000001…, which on
		// a 20 GiB disk is 32 bytes more than a tenth.
		pct, err := strconv.ParseFloat(value[:len(value)-1], 32)
		if err != nil {
			return resource.Quantity{}
		}
		share := float32(pct) / 100
		return *resource.NewQuantity(int64(float64(capacity.Value())*float64(share)), capacity.Format)
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
