package simulated

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
