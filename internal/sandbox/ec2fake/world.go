package ec2fake

import (
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"time"
)

// DefaultAccountID is the account the fake answers as when World.AccountID is
// empty. It is the account ID AWS documentation uses in examples.
const DefaultAccountID = "111122223333"

// EKSAccountID owns the EKS-optimized AMIs in most commercial regions,
// us-west-2 included.
const EKSAccountID = "602401143452"

// DiscoveryTag is the tag key DefaultWorld puts, with value "sandbox", on the
// resources a sandbox cluster should discover.
const DiscoveryTag = "nodeforge.dev/discovery"

// World is the fixed part of the fake's EC2 region: its catalogue and network.
// New copies it, so a World can be reused and modified by the caller.
type World struct {
	Region    string // e.g. "us-west-2"
	AccountID string // owner of subnets, templates and "self" AMIs; DefaultAccountID if empty
	Zones     []Zone

	InstanceTypes []InstanceType
	// Offerings lists, per instance type, the zone names where it is offered.
	// A type that is missing (or a nil map) is offered in every zone.
	Offerings map[string][]string
	// SpotPrices is instance type -> zone name -> $/hour. A type×zone with no
	// price has no Spot capacity: Spot launches there fail with Unsupported.
	SpotPrices map[string]map[string]float64
	// OnDemandPrices is instance type -> $/hour, used to order on-demand
	// candidates for the lowest-price strategy.
	OnDemandPrices map[string]float64

	Subnets        []Subnet
	SecurityGroups []SecurityGroup
	Images         []Image
	// CapacityReservations are the account's on-demand capacity
	// reservations (reservations.go); none by default.
	CapacityReservations []CapacityReservation

	// PendingFor is how long a new instance stays pending before it is
	// running; zero makes instances running as soon as they are launched.
	PendingFor time.Duration
	// ShuttingDownFor is how long a terminated instance stays shutting-down
	// before it is terminated; zero makes that immediate.
	ShuttingDownFor time.Duration
	// TerminatedVisibleFor is how long DescribeInstances still shows a
	// terminated instance (about an hour on real EC2); zero means forever.
	TerminatedVisibleFor time.Duration
	// RequestRateLimits throttles requests as EC2 does, with a token
	// bucket per API (ratelimit.go); Server.LimitRequestRates turns them
	// on and off later.
	RequestRateLimits bool
	// Now is the clock; time.Now if nil.
	Now func() time.Time
}

// Zone is an availability zone.
type Zone struct {
	Name string // e.g. "us-west-2a"
	ID   string // e.g. "usw2-az1"
}

// InstanceType describes an instance type as DescribeInstanceTypes reports it.
type InstanceType struct {
	Name           string
	VCPUs          int32
	ThreadsPerCore int32 // 2 for Intel and AMD with SMT, 1 for Graviton; 0 means 1
	MemoryMiB      int64
	// Architectures is "x86_64" and/or "arm64"; nil means x86_64.
	Architectures         []string
	ProcessorManufacturer string // "Intel", "AMD" or "AWS"
	// MaxENIs is the interfaces of every network card together
	// (networkInfo maximumNetworkInterfaces).
	MaxENIs    int32
	IPv4PerENI int32
	// NetworkCards is each card's maximum interfaces, by card index; nil
	// means one card with MaxENIs. The first card is the default one.
	NetworkCards []int32
	// EFAs is the most EFA interfaces the type takes (efaInfo
	// maximumEfaInterfaces); 0: EFA unsupported.
	EFAs int32
	// NeuronDevices are its Inferentia or Trainium devices (neuronInfo).
	NeuronDevices []NeuronDevice
	// BranchENIs is how many branch interfaces (pods with security groups
	// of their own) the VPC resource controller gives a node of the type;
	// 0 for a type that cannot trunk. EC2 does not describe it: only the
	// fake's kubelet (package kubeletfake) reads it.
	BranchENIs         int32
	NetworkPerformance string
	// BaselineBandwidthGbps and PeakBandwidthGbps are the default network
	// card's bandwidth (networkCards baselineBandwidthInGbps, ...).
	BaselineBandwidthGbps float64
	PeakBandwidthGbps     float64
	// EncryptionInTransit: the type encrypts traffic between instances.
	EncryptionInTransit bool
	GPUs                []GPU
	InstanceStorageGB   int64  // local NVMe instance storage; 0 for EBS only
	Hypervisor          string // "nitro" or "xen"; empty for bare metal
	BareMetal           bool
	Burstable           bool
	// SupportedUsageClasses is "on-demand" and/or "spot"; nil means both.
	SupportedUsageClasses []string
	CurrentGeneration     bool
}

