package virtualnodes

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/provisioner/repack"
	"github.com/nodeforge/nodeforge/simulator"
)

// harness runs pods through the path the scheduler runs for a pending pod:
// PreFilter and Filter of the live profile on the real nodes, then
// VirtualNodes' PostFilter.
type harness struct {
	live   framework.Framework
	plugin *VirtualNodes
	real   []fwk.NodeInfo
	// snapshot is the scheduler's snapshot both frameworks read; setReal
	// replaces its contents, as a new scheduling cycle would.
	snapshot *cache.Snapshot
	// profile, shared and registry build the provisioner's simulator
	// (repack).
	profile  *config.KubeSchedulerProfile
	shared   simulator.Shared
	registry frameworkruntime.Registry
}

// setReal makes the real cluster nodes with pods, for the cycles to come.
func (h *harness) setReal(pods []*corev1.Pod, nodes ...*corev1.Node) {
	*h.snapshot = *cache.NewSnapshot(pods, append([]*corev1.Node{controlPlaneNode()}, nodes...))
	h.real, _ = h.snapshot.NodeInfos().List()
}

// controlPlaneNode is the one real node: tainted, so no workload fits it.
func controlPlaneNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "control-plane", Labels: map[string]string{corev1.LabelHostname: "control-plane", corev1.LabelTopologyZone: "zone-a"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}},
		Status:     corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}},
	}
}

func newHarness(tb testing.TB, pools []*pool) *harness {
	tb.Helper()
	return newHarnessWith(tb, pools, nil)
}

// newHarnessWith is newHarness with the default profile edited first.
func newHarnessWith(tb testing.TB, pools []*pool, edit func(*config.KubeSchedulerProfile)) *harness {
	tb.Helper()
	reg, err := registry.All()
	if err != nil {
		tb.Fatal(err)
	}
	return newHarnessFrom(tb, reg, pools, edit)
}

// newHarnessFrom is newHarnessWith with the scheduler's plugins from reg.
func newHarnessFrom(tb testing.TB, reg frameworkruntime.Registry, pools []*pool, edit func(*config.KubeSchedulerProfile)) *harness {
	tb.Helper()
	return newHarnessOf(tb, reg, pools, edit)
}

// newHarnessOf is newHarnessFrom with objs in the API the scheduler's
// informers read (DeviceClasses and ResourceClaims, say).
func newHarnessOf(tb testing.TB, reg frameworkruntime.Registry, pools []*pool, edit func(*config.KubeSchedulerProfile), objs ...runtime.Object) *harness {
	tb.Helper()
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	schedmetrics.Register() // as the scheduler does at start
	cfg, err := latest.Default()
	if err != nil {
		tb.Fatal(err)
	}
	profile := &cfg.Profiles[0]
	if edit != nil {
		edit(profile)
	}
	cs := kubefake.NewClientset(objs...)
	inf := informers.NewSharedInformerFactory(cs, 0)
	snapshot := cache.NewSnapshot(nil, []*corev1.Node{controlPlaneNode()})
	shared, err := simulator.SharedState(ctx, cs, inf)
	if err != nil {
		tb.Fatal(err)
	}
	live, err := frameworkruntime.NewFramework(ctx, reg, profile, append(slices.Clone(shared.Options), frameworkruntime.WithSnapshotSharedLister(snapshot))...)
	if err != nil {
		tb.Fatal(err)
	}
	args, err := DecodeArgs(nil)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := newPlugin(ctx, reg, args, profile, live)
	if err != nil {
		tb.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	p.setPools(pools)
	close(p.synced)
	real, _ := snapshot.NodeInfos().List()
	return &harness{live: live, plugin: p, real: real, snapshot: snapshot, profile: profile, shared: shared, registry: reg}
}

// scheduleAll runs pods in order, failing b at the first that is not
// nominated, and returns how long that took.
func (h *harness) scheduleAll(ctx context.Context, b *testing.B, pods []*corev1.Pod) time.Duration {
	start := time.Now()
	for _, pod := range pods {
		if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
			b.Fatalf("pod %s: %v", pod.Name, s.Message())
		}
	}
	return time.Since(start)
}

