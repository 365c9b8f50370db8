// Package eksnode computes what the node of an EC2 instance reports when
// it joins an EKS cluster from an Amazon Linux 2023 image: its capacity,
// allocatable, labels and taints, from the instance type as EC2 describes
// it and the NodeConfig in its user data. It plays nodeadm, the kubelet,
// the device plugins and the VPC resource controller for the sandbox's
// fake region, and it is what tests hold the aws provider's virtual nodes
// against, so it is written from those programs' published behaviour and
// shares no arithmetic with the provider:
//   - max pods and kube-reserved: nodeadm (awslabs/amazon-eks-ami,
//     nodeadm/internal/kubelet/config.go withDefaultReservedResources and
//     eni_max_pods.go CalcMaxPods): the default network card's interfaces ×
//     (IPv4 addresses per interface − 1) + 2, or the maxPodsExpression (CEL
//     over default_enis, ips_per_eni, max_pods) when set and valid; a
//     maxPods in the kubelet config wins over both but kube-reserved memory
//     stays 11 MiB × nodeadm's figure + 255 MiB; CPU 6% of the first core,
//     1% of the second, 0.5% of the next two, 0.25% of the rest, each range
//     rounded down; ephemeral storage 1 GiB;
//   - podsPerCore: the kubelet's MachineInfo setter caps the pods capacity
//     at podsPerCore × logical CPUs;
//   - eviction: the kubelet's defaults memory.available 100Mi and
//     nodefs.available 10%, as nodeadm leaves them unless the config sets
//     them;
//   - devices: NVIDIA's, AMD's and Habana's device plugins count their
//     GPUs, but on a node that runs the NVIDIA GPU DRA driver (labelled
//     for its DaemonSet, dra.go), where that driver publishes the NVIDIA
//     GPUs as ResourceSlices instead; the Neuron device plugin registers aws.amazon.com/neuron
//     (devices) and aws.amazon.com/neuroncore (cores); the EFA device
//     plugin counts the EFA interfaces attached; the VPC resource
//     controller advertises vpc.amazonaws.com/pod-eni on trunk-capable
//     types where security groups for pods are on;
//   - taints: the kubelet's --register-with-taints, plus the external
//     cloud provider's node.cloudprovider.kubernetes.io/uninitialized,
//     which the cloud controller manager lifts.
//
// Memory is the one figure no program publishes: the kernel sees the
// type's memory less what the hypervisor and the kernel keep. KernelShare
// models it; it is chosen, not measured.
package eksnode

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// KernelShare is the share of an instance type's memory the node does not
// see: a real node reports somewhat less than the type's memory, by an
// amount that depends on the type and the kernel. Below the provider's
// 7.5% estimate, as Karpenter's account of real nodes has it
// ("conservative"), so that tests see the provider correct its estimate
// from the nodes that register.
const KernelShare = 0.06

// Boot is what an instance boots with beyond its type.
type Boot struct {
	// UserData is the instance's decoded user data.
	UserData string
	// RootGiB is the root volume's size.
	RootGiB int64
	// EFAInterfaces attached to the instance.
	EFAInterfaces int64
	// PodENI: the cluster's VPC CNI has security groups for pods on, so
	// the VPC resource controller advertises branch interfaces.
	PodENI bool
}

// Node is what a node reports when it registers.
type Node struct {
	Capacity, Allocatable corev1.ResourceList
	// Labels and Taints it registers with (the cloud provider's
	// uninitialised taint among them).
	Labels map[string]string
	Taints []corev1.Taint
	// DRADevices are the devices its DRA drivers publish once it runs,
	// by driver, without what is the node's own (Slices adds it).
	DRADevices map[string][]resourcev1.Device
}

// Join computes the node an instance of type it registers, booted with b.
func Join(it ec2fake.InstanceType, b Boot) (Node, error) {
	nc, labels, taints, err := readUserData(b.UserData)
	if err != nil {
		return Node{}, err
	}
	return report(it, b, nc, labels, taints)
}