// GPU is one kind of GPU fitted to an instance type.
type GPU struct {
	Name         string // e.g. "T4"
	Manufacturer string // e.g. "NVIDIA"
	Count        int32
	MemoryMiB    int32 // per GPU
}

// NeuronDevice is one kind of Neuron device fitted to an instance type.
type NeuronDevice struct {
	Name      string // "Inferentia2", "Trainium"
	Count     int32
	Cores     int32 // NeuronCores per device
	Version   int32 // the NeuronCore's version
	MemoryMiB int32 // per device
}

// cards is the type's network cards' maximum interfaces, by index.
func (it *InstanceType) cards() []int32 {
	if len(it.NetworkCards) == 0 {
		return []int32{it.MaxENIs}
	}
	return it.NetworkCards
}

// Subnet is a VPC subnet instances can be launched into.
type Subnet struct {
	ID     string
	VpcID  string
	Zone   string // zone name
	ZoneID string
	CIDR   string // IPv4, e.g. "10.0.0.0/20"
	// AvailableIPs is how many addresses are free before any launch; zero
	// means every usable address of the CIDR (its size less the five AWS
	// reserves). Each running instance uses one.
	AvailableIPs int32
	Tags         map[string]string
}

// SecurityGroup is a VPC security group.
type SecurityGroup struct {
	ID          string
	Name        string
	Description string
	VpcID       string
	Tags        map[string]string
}

// Image is an AMI.
type Image struct {
	ID           string
	Name         string
	Description  string
	OwnerID      string
	OwnerAlias   string // "amazon" for AMIs published by AWS; matched by the Owners "amazon" alias
	Architecture string // "x86_64" or "arm64"
	CreationDate time.Time
	State        string // "available" if empty
	Public       bool
	Tags         map[string]string
}

func (w World) clone() World {
	c := w
	c.Zones = slices.Clone(w.Zones)
	c.InstanceTypes = make([]InstanceType, len(w.InstanceTypes))
	for i, it := range w.InstanceTypes {
		it.Architectures = slices.Clone(it.Architectures)
		it.GPUs = slices.Clone(it.GPUs)
		it.SupportedUsageClasses = slices.Clone(it.SupportedUsageClasses)
		it.NetworkCards = slices.Clone(it.NetworkCards)
		it.NeuronDevices = slices.Clone(it.NeuronDevices)
		c.InstanceTypes[i] = it
	}
	c.Offerings = map[string][]string{}
	for k, v := range w.Offerings {
		c.Offerings[k] = slices.Clone(v)
	}
	c.SpotPrices = map[string]map[string]float64{}
	for k, v := range w.SpotPrices {
		c.SpotPrices[k] = maps.Clone(v)
	}
	c.OnDemandPrices = maps.Clone(w.OnDemandPrices)
	c.Subnets = make([]Subnet, len(w.Subnets))
	for i, sn := range w.Subnets {
		sn.Tags = maps.Clone(sn.Tags)
		c.Subnets[i] = sn
	}
	c.SecurityGroups = make([]SecurityGroup, len(w.SecurityGroups))
	for i, sg := range w.SecurityGroups {
		sg.Tags = maps.Clone(sg.Tags)
		c.SecurityGroups[i] = sg
	}
	c.Images = make([]Image, len(w.Images))
	for i, im := range w.Images {
		im.Tags = maps.Clone(im.Tags)
		c.Images[i] = im
	}
	c.CapacityReservations = make([]CapacityReservation, len(w.CapacityReservations))
	for i, cr := range w.CapacityReservations {
		cr.Tags = maps.Clone(cr.Tags)
		c.CapacityReservations[i] = cr
	}
	return c
}

