package ec2fake

// Where the figures of the instance types below come from:
//   - vCPUs, memory, GPUs, Neuron devices, EFA interfaces, network cards
//     and IPv4 addresses per interface: the Amazon EC2 instance type
//     specifications (docs.aws.amazon.com/ec2/latest/instancetypes), as
//     DescribeInstanceTypes reports them; where Karpenter's AWS provider
//     records a real DescribeInstanceTypes answer for a type
//     (pkg/fake/zz_generated.describe_instance_types.go), the figures were
//     checked against it.
//   - Network cards and their interfaces, and branch interfaces: the VPC
//     resource controller's limits table (aws/amazon-vpc-resource-
//     controller-k8s, pkg/aws/vpc/limits.go, generated 2026-03-20).
//   - On-demand prices: the us-east-1 Linux figures of the price table the
//     aws provider ships (pricing/ondemand.json).

// branchENIs are the VPC resource controller's branch interfaces of the
// trunk-capable types of both catalogues.
var branchENIs = map[string]int32{
	"m5.large": 9, "m5.xlarge": 18, "m5.2xlarge": 38, "c5.large": 9, "c5.xlarge": 18, "r5.large": 9,
	"m6g.large": 9, "m6g.xlarge": 18, "c6g.large": 9, "m7i.large": 9, "m7i.xlarge": 18, "m7i.2xlarge": 38,
	"c7i.large": 9, "c7g.xlarge": 18, "g4dn.xlarge": 39,
	"inf2.xlarge": 18, "inf2.24xlarge": 107, "trn1.2xlarge": 17, "trn1.32xlarge": 82,
	"c5n.9xlarge": 54, "p4d.24xlarge": 62, "p5.48xlarge": 120, "g5.12xlarge": 107, "g4ad.16xlarge": 6, "dl1.24xlarge": 62,
	"c6in.32xlarge": 106, "m6idn.32xlarge": 106, "c5n.18xlarge": 107,
}

func withBranches(types []InstanceType) []InstanceType {
	for i := range types {
		types[i].BranchENIs = branchENIs[types[i].Name]
	}
	return types
}

// acceleratedInstanceTypes are DefaultWorld's types with devices: the
// smallest Inferentia2 and Trainium ones, so that the sandbox's region
// offers aws.amazon.com/neuron, and the smallest with EFA.
func acceleratedInstanceTypes() []InstanceType {
	inf2 := amd("inf2.xlarge", 4, 16384, 4, 15, "Up to 15 Gigabit")
	inf2.NeuronDevices = []NeuronDevice{{Name: "Inferentia2", Count: 1, Cores: 2, Version: 2, MemoryMiB: 32768}}
	trn1 := intelType("trn1.2xlarge", 8, 32768, 4, 15, "Up to 12.5 Gigabit")
	trn1.NeuronDevices = []NeuronDevice{{Name: "Trainium", Count: 1, Cores: 2, Version: 2, MemoryMiB: 32768}}
	trn1.InstanceStorageGB = 474
	c5n := intelType("c5n.9xlarge", 36, 98304, 8, 30, "50 Gigabit")
	c5n.EFAs = 1
	return []InstanceType{inf2, trn1, c5n}
}