// Standard is the node an instance of type it registers when its
// NodeConfig sets nothing of the kubelet's (nodeadm's defaults), with a
// root volume of rootGiB and no EFA interfaces.
func Standard(it ec2fake.InstanceType, rootGiB int64) Node {
	n, err := report(it, Boot{RootGiB: rootGiB}, nodeConfig{}, map[string]string{}, nil)
	if err != nil {
		panic(err) // nothing in an empty NodeConfig can be wrong
	}
	return n
}

// report is what the node reports, from its type, boot and NodeConfig.
func report(it ec2fake.InstanceType, b Boot, nc nodeConfig, labels map[string]string, taints []corev1.Taint) (Node, error) {
	var config kubeletConfig
	if len(nc.Spec.Kubelet.Config) > 0 {
		raw, err := json.Marshal(nc.Spec.Kubelet.Config)
		if err != nil {
			return Node{}, err
		}
		if err := json.Unmarshal(raw, &config); err != nil {
			return Node{}, fmt.Errorf("kubelet config: %w", err)
		}
	}
	nodeadmPods := nodeadmMaxPods(it, nc.Spec.Kubelet.MaxPodsExpression)
	maxPods := nodeadmPods
	if config.MaxPods > 0 {
		maxPods = config.MaxPods
	}
	pods := maxPods
	if config.PodsPerCore > 0 {
		pods = min(pods, config.PodsPerCore*int64(it.VCPUs))
	}
	memKi := it.MemoryMiB * 1024
	memKi -= int64(float64(memKi) * KernelShare)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(it.VCPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memKi*1024, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(b.RootGiB<<30, resource.BinarySI),
	}
	nvidiaDRA := runsNVIDIADRA(labels)
	for name, n := range devices(it, b, nvidiaDRA) {
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	kubeReserved := map[string]string{
		"cpu":               fmt.Sprintf("%dm", reservedMilliCPU(int64(it.VCPUs)*1000)),
		"ephemeral-storage": "1Gi",
		"memory":            fmt.Sprintf("%dMi", 11*nodeadmPods+255),
	}
	maps.Copy(kubeReserved, config.KubeReserved)
	eviction := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}
	maps.Copy(eviction, config.EvictionHard)
	allocatable := capacity.DeepCopy()
	for _, reserved := range []map[string]string{kubeReserved, config.SystemReserved} {
		for name, v := range reserved {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return Node{}, fmt.Errorf("reserved %s %q: %w", name, v, err)
			}
			subtract(allocatable, corev1.ResourceName(name), q)
		}
	}
	for signal, name := range map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage} {
		v := eviction[signal]
		if pct, ok := strings.CutSuffix(v, "%"); ok {
			// The kubelet's percentages are float32s.
			f, err := strconv.ParseFloat(pct, 32)
			if err != nil {
				return Node{}, fmt.Errorf("eviction %s %q: %w", signal, v, err)
			}
			c := capacity[name]
			subtract(allocatable, name, *resource.NewQuantity(int64(float64(c.Value())*float64(float32(f)/100)), resource.BinarySI))
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return Node{}, fmt.Errorf("eviction %s %q: %w", signal, v, err)
		}
		subtract(allocatable, name, q)
	}
	taints = append(taints, corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	node := Node{Capacity: capacity, Allocatable: allocatable, Labels: labels, Taints: taints}
	if gpus := nvidiaDevices(it); nvidiaDRA && len(gpus) > 0 {
		node.DRADevices = map[string][]resourcev1.Device{DriverNVIDIAGPU: gpus}
	}
	return node, nil
}

// kubeletConfig is the part of the kubelet's configuration file a
// NodeConfig may set that changes what the node reports.
type kubeletConfig struct {
	MaxPods        int64             `json:"maxPods"`
	PodsPerCore    int64             `json:"podsPerCore"`
	KubeReserved   map[string]string `json:"kubeReserved"`
	SystemReserved map[string]string `json:"systemReserved"`
	EvictionHard   map[string]string `json:"evictionHard"`
}

