// Package simulated is the simulated cloud: a catalog of instance types and
// offerings kept as data (catalog.yaml, replaceable), which the sandbox and
// the tests launch "instances" from.
package simulated

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

//go:embed catalog.yaml
var defaultCatalog []byte

// ResourceGPU is the extended resource the GPU family offers.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// catalogFile is the shape of catalog.yaml.
type catalogFile struct {
	Zones           []string           `json:"zones"`
	ZoneSpotFactors map[string]float64 `json:"zoneSpotFactors"`
	SpotFactor      float64            `json:"spotFactor"`
	Sizes           map[string]int     `json:"sizes"`
	// RootVolumeGi is every node's root volume, its ephemeral-storage
	// capacity; 20 when unset, the aws provider's default.
	RootVolumeGi int `json:"rootVolumeGi"`
	Families     []struct {
		Name           string  `json:"name"`
		Description    string  `json:"description"`
		Arch           string  `json:"arch"`
		MemoryGiPerCPU int     `json:"memoryGiPerCPU"`
		PricePerCPU    float64 `json:"pricePerCPU"`
		GPUsPer8CPU    int     `json:"gpusPer8CPU"`
		// CPUManufacturer: "intel" (the default for amd64), "amd" or
		// "aws" (the default for arm64).
		CPUManufacturer string `json:"cpuManufacturer"`
		// GPU names the family's GPU model, lower case, and its memory.
		GPU *struct {
			Name         string `json:"name"`
			Manufacturer string `json:"manufacturer"`
			MemoryMiB    int    `json:"memoryMiB"`
		} `json:"gpu"`
		// GPUDriver is how a node of the family offers its GPUs:
		// "device-plugin" (the default) as the extended resource
		// nvidia.com/gpu, or "dra" as the NVIDIA DRA driver's devices in a
		// ResourceSlice (the instance type's resourceSlices template), as
		// on nodes that run that driver instead of the device plugin.
		GPUDriver string `json:"gpuDriver"`
		// NetworkMbpsPerCPU is the baseline bandwidth per vCPU; 390 when
		// unset (a 7th generation type's 781 Mbit/s per 2 vCPU).
		NetworkMbpsPerCPU int      `json:"networkMbpsPerCPU"`
		Sizes             []string `json:"sizes"`
		Zones             []string `json:"zones"`
	} `json:"families"`
}

// LoadCatalog reads a catalog file, or the built-in one when path is "".
func LoadCatalog(path string) ([]v1alpha1.InstanceType, error) {
	raw := defaultCatalog
	if path != "" {
		var err error
		if raw, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading catalog: %w", err)
		}
	}
	var f catalogFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return nil, fmt.Errorf("parsing catalog %s: %w", path, err)
	}
	rootGi := cmp.Or(f.RootVolumeGi, 20)
	var out []v1alpha1.InstanceType
	for _, fam := range f.Families {
		zones := fam.Zones
		if len(zones) == 0 {
			zones = f.Zones
		}
		manufacturer := fam.CPUManufacturer
		if manufacturer == "" {
			manufacturer = map[string]string{"amd64": "intel", "arm64": "aws"}[fam.Arch]
		}
		for _, size := range fam.Sizes {
			cpus, ok := f.Sizes[size]
			if !ok {
				return nil, fmt.Errorf("family %s: unknown size %q", fam.Name, size)
			}
			name := fam.Name + "." + size
			// The instance attribute labels, as the aws provider sets
			// them for a type of this shape.
			labels := v1alpha1.InstanceNameLabels(name)
			labels[corev1.LabelArchStable] = fam.Arch
			labels[corev1.LabelOSStable] = "linux"
			labels[v1alpha1.LabelInstanceCPU] = strconv.Itoa(cpus)
			labels[v1alpha1.LabelInstanceCPUManufacturer] = manufacturer
			labels[v1alpha1.LabelInstanceMemory] = strconv.Itoa(cpus * fam.MemoryGiPerCPU * 1024)
			labels[v1alpha1.LabelInstanceHypervisor] = "nitro"
			labels[v1alpha1.LabelInstanceNetworkBandwidth] = strconv.Itoa(cpus * cmp.Or(fam.NetworkMbpsPerCPU, 390))
			labels[v1alpha1.LabelInstanceEncryptionInTransitSupported] = "true"
			it := v1alpha1.InstanceType{
				Name:   name,
				Labels: labels,
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU:              *resource.NewQuantity(int64(cpus), resource.DecimalSI),
					corev1.ResourceMemory:           *resource.NewQuantity(int64(cpus*fam.MemoryGiPerCPU)<<30, resource.BinarySI),
					corev1.ResourcePods:             *resource.NewQuantity(maxPods(cpus), resource.DecimalSI),
					corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(rootGi)<<30, resource.BinarySI),
				},
			}
			if fam.GPUsPer8CPU > 0 {
				gpus := max(1, cpus*fam.GPUsPer8CPU/8)
				switch fam.GPUDriver {
				case "", "device-plugin":
					it.Capacity[ResourceGPU] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
				case "dra":
					if fam.GPU == nil {
						return nil, fmt.Errorf("family %s: gpuDriver dra needs gpu, the model its DRA driver describes", fam.Name)
					}
					slice, err := cloudprovider.NVIDIAGPUSlice(fam.GPU.Name, gpus)
					if err != nil {
						return nil, fmt.Errorf("family %s: %w", fam.Name, err)
					}
					it.ResourceSlices = []v1alpha1.ResourceSliceTemplate{slice}
				default:
					return nil, fmt.Errorf("family %s: gpuDriver %q: choose device-plugin or dra", fam.Name, fam.GPUDriver)
				}
				labels[v1alpha1.LabelInstanceGPUCount] = strconv.Itoa(gpus)
				if fam.GPU != nil {
					labels[v1alpha1.LabelInstanceGPUName] = fam.GPU.Name
					labels[v1alpha1.LabelInstanceGPUManufacturer] = fam.GPU.Manufacturer
					labels[v1alpha1.LabelInstanceGPUMemory] = strconv.Itoa(fam.GPU.MemoryMiB)
				}
			}
			it.Allocatable = Allocatable(it.Capacity)
			onDemand := fam.PricePerCPU * float64(cpus)
			for _, z := range zones {
				spotFactor := f.SpotFactor
				if zf, ok := f.ZoneSpotFactors[z]; ok {
					spotFactor *= zf
				}
				it.Offerings = append(it.Offerings,
					v1alpha1.Offering{Zone: z, CapacityType: v1alpha1.CapacityTypeOnDemand, Price: price(onDemand), Available: true},
					v1alpha1.Offering{Zone: z, CapacityType: v1alpha1.CapacityTypeSpot, Price: price(onDemand * spotFactor), Available: true},
				)
			}
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.InstanceType) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// maxPods follows the common rule of 110 pods per node, fewer on the
// smallest sizes, as their network interfaces would allow.
func maxPods(cpus int) int64 {
	switch {
	case cpus <= 2:
		return 29
	case cpus <= 4:
		return 58
	default:
		return 110
	}
}

