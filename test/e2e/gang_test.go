package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// gangOf creates PodGroup default/<name>, a gang of minCount n, and its n
// pods of 3 cpu, which a c7.xlarge (4 cpu) holds one of.
func gangOf(t *testing.T, cs kubernetes.Interface, name, pool string, n int) {
	t.Helper()
	groupOf(t, cs, name, n)
	for i := range n {
		gangPod(t, cs, name, pool, fmt.Sprintf("%s-%d", name, i), "3")
	}
}

// groupOf creates PodGroup default/<name>, a gang of minCount.
func groupOf(t *testing.T, cs kubernetes.Interface, name string, minCount int) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(minCount)}}}}
	if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gangPod creates pod default/<pod> of PodGroup group, on pool's nodes,
// requesting cpu.
func gangPod(t *testing.T, cs kubernetes.Interface, group, pool, pod, cpu string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "default", Labels: map[string]string{"gang": group}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector:    map[string]string{"team": pool},
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// catalogPublished says whether the pool's catalog lists an instance
// type yet.
func catalogPublished(ctx context.Context, kube client.Client, pool string) (bool, error) {
	types, err := cluster.InstanceTypesOf(ctx, kube, pool)
	return len(types) > 0, err
}

// TestAGangLaunchesWholeOrNotAtAll, with GenericWorkload on: a gang of 8
// pods that each need a c7.xlarge of their own, under a pool limit that
// allows 7 such nodes, launches nothing, and each pod and the group say
// why; once the limit allows 8, the gang gets 8 new nodes and all its
// pods run, bound by the scheduler's group cycle.
func TestAGangLaunchesWholeOrNotAtAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{FeatureGates: map[string]bool{"GenericWorkload": true}})
	const pool, n = "gang", 8
	np := poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		onDemandTeamPool(np, pool, []string{"c7.xlarge"})
		np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("28")}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	// A pod's Events of one reason form a series that keeps the first
	// note: made before the pool's catalog is published, the gang would
	// be told "only 0 of its 8" and then counted under it.
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	gangOf(t, cs, "train", pool, n)
	poll(t, "train-0's Event saying only 7 of 8 can have a node, for the pool's limits", func() (bool, error) {
		_, notes, err := podEvents(ctx, cs, "train-0")
		return slices.ContainsFunc(notes, func(s string) bool {
			return strings.Contains(s, "pod group default/train is a gang of minCount 8 and only 7 of its 8 pods can have a node") && strings.Contains(s, "limits")
		}), err
	})
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Fatalf("a gang that cannot have 8 nodes made %d nodeclaims: %v", len(claims), claimTypes(claims))
	}
	update(t, kube, np, func() { np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("32")} })
	raised := time.Now()
	pollFor(t, 3*time.Minute, "the gang's 8 pods Running", func() (bool, error) {
		k, err := runningPods(ctx, cs, "gang=train")
		return k == n, err
	})
	t.Logf("8 pods Running %s after the limit was raised", time.Since(raised).Round(time.Second))
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "gang=train"})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
	}
	claims, err = poolClaims(ctx, kube, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != n || len(claims) != n {
		t.Errorf("the gang runs on %d nodes of %d nodeclaims, want %d of each", len(nodes), len(claims), n)
	}
	var handed int
	for _, p := range pods.Items {
		reasons, _, err := podEvents(ctx, cs, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(reasons, v1alpha1.ReasonHandedOff) {
			handed++
		}
	}
	if handed != n {
		t.Errorf("%d of the gang's pods were handed to the scheduler to bind, want all %d", handed, n)
	}
}

// TestAGangOfOneZoneLandsInOneZone, with TopologyAwareWorkloadScheduling
// on: four pods that would spread over three zones (maxSkew 1) form a
// gang whose PodGroup says its pods share a zone; their nodes are all
// launched in one zone, and the four run there.
func TestAGangOfOneZoneLandsInOneZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{FeatureGates: map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}})
	const pool, n = "onezone", 4
	createZonalPool(t, kube, pool)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "ring", Namespace: "default"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: n}},
		SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: corev1.LabelTopologyZone}}}}}
	if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	topologyPods(t, cs, pool, n, func(spec *corev1.PodSpec) {
		spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("ring")}
		spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pool}}}}
	})
	start := time.Now()
	pollFor(t, 3*time.Minute, "the gang's 4 pods Running", func() (bool, error) {
		k, err := runningPods(ctx, cs, "app="+pool)
		return k == n, err
	})
	t.Logf("4 pods Running %s after they were made", time.Since(start).Round(time.Second))
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]bool{}
	for _, p := range pods.Items {
		var node corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		zones[node.Labels[corev1.LabelTopologyZone]] = true
	}
	if len(zones) != 1 {
		t.Errorf("the gang runs in zones %v, want one", zones)
	}
}