// RealInstanceTypes are instance types of every shape that changes what
// a node reports: one network card and several (p5.48xlarge's 32 cards of
// 2 interfaces), NVIDIA, AMD and Habana GPUs, Inferentia and Trainium
// devices, EFA, trunk-capable and not, burstable and Graviton. With
// RealOnDemandPrices they make a region whose nodes tests can compare
// with the provider's virtual nodes.
func RealInstanceTypes() []InstanceType {
	types := defaultInstanceTypes()
	types = append(types, acceleratedInstanceTypes()...)
	micro := intelType("t3.micro", 2, 1024, 2, 2, "Up to 5 Gigabit")
	micro.Burstable = true

	inf2big := amd("inf2.24xlarge", 96, 393216, 15, 50, "50 Gigabit")
	inf2big.NeuronDevices = []NeuronDevice{{Name: "Inferentia2", Count: 6, Cores: 2, Version: 2, MemoryMiB: 32768}}

	trn1big := intelType("trn1.32xlarge", 128, 524288, 40, 50, "8x 100 Gigabit")
	trn1big.NetworkCards = []int32{5, 5, 5, 5, 5, 5, 5, 5}
	trn1big.EFAs = 8
	trn1big.NeuronDevices = []NeuronDevice{{Name: "Trainium", Count: 16, Cores: 2, Version: 2, MemoryMiB: 32768}}

	p4d := intelType("p4d.24xlarge", 96, 1179648, 60, 50, "4x 100 Gigabit")
	p4d.NetworkCards = []int32{15, 15, 15, 15}
	p4d.EFAs = 4
	p4d.GPUs = []GPU{{Name: "A100", Manufacturer: "NVIDIA", Count: 8, MemoryMiB: 40960}}

	p5 := amd("p5.48xlarge", 192, 2097152, 64, 50, "3200 Gigabit")
	p5.NetworkCards = make([]int32, 32)
	for i := range p5.NetworkCards {
		p5.NetworkCards[i] = 2
	}
	p5.EFAs = 32
	p5.GPUs = []GPU{{Name: "H100", Manufacturer: "NVIDIA", Count: 8, MemoryMiB: 81920}}

	g5 := amd("g5.12xlarge", 48, 196608, 15, 50, "40 Gigabit")
	g5.EFAs = 1
	g5.GPUs = []GPU{{Name: "A10G", Manufacturer: "NVIDIA", Count: 4, MemoryMiB: 22888}}

	g4ad := amd("g4ad.16xlarge", 64, 262144, 8, 30, "25 Gigabit")
	g4ad.GPUs = []GPU{{Name: "Radeon Pro V520", Manufacturer: "AMD", Count: 4, MemoryMiB: 8192}}

	dl1 := intelType("dl1.24xlarge", 96, 786432, 60, 50, "4x 100 Gigabit")
	dl1.NetworkCards = []int32{15, 15, 15, 15}
	dl1.EFAs = 4
	dl1.GPUs = []GPU{{Name: "Gaudi HL-205", Manufacturer: "Habana", Count: 8, MemoryMiB: 32768}}

	c6in := intelType("c6in.32xlarge", 128, 262144, 16, 50, "200 Gigabit")
	c6in.NetworkCards = []int32{8, 8}
	c6in.EFAs = 2

	m6idn := intelType("m6idn.32xlarge", 128, 524288, 16, 50, "200 Gigabit")
	m6idn.NetworkCards = []int32{8, 8}
	m6idn.EFAs = 2

	c5n := intelType("c5n.18xlarge", 72, 196608, 15, 50, "100 Gigabit")
	c5n.EFAs = 1

	types = append(types, micro, inf2big, trn1big, p4d, p5, g5, g4ad, dl1, c6in, m6idn, c5n)
	return withBranches(types)
}

// RealOnDemandPrices are the on-demand prices of RealInstanceTypes, for
// the fake's lowest-price order.
func RealOnDemandPrices() map[string]float64 {
	prices := defaultOnDemandPrices()
	for name, price := range map[string]float64{
		"t3.micro": 0.0104, "inf2.24xlarge": 6.49063, "trn1.32xlarge": 21.5, "p4d.24xlarge": 21.957642,
		"p5.48xlarge": 55.04, "g5.12xlarge": 5.672, "g4ad.16xlarge": 3.468, "dl1.24xlarge": 13.10904,
		"c6in.32xlarge": 7.2576, "m6idn.32xlarge": 10.18368, "c5n.18xlarge": 3.888,
	} {
		prices[name] = price
	}
	return prices
}

func intelType(name string, vcpus int32, mib int64, enis, ips int32, net string) InstanceType {
	return InstanceType{
		Name: name, VCPUs: vcpus, ThreadsPerCore: 2, MemoryMiB: mib,
		Architectures: []string{"x86_64"}, ProcessorManufacturer: "Intel",
		MaxENIs: enis, IPv4PerENI: ips, NetworkPerformance: net,
		Hypervisor: "nitro", SupportedUsageClasses: []string{"on-demand", "spot"},
		CurrentGeneration: true,
	}
}

func amd(name string, vcpus int32, mib int64, enis, ips int32, net string) InstanceType {
	it := intelType(name, vcpus, mib, enis, ips, net)
	it.ProcessorManufacturer = "AMD"
	return it
}
