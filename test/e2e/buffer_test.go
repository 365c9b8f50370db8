package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestABufferKeepsRoomThatPodsTakeAtOnce: a CapacityBuffer of 4 chunks
// of (2 cpu, 4Gi) on a pool of c7.2xlarge and m7.2xlarge nodes gets
// nodes with room for all four and no pod on them, and no more while
// nothing takes that room. Four real pods of that shape then run on
// those nodes with no launch; the buffer, its room taken, launches nodes
// to get it back.
func TestABufferKeepsRoomThatPodsTakeAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{CapacityBuffers: true})
	bufs := bufferClient(t, sb)
	const pool = "buffer"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		onDemandTeamPool(np, pool, []string{"c7.2xlarge", "m7.2xlarge"})
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: "1s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
	})
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	spec := corev1.PodSpec{
		SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
		NodeSelector: map[string]string{"team": pool},
		Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}},
	}
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chunk", Namespace: "default"}, Template: corev1.PodTemplateSpec{Spec: spec}}
	if _, err := cs.CoreV1().PodTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	buf := &bufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: "headroom", Namespace: "default"}, Spec: bufferv1beta1.CapacityBufferSpec{
		PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: ptr.To[int32](4)}}
	if err := bufs.Create(ctx, buf); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	first := awaitInitializedClaims(t, kube, pool, 1, "the buffer's nodes")
	t.Logf("the buffer's room on %d nodes (%v) %s after it was made", len(first), claimTypes(first), time.Since(start).Round(100*time.Millisecond))
	if err := bufs.Get(ctx, client.ObjectKeyFromObject(buf), buf); err != nil {
		t.Fatal(err)
	}
	if buf.Status.Replicas == nil || *buf.Status.Replicas != 4 || !meta.IsStatusConditionTrue(buf.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning) {
		t.Fatalf("the buffer's status: replicas %v, conditions %v; want 4, ReadyForProvisioning", buf.Status.Replicas, buf.Status.Conditions)
	}
	// Nothing takes the room: over two looks (2 s each) and past
	// consolidateAfter, the buffer launches nothing more and its empty
	// nodes stay.
	time.Sleep(5 * time.Second)
	if again, err := poolClaims(ctx, kube, pool); err != nil || !sameClaims(again, first) {
		t.Fatalf("with its room kept, the buffer's pool went from %v to %v (%v)", claimNames(first), claimNames(again), err)
	}
	made := time.Now()
	for i := range 4 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%d", i), Namespace: "default", Labels: map[string]string{"app": "burst"}}, Spec: *spec.DeepCopy()}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "the 4 pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=burst")
		return n == 4, err
	})
	t.Logf("4 pods Running %s after they were made, on the buffer's room", time.Since(made).Round(100*time.Millisecond))
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=burst"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !slices.ContainsFunc(first, func(c v1alpha1.NodeClaim) bool { return c.Status.NodeName == p.Spec.NodeName }) {
			t.Errorf("pod %s runs on %s, not on a node of the buffer's room %v", p.Name, p.Spec.NodeName, claimNames(first))
		}
		if p.Status.NominatedNodeName != "" {
			t.Errorf("pod %s was nominated to %s: it waited for a launch", p.Name, p.Status.NominatedNodeName)
		}
	}
	more := awaitInitializedClaims(t, kube, pool, len(first)+1, "nodes launched to restore the buffer's room")
	t.Logf("the buffer restored its room: %d nodes (%v)", len(more), claimTypes(more))
}

