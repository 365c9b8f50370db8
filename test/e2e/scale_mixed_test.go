package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// BenchmarkScaleUpMixed500 is BenchmarkNominate's workload in the sandbox:
// 500 pods in five groups of 100 (plain; zone topology spread, maxSkew 1;
// hostname topology spread, maxSkew 1; required zone affinity to its own
// group; required hostname anti-affinity within its group), each group
// five Deployments of 20 pods, one per size (cpu 100m to 1.5, memory
// 100Mi to 4Gi, paired as BenchmarkNominate draws them), all created at
// once. Besides the time to Running and the fleet, it reports what the
// provisioner's repack of each batch before launch saved: the batches it
// changed and the $/h their claims would have cost as nominated, from
// the Repacked Events.
func BenchmarkScaleUpMixed500(b *testing.B) {
	const n = 500
	sizes := []struct{ cpu, mem string }{{"100m", "2Gi"}, {"250m", "4Gi"}, {"500m", "100Mi"}, {"1", "512Mi"}, {"1500m", "1Gi"}}
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		dir := b.TempDir()
		cmd, kubeconfig := upSandbox(b, dir)
		cs := clientFor(b, kubeconfig)
		kube := nodeforgeClient(b, kubeconfig)
		w := watchPods(ctx, b, cs, "bench=mixed")
		var deps []*appsv1.Deployment
		cpu, gib := 0.0, 0.0
		for g := range 5 {
			group := map[string]string{"group": strconv.Itoa(g)}
			sel := &metav1.LabelSelector{MatchLabels: group}
			for i, size := range sizes {
				name := fmt.Sprintf("mixed-%d-%d", g, i)
				labels := map[string]string{"bench": "mixed", "group": strconv.Itoa(g), "app": name}
				spec := corev1.PodSpec{
					SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(size.cpu), corev1.ResourceMemory: resource.MustParse(size.mem)}}}},
				}
				switch g {
				case 1, 2:
					key := corev1.LabelTopologyZone
					if g == 2 {
						key = corev1.LabelHostname
					}
					spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
				case 3:
					spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone}}}}
				case 4:
					spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
				}
				deps = append(deps, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](n / 25), Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
				}})
				c, m := resource.MustParse(size.cpu), resource.MustParse(size.mem)
				cpu += float64(n/25) * c.AsApproximateFloat64()
				gib += float64(n/25) * m.AsApproximateFloat64() / (1 << 30)
			}
		}
		b.StartTimer()
		start := time.Now()
		for _, d := range deps {
			if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		created, running, err := w.wait(n, 20*time.Minute)
		seconds := time.Since(start).Seconds()
		b.StopTimer()
		if err != nil {
			b.Fatalf("not all %d pods Running: %v", n, err)
		}
		lat := latencies(created, running)
		claims, fleet := fleetOf(ctx, b, kube)
		// "batch repacked (how): $A/h instead of $B/h; ..." on each
		// changed batch's plan claim.
		evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonRepacked})
		if err != nil {
			b.Fatal(err)
		}
		saving := regexp.MustCompile(`\$([0-9.]+)/h instead of \$([0-9.]+)/h`)
		batches, saved := 0, 0.0
		for _, e := range evs.Items {
			if m := saving.FindStringSubmatch(e.Note); m != nil && e.Regarding.Kind == "NodeClaim" && e.Action == "Launch" {
				after, _ := strconv.ParseFloat(m[1], 64)
				before, _ := strconv.ParseFloat(m[2], 64)
				batches++
				saved += before - after
			}
		}
		bound := lowerBound(b, cpu, gib)
		b.ReportMetric(seconds, "s-to-running")
		b.ReportMetric(percentile(lat, 0.50), "p50-created-to-running-s")
		b.ReportMetric(percentile(lat, 0.99), "p99-created-to-running-s")
		b.ReportMetric(float64(len(claims.Items)), "nodes")
		b.ReportMetric(fleet, "$/h")
		b.ReportMetric(bound, "lowerbound$/h")
		b.ReportMetric(fleet/bound, "fleet/bound")
		b.ReportMetric(float64(batches), "batches-repacked")
		b.ReportMetric(saved, "repack-saved$/h")
		b.ReportMetric((fleet+saved)/bound, "as-nominated/bound")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}
