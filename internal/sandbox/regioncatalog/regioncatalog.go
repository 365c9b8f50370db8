// Package regioncatalog builds the instance-type catalog of a whole AWS
// region, as the provisioner would publish it for a pool that may launch
// anything, for tests that measure how catalogs are stored and written.
//
// Where the figures come from: the instance-type names and their on-demand
// prices are the us-east-1 entries of the price table the aws provider
// ships (package pricing, ondemand.json, generated from the AWS Pricing
// API's public figures), which lists every type AWS prices in the region;
// us-east-1 has six availability zones (use1-az1 … use1-az6), and every
// type is offered in all six, spot and on-demand, which is the largest a
// region's catalog can be. A type's vCPUs follow from its size (xlarge is
// 4, 2xlarge 8, …), its memory from its category's published ratio (c 2
// GiB per vCPU, m 4, r 8, x 16, …), and its capacity and allocatable are
// what its node reports with nodeadm's defaults and a 20 GiB root volume
// (package eksnode, written from nodeadm's and the kubelet's published
// behaviour, not from the aws provider). Spot prices are made up (30–40%
// of on-demand), stable from run to run.
package regioncatalog

import (
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/eksnode"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// Region is the region whose catalog InstanceTypes builds.
const Region = "us-east-1"

// Zones are the region's availability zones.
var Zones = []string{"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"}

// LabelPrefix starts the keys of the labels that describe a type beyond
// arch and os: the instance attribute labels the aws provider sets
// (v1alpha1.InstanceLabels), and two more Karpenter has (EBS bandwidth,
// capacity reservations), so that a catalog measured here is at least as
// large as the provider's.
const LabelPrefix = "nodeforge.dev/instance-"

// Extended resources of accelerated types, as their device plugins name them.
const (
	ResourceAMDGPU = v1alpha1.ResourceAMDGPU
	ResourceNeuron = v1alpha1.ResourceNeuron
	ResourceGaudi  = v1alpha1.ResourceHabanaGaudi
)

// InstanceTypes returns the region's catalog, sorted by type name, each
// type offered in every zone, spot and on-demand, all available.
func InstanceTypes() ([]v1alpha1.InstanceType, error) {
	table, err := pricing.Shipped()
	if err != nil {
		return nil, err
	}
	names := table.InstanceTypes(Region)
	if len(names) == 0 {
		return nil, fmt.Errorf("the shipped price table has no types in %s", Region)
	}
	largest := map[string]int32{} // family → vCPUs of its largest sized (not metal) type
	for _, n := range names {
		fam, size, _ := strings.Cut(n, ".")
		if v := sizedVCPUs(fam, size); v > largest[fam] {
			largest[fam] = v
		}
	}
	out := make([]v1alpha1.InstanceType, 0, len(names))
	for _, n := range names {
		od, _ := table.OnDemand(Region, n)
		out = append(out, instanceType(n, od, largest))
	}
	return out, nil
}

// familyPattern splits a family name into category, generation and
// options: "m7gd" is category m, generation 7, options gd; "u7in-16tb" is
// u, 7, in-16tb; "p6-b200" is p, 6, -b200.
var familyPattern = regexp.MustCompile(`^([a-z]+?)(\d+)([a-z-].*)?$`)

func instanceType(name string, onDemand float64, largest map[string]int32) v1alpha1.InstanceType {
	fam, size, _ := strings.Cut(name, ".")
	m := familyPattern.FindStringSubmatch(fam)
	category, generation, options := fam, "", ""
	if m != nil {
		category, generation, options = m[1], m[2], m[3]
	}
	vcpus := sizedVCPUs(fam, size)
	if strings.HasPrefix(size, "metal") {
		vcpus = metalVCPUs(size, largest[fam])
	}
	arch, manufacturer := "amd64", "intel"
	switch {
	case category == "a" || strings.HasPrefix(options, "g"):
		arch, manufacturer = "arm64", "aws"
	case strings.HasPrefix(options, "a"):
		manufacturer = "amd"
	}
	mib := memoryMiB(category, fam, size, vcpus)

	enis, ips := eniLimits(size, vcpus)
	info := ec2fake.InstanceType{Name: name, VCPUs: vcpus, MemoryMiB: mib, MaxENIs: enis, IPv4PerENI: ips}
	labels := map[string]string{
		corev1.LabelArchStable:                          arch,
		corev1.LabelOSStable:                            "linux",
		LabelPrefix + "category":                        category,
		LabelPrefix + "family":                          fam,
		LabelPrefix + "generation":                      generation,
		LabelPrefix + "size":                            size,
		LabelPrefix + "cpu":                             strconv.Itoa(int(vcpus)),
		LabelPrefix + "cpu-manufacturer":                manufacturer,
		LabelPrefix + "memory":                          strconv.FormatInt(mib, 10),
		LabelPrefix + "hypervisor":                      "nitro",
		LabelPrefix + "network-bandwidth":               strconv.Itoa(int(min(vcpus, 192)) * 390),
		LabelPrefix + "ebs-bandwidth":                   strconv.Itoa(int(min(vcpus, 192)) * 312),
		LabelPrefix + "encryption-in-transit-supported": "true",
		LabelPrefix + "capacity-reservation":            "true",
	}
	if strings.HasPrefix(size, "metal") {
		labels[LabelPrefix+"hypervisor"] = ""
	}
	if strings.Contains(options, "d") {
		labels[LabelPrefix+"local-nvme"] = strconv.Itoa(int(vcpus) * 59)
	}
	count := max(1, min(8, vcpus/12))
	switch {
	case category == "g" && options == "ad":
		info.GPUs = []ec2fake.GPU{{Name: "Radeon Pro V520", Manufacturer: "AMD", Count: count}}
		labels[LabelPrefix+"gpu-name"], labels[LabelPrefix+"gpu-manufacturer"] = "radeon-pro-v520", "amd"
	case category == "g" || category == "gr" || category == "p":
		info.GPUs = []ec2fake.GPU{{Name: "L4", Manufacturer: "NVIDIA", Count: count}}
		labels[LabelPrefix+"gpu-name"], labels[LabelPrefix+"gpu-manufacturer"] = "l4", "nvidia"
	case category == "inf" || category == "trn":
		info.NeuronDevices = []ec2fake.NeuronDevice{{Name: "Inferentia2", Count: count, Cores: 2}}
		labels[LabelPrefix+"accelerator-name"], labels[LabelPrefix+"accelerator-manufacturer"] = "inferentia", "aws"
	case category == "dl":
		info.GPUs = []ec2fake.GPU{{Name: "Gaudi HL-205", Manufacturer: "Habana", Count: count}}
		labels[LabelPrefix+"accelerator-name"], labels[LabelPrefix+"accelerator-manufacturer"] = "gaudi-hl-205", "habana"
	}
	if _, ok := labels[LabelPrefix+"gpu-name"]; ok {
		labels[LabelPrefix+"gpu-count"] = strconv.Itoa(int(count))
		labels[LabelPrefix+"gpu-memory"] = strconv.Itoa(int(count) * 24576)
	}
	if _, ok := labels[LabelPrefix+"accelerator-name"]; ok {
		labels[LabelPrefix+"accelerator-count"] = strconv.Itoa(int(count))
	}

	node := eksnode.Standard(info, 20)
	it := v1alpha1.InstanceType{Name: name, Labels: labels, Capacity: node.Capacity, Allocatable: node.Allocatable}
	for _, zone := range Zones {
		it.Offerings = append(it.Offerings,
			v1alpha1.Offering{Zone: zone, CapacityType: v1alpha1.CapacityTypeOnDemand, Price: strconv.FormatFloat(onDemand, 'f', -1, 64), Available: true},
			v1alpha1.Offering{Zone: zone, CapacityType: v1alpha1.CapacityTypeSpot, Price: spotPrice(name, zone, onDemand), Available: true},
		)
	}
	return it
}

// sizedVCPUs is the vCPUs a size name stands for: large 2, xlarge 4,
// Nxlarge 4N; the smallest burstable sizes have 2 and medium has 1 (2 on
// burstable families); metal sizes are 0 here (see metalVCPUs).
func sizedVCPUs(fam, size string) int32 {
	switch size {
	case "nano", "micro", "small":
		return 2
	case "medium":
		if strings.HasPrefix(fam, "t") {
			return 2
		}
		return 1
	case "large":
		return 2
	case "xlarge":
		return 4
	}
	if n, ok := strings.CutSuffix(size, "xlarge"); ok {
		if v, err := strconv.Atoi(n); err == nil {
			return int32(4 * v)
		}
	}
	return 0
}

// metalVCPUs: metal-48xl is as large as 48xlarge; plain metal as the
// family's largest sized type (96 for a family that has only metal).
func metalVCPUs(size string, largest int32) int32 {
	if n, ok := strings.CutPrefix(size, "metal-"); ok {
		if v, err := strconv.Atoi(strings.TrimSuffix(n, "xl")); err == nil {
			return int32(4 * v)
		}
	}
	if largest > 0 {
		return largest
	}
	return 96
}

// memoryMiB follows each category's published memory per vCPU.
func memoryMiB(category, fam, size string, vcpus int32) int64 {
	if category == "t" {
		gib := map[string]float64{"nano": 0.5, "micro": 1, "small": 2, "medium": 4, "large": 8, "xlarge": 16, "2xlarge": 32}[size]
		return int64(gib * 1024)
	}
	if category == "u" {
		// u-6tb1, u7i-12tb: the family names its memory in TiB.
		m := regexp.MustCompile(`(\d+)tb`).FindStringSubmatch(fam)
		if m != nil {
			tb, _ := strconv.Atoi(m[1])
			return int64(tb) << 20
		}
	}
	perVCPU := map[string]float64{
		"a": 2, "c": 2, "vt": 2, "m": 4, "h": 4, "g": 4, "gr": 4, "inf": 4, "trn": 4, "hpc": 4, "mac": 4,
		"r": 8, "z": 8, "i": 8, "im": 4, "is": 6, "d": 8, "dl": 8, "cr": 8, "p": 12, "f": 16, "x": 16,
	}[category]
	if perVCPU == 0 {
		perVCPU = 4
	}
	if category == "x" && strings.Contains(fam, "e") {
		perVCPU = 32
	}
	return int64(float64(vcpus) * perVCPU * 1024)
}

// eniLimits are the ENIs and IPv4 addresses per ENI EC2 publishes for
// types of that many vCPUs, roughly; they decide max pods.
func eniLimits(size string, vcpus int32) (enis, ips int32) {
	enis, ips = 15, 50
	switch {
	case size == "nano" || size == "micro":
		enis, ips = 2, 2
	case vcpus <= 2:
		enis, ips = 3, 10
	case vcpus <= 8:
		enis, ips = 4, 15
	case vcpus <= 32:
		enis, ips = 8, 30
	}
	return enis, ips
}

// spotPrice is 30–40% of on-demand, differing per type and zone, to five
// decimal places as EC2 quotes spot prices.
func spotPrice(name, zone string, onDemand float64) string {
	h := fnv.New32a()
	h.Write([]byte(name + "/" + zone))
	fraction := 0.30 + float64(h.Sum32()%1000)/10000
	return strconv.FormatFloat(math.Round(onDemand*fraction*1e5)/1e5, 'f', -1, 64)
}

// Families returns the distinct families of types, sorted.
func Families(types []v1alpha1.InstanceType) []string {
	var out []string
	for _, it := range types {
		fam, _, _ := strings.Cut(it.Name, ".")
		out = append(out, fam)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