// fleet is the claims made and their cost, each at its cheapest option.
func (h *harness) fleet() (nodes int, cost float64) {
	for _, c := range h.plugin.book.claims {
		cost += c.options[0].price
	}
	return h.plugin.book.count(), cost
}

// schedule runs one pod; it returns the claim it was nominated to, or nil.
func (h *harness) schedule(ctx context.Context, pod *corev1.Pod) (*claim, *fwk.Status) {
	state := framework.NewCycleState()
	if _, s, _ := h.live.RunPreFilterPlugins(ctx, state, pod); s.IsSuccess() {
		for _, n := range h.real {
			if h.live.RunFilterPlugins(ctx, state, pod, n).IsSuccess() {
				return nil, fwk.NewStatus(fwk.Error, "fits a real node: "+n.Node().Name)
			}
		}
	}
	res, s := h.plugin.PostFilter(ctx, state, pod, nil)
	if !s.IsSuccess() {
		return nil, s
	}
	return h.plugin.book.claim(res.NominatedNodeName), s
}

// benchPool is the catalog: 400 types, type i with i+1 vCPU,
// 2(i+1) GiB and 10(i+1) pods; on-demand in 3 zones, spot in 2; priced
// 0.025 per vCPU-hour plus 0.001 per GiB-hour on demand, spot at 0.7 of that.
func benchPool(tb testing.TB) *pool {
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	cat := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: benchCatalog()}}
	pl, err := newPool(np, cat)
	if err != nil {
		tb.Fatal(err)
	}
	return pl
}

// benchCatalog is benchPool's instance types.
func benchCatalog() []v1alpha1.InstanceType {
	var out []v1alpha1.InstanceType
	for i := range 400 {
		cpu, gib := i+1, 2*(i+1)
		od := 0.025*float64(cpu) + 0.001*float64(gib)
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(cpu), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(gib)<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(int64(10*(i+1)), resource.DecimalSI),
		}
		it := v1alpha1.InstanceType{Name: fmt.Sprintf("t%d", i), Labels: map[string]string{corev1.LabelArchStable: "amd64"}, Capacity: alloc, Allocatable: alloc}
		for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
			it.Offerings = append(it.Offerings, v1alpha1.Offering{Zone: z, CapacityType: "on-demand", Price: fmt.Sprintf("%.6f", od), Available: true})
		}
		for _, z := range []string{"zone-a", "zone-b"} {
			it.Offerings = append(it.Offerings, v1alpha1.Offering{Zone: z, CapacityType: "spot", Price: fmt.Sprintf("%.6f", 0.7*od), Available: true})
		}
		out = append(out, it)
	}
	return out
}

// benchPods is the workload: n pods in five equal groups.
func benchPods(n int) []*corev1.Pod {
	rng := rand.New(rand.NewPCG(42, 42))
	cpus := []string{"100m", "250m", "500m", "1", "1.5"}
	mems := []string{"100Mi", "512Mi", "1Gi", "2Gi", "4Gi"}
	pods := make([]*corev1.Pod, n)
	for i := range n {
		group := i % 5
		labels := map[string]string{"group": fmt.Sprint(group)}
		sel := &metav1.LabelSelector{MatchLabels: labels}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i)), Labels: labels,
				OwnerReferences: []metav1.OwnerReference{{UID: types.UID(fmt.Sprint("owner-", group)), Controller: ptr.To(true), Kind: "ReplicaSet", Name: fmt.Sprint("rs-", group), APIVersion: "apps/v1"}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpus[rng.IntN(5)]), corev1.ResourceMemory: resource.MustParse(mems[rng.IntN(5)]),
			}}}}},
		}
		switch group {
		case 1:
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		case 2:
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		case 3:
			pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone}}}}
		case 4:
			pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
		}
		pods[i] = pod
	}
	return pods
}