// nodeadmMaxPods is nodeadm's max pods for the type: the expression's
// value when it evaluates to a positive integer, else the standard figure
// from the default network card.
func nodeadmMaxPods(it ec2fake.InstanceType, expression string) int64 {
	defaultENIs := int64(it.MaxENIs)
	if len(it.NetworkCards) > 0 {
		defaultENIs = int64(it.NetworkCards[0])
	}
	ips := int64(it.IPv4PerENI)
	standard := defaultENIs*(ips-1) + 2
	if expression == "" {
		return standard
	}
	env, err := cel.NewEnv(cel.Variable("default_enis", cel.IntType), cel.Variable("ips_per_eni", cel.IntType), cel.Variable("max_pods", cel.IntType))
	if err != nil {
		return standard
	}
	ast, issues := env.Compile(expression)
	if issues != nil && issues.Err() != nil {
		return standard
	}
	prg, err := env.Program(ast)
	if err != nil {
		return standard
	}
	out, _, err := prg.Eval(map[string]any{"default_enis": defaultENIs, "ips_per_eni": ips, "max_pods": standard})
	if err != nil {
		return standard
	}
	n, ok := out.Value().(int64)
	if !ok || n <= 0 {
		return standard
	}
	return n
}

// reservedMilliCPU is nodeadm's CPU reservation for a node of the given
// millicores: a share of each range, each rounded down.
func reservedMilliCPU(total int64) int64 {
	bounds := []int64{0, 1000, 2000, 4000, total}
	perTenThousand := []int64{600, 100, 50, 25}
	var out int64
	for i, pct := range perTenThousand {
		start, end := bounds[i], bounds[i+1]
		if total <= start {
			continue
		}
		out += (min(total, end) - start) * pct / 10000
	}
	return out
}

// devices are the extended resources the device plugins and the VPC
// resource controller advertise; nvidiaDRA: the NVIDIA GPU DRA driver,
// not the device plugin, offers the NVIDIA GPUs.
func devices(it ec2fake.InstanceType, b Boot, nvidiaDRA bool) map[string]int64 {
	out := map[string]int64{}
	for _, g := range it.GPUs {
		switch g.Manufacturer {
		case "NVIDIA":
			if !nvidiaDRA {
				out["nvidia.com/gpu"] += int64(g.Count)
			}
		case "AMD":
			out["amd.com/gpu"] += int64(g.Count)
		case "Habana":
			out["habana.ai/gaudi"] += int64(g.Count)
		}
	}
	for _, d := range it.NeuronDevices {
		out["aws.amazon.com/neuron"] += int64(d.Count)
		out["aws.amazon.com/neuroncore"] += int64(d.Count * d.Cores)
	}
	if b.EFAInterfaces > 0 {
		out["vpc.amazonaws.com/efa"] = b.EFAInterfaces
	}
	if b.PodENI && it.BranchENIs > 0 {
		out["vpc.amazonaws.com/pod-eni"] = int64(it.BranchENIs)
	}
	return out
}

func subtract(rl corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	v, ok := rl[name]
	if !ok {
		return
	}
	v.Sub(q)
	if v.Sign() < 0 {
		v = *resource.NewQuantity(0, v.Format)
	}
	rl[name] = v
}

// BootOf reads what the instance boots with from its launch template
// (among templates): its root volume (20 GiB, EC2's default for the EKS
// images, when the template maps none) and its EFA interfaces.
func BootOf(in ec2fake.Instance, templates []ec2fake.LaunchTemplate, podENI bool) Boot {
	b := Boot{UserData: in.UserData, RootGiB: 20, PodENI: podENI}
	for _, lt := range templates {
		if lt.ID != in.LaunchTemplateID && lt.Name != in.LaunchTemplateName {
			continue
		}
		if len(lt.BlockDeviceMappings) > 0 && lt.BlockDeviceMappings[0].VolumeSizeGiB > 0 {
			b.RootGiB = int64(lt.BlockDeviceMappings[0].VolumeSizeGiB)
		}
		b.EFAInterfaces = int64(lt.EFAInterfaces())
	}
	return b
}
