package virtualnodes

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/plugin/registry"
)

// gpuPrice is what one GPU adds to a type's price an hour in the devices
// benchmark's catalog.
const gpuPrice = 1.0

// benchDevicesPool is benchPool's catalog and eight GPU types g1 … g8:
// gN has N GPUs of 80Gi (in a slice of driver gpu.example.com), 8N vCPU
// and 16N GiB, at the CPU and memory prices plus gpuPrice a GPU.
func benchDevicesPool(tb testing.TB) *pool {
	types := benchCatalog()
	for n := 1; n <= 8; n++ {
		cpu, gib := 8*n, 16*n
		od := 0.025*float64(cpu) + 0.001*float64(gib) + gpuPrice*float64(n)
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(cpu), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(gib)<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}
		tmpl := v1alpha1.ResourceSliceTemplate{Driver: "gpu.example.com"}
		for i := range n {
			tmpl.Devices = append(tmpl.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i),
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}})
		}
		it := v1alpha1.InstanceType{Name: fmt.Sprintf("g%d", n), Labels: map[string]string{corev1.LabelArchStable: "amd64"}, Capacity: alloc, Allocatable: alloc,
			ResourceSlices: []v1alpha1.ResourceSliceTemplate{tmpl}}
		for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
			it.Offerings = append(it.Offerings, v1alpha1.Offering{Zone: z, CapacityType: "on-demand", Price: fmt.Sprintf("%.6f", od), Available: true})
		}
		types = append(types, it)
	}
	pl, err := newPool(&v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, &v1alpha1.InstanceTypeCatalog{Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: types}})
	if err != nil {
		tb.Fatal(err)
	}
	return pl
}

// BenchmarkNominateWithDevices is BenchmarkNominate's workload with every
// pod of the unconstrained group (a fifth of the pods) given a
// ResourceClaim for one GPU of at least 40Gi, beside the same pods
// without claims: pods a second, the fleet, and the fleet against its
// bound (the requested cpu and memory at the cheapest prices, plus
// gpuPrice for each GPU claimed).
func BenchmarkNominateWithDevices(b *testing.B) {
	withoutStateChecks(b)
	for _, n := range []int{100, 1000, 5000} {
		for _, withClaims := range []bool{false, true} {
			b.Run(fmt.Sprintf("pods=%d/claims=%v", n, withClaims), func(b *testing.B) {
				ctx := klog.NewContext(context.Background(), klog.Background().V(0))
				pods := benchPods(n)
				objs := []runtime.Object{&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"},
					Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}}}
				var cpu, gib float64
				claimed := 0
				for i, p := range pods {
					cpu += p.Spec.Containers[0].Resources.Requests.Cpu().AsApproximateFloat64()
					gib += p.Spec.Containers[0].Resources.Requests.Memory().AsApproximateFloat64() / (1 << 30)
					if !withClaims || i%5 != 0 {
						continue
					}
					name := fmt.Sprintf("gpu-%d", i)
					objs = append(objs, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
						Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
							Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
								Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0"}}}}}}}}})
					p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
					p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
					claimed++
				}
				bound := cpu*0.025*0.7 + gib*0.001*0.7 + gpuPrice*float64(claimed)
				reg, err := registry.All()
				if err != nil {
					b.Fatal(err)
				}
				var elapsed time.Duration
				var nodes int
				var cost float64
				for range b.N {
					b.StopTimer()
					h := newHarnessOf(b, reg, []*pool{benchDevicesPool(b)}, nil, objs...)
					if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
						claims, err := h.plugin.devices.ResourceClaims().List()
						return err == nil && len(claims) == claimed, nil
					}); err != nil {
						b.Fatalf("the %d claims never reached the DRA manager: %v", claimed, err)
					}
					b.StartTimer()
					elapsed += h.scheduleAll(ctx, b, pods)
					nodes, cost = h.fleet()
					if got := h.plugin.devices.Planned(); got != claimed {
						b.Fatalf("%d claims planned, want %d", got, claimed)
					}
				}
				b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "pods/s")
				b.ReportMetric(float64(nodes), "nodes")
				b.ReportMetric(cost, "$/h")
				b.ReportMetric(cost/bound, "fleet/bound")
			})
		}
	}
}
