// Package throughput measures kube-scheduler's own throughput, in process
// against a real kube-apiserver, with the stock profile and with VirtualNodes
// enabled while it holds many open claims: VirtualNodes must not slow the
// scheduling of pods that fit the cluster's real nodes.
package throughput

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/plugin/virtualnodes"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

var (
	cfg  *rest.Config
	cs   kubernetes.Interface
	kube client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Only the benchmark needs the control plane; `go test ./...` runs
	// nothing here.
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	sandboxtest.TestMain(m, func(m *testing.M) (int, error) {
		env, stop, err := sandboxtest.StartControlPlane(context.Background(), os.Stderr)
		if err != nil {
			return 0, err
		}
		defer stop()
		cfg = rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = 5000, 5000
		if cs, err = kubernetes.NewForConfig(cfg); err != nil {
			return 0, err
		}
		if kube, err = env.Client(); err != nil {
			return 0, err
		}
		return m.Run(), nil
	})
}

const (
	realNodes = 500
	fitPods   = 5000
	heldPods  = 200
	// warmupPods of each round are not timed (round); measuredPods are.
	warmupPods   = 500
	measuredPods = fitPods - warmupPods
	benchNS      = "throughput"
	heldNS       = "held"
	heldPool     = "held"
)

// startScheduler runs kube-scheduler in this process, as the kube-scheduler
// command runs it (its informers synced first), with one profile: the
// default plugins, and VirtualNodes as the shipped configuration enables it
// when virtualNodes is set. It returns a function that stops it.
func startScheduler(tb testing.TB, virtualNodes bool) func() {
	tb.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
	cc, err := latest.Default()
	if err != nil {
		tb.Fatal(err)
	}
	prof := &cc.Profiles[0]
	prof.SchedulerName = "bench"
	reg := frameworkruntime.Registry{}
	if virtualNodes {
		prof.Plugins.PreFilter.Enabled = append(prof.Plugins.PreFilter.Enabled, config.Plugin{Name: virtualnodes.Name})
		prof.Plugins.Filter.Enabled = append(prof.Plugins.Filter.Enabled, config.Plugin{Name: virtualnodes.Name})
		prof.Plugins.PostFilter.Enabled = append(prof.Plugins.PostFilter.Enabled, config.Plugin{Name: virtualnodes.Name})
		all := func() (frameworkruntime.Registry, error) { return registry.All() }
		if err := reg.Register(virtualnodes.Name, virtualnodes.NewFactory(cc, all)); err != nil {
			tb.Fatal(err)
		}
		outOfTree, err := registry.OutOfTree()
		if err != nil {
			tb.Fatal(err)
		}
		for name, factory := range outOfTree {
			if err := reg.Register(name, factory); err != nil {
				tb.Fatal(err)
			}
		}
	}
	factory := scheduler.NewInformerFactory(cs, 0, nil)
	dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0, corev1.NamespaceAll, nil)
	broadcaster := events.NewEventBroadcasterAdapterWithContext(ctx, cs)
	sched, err := scheduler.New(ctx, cs, factory, dyn,
		func(name string) events.EventRecorderLogger { return broadcaster.NewRecorder(name) },
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(cc.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cc.PercentageOfNodesToScore),
		scheduler.WithFrameworkOutOfTreeRegistry(reg),
		scheduler.WithParallelism(cc.Parallelism),
	)
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	factory.Start(ctx.Done())
	dyn.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	dyn.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	var done sync.WaitGroup
	done.Go(func() { sched.Run(ctx) })
	return func() {
		cancel()
		done.Wait()
		broadcaster.Shutdown()
	}
}

// setUp makes the real nodes, and the held pods: pods no real node can
// hold (they select the held pool), each on a node of its own (hostname
// anti-affinity), which VirtualNodes nominates to heldPods open claims that
// stay open (no provisioner runs).
func setUp(b *testing.B) {
	setUpOnce.Do(func() { setUpErr = makeCluster(b) })
	if setUpErr != nil {
		b.Fatal(setUpErr)
	}
}

