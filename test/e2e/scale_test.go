package e2e

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// BenchmarkScaleUp1000 scales a Deployment from 0 to 1,000 pods (500m cpu,
// 512Mi each) in the sandbox, with the shipped binaries and the default
// pool, and reports the seconds until all are Running, the nodes launched,
// the fleet's $/h and a lower bound: the requested cpu, or memory, at the
// catalog's cheapest price per vCPU, or per GiB, whichever is higher.
func BenchmarkScaleUp1000(b *testing.B) {
	const replicas = 1000
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		cmd, kubeconfig := upSandbox(b, b.TempDir())
		cs := clientFor(b, kubeconfig)
		labels := map[string]string{"app": "scale"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "scale", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}}},
			}},
		}}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		// The deployment controller writes the Deployment too: retry a
		// read-modify-write that meets a newer version.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := cs.AppsV1().Deployments("default").GetScale(ctx, "scale", metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Spec.Replicas = replicas
			_, err = cs.AppsV1().Deployments("default").UpdateScale(ctx, "scale", s, metav1.UpdateOptions{})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := runningPods(ctx, cs, "app=scale")
			return err == nil && n == replicas, nil
		})
		seconds := time.Since(start).Seconds()
		b.StopTimer()
		if err != nil {
			b.Fatalf("not all %d pods Running: %v", replicas, err)
		}
		kube := nodeforgeClient(b, kubeconfig)
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			b.Fatal(err)
		}
		fleet := 0.0
		for _, nc := range claims.Items {
			p, _ := strconv.ParseFloat(nc.Status.Price, 64)
			fleet += p
		}
		b.ReportMetric(seconds, "s-to-running")
		b.ReportMetric(float64(len(claims.Items)), "nodes")
		b.ReportMetric(fleet, "$/h")
		b.ReportMetric(lowerBound(b, replicas*0.5, replicas*0.5), "lowerbound$/h")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// lowerBound prices cpu cores and memory GiB at the catalog's cheapest
// offering per vCPU and per GiB; the fleet cannot cost less than either.
func lowerBound(b *testing.B, cpu, gib float64) float64 {
	types, err := simulated.LoadCatalog("")
	if err != nil {
		b.Fatal(err)
	}
	perCPU, perGiB := 1e9, 1e9
	for _, it := range types {
		c := it.Capacity.Cpu().AsApproximateFloat64()
		m := it.Capacity.Memory().AsApproximateFloat64() / (1 << 30)
		for _, o := range it.Offerings {
			p, _ := strconv.ParseFloat(o.Price, 64)
			perCPU, perGiB = min(perCPU, p/c), min(perGiB, p/m)
		}
	}
	return max(cpu*perCPU, gib*perGiB)
}