// bufferClient is a client that knows CapacityBuffers.
func bufferClient(t *testing.T, sb *sandbox.Sandbox) client.Client {
	t.Helper()
	c, err := clientKnowing(sb, bufferv1beta1.AddToScheme)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitInitializedClaims waits until the pool has at least n claims, all
// Initialized, and returns them.
func awaitInitializedClaims(t *testing.T, kube client.Client, pool string, n int, what string) []v1alpha1.NodeClaim {
	t.Helper()
	var claims []v1alpha1.NodeClaim
	poll(t, what, func() (bool, error) {
		var err error
		claims, err = poolClaims(context.Background(), kube, pool)
		if err != nil || len(claims) < n {
			return false, err
		}
		for _, c := range claims {
			if c.Status.Phase != v1alpha1.NodeClaimInitialized {
				return false, nil
			}
		}
		return true, nil
	})
	return claims
}

// sameClaims says whether a and b are the same claims, by name.
func sameClaims(a, b []v1alpha1.NodeClaim) bool {
	x, y := claimNames(a), claimNames(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// BenchmarkBufferedPodToRunning measures, in the sandbox, a pod's time
// from creation to Running (one pod of 2 cpu and 4Gi, each iteration on a
// new pool):
//   - room: a CapacityBuffer of the example, 4 chunks of that
//     shape, has its room; the pod takes it. Also reported: what the
//     buffer's nodes cost ($/h), and the seconds from the buffer's
//     creation to its room.
//   - launch: no buffer; the pod waits for a node.
//   - floor: the pod fits a node there (made for a pod of twice its size,
//     then deleted): what the sandbox takes with no autoscaler involved.
func BenchmarkBufferedPodToRunning(b *testing.B) {
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: b.TempDir(), Binaries: bins, CapacityBuffers: true})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Stop()
	cs, kube, err := sb.Clients()
	if err != nil {
		b.Fatal(err)
	}
	bufs, err := clientKnowing(sb, bufferv1beta1.AddToScheme)
	if err != nil {
		b.Fatal(err)
	}
	round := 0
	shape := func(pool, cpu, mem string) corev1.PodSpec {
		return corev1.PodSpec{SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0), NodeSelector: map[string]string{"team": pool},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}}
	}
	runPod := func(b *testing.B, name string, spec corev1.PodSpec) time.Duration {
		start := time.Now()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"bench": name}}, Spec: spec}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			k, err := runningPods(ctx, cs, "bench="+name)
			return k == 1, err
		}); err != nil {
			b.Fatalf("pod %s not Running: %v", name, err)
		}
		return time.Since(start)
	}
	for _, path := range []string{"room", "launch", "floor"} {
		b.Run(path, func(b *testing.B) {
			var took, cost, ready []float64
			for range b.N {
				round++
				pool := fmt.Sprintf("buf-%d", round)
				if err := kube.Create(ctx, latencyPool(pool, "team")); err != nil {
					b.Fatal(err)
				}
				if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					return catalogPublished(ctx, kube, pool)
				}); err != nil {
					b.Fatal(err)
				}
				switch path {
				case "room":
					made := time.Now()
					claims := bufferRoom(ctx, b, cs, bufs, kube, pool, shape(pool, "2", "4Gi"))
					ready = append(ready, time.Since(made).Seconds())
					cost = append(cost, claimsPrice(b, claims))
				case "floor":
					runPod(b, pool+"-warm", shape(pool, "4", "8Gi"))
					if err := cs.CoreV1().Pods("default").Delete(ctx, pool+"-warm", metav1.DeleteOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				took = append(took, runPod(b, pool+"-pod", shape(pool, "2", "4Gi")).Seconds())
			}
			slices.Sort(took)
			b.ReportMetric(took[len(took)/2], "median-s")
			b.ReportMetric(took[len(took)-1], "max-s")
			if len(cost) > 0 {
				slices.Sort(cost)
				slices.Sort(ready)
				b.ReportMetric(cost[len(cost)/2], "buffer-$/h")
				b.ReportMetric(ready[len(ready)/2], "buffer-room-s")
			}
		})
	}
}

// bufferRoom makes a CapacityBuffer of 4 chunks of spec on pool and
// waits until its nodes are initialized; it returns their claims.
func bufferRoom(ctx context.Context, b *testing.B, cs kubernetes.Interface, bufs, kube client.Client, pool string, spec corev1.PodSpec) []v1alpha1.NodeClaim {
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: "default"}, Template: corev1.PodTemplateSpec{Spec: spec}}
	if _, err := cs.CoreV1().PodTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	buf := &bufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: "default"}, Spec: bufferv1beta1.CapacityBufferSpec{
		PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: pool}, Replicas: ptr.To[int32](4)}}
	if err := bufs.Create(ctx, buf); err != nil {
		b.Fatal(err)
	}
	var claims []v1alpha1.NodeClaim
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if claims, err = poolClaims(ctx, kube, pool); err != nil || len(claims) == 0 {
			return false, err
		}
		for _, c := range claims {
			if c.Status.Phase != v1alpha1.NodeClaimInitialized {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		b.Fatalf("the buffer's room: %v", err)
	}
	return claims
}

// claimsPrice is what the claims' instances cost, $/h.
func claimsPrice(b *testing.B, claims []v1alpha1.NodeClaim) float64 {
	sum := 0.0
	for _, c := range claims {
		p, err := strconv.ParseFloat(c.Status.Price, 64)
		if err != nil {
			b.Fatalf("nodeclaim %s price %q: %v", c.Name, c.Status.Price, err)
		}
		sum += p
	}
	return sum
}