var (
	setUpOnce sync.Once
	setUpErr  error
)

func makeCluster(b *testing.B) error {
	ctx := context.Background()
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"), corev1.ResourcePods: resource.MustParse("110")}
	var g errgroup.Group
	g.SetLimit(32)
	for i := range realNodes {
		g.Go(func() error {
			zone := fmt.Sprintf("zone-%c", 'a'+i%3)
			n := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("real-%03d", i), Labels: map[string]string{corev1.LabelHostname: fmt.Sprintf("real-%03d", i), corev1.LabelTopologyZone: zone}},
				Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc,
					Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}},
			}
			n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			// The API server taints a new node not-ready; no node
			// lifecycle controller runs here to lift it.
			n.Spec.Taints = nil
			_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}
	for _, ns := range []string{benchNS, heldNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// No kube-controller-manager runs to make it.
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}

	types, err := simulated.LoadCatalog("")
	if err != nil {
		b.Fatal(err)
	}
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: heldPool}, Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{
		NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}}},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"}}}
	if err := kube.Create(ctx, np); err != nil {
		b.Fatal(err)
	}
	if err := kube.Create(ctx, &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: heldPool, Labels: map[string]string{v1alpha1.LabelNodePool: heldPool}},
		Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: heldPool, Provider: "simulated", InstanceTypeCount: int32(len(types)), InstanceTypes: types}}); err != nil {
		b.Fatal(err)
	}

	stop := startScheduler(b, true)
	defer stop()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}}
	for i := range heldPods {
		p := pod(fmt.Sprintf("held-%03d", i), "app", "held")
		p.Spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: heldPool}
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
		if _, err := cs.CoreV1().Pods(heldNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Every held pod nominated, and every claim written.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		nominated := 0
		for _, c := range claims.Items {
			nominated += int(c.Spec.NominatedPods)
		}
		return len(claims.Items) == heldPods && nominated == heldPods, nil
	}); err != nil {
		return fmt.Errorf("waiting for %d open claims: %w", heldPods, err)
	}
	return nil
}

func pod(name string, labels ...string) *corev1.Pod {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec: corev1.PodSpec{
			SchedulerName: "bench",
			Containers: []corev1.Container{{Name: "c", Image: "pause", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}},
		},
	}
}