// TestAGangWhoseClaimCannotLaunchLeavesNothing: a gang of 4 pods, each
// on a node of its own, three of which fit a c7.xlarge and one needs a
// c7.2xlarge, which has no capacity (an injected fault). A c7.2xlarge
// claim has no option left and is given up, and the gang's other claims
// (launched or launching) are released with it, any instance
// terminated.
// Decided afresh without the c7.2xlarge, the gang cannot have 4 nodes:
// nothing of it is left running or billed, and its pods say why.
func TestAGangWhoseClaimCannotLaunchLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{FeatureGates: map[string]bool{"GenericWorkload": true}})
	const pool, n = "gangfail", 4
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		// One zone: the capacity error marks the c7.2xlarge offering
		// the pool has unavailable at once (in three zones, the gang
		// would be tried in each in turn, launching and releasing).
		onDemandTeamPool(np, pool, []string{"c7.xlarge", "c7.2xlarge"}, "zone-a")
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	update(t, kube, class, func() {
		class.Spec.Faults = []v1alpha1.SimulatedFault{{Kind: v1alpha1.FaultInsufficientCapacity, InstanceTypes: []string{"c7.2xlarge"}}}
	})
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	groupOf(t, cs, "fail", n)
	for i := range n - 1 {
		gangPod(t, cs, "fail", pool, fmt.Sprintf("fail-%d", i), "3")
	}
	gangPod(t, cs, "fail", pool, "fail-big", "6")
	start := time.Now()
	poll(t, "the gang's other claims released", func() (bool, error) {
		evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonGroupReleased})
		if err != nil {
			return false, err
		}
		claims := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "NodeClaim" {
				claims[e.Regarding.Name] = true
			}
		}
		return len(claims) > 0, nil
	})
	podEventsUntil(t, cs, "fail-big", v1alpha1.ReasonGroupNotLaunchable)
	pollFor(t, 3*time.Minute, "no nodeclaim, node or instance of the gang left", func() (bool, error) {
		return poolLeftNothing(ctx, cs, kube, pool)
	})
	t.Logf("the gang's launched claims released and nothing left %s after its last pod was made", time.Since(start).Round(time.Second))
	if k, err := runningPods(ctx, cs, "gang=fail"); err != nil || k != 0 {
		t.Errorf("%d of the gang's pods run (err %v), want none", k, err)
	}
}