// withoutStateChecks turns off, for the benchmark b, the tests' check of
// every saved affinity and spread state against a fresh one: benchmarks
// measure without.
func withoutStateChecks(b *testing.B) {
	affinity, spread := checkAffinityHit, checkSpreadHit
	checkAffinityHit, checkSpreadHit = nil, nil
	b.Cleanup(func() { checkAffinityHit, checkSpreadHit = affinity, spread })
}

// BenchmarkNominate measures pods nominated per second through the
// scheduler's path for a pending pod, and the fleet it asks for: nodes,
// its $/h (each claim at its cheapest option) and two lower bounds: the
// requested resources at the cheapest price per vCPU and per GiB, and the
// same with the catalog's shape (2 GiB per vCPU) taken into account.
func BenchmarkNominate(b *testing.B) {
	withoutStateChecks(b)
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			ctx := klog.NewContext(context.Background(), klog.Background().V(0))
			pods := benchPods(n)
			var cpu, gib float64
			for _, p := range pods {
				cpu += p.Spec.Containers[0].Resources.Requests.Cpu().AsApproximateFloat64()
				gib += p.Spec.Containers[0].Resources.Requests.Memory().AsApproximateFloat64() / (1 << 30)
			}
			lowerBound := cpu*0.025*0.7 + gib*0.001*0.7
			// Every type of this catalog has 2 GiB per vCPU, so a fleet
			// holds at least max(cpu, GiB/2) vCPU, each with its 2 GiB,
			// at the spot price: the bound no fleet of these types beats.
			shapeBound := max(cpu, gib/2) * (0.025 + 2*0.001) * 0.7
			var elapsed, repackTime time.Duration
			var nodes, moved int
			var cost, repacked float64
			for range b.N {
				b.StopTimer()
				h := newHarness(b, []*pool{benchPool(b)})
				b.StartTimer()
				elapsed += h.scheduleAll(ctx, b, pods)
				nodes, cost = h.fleet()
				b.StopTimer()
				start := time.Now()
				repacked, moved, _ = h.repackClaims(ctx, b)
				repackTime += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "pods/s")
			b.ReportMetric(float64(nodes), "nodes")
			b.ReportMetric(cost, "$/h")
			b.ReportMetric(lowerBound, "lowerbound$/h")
			b.ReportMetric(cost/lowerBound, "fleet/bound")
			b.ReportMetric(cost/shapeBound, "fleet/shapebound")
			// The same claims repacked as one batch, as the provisioner
			// repacks the claims it closes together (not timed above).
			b.ReportMetric(repacked, "repacked$/h")
			b.ReportMetric(repacked/lowerBound, "repacked/bound")
			b.ReportMetric(repacked/shapeBound, "repacked/shapebound")
			b.ReportMetric(float64(moved), "moved-pods")
			b.ReportMetric(repackTime.Seconds()/float64(b.N), "repack-s")
		})
	}
}

// TestPreFilterSkipsPodsNotNominated: a pod VirtualNodes has not nominated
// skips its Filter (PreFilter says Skip); a nominated pod is held for its
// claim's node by Filter, with or without PreFilter having run.
func TestPreFilterSkipsPodsNotNominated(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	pod := benchPods(1)[0]
	if _, s := h.plugin.PreFilter(ctx, framework.NewCycleState(), pod, nil); s.Code() != fwk.Skip {
		t.Fatalf("PreFilter of a pod not nominated: %v, want Skip", s)
	}
	c, s := h.schedule(ctx, pod)
	if !s.IsSuccess() || c == nil {
		t.Fatalf("not nominated: %v", s)
	}
	state := framework.NewCycleState()
	if _, s := h.plugin.PreFilter(ctx, state, pod, nil); !s.IsSuccess() {
		t.Fatalf("PreFilter of a nominated pod: %v, want success", s)
	}
	for name, st := range map[string]fwk.CycleState{"after PreFilter": state, "without PreFilter": framework.NewCycleState()} {
		s := h.plugin.Filter(ctx, st, pod, h.real[0])
		if s.Code() != fwk.Unschedulable || !strings.Contains(s.Message(), c.name) {
			t.Errorf("Filter %s on another node: %v, want Unschedulable naming %s", name, s, c.name)
		}
	}
}

