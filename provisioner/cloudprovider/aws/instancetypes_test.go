package aws

import (
	"encoding/base64"
	"strings"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// info is an instance type as DescribeInstanceTypes describes it.
func info(name string, vcpus int32, mib int64, enis, ipsPerENI int32, gpus int32) ec2types.InstanceTypeInfo {
	it := ec2types.InstanceTypeInfo{
		InstanceType: ec2types.InstanceType(name),
		VCpuInfo:     &ec2types.VCpuInfo{DefaultVCpus: sdkaws.Int32(vcpus)},
		MemoryInfo:   &ec2types.MemoryInfo{SizeInMiB: sdkaws.Int64(mib)},
		NetworkInfo:  &ec2types.NetworkInfo{MaximumNetworkInterfaces: sdkaws.Int32(enis), Ipv4AddressesPerInterface: sdkaws.Int32(ipsPerENI)},
	}
	if gpus > 0 {
		it.GpuInfo = &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Count: sdkaws.Int32(gpus), Manufacturer: sdkaws.String("NVIDIA"), Name: sdkaws.String("T4")}}}
	}
	return it
}

// TestCapacityAndAllocatableOfRealTypes checks the figures of real instance
// types (vCPUs, memory and ENI limits as EC2 publishes them) against values
// worked out by hand:
//
//	max pods    = ENIs × (IPv4 per ENI − 1) + 2
//	memory      = MiB − ⌈7.5% × MiB⌉ (hypervisor overhead)
//	alloc. mem  = memory − (255 + 11 × max pods) MiB − 100 MiB (eviction)
//	alloc. cpu  = cores − (60 + 10 + 5 + 5 + 2.5 × (cores − 4)) m, floored
//	alloc. disk = 20 GiB root − 1 GiB kube-reserved − 10% eviction
//	            = 17 GiB − 32 B (the kubelet's 10% is the float32 0.1000000015)
func TestCapacityAndAllocatableOfRealTypes(t *testing.T) {
	cases := []struct {
		info                  ec2types.InstanceTypeInfo
		pods, memMiB          int64
		allocCPU, allocMemMiB int64
		gpus                  int64
	}{
		// m5.large: 2 vCPU, 8 GiB, 3 ENIs × 10: 29 pods; 8192−615=7577;
		// 7577−574−100=6903; 2000−70=1930m.
		{info: info("m5.large", 2, 8192, 3, 10, 0), pods: 29, memMiB: 7577, allocCPU: 1930, allocMemMiB: 6903},
		// m5.xlarge: 4 vCPU, 16 GiB, 4 ENIs × 15: 58 pods; 16384−1229=15155;
		// 15155−893−100=14162; 4000−80=3920m.
		{info: info("m5.xlarge", 4, 16384, 4, 15, 0), pods: 58, memMiB: 15155, allocCPU: 3920, allocMemMiB: 14162},
		// m5.2xlarge: 8 vCPU, 32 GiB, 4 ENIs × 15: 58 pods; 32768−2458=30310;
		// 30310−893−100=29317; 8000−90=7910m.
		{info: info("m5.2xlarge", 8, 32768, 4, 15, 0), pods: 58, memMiB: 30310, allocCPU: 7910, allocMemMiB: 29317},
		// t3.medium: 2 vCPU, 4 GiB, 3 ENIs × 6: 17 pods; 4096−308=3788;
		// 3788−442−100=3246.
		{info: info("t3.medium", 2, 4096, 3, 6, 0), pods: 17, memMiB: 3788, allocCPU: 1930, allocMemMiB: 3246},
		// g4dn.xlarge: 4 vCPU, 16 GiB, 3 ENIs × 10, one NVIDIA T4: 29 pods;
		// 15155−574−100=14481.
		{info: info("g4dn.xlarge", 4, 16384, 3, 10, 1), pods: 29, memMiB: 15155, allocCPU: 3920, allocMemMiB: 14481, gpus: 1},
	}
	for _, tc := range cases {
		t.Run(string(tc.info.InstanceType), func(t *testing.T) {
			capacity := Capacity(tc.info, nil, defaultRootVolumeGiB, 0.075)
			alloc := Allocatable(capacity, tc.pods, nil)
			want := map[string]int64{
				"pods": tc.pods, "memory": tc.memMiB << 20, "cpu": int64(*tc.info.VCpuInfo.DefaultVCpus) * 1000,
				"alloc cpu": tc.allocCPU, "alloc memory": tc.allocMemMiB << 20, "alloc disk": 17<<30 - 32, "gpu": tc.gpus,
			}
			gpu := capacity[ResourceGPU]
			got := map[string]int64{
				"pods": capacity.Pods().Value(), "memory": capacity.Memory().Value(), "cpu": capacity.Cpu().MilliValue(),
				"alloc cpu": alloc.Cpu().MilliValue(), "alloc memory": alloc.Memory().Value(), "alloc disk": alloc.StorageEphemeral().Value(), "gpu": gpu.Value(),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

// TestKubeletSettingsChangeAllocatable: maxPods, system-reserved and a
// percentage eviction threshold of the class are applied. On m5.large with
// maxPods 110: kube-reserved memory 255+1210=1465 MiB; eviction 5% (the
// kubelet's float32 0.0500000007) of 7577 MiB = ⌊397253023.5⌋ bytes;
// 7577−1465−200 MiB − 397253023 B; disk 50 GiB − 1 GiB − 10% (5368709200 B).
func TestKubeletSettingsChangeAllocatable(t *testing.T) {
	kubelet := &v1alpha1.KubeletConfiguration{
		MaxPods:        sdkaws.Int32(110),
		SystemReserved: map[string]v1alpha1.KubeletValue{"memory": "200Mi", "cpu": "100m"},
		EvictionHard:   map[string]v1alpha1.KubeletValue{"memory.available": "5%"},
	}
	capacity := Capacity(info("m5.large", 2, 8192, 3, 10, 0), kubelet, 50, 0.075)
	alloc := Allocatable(capacity, 110, kubelet)
	if got := capacity.Pods().Value(); got != 110 {
		t.Errorf("pods = %d, want the class's 110", got)
	}
	if got, want := alloc.Memory().Value(), int64(7577-1465-200)<<20-397253023; got != want {
		t.Errorf("allocatable memory = %d, want %d", got, want)
	}
	if got := alloc.Cpu().MilliValue(); got != 1830 {
		t.Errorf("allocatable cpu = %dm, want 2000−70−100 = 1830m", got)
	}
	if got := alloc.StorageEphemeral().Value(); got != 50<<30-1<<30-5368709200 {
		t.Errorf("allocatable ephemeral storage = %d, want 50−1 GiB − 10%% (5368709200 B)", got)
	}
}

// TestUserDataJoinsTheClusterWithThePoolsLabelsAndTaints builds user data
// and reads it back as the sandbox's kubelets do.
func TestUserDataJoinsTheClusterWithThePoolsLabelsAndTaints(t *testing.T) {
	script := "#!/bin/bash\necho custom setup\n"
	class := &v1alpha1.EC2NodeClass{Spec: v1alpha1.EC2NodeClassSpec{
		UserData: &script,
		Kubelet:  &v1alpha1.KubeletConfiguration{MaxPods: sdkaws.Int32(42)},
	}}
	opts := Options{ClusterName: "prod", ClusterEndpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com", ClusterCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), ClusterServiceCIDR: "10.100.0.0/16"}
	labels := map[string]string{v1alpha1.LabelNodePool: "apps", "intent": "apps"}
	taints := []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}, {Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoExecute}}
	encoded, err := UserData(opts, class, labels, taints)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	if !strings.HasPrefix(doc, "MIME-Version: 1.0\nContent-Type: multipart/mixed;") || !strings.Contains(doc, "Content-Type: text/x-shellscript") || !strings.Contains(doc, "echo custom setup") {
		t.Errorf("user data is not MIME multi-part with the class's script first:\n%s", doc)
	}
	if strings.Index(doc, "echo custom setup") > strings.Index(doc, "kind: NodeConfig") {
		t.Errorf("the class's script must run before nodeadm's NodeConfig:\n%s", doc)
	}
	nc, gotLabels, gotTaints, err := ParseNodeConfig(doc)
	if err != nil {
		t.Fatal(err)
	}
	if nc.Spec.Cluster.Name != "prod" || nc.Spec.Cluster.APIServerEndpoint != opts.ClusterEndpoint || string(nc.Spec.Cluster.CertificateAuthority) != string(opts.ClusterCA) || nc.Spec.Cluster.CIDR != "10.100.0.0/16" {
		t.Errorf("cluster = %+v", nc.Spec.Cluster)
	}
	if nc.Spec.Kubelet.MaxPodsExpression != "42" || nc.Spec.Kubelet.Config["maxPods"] != nil {
		t.Errorf("kubelet = %+v, want maxPodsExpression 42 and no maxPods in the config (nodeadm would reserve memory for its own figure)", nc.Spec.Kubelet)
	}
	if diff := cmp.Diff(labels, gotLabels); diff != "" {
		t.Errorf("labels (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(taints, gotTaints); diff != "" {
		t.Errorf("taints (-want,+got):\n%s", diff)
	}
}

func TestProviderIDRoundTrip(t *testing.T) {
	id, err := instanceID(providerID("us-west-2a", "i-0123456789abcdef0"))
	if err != nil || id != "i-0123456789abcdef0" {
		t.Errorf("instanceID = %q, %v", id, err)
	}
	if _, err := instanceID("kwok://node-1"); err == nil {
		t.Error("a non-EC2 provider ID was accepted")
	}
}

// cards makes info a type with several network cards of the given
// interfaces, the first the default.
func cards(it ec2types.InstanceTypeInfo, enis ...int32) ec2types.InstanceTypeInfo {
	it.NetworkInfo.DefaultNetworkCardIndex = sdkaws.Int32(0)
	for i, n := range enis {
		it.NetworkInfo.NetworkCards = append(it.NetworkInfo.NetworkCards, ec2types.NetworkCardInfo{NetworkCardIndex: sdkaws.Int32(int32(i)), MaximumNetworkInterfaces: sdkaws.Int32(n)})
	}
	return it
}

// TestMaxPodsCountsTheDefaultCardOnly: the VPC CNI attaches interfaces to
// the default network card only, so nodeadm's max pods (its
// instance-info.jsonl: p5.48xlarge 2 ENIs × 50, p4d.24xlarge 15 × 50,
// trn1.32xlarge 5 × 50, c6in.32xlarge 8 × 50) is the node's.
func TestMaxPodsCountsTheDefaultCardOnly(t *testing.T) {
	p5 := cards(info("p5.48xlarge", 192, 2097152, 64, 50, 8), 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)
	for _, tc := range []struct {
		info ec2types.InstanceTypeInfo
		want int64
	}{
		{p5, 100},
		{cards(info("p4d.24xlarge", 96, 1179648, 60, 50, 8), 15, 15, 15, 15), 737},
		{cards(info("trn1.32xlarge", 128, 524288, 40, 50, 0), 5, 5, 5, 5, 5, 5, 5, 5), 247},
		{cards(info("c6in.32xlarge", 128, 262144, 16, 50, 0), 8, 8), 394},
		{cards(info("m5.large", 2, 8192, 3, 10, 0), 3), 29},
		// An answer without cards has one: the type's.
		{info("t3.micro", 2, 1024, 2, 2, 0), 4},
	} {
		if got := MaxPods(tc.info); got != tc.want {
			t.Errorf("%s: max pods = %d, want %d", tc.info.InstanceType, got, tc.want)
		}
	}
	// Kube-reserved memory follows: 255 + 11 × 100 MiB on a p5.48xlarge,
	// not 255 + 11 × 3138 (about 33 GiB more).
	capacity := Capacity(p5, nil, 20, 0.075)
	alloc := Allocatable(capacity, MaxPods(p5), nil)
	reserved := capacity.Memory().Value() - alloc.Memory().Value()
	if want := int64(255+11*100+100) << 20; reserved != want {
		t.Errorf("p5.48xlarge memory reserved = %d MiB, want %d MiB", reserved>>20, want>>20)
	}
}

// TestPodsUnderTheClassSettings: maxPods replaces the ENI figure for both
// the kubelet and nodeadm; reservedENIs takes interfaces off the default
// card; podsPerCore lowers what the kubelet reports but not what nodeadm
// reserves memory for.
func TestPodsUnderTheClassSettings(t *testing.T) {
	m5 := cards(info("m5.large", 2, 8192, 3, 10, 0), 3)
	for _, tc := range []struct {
		name                   string
		kubelet                *v1alpha1.KubeletConfiguration
		wantNodeadm, wantPods  int64
		wantExpression         string
		wantPodsPerCoreWritten bool
	}{
		{name: "defaults", wantNodeadm: 29, wantPods: 29},
		{name: "maxPods", kubelet: &v1alpha1.KubeletConfiguration{MaxPods: sdkaws.Int32(110)}, wantNodeadm: 110, wantPods: 110, wantExpression: "110"},
		{name: "one reserved ENI", kubelet: &v1alpha1.KubeletConfiguration{ReservedENIs: sdkaws.Int32(1)}, wantNodeadm: 20, wantPods: 20, wantExpression: "default_enis > 1 ? (default_enis - 1) * (ips_per_eni - 1) + 2 : 2"},
		{name: "every ENI reserved", kubelet: &v1alpha1.KubeletConfiguration{ReservedENIs: sdkaws.Int32(5)}, wantNodeadm: 2, wantPods: 2, wantExpression: "default_enis > 5 ? (default_enis - 5) * (ips_per_eni - 1) + 2 : 2"},
		{name: "podsPerCore", kubelet: &v1alpha1.KubeletConfiguration{PodsPerCore: sdkaws.Int32(4)}, wantNodeadm: 29, wantPods: 8, wantPodsPerCoreWritten: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodeadm, pods := Pods(m5, tc.kubelet)
			if nodeadm != tc.wantNodeadm || pods != tc.wantPods {
				t.Errorf("Pods = %d (nodeadm), %d (capacity); want %d, %d", nodeadm, pods, tc.wantNodeadm, tc.wantPods)
			}
			encoded, err := UserData(Options{ClusterName: "c"}, &v1alpha1.EC2NodeClass{Spec: v1alpha1.EC2NodeClassSpec{Kubelet: tc.kubelet}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := base64.StdEncoding.DecodeString(encoded)
			nc, _, _, err := ParseNodeConfig(string(raw))
			if err != nil {
				t.Fatal(err)
			}
			if nc.Spec.Kubelet.MaxPodsExpression != tc.wantExpression {
				t.Errorf("maxPodsExpression = %q, want %q", nc.Spec.Kubelet.MaxPodsExpression, tc.wantExpression)
			}
			if _, ok := nc.Spec.Kubelet.Config["podsPerCore"]; ok != tc.wantPodsPerCoreWritten {
				t.Errorf("kubelet config = %v; podsPerCore written: %v, want %v", nc.Spec.Kubelet.Config, ok, tc.wantPodsPerCoreWritten)
			}
		})
	}
}

// TestDevicesAsTheDevicePluginsCountThem: the extended resources of GPU,
// Neuron, EFA and trunk-capable types.
func TestDevicesAsTheDevicePluginsCountThem(t *testing.T) {
	gpu := func(manufacturer string, n int32) *ec2types.GpuInfo {
		return &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Manufacturer: sdkaws.String(manufacturer), Count: sdkaws.Int32(n)}}}
	}
	inf2 := info("inf2.24xlarge", 96, 393216, 15, 50, 0)
	inf2.NeuronInfo = &ec2types.NeuronInfo{NeuronDevices: []ec2types.NeuronDeviceInfo{{Count: sdkaws.Int32(6), CoreInfo: &ec2types.NeuronDeviceCoreInfo{Count: sdkaws.Int32(2)}}}}
	p5 := info("p5.48xlarge", 192, 2097152, 64, 50, 8)
	p5.NetworkInfo.EfaSupported = sdkaws.Bool(true)
	p5.NetworkInfo.EfaInfo = &ec2types.EfaInfo{MaximumEfaInterfaces: sdkaws.Int32(32)}
	g4ad := info("g4ad.16xlarge", 64, 262144, 8, 30, 0)
	g4ad.GpuInfo = gpu("AMD", 4)
	dl1 := info("dl1.24xlarge", 96, 786432, 60, 50, 0)
	dl1.GpuInfo = gpu("Habana", 8)
	for _, tc := range []struct {
		info ec2types.InstanceTypeInfo
		want map[corev1.ResourceName]int64
	}{
		{inf2, map[corev1.ResourceName]int64{v1alpha1.ResourceNeuron: 6, v1alpha1.ResourceNeuronCore: 12, v1alpha1.ResourcePodENI: 107}},
		{p5, map[corev1.ResourceName]int64{v1alpha1.ResourceNVIDIAGPU: 8, v1alpha1.ResourceEFA: 32, v1alpha1.ResourcePodENI: 120}},
		{g4ad, map[corev1.ResourceName]int64{v1alpha1.ResourceAMDGPU: 4, v1alpha1.ResourcePodENI: 6}},
		{dl1, map[corev1.ResourceName]int64{v1alpha1.ResourceHabanaGaudi: 8, v1alpha1.ResourcePodENI: 62}},
		// t3 cannot trunk: no pod ENIs.
		{info("t3.medium", 2, 4096, 3, 6, 0), map[corev1.ResourceName]int64{}},
	} {
		if diff := cmp.Diff(tc.want, Devices(tc.info)); diff != "" {
			t.Errorf("%s devices (-want,+got):\n%s", tc.info.InstanceType, diff)
		}
	}
}