// DefaultWorld is a small, realistic us-west-2: three zones, one tagged
// private subnet per zone plus an untagged one, two security groups, current
// and previous EKS AL2023 AMIs for both architectures plus a custom one, and
// nineteen real instance types with their published figures and prices,
// two of them with Neuron devices and one with EFA.
func DefaultWorld() World {
	const vpc = "vpc-0a1b2c3d4e5f60718"
	discovered := func(name string) map[string]string {
		return map[string]string{DiscoveryTag: "sandbox", "Name": name}
	}
	w := World{
		Region:    "us-west-2",
		AccountID: DefaultAccountID,
		Zones: []Zone{
			{Name: "us-west-2a", ID: "usw2-az1"},
			{Name: "us-west-2b", ID: "usw2-az2"},
			{Name: "us-west-2c", ID: "usw2-az3"},
		},
		InstanceTypes:  withBranches(append(defaultInstanceTypes(), acceleratedInstanceTypes()...)),
		OnDemandPrices: defaultOnDemandPrices(),
		// Invented, so that "not offered in this zone" can be exercised with
		// the default catalogue: GPU types are commonly missing from some
		// zones of a region.
		Offerings: map[string][]string{
			"g4dn.xlarge": {"us-west-2a", "us-west-2b"},
		},
		Subnets: []Subnet{
			{ID: "subnet-0c1a4f3e2d5b60a01", VpcID: vpc, Zone: "us-west-2a", ZoneID: "usw2-az1", CIDR: "10.0.0.0/20", Tags: discovered("sandbox-private-us-west-2a")},
			{ID: "subnet-0c1a4f3e2d5b60b02", VpcID: vpc, Zone: "us-west-2b", ZoneID: "usw2-az2", CIDR: "10.0.16.0/20", Tags: discovered("sandbox-private-us-west-2b")},
			{ID: "subnet-0c1a4f3e2d5b60c03", VpcID: vpc, Zone: "us-west-2c", ZoneID: "usw2-az3", CIDR: "10.0.32.0/20", Tags: discovered("sandbox-private-us-west-2c")},
			{ID: "subnet-0c1a4f3e2d5b60d04", VpcID: vpc, Zone: "us-west-2a", ZoneID: "usw2-az1", CIDR: "10.0.128.0/24"},
		},
		SecurityGroups: []SecurityGroup{
			{ID: "sg-0e5d4c3b2a1f09871", Name: "sandbox-nodes", Description: "Nodes of the sandbox cluster", VpcID: vpc, Tags: discovered("sandbox-nodes")},
			{ID: "sg-0e5d4c3b2a1f09872", Name: "default", Description: "default VPC security group", VpcID: vpc},
		},
		Images: []Image{
			eksImage("ami-0e7a1d2c3b4f50001", "x86_64", "standard", "v20261101", date(2026, 11, 1)),
			eksImage("ami-0e7a1d2c3b4f50002", "arm64", "standard", "v20261101", date(2026, 11, 1)),
			eksImage("ami-0e7a1d2c3b4f50003", "x86_64", "standard", "v20261001", date(2026, 10, 1)),
			eksImage("ami-0e7a1d2c3b4f50004", "arm64", "standard", "v20261001", date(2026, 10, 1)),
			eksImage("ami-0e7a1d2c3b4f50006", "x86_64", "nvidia", "v20261101", date(2026, 11, 1)),
			eksImage("ami-0e7a1d2c3b4f50007", "arm64", "nvidia", "v20261101", date(2026, 11, 1)),
			eksImage("ami-0e7a1d2c3b4f50008", "x86_64", "nvidia", "v20261001", date(2026, 10, 1)),
			eksImage("ami-0e7a1d2c3b4f50009", "x86_64", "neuron", "v20261101", date(2026, 11, 1)),
			{
				ID: "ami-0c5f0d1e2a3b40005", Name: "nodeforge-custom-al2023-x86_64-20261115",
				Description: "Custom sandbox node image", OwnerID: DefaultAccountID,
				Architecture: "x86_64", CreationDate: date(2026, 11, 15), State: "available",
				Tags: discovered("nodeforge-custom"),
			},
		},
	}
	w.SpotPrices = defaultSpotPrices(w.OnDemandPrices, w.Zones)
	return w
}

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

func eksImage(id, arch, variant, release string, created time.Time) Image {
	return Image{
		ID:           id,
		Name:         "amazon-eks-node-al2023-" + arch + "-" + variant + "-1.37-" + release,
		Description:  "EKS-optimized Kubernetes node based on Amazon Linux 2023, (k8s: 1.37)",
		OwnerID:      EKSAccountID,
		OwnerAlias:   "amazon",
		Architecture: arch,
		CreationDate: created,
		State:        "available",
		Public:       true,
	}
}

