package virtualnodes

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// BenchmarkNominateMemory measures what VirtualNodes holds while a burst
// of pods is pending: N pods of 500m and 512Mi (the sandbox scale-up's),
// none of which fits the N/10 real nodes (tainted, as nodes that are full
// or reserved would be), are nominated in the scheduler's path; then the
// heap still in use after a garbage collection, per pod, and the
// process's peak resident memory are reported. Run one size per process,
// or the peak is the largest size's:
//
//	go test -run '^$' -bench 'BenchmarkNominateMemory/pods=20000$' -benchtime 1x ./plugin/virtualnodes/
func BenchmarkNominateMemory(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			ctx := klog.NewContext(context.Background(), klog.Background().V(0))
			for range b.N {
				b.StopTimer()
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				h := newHarness(b, []*pool{benchPool(b)})
				nodes := make([]*corev1.Node, n/10)
				for i := range nodes {
					nodes[i] = &corev1.Node{
						ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("real-%d", i), Labels: map[string]string{
							corev1.LabelHostname: fmt.Sprintf("real-%d", i), corev1.LabelTopologyZone: []string{"zone-a", "zone-b", "zone-c"}[i%3]}},
						Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "reserved", Effect: corev1.TaintEffectNoSchedule}}},
						Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
							corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}},
					}
				}
				h.setReal(nil, nodes...)
				pods := make([]*corev1.Pod, n)
				for i := range pods {
					pods[i] = testPod(fmt.Sprintf("p%d", i), "500m", "512Mi")
				}
				b.StartTimer()
				for _, pod := range pods {
					if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
						b.Fatalf("pod %s: %v", pod.Name, s.Message())
					}
				}
				b.StopTimer()
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(1<<20), "heap-MiB")
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n), "heap-B/pod")
				b.ReportMetric(float64(h.plugin.book.count()), "claims")
				b.ReportMetric(peakRSS(b), "peak-rss-MiB")
				runtime.KeepAlive(h)
				runtime.KeepAlive(pods)
			}
		})
	}
}

// peakRSS is this process's peak resident memory (VmHWM), in MiB.
func peakRSS(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