// BenchmarkGangCreatedToRunning measures, in the sandbox with
// GenericWorkload on, the time from the first of 64 pods' creation to
// all 64 Running: as a gang (one PodGroup of minCount 64, decided by
// PodGroupPostFilter and bound by the scheduler's group cycle), and as 64
// pods of no group (PostFilter, bound by the provisioner). Each iteration
// uses a new pool, so every pod goes through a new node.
func BenchmarkGangCreatedToRunning(b *testing.B) {
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: bins, FeatureGates: map[string]bool{"GenericWorkload": true}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Stop()
	cs, kube, err := sb.Clients()
	if err != nil {
		b.Fatal(err)
	}
	const n = 64
	round := 0
	for _, path := range []string{"pods", "gang"} {
		b.Run(path, func(b *testing.B) {
			var took []time.Duration
			var perPod []float64
			for range b.N {
				round++
				pool := fmt.Sprintf("bench-%d", round)
				if err := kube.Create(ctx, latencyPool(pool, "team")); err != nil {
					b.Fatal(err)
				}
				if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					return catalogPublished(ctx, kube, pool)
				}); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if path == "gang" {
					pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: "default"}, Spec: schedulingv1beta1.PodGroupSpec{
						SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: n}}}}
					if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				for i := range n {
					p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Namespace: "default", Labels: map[string]string{"bench": pool}},
						Spec: corev1.PodSpec{
							SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
							NodeSelector: map[string]string{"team": pool},
							Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
						}}
					if path == "gang" {
						p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(pool)}
					}
					if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
					k, err := runningPods(ctx, cs, "bench="+pool)
					return k == n, err
				}); err != nil {
					b.Fatalf("the %d pods not all Running: %v", n, err)
				}
				running := time.Now()
				took = append(took, running.Sub(start))
				// The requests Nodeforge's programs made for these pods:
				// from their creation to requestSettle after the last ran.
				time.Sleep(time.Until(running.Add(requestSettle)))
				reqs := apiRequests(b, filepath.Join(dir, "logs", sandbox.AuditLog), start, running.Add(requestSettle))
				perPod = append(perPod, float64(nodeforgeRequests(reqs))/n)
				b.Logf("%s: API requests by program, verb and resource:\n%s", path, reqs.Top(10))
			}
			slices.Sort(took)
			slices.Sort(perPod)
			b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
			b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
			b.ReportMetric(perPod[len(perPod)/2], "api-requests/pod")
		})
	}
}