// repackClaims repacks the harness's claims as the provisioner would
// repack a batch of closed claims (repack.Repack), one group (zone,
// capacity type, architecture) at a time, every other claim as a node
// around it. It returns the fleet's $/h after, the pods moved, and every
// plan, by group.
func (h *harness) repackClaims(ctx context.Context, tb testing.TB) (float64, int, map[*group]repack.Plan) {
	tb.Helper()
	sched, err := simulator.NewScheduler(ctx, h.registry, h.profile, nil, h.shared, Name)
	if err != nil {
		tb.Fatal(err)
	}
	byGroup := map[*group][]*claim{}
	var groups []*group
	for _, c := range h.plugin.book.claims {
		if byGroup[c.group] == nil {
			groups = append(groups, c.group)
		}
		byGroup[c.group] = append(byGroup[c.group], c)
	}
	slices.SortFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.capacityType, b.capacityType), cmp.Compare(a.arch, b.arch))
	})
	// Every group's nodes with their pods, as the plans so far have them.
	nodes := map[*group][]*corev1.Node{}
	pods := map[*group][]*corev1.Pod{}
	bound := func(pod *corev1.Pod, node string) *corev1.Pod {
		p := pod.DeepCopy()
		p.Spec.NodeName = node
		return p
	}
	optionsOf := map[*group]map[string]*repack.Option{}
	for _, g := range groups {
		optionsOf[g] = map[string]*repack.Option{}
		for _, o := range g.options {
			optionsOf[g][o.name] = &repack.Option{Name: o.name, Price: o.price, Node: func(name string) *corev1.Node { return g.node(g.pool.template, name, o) }}
		}
		slices.SortFunc(byGroup[g], func(a, b *claim) int { return cmp.Compare(a.name, b.name) })
		for _, c := range byGroup[g] {
			nodes[g] = append(nodes[g], c.node(c.options[0]))
			for _, pod := range c.pods {
				pods[g] = append(pods[g], bound(pod, c.name))
			}
		}
	}
	plans := map[*group]repack.Plan{}
	var cost float64
	moved, fresh := 0, 0
	for _, g := range groups {
		prob := repack.Problem{Scheduler: sched, DaemonSetPods: h.plugin.decider.daemonSetPods, Nodes: []*corev1.Node{controlPlaneNode()},
			NewName: func() string { fresh++; return fmt.Sprintf("repack-%d", fresh) }}
		for _, other := range groups {
			if other != g {
				prob.Nodes = append(prob.Nodes, nodes[other]...)
				prob.Pods = append(prob.Pods, pods[other]...)
			}
		}
		for _, o := range g.options {
			prob.Catalog = append(prob.Catalog, optionsOf[g][o.name])
		}
		for _, c := range byGroup[g] {
			bin := repack.Bin{Name: c.name}
			for _, o := range c.options {
				bin.Options = append(bin.Options, optionsOf[g][o.name])
			}
			for _, pod := range c.pods {
				bin.Pods = append(bin.Pods, pod)
			}
			slices.SortFunc(bin.Pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
			prob.Batch = append(prob.Batch, bin)
		}
		plan, err := repack.Repack(ctx, prob)
		if err != nil {
			tb.Fatal(err)
		}
		plans[g] = plan
		cost += plan.After
		moved += plan.Moved
		nodes[g], pods[g] = nil, nil
		for _, b := range plan.Bins {
			nodes[g] = append(nodes[g], b.Options[0].Node(b.Name))
			for _, pod := range b.Pods {
				pods[g] = append(pods[g], bound(pod, b.Name))
			}
		}
	}
	return cost, moved, plans
}