// round creates fitPods pods that fit the real nodes, then starts the
// scheduler and returns how long it took to bind the last measuredPods of
// them, from the moment warmupPods were scheduled to the last binding
// seen; the CPU time this process (the scheduler, and a poll) used
// meanwhile; and the scheduling algorithm's mean time per attempt then.
func round(b *testing.B, virtualNodes bool) (time.Duration, time.Duration, time.Duration) {
	ctx := context.Background()
	var g errgroup.Group
	g.SetLimit(32)
	for i := range fitPods {
		g.Go(func() error {
			_, err := cs.CoreV1().Pods(benchNS).Create(ctx, pod(fmt.Sprintf("fit-%04d", i), "app", "fit"), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	scheduled0 := schedulerMetric(b, "scheduler_schedule_attempts_total", "scheduled")
	stop := startScheduler(b, virtualNodes)
	// The first warmupPods are left out: a scheduler just started also
	// tries the held pods again (they are older), and VirtualNodes reads
	// its pools and claims; a long-running scheduler does that once.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return schedulerMetric(b, "scheduler_schedule_attempts_total", "scheduled")-scheduled0 >= warmupPods, nil
	}); err != nil {
		b.Fatalf("waiting for %d pods to be scheduled: %v", warmupPods, err)
	}
	start, cpu := time.Now(), cpuTime(b)
	algorithm0, attempts0 := algorithmTime(b)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=", Limit: 1})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	}); err != nil {
		b.Fatalf("waiting for %d pods to be bound: %v", fitPods, err)
	}
	took, used := time.Since(start), cpuTime(b)-cpu
	algorithm1, attempts1 := algorithmTime(b)
	stop()
	if attempts1-attempts0 < measuredPods/2 {
		b.Fatalf("%v scheduling algorithm runs recorded for %d pods", attempts1-attempts0, measuredPods)
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(benchNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		b.Fatal(err)
	}
	return took, used, time.Duration(float64(time.Second) * (algorithm1 - algorithm0) / (attempts1 - attempts0))
}

// schedulerMetric is the sum of counter name's series whose result label
// is result, in this process's registry (the scheduler's metrics).
func schedulerMetric(b *testing.B, name, result string) float64 {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// algorithmTime is the scheduler's scheduling_algorithm_duration_seconds
// so far in this process (the scheduling cycle's PreFilter to Score, per
// pod, where VirtualNodes runs; no API call): its sum and count.
func algorithmTime(b *testing.B) (float64, float64) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "scheduler_scheduling_algorithm_duration_seconds" {
			continue
		}
		var sum, count float64
		for _, m := range f.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			count += float64(m.GetHistogram().GetSampleCount())
		}
		return sum, count
	}
	return 0, 0
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSchedulerThroughput schedules fitPods pods (100m, 128Mi) onto
// realNodes real nodes, in rounds that alternate the stock profile and the
// same profile with VirtualNodes while it holds heldPods open claims. Each
// round runs the scheduler's full cycle (queue, PreFilter, Filter, Score,
// Reserve, bind through the API), timed from its warmupPods-th pod
// scheduled to the last pod bound, and reports: pods per second of
// wall-clock time, which on a small machine the API server's writes bound;
// pods per CPU-second of the scheduler's process; and the scheduling
// algorithm's time per pod (the scheduler's own histogram: PreFilter to
// Score, where VirtualNodes runs, no API call). The
// ratios are the medians over rounds of VirtualNodes' figure over the
// stock profile's in the same round (for the algorithm, stock time over
// VirtualNodes' time: above 1 is faster). b.N is the number of rounds.
func BenchmarkSchedulerThroughput(b *testing.B) {
	setUp(b)
	var stock, vn, ratios, stockCPU, vnCPU, cpuRatios, stockAlg, vnAlg, algRatios []float64
	for i := range b.N {
		// Alternate which goes first, so neither is always second.
		var s, v, sc, vc, sa, va time.Duration
		if i%2 == 1 {
			v, vc, va = round(b, true)
			s, sc, sa = round(b, false)
		} else {
			s, sc, sa = round(b, false)
			v, vc, va = round(b, true)
		}
		sp, vp := float64(measuredPods)/s.Seconds(), float64(measuredPods)/v.Seconds()
		spc, vpc := float64(measuredPods)/sc.Seconds(), float64(measuredPods)/vc.Seconds()
		stock, vn, ratios = append(stock, sp), append(vn, vp), append(ratios, vp/sp)
		stockCPU, vnCPU, cpuRatios = append(stockCPU, spc), append(vnCPU, vpc), append(cpuRatios, vpc/spc)
		stockAlg, vnAlg, algRatios = append(stockAlg, ms(sa)), append(vnAlg, ms(va)), append(algRatios, sa.Seconds()/va.Seconds())
		b.Logf("round %d: stock %.0f pods/s (%.0f per CPU-s, algorithm %.3f ms a pod), with VirtualNodes %.0f pods/s (%.0f per CPU-s, algorithm %.3f ms a pod); ratios %.3f (%.3f per CPU-s, %.3f of the algorithm)",
			i, sp, spc, ms(sa), vp, vpc, ms(va), vp/sp, vpc/spc, sa.Seconds()/va.Seconds())
	}
	b.ReportMetric(median(stock), "stock-pods/s")
	b.ReportMetric(median(vn), "virtualnodes-pods/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(median(stockCPU), "stock-pods/cpu-s")
	b.ReportMetric(median(vnCPU), "virtualnodes-pods/cpu-s")
	b.ReportMetric(median(cpuRatios), "ratio-per-cpu-s")
	b.ReportMetric(median(stockAlg), "stock-algorithm-ms/pod")
	b.ReportMetric(median(vnAlg), "virtualnodes-algorithm-ms/pod")
	b.ReportMetric(median(algRatios), "ratio-of-algorithm")
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
