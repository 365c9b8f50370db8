package simulated

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// TestAllocatable checks the reservation formulas on sizes worked by hand.
func TestAllocatable(t *testing.T) {
	for _, tc := range []struct {
		cpu, memory, pods string
		wantCPU, wantMem  string
	}{
		// 2 cores: 60m + 10m = 70m. Memory: 255 + 11*29 + 100 = 674Mi.
		{cpu: "2", memory: "4Gi", pods: "29", wantCPU: "1930m", wantMem: "3422Mi"},
		// 8 cores: 60 + 10 + 5 + 5 + 4*2.5 = 90m. Memory: 255 + 1210 + 100 = 1565Mi.
		{cpu: "8", memory: "32Gi", pods: "110", wantCPU: "7910m", wantMem: "31203Mi"},
		// 96 cores: 80m + 92*2.5 = 310m.
		{cpu: "96", memory: "192Gi", pods: "110", wantCPU: "95690m", wantMem: "195043Mi"},
	} {
		got := Allocatable(corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(tc.cpu), corev1.ResourceMemory: resource.MustParse(tc.memory), corev1.ResourcePods: resource.MustParse(tc.pods),
		})
		if c := got[corev1.ResourceCPU]; c.Cmp(resource.MustParse(tc.wantCPU)) != 0 {
			t.Errorf("%s cpu: allocatable %s, want %s", tc.cpu, c.String(), tc.wantCPU)
		}
		if m := got[corev1.ResourceMemory]; m.Cmp(resource.MustParse(tc.wantMem)) != 0 {
			t.Errorf("%s memory: allocatable %s, want %s", tc.memory, m.String(), tc.wantMem)
		}
	}
}

// TestDefaultCatalog checks the built-in catalog has what the issue asks:
// several families, 2 to 64+ vCPU, both architectures, GPUs, three zones,
// spot and on-demand, spot cheaper.
func TestDefaultCatalog(t *testing.T) {
	types, err := LoadCatalog("")
	if err != nil {
		t.Fatal(err)
	}
	archs, zones := map[string]bool{}, map[string]bool{}
	minCPU, maxCPU, gpus := int64(1<<62), int64(0), 0
	for _, it := range types {
		archs[it.Labels[corev1.LabelArchStable]] = true
		c := it.Capacity.Cpu().Value()
		minCPU, maxCPU = min(minCPU, c), max(maxCPU, c)
		if _, ok := it.Capacity[ResourceGPU]; ok {
			gpus++
		}
		prices := map[string]float64{}
		for _, o := range it.Offerings {
			zones[o.Zone] = true
			q := resource.MustParse(o.Price)
			prices[o.Zone+"/"+string(o.CapacityType)] = q.AsApproximateFloat64()
		}
		for z := range zones {
			if s, od := prices[z+"/spot"], prices[z+"/on-demand"]; s != 0 && s >= od {
				t.Errorf("%s in %s: spot %v not below on-demand %v", it.Name, z, s, od)
			}
		}
	}
	if len(types) < 40 || !archs["amd64"] || !archs["arm64"] || len(zones) != 3 || minCPU != 2 || maxCPU < 64 || gpus == 0 {
		t.Errorf("catalog: %d types, archs %v, zones %v, cpu %d..%d, %d GPU types", len(types), archs, zones, minCPU, maxCPU, gpus)
	}
}

// TestNodesPublishWhatTheirHardwareHas: a launch decided from a catalog
// whose p5.2xlarge a DeviceTemplate says has two GPUs (and an FPGA) gets
// a node whose NVIDIA driver publishes the one GPU a p5.2xlarge has, and
// the FPGA driver's slice as the template says, the sandbox running no
// such driver of its own.
func TestNodesPublishWhatTheirHardwareHas(t *testing.T) {
	c, err := NewCatalog("")
	if err != nil {
		t.Fatal(err)
	}
	two, err := cloudprovider.NVIDIAGPUSlice("h100", 2)
	if err != nil {
		t.Fatal(err)
	}
	fpga := v1alpha1.ResourceSliceTemplate{Driver: "fpga.example.com", Devices: []resourcev1.Device{{Name: "fpga-0"}}}
	got := c.driverSlices(v1alpha1.InstanceType{Name: "p5.2xlarge", ResourceSlices: []v1alpha1.ResourceSliceTemplate{two, fpga}})
	devices := map[string]int{}
	for _, s := range got {
		devices[s.Driver] = len(s.Devices)
	}
	if len(devices) != 2 || devices[cloudprovider.DriverNVIDIAGPU] != 1 || devices["fpga.example.com"] != 1 {
		t.Errorf("a p5.2xlarge node publishes %v, want 1 device of %s and 1 of fpga.example.com", devices, cloudprovider.DriverNVIDIAGPU)
	}
	if got := c.driverSlices(v1alpha1.InstanceType{Name: "c7.large", ResourceSlices: []v1alpha1.ResourceSliceTemplate{two}}); len(got) != 0 {
		t.Errorf("a c7.large node, which has no GPU, publishes %v", got)
	}
}