// defaultInstanceTypes are real instance types. vCPUs, memory, maximum
// network interfaces, IPv4 addresses per interface, network performance, GPU
// and local storage figures are the published ones from the Amazon EC2
// instance type specifications (docs.aws.amazon.com/ec2/latest/instancetypes),
// which DescribeInstanceTypes also reports.
func defaultInstanceTypes() []InstanceType {
	intel := intelType
	graviton := func(name string, vcpus int32, mib int64, enis, ips int32, net string) InstanceType {
		it := intel(name, vcpus, mib, enis, ips, net)
		it.ThreadsPerCore = 1
		it.Architectures = []string{"arm64"}
		it.ProcessorManufacturer = "AWS"
		return it
	}
	t3 := intel("t3.medium", 2, 4096, 3, 6, "Up to 5 Gigabit")
	t3.Burstable = true
	g4dn := intel("g4dn.xlarge", 4, 16384, 3, 10, "Up to 25 Gigabit")
	g4dn.GPUs = []GPU{{Name: "T4", Manufacturer: "NVIDIA", Count: 1, MemoryMiB: 16384}}
	g4dn.InstanceStorageGB = 125
	types := []InstanceType{
		t3,
		intel("m5.large", 2, 8192, 3, 10, "Up to 10 Gigabit"),
		intel("m5.xlarge", 4, 16384, 4, 15, "Up to 10 Gigabit"),
		intel("m5.2xlarge", 8, 32768, 4, 15, "Up to 10 Gigabit"),
		intel("c5.large", 2, 4096, 3, 10, "Up to 10 Gigabit"),
		intel("c5.xlarge", 4, 8192, 4, 15, "Up to 10 Gigabit"),
		intel("r5.large", 2, 16384, 3, 10, "Up to 10 Gigabit"),
		graviton("m6g.large", 2, 8192, 3, 10, "Up to 10 Gigabit"),
		graviton("m6g.xlarge", 4, 16384, 4, 15, "Up to 10 Gigabit"),
		graviton("c6g.large", 2, 4096, 3, 10, "Up to 10 Gigabit"),
		intel("m7i.large", 2, 8192, 3, 10, "Up to 12.5 Gigabit"),
		intel("m7i.xlarge", 4, 16384, 4, 15, "Up to 12.5 Gigabit"),
		intel("m7i.2xlarge", 8, 32768, 4, 15, "Up to 12.5 Gigabit"),
		intel("c7i.large", 2, 4096, 3, 10, "Up to 12.5 Gigabit"),
		graviton("c7g.xlarge", 4, 8192, 4, 15, "Up to 12.5 Gigabit"),
		g4dn,
	}
	// Baseline bandwidth (Gbit/s) of each type's network card and whether
	// it encrypts traffic in transit, as the instance type specifications
	// publish them (network specifications tables).
	network := map[string]struct {
		gbps      float64
		encrypted bool
	}{
		"t3.medium": {0.256, false}, "m5.large": {0.75, false}, "m5.xlarge": {1.25, false}, "m5.2xlarge": {2.5, false},
		"c5.large": {0.75, false}, "c5.xlarge": {1.25, false}, "r5.large": {0.75, false},
		"m6g.large": {0.75, false}, "m6g.xlarge": {1.25, false}, "c6g.large": {0.75, false},
		"m7i.large": {0.781, true}, "m7i.xlarge": {1.562, true}, "m7i.2xlarge": {3.125, true}, "c7i.large": {0.781, true},
		"c7g.xlarge": {1.876, true}, "g4dn.xlarge": {5, true},
	}
	for i := range types {
		n := network[types[i].Name]
		types[i].BaselineBandwidthGbps, types[i].EncryptionInTransit = n.gbps, n.encrypted
	}
	return withBranches(types)
}

// defaultOnDemandPrices are the published us-west-2 Linux on-demand prices in
// $/hour (Amazon EC2 On-Demand pricing page).
func defaultOnDemandPrices() map[string]float64 {
	return map[string]float64{
		"t3.medium":   0.0416,
		"m5.large":    0.096,
		"m5.xlarge":   0.192,
		"m5.2xlarge":  0.384,
		"c5.large":    0.085,
		"c5.xlarge":   0.17,
		"r5.large":    0.126,
		"m6g.large":   0.077,
		"m6g.xlarge":  0.154,
		"c6g.large":   0.068,
		"m7i.large":   0.1008,
		"m7i.xlarge":  0.2016,
		"m7i.2xlarge": 0.4032,
		"c7i.large":   0.08925,
		"c7g.xlarge":  0.145,
		"g4dn.xlarge": 0.526,
		// us-east-1's shipped figures, which us-west-2 shares for these.
		"inf2.xlarge":  0.7582,
		"trn1.2xlarge": 1.34375,
		"c5n.9xlarge":  1.944,
	}
}

// defaultSpotPrices invents Spot prices, which on real EC2 move over time:
// 30–40% of the on-demand price, differing per type and zone but stable from
// run to run so tests can rely on the order.
func defaultSpotPrices(onDemand map[string]float64, zones []Zone) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for name, od := range onDemand {
		out[name] = map[string]float64{}
		for _, z := range zones {
			h := fnv.New32a()
			h.Write([]byte(name + "/" + z.Name))
			fraction := 0.30 + float64(h.Sum32()%1000)/10000 // 0.30 to 0.3999
			out[name][z.Name] = math.Round(od*fraction*10000) / 10000
		}
	}
	return out
}