// h100Claim is a claim spec for count NVIDIA H100s, chosen by the
// productName the NVIDIA DRA driver publishes.
func h100Claim(count int64) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`}}}}}}}}
}

// gangSharing creates PodGroup default/<name>, a gang of n whose
// spec.resourceClaims names claim "gpus" (ref), and its n pods of 1 cpu
// on pool's nodes, each using the group's claim.
func gangSharing(t *testing.T, cs kubernetes.Interface, name, pool string, n int, ref schedulingv1beta1.PodGroupResourceClaim) {
	t.Helper()
	ctx := context.Background()
	ref.Name = "gpus"
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}},
		ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{ref}}}
	if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: "default", Labels: map[string]string{"gang": name}},
			Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
				NodeSelector:    map[string]string{"pool": pool},
				SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)},
				ResourceClaims:  []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ref.ResourceClaimName, ResourceClaimTemplateName: ref.ResourceClaimTemplateName}},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Claims:   []corev1.ResourceClaim{{Name: "gpus"}}}}},
			}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAGangSharesItsPodGroupsGPUs, with GenericWorkload and
// DRAWorkloadResourceClaims on: PodGroup pair's spec.resourceClaims
// names a ResourceClaimTemplate for two H100s; kube-controller-manager
// makes one claim, owned by the group, and records it on the group and
// on each of its three pods. VirtualNodes plans the claim once and
// nominates the three pods to one node of p5.4xlarge, the type with two
// H100s; the bind gate accepts them there and hands them to the
// scheduler, which allocates the claim both GPUs of that node and
// reserves it for the PodGroup, and the three run there.
// Beside it, a gang whose group claim asks for three H100s, which no
// type has, launches nothing and its pods say which claim no type's
// devices satisfy.
func TestAGangSharesItsPodGroupsGPUs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{FeatureGates: map[string]bool{"GenericWorkload": true, "DRAWorkloadResourceClaims": true}})
	const n = 3
	createZonalPool(t, kube, "gpupair")
	createZonalPool(t, kube, "gpunone")
	poll(t, "the pools' catalogs", func() (bool, error) {
		a, err := catalogPublished(ctx, kube, "gpupair")
		if err != nil || !a {
			return false, err
		}
		return catalogPublished(ctx, kube, "gpunone")
	})
	if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "two-h100", Namespace: "default"}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: h100Claim(2)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "three-h100", Namespace: "default"}, Spec: h100Claim(3)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	gangSharing(t, cs, "pair", "gpupair", n, schedulingv1beta1.PodGroupResourceClaim{ResourceClaimTemplateName: ptr.To("two-h100")})
	gangSharing(t, cs, "none", "gpunone", n, schedulingv1beta1.PodGroupResourceClaim{ResourceClaimName: ptr.To("three-h100")})

	pollFor(t, 3*time.Minute, "the gang pair's 3 pods Running", func() (bool, error) {
		k, err := runningPods(ctx, cs, "gang=pair")
		return k == n, err
	})
	t.Logf("3 pods Running %s after they were made", time.Since(start).Round(time.Second))
	claims, err := poolClaims(ctx, kube, "gpupair")
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].Status.InstanceType != "p5.4xlarge" {
		t.Fatalf("nodeclaims %v; want one p5.4xlarge, the type with two H100s", claimTypes(claims))
	}
	node := claims[0].Status.NodeName
	pg, err := cs.SchedulingV1beta1().PodGroups("default").Get(ctx, "pair", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pg.Status.ResourceClaimStatuses) != 1 || pg.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("PodGroup pair's status.resourceClaimStatuses %v; want the claim made from two-h100", pg.Status.ResourceClaimStatuses)
	}
	name := *pg.Status.ResourceClaimStatuses[0].ResourceClaimName
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "gang=pair"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node {
			t.Errorf("pod %s runs on %s, want %s with the group's GPUs", p.Name, p.Spec.NodeName, node)
		}
		if s := p.Status.ResourceClaimStatuses; len(s) != 1 || ptr.Deref(s[0].ResourceClaimName, "") != name {
			t.Errorf("pod %s: status.resourceClaimStatuses %v, want the group's claim %s", p.Name, s, name)
		}
		reasons, _, err := podEvents(ctx, cs, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		// The bind gate judges the pod with its group's claim as the
		// scheduler does, so it never refuses it on its node.
		if !slices.Contains(reasons, v1alpha1.ReasonHandedOff) || slices.Contains(reasons, v1alpha1.ReasonNominationCleared) {
			t.Errorf("pod %s: Events %v, want %s (bound by the scheduler's group cycle) and no %s", p.Name, reasons, v1alpha1.ReasonHandedOff, v1alpha1.ReasonNominationCleared)
		}
	}
	claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 2 || a.Devices.Results[0].Pool != node || a.Devices.Results[1].Pool != node {
		t.Errorf("claim %s: allocation %v, want both GPUs of node %s", name, claim.Status.Allocation, node)
	}
	if r := claim.Status.ReservedFor; len(r) != 1 || r[0].Resource != "podgroups" || r[0].Name != "pair" {
		t.Errorf("claim %s reserved for %v, want PodGroup pair alone", name, r)
	}

	podEventsUntil(t, cs, "none-0", v1alpha1.ReasonGroupNotLaunchable)
	_, notes, err := podEvents(ctx, cs, "none-0")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(notes, func(s string) bool {
		return strings.Contains(s, "only 0 of its 3 pods") && strings.Contains(s, "no instance type's devices satisfy claim default/three-h100 (request gpus: 3 of gpu.nvidia.com)")
	}) {
		t.Errorf("pod none-0: notes %q; want one saying no type's devices satisfy the group's claim three-h100", notes)
	}
	if claims, err := poolClaims(ctx, kube, "gpunone"); err != nil || len(claims) != 0 {
		t.Errorf("a gang whose claim no type holds made nodeclaims %v (err %v), want none", claimTypes(claims), err)
	}
}

// TestAGangsNodesDriftTogether, with GenericWorkload on: a gang of 3 pods
// runs on 3 nodes of a pool whose template then changes. Drift replaces
// a gang's nodes as a unit: while the pool's budget for drift allows 2
// nodes at once, none is replaced and the claims say why; once it allows
// 3, all three are replaced together, each by a node of the new
// template.
func TestAGangsNodesDriftTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{FeatureGates: map[string]bool{"GenericWorkload": true}})
	const pool, n = "gangdrift", 3
	np := poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		onDemandTeamPool(np, pool, []string{"c7.xlarge"})
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "2", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}
	})
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	// A ReplicaSet's, so that drift launches replacements for them and
	// the evicted pods come back.
	groupOf(t, cs, "unit", n)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "unit", Namespace: "default"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](n), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"gang": "unit"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"gang": "unit"}}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector:    map[string]string{"team": pool},
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("unit")},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}}}
	if _, err := cs.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the gang's 3 pods Running", func() (bool, error) {
		k, err := runningPods(ctx, cs, "gang=unit")
		return k == n, err
	})
	old, err := poolClaims(ctx, kube, pool)
	if err != nil || len(old) != n {
		t.Fatalf("the gang has %d nodeclaims (%v), want %d", len(old), err, n)
	}
	update(t, kube, np, func() { np.Spec.Template.ObjectMeta.Labels["rev"] = "2" })
	poll(t, "a claim saying the gang's nodes wait for a budget of 3", func() (bool, error) {
		for _, c := range old {
			_, notes, err := claimEvents(ctx, cs, c.Name)
			if err != nil {
				return false, err
			}
			if slices.ContainsFunc(notes, func(s string) bool {
				return strings.Contains(s, "PodGroup default/unit, whose 3 nodes are replaced together, and the disruption budgets do not allow 3 at once")
			}) {
				return true, nil
			}
		}
		return false, nil
	})
	now, err := poolClaims(ctx, kube, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range now {
		if c.DeletionTimestamp != nil || c.Annotations[v1alpha1.AnnotationReplacement] != "" || c.Status.Phase == v1alpha1.NodeClaimDisrupting || len(now) != n {
			t.Fatalf("with a budget of 2, drift began replacing the gang's nodes: %s (deleting %v, replacement %q, phase %s; %d claims)", c.Name, c.DeletionTimestamp != nil, c.Annotations[v1alpha1.AnnotationReplacement], c.Status.Phase, len(now))
		}
	}
	update(t, kube, np, func() {
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "3", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}
	})
	raised := time.Now()
	pollFor(t, 3*time.Minute, "the gang's 3 nodes replaced by nodes of the new template", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, pool)
		if err != nil {
			return false, err
		}
		fresh := 0
		for _, c := range claims {
			for _, o := range old {
				if c.Name == o.Name {
					return false, nil
				}
			}
			if c.Status.Phase == v1alpha1.NodeClaimInitialized && c.Spec.Labels["rev"] == "2" {
				fresh++
			}
		}
		return fresh == n, nil
	})
	t.Logf("the gang's 3 nodes replaced %s after the budget allowed 3", time.Since(raised).Round(time.Second))
	poll(t, "the gang's 3 pods Running again", func() (bool, error) {
		k, err := runningPods(ctx, cs, "gang=unit")
		return k == n, err
	})
}

// poolLeftNothing says whether the pool has no nodeclaim, no node and no
// simulated instance left (none billed).
func poolLeftNothing(ctx context.Context, cs kubernetes.Interface, kube client.Client, pool string) (bool, error) {
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil || len(claims) > 0 {
		return false, err
	}
	nodes, err := poolNodes(ctx, cs, pool)
	if err != nil || nodes > 0 {
		return false, err
	}
	inventory, err := cs.CoreV1().ConfigMaps("nodeforge").List(ctx, metav1.ListOptions{LabelSelector: "simulated.nodeforge.dev/instance"})
	if err != nil {
		return false, err
	}
	for _, cm := range inventory.Items {
		if strings.Contains(cm.Data["instance.json"], `"NodePool":"`+pool+`"`) {
			return false, nil
		}
	}
	return true, nil
}