// Allocatable is capacity minus the kubelet's reservations, by the formulas
// managed Kubernetes services publish for kube-reserved: CPU 6% of the
// first core, 1% of the second, 0.5% of the third and fourth and 0.25% of
// the rest; memory 255Mi plus 11Mi per pod; plus a 100Mi eviction
// threshold; ephemeral storage 1Gi plus the 10% nodefs eviction threshold.
func Allocatable(capacity corev1.ResourceList) corev1.ResourceList {
	out := capacity.DeepCopy()
	cpuMilli := capacity.Cpu().MilliValue()
	// Tenths of a millicore reserved per whole core: 6%, 1%, 0.5%, 0.5%, then 0.25%.
	var reservedTenths int64
	for core := int64(1); core <= cpuMilli/1000; core++ {
		switch {
		case core == 1:
			reservedTenths += 600
		case core == 2:
			reservedTenths += 100
		case core <= 4:
			reservedTenths += 50
		default:
			reservedTenths += 25
		}
	}
	out[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpuMilli-(reservedTenths+9)/10, resource.DecimalSI)
	memReserved := (255 + 11*capacity.Pods().Value() + 100) << 20
	out[corev1.ResourceMemory] = *resource.NewQuantity(capacity.Memory().Value()-memReserved, resource.BinarySI)
	if disk, ok := capacity[corev1.ResourceEphemeralStorage]; ok {
		reserved := 1<<30 + (disk.Value()+9)/10
		out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(max(0, disk.Value()-reserved), resource.BinarySI)
	}
	return out
}

func price(p float64) string { return strconv.FormatFloat(math.Round(p*1e5)/1e5, 'f', -1, 64) }

// Catalog serves a fixed list of instance types.
type Catalog struct {
	types []v1alpha1.InstanceType
}

// NewCatalog loads the catalog at path, or the built-in one when path is "".
func NewCatalog(path string) (*Catalog, error) {
	types, err := LoadCatalog(path)
	if err != nil {
		return nil, err
	}
	return &Catalog{types: types}, nil
}

// Name is the provider's name.
func (c *Catalog) Name() string { return "simulated" }

// driverSlices are the slices the DRA drivers of a node of type it
// publish once it runs: for a driver the simulated cloud's own types
// carry (gpu.nvidia.com), what its own type of that name has, whatever
// the catalog the launch was decided from said (a DeviceTemplate may be
// wrong, and a driver publishes what the hardware has); for any other
// driver, a DeviceTemplate's, as the user's own driver would publish it
// (the sandbox runs no such driver).
func (c *Catalog) driverSlices(it v1alpha1.InstanceType) []v1alpha1.ResourceSliceTemplate {
	own := map[string]bool{}
	var truth []v1alpha1.ResourceSliceTemplate
	for _, t := range c.types {
		for _, s := range t.ResourceSlices {
			own[s.Driver] = true
		}
		if t.Name == it.Name {
			truth = t.ResourceSlices
		}
	}
	out := slices.Clone(truth)
	for _, s := range it.ResourceSlices {
		if !own[s.Driver] {
			out = append(out, s)
		}
	}
	return out
}

// InstanceTypes returns every instance type of the catalog: simulated node
// classes do not change what a pool can launch.
func (c *Catalog) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return c.types, nil
}
