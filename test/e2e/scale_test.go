package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/auditlog"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// BenchmarkScaleUp1000 scales a Deployment from 0 to 1,000 pods (500m cpu,
// 512Mi each) in the sandbox, with the shipped binaries installed from the
// chart and the default pool; see scaleUp for what it reports.
func BenchmarkScaleUp1000(b *testing.B) { scaleUp(b, 1000, 0) }

// BenchmarkScaleUp5000 is BenchmarkScaleUp1000 with 5,000 pods.
func BenchmarkScaleUp5000(b *testing.B) { scaleUp(b, 5000, 0) }

// BenchmarkScaleUp1000Paced is BenchmarkScaleUp1000 with the pods asked
// for 20 a second (the Deployment scaled up by 20 each second, its floor
// too), the pace of a controller manager at its default client rate: what
// a pod waits for when this 2-core machine is not saturated by the
// control plane creating 100 pods a second.
func BenchmarkScaleUp1000Paced(b *testing.B) { scaleUp(b, 1000, 20) }

// BenchmarkScaleUp5000Paced is BenchmarkScaleUp5000 paced as
// BenchmarkScaleUp1000Paced is.
func BenchmarkScaleUp5000Paced(b *testing.B) { scaleUp(b, 5000, 20) }

// requestSettle is how long after the last pod is Running the API
// requests are still counted: Events are written in the background, and a
// count that ended at the last pod would miss the last ones written.
const requestSettle = 5 * time.Second

// scaleUp scales a Deployment from 0 to replicas pods and reports: the
// seconds from the scale call until all are Running; each pod's time from
// its creation to Running (p50, p99), and the seconds from the last pod's
// creation to all Running, both as seen on a watch; the nodes launched, the
// fleet's $/h and a lower bound (the requested cpu, or memory, at the
// catalog's cheapest price per vCPU, or per GiB, whichever is higher); and
// the CPU seconds nodeforge-scheduler and nodeforge-provisioner used over
// the run, with their peak resident memory; the CPU seconds of the control
// plane's processes, and the share of the machine's CPU time that was busy;
// then the same scale-up onto the nodes it launched (floor).
//
// perSecond, when more than 0, is how many pods are asked for each second
// (the Deployment's replicas raised by that much every second), in both
// the scale-up and its floor.
func scaleUp(b *testing.B, replicas, perSecond int) {
	for range b.N {
		b.StopTimer()
		ctx := context.Background()
		dir := b.TempDir()
		cmd, kubeconfig := upSandbox(b, dir)
		cs := clientFor(b, kubeconfig)
		kube := nodeforgeClient(b, kubeconfig)
		// The default pool is capped at 1,000 cpu and 4,000 GiB, which
		// 5,000 pods of 500m do not fit in; give it room for the whole
		// Deployment twice over in cpu, and 8 GiB a cpu in memory (the
		// most any type of the catalog has), so that the pool's limit is
		// not what the run measures.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var np v1alpha1.NodePool
			if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &np); err != nil {
				return err
			}
			np.Spec.Limits = v1alpha1.Limits{
				corev1.ResourceCPU:    *resource.NewQuantity(int64(max(1000, replicas)), resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(max(4000, 8*replicas))<<30, resource.BinarySI),
			}
			return kube.Update(ctx, &np)
		}); err != nil {
			b.Fatal(err)
		}
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
		w := watchPods(ctx, b, cs, "app=scale")
		procs := []*procStat{findProcess(b, dir, "nodeforge-scheduler"), findProcess(b, dir, "nodeforge-provisioner")}
		// The control plane shares the machine's cores with both
		// programs: its CPU, and the machine's, say whether the run was
		// short of CPU or waiting.
		plane := []*procStat{findProcess(b, dir, "kube-apiserver"), findProcess(b, dir, "etcd"),
			findProcess(b, dir, "kube-controller-manager"), findProcess(b, dir, "kwok")}
		busy0, total0 := machineCPU(b)
		b.StartTimer()
		start := time.Now()
		scaleInSteps(b, cs, w, replicas, perSecond)
		profiled := profileScheduler(b, dir, kubeconfig)
		created, running, err := w.wait(replicas, 30*time.Minute)
		seconds := time.Since(start).Seconds()
		b.StopTimer()
		if err != nil {
			b.Fatalf("not all %d pods Running: %v", replicas, err)
		}
		lat := latencies(created, running)
		var lastCreated, lastRunning time.Time
		for uid, r := range running {
			lastCreated, lastRunning = later(lastCreated, created[uid]), later(lastRunning, r)
		}
		claims, fleet := fleetOf(ctx, b, kube)
		bound := lowerBound(b, float64(replicas)*0.5, float64(replicas)*0.5)
		b.ReportMetric(seconds, "s-to-running")
		b.ReportMetric(percentile(lat, 0.50), "p50-created-to-running-s")
		b.ReportMetric(percentile(lat, 0.99), "p99-created-to-running-s")
		b.ReportMetric(lastRunning.Sub(lastCreated).Seconds(), "s-last-created-to-all-running")
		// Where the time went, step by step, at the median and p99.
		w.mu.Lock()
		for _, step := range []struct {
			name     string
			from, to map[types.UID]time.Time
		}{{"created-to-nominated", created, w.nominated}, {"nominated-to-bound", w.nominated, w.bound}, {"bound-to-running", w.bound, running}} {
			var d []float64
			for uid, t := range step.to {
				if f, ok := step.from[uid]; ok {
					d = append(d, t.Sub(f).Seconds())
				}
			}
			slices.Sort(d)
			b.ReportMetric(percentile(d, 0.50), "p50-"+step.name+"-s")
			b.ReportMetric(percentile(d, 0.99), "p99-"+step.name+"-s")
		}
		w.mu.Unlock()
		b.ReportMetric(float64(len(claims.Items)), "nodes")
		b.ReportMetric(fleet, "$/h")
		b.ReportMetric(bound, "lowerbound$/h")
		b.ReportMetric(fleet/bound, "fleet/bound")
		for _, p := range procs {
			cpu, rss := p.since()
			b.ReportMetric(cpu, p.name+"-cpu-s")
			b.ReportMetric(rss, p.name+"-peak-rss-MiB")
		}
		for _, p := range plane {
			cpu, _ := p.since()
			b.ReportMetric(cpu, p.name+"-cpu-s")
		}
		busy1, total1 := machineCPU(b)
		b.ReportMetric((busy1-busy0)/(total1-total0), "machine-busy-share")
		time.Sleep(time.Until(lastRunning.Add(requestSettle)))
		reqs := apiRequests(b, filepath.Join(dir, "logs", sandbox.AuditLog), start, lastRunning.Add(requestSettle))
		for _, program := range append(nodeforgePrograms, auditlog.SimulatedCloud) {
			b.ReportMetric(float64(reqs.Total[program]), program+"-api-requests")
			b.ReportMetric(float64(reqs.Writes[program]), program+"-api-writes")
		}
		b.ReportMetric(float64(nodeforgeRequests(reqs))/float64(replicas), "api-requests/pod")
		b.ReportMetric(float64(reqs.Total[auditlog.SimulatedCloud])/float64(replicas), auditlog.SimulatedCloud+"-api-requests/pod")
		if attempts, queued := schedulerAttempts(b, dir, kubeconfig); attempts > 0 {
			b.ReportMetric(attempts/float64(replicas), "scheduling-attempts/pod")
			b.Logf("scheduler queue: pods moved by event:\n%s", queued)
		}
		b.Logf("API requests from the scale call to 5 s after the last pod Running, by program, verb and resource:\n%s", reqs.Top(15))
		profiled()
		floorP99 := floor(ctx, b, cs, kube, dir, replicas, perSecond, len(claims.Items))
		if floorP99 > 0 {
			b.ReportMetric(percentile(lat, 0.99)/floorP99, "p99-to-floor-p99")
		}
		keepBenchLogs(b, dir)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// floor measures what the sandbox itself takes: the Deployment is scaled
// to 0 and back to replicas onto the nodes the first scale-up launched,
// which stay (the pool's budget is set to 0 nodes first), so nothing is
// provisioned and the scheduler binds every pod itself. Reported with the
// prefix floor-: seconds from the scale call to all Running, each pod's
// created→Running p50 and p99, seconds from the last pod's creation to
// all Running, the machine's busy share, the nodes launched meanwhile, and
// the API requests per pod of Nodeforge's programs (the scheduler's own
// binding and Event, and whatever else either program did meanwhile) and,
// apart, of the simulated cloud, as the scale-up reports them. It
// fails when the nodes changed: then it is no floor. The first scale-up's
// figures less these are what provisioning added. It returns the floor's
// p99 created→Running, in seconds.
func floor(ctx context.Context, b *testing.B, cs kubernetes.Interface, kube client.Client, dir string, replicas, perSecond, nodes int) float64 {
	b.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var np v1alpha1.NodePool
		if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &np); err != nil {
			return err
		}
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "0"}}
		return kube.Update(ctx, &np)
	}); err != nil {
		b.Fatal(err)
	}
	scaleTo(b, cs, "scale", 0)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=scale"})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		b.Fatalf("the scale-up's pods not all gone: %v", err)
	}
	w := watchPods(ctx, b, cs, "app=scale")
	busy0, total0 := machineCPU(b)
	start := time.Now()
	scaleInSteps(b, cs, w, replicas, perSecond)
	created, running, err := w.wait(replicas, 30*time.Minute)
	seconds := time.Since(start).Seconds()
	if err != nil {
		b.Fatalf("floor: not all %d pods Running: %v", replicas, err)
	}
	busy1, total1 := machineCPU(b)
	lat := latencies(created, running)
	var lastCreated, lastRunning time.Time
	for uid, r := range running {
		lastCreated, lastRunning = later(lastCreated, created[uid]), later(lastRunning, r)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(seconds, "floor-s-to-running")
	b.ReportMetric(percentile(lat, 0.50), "floor-p50-created-to-running-s")
	b.ReportMetric(percentile(lat, 0.99), "floor-p99-created-to-running-s")
	b.ReportMetric(lastRunning.Sub(lastCreated).Seconds(), "floor-s-last-created-to-all-running")
	b.ReportMetric((busy1-busy0)/(total1-total0), "floor-machine-busy-share")
	b.ReportMetric(float64(len(claims.Items)-nodes), "floor-nodes-launched")
	if len(claims.Items) != nodes {
		b.Errorf("floor: %d nodeclaims after, %d before: nodes came or went, so it is no floor", len(claims.Items), nodes)
	}
	time.Sleep(time.Until(lastRunning.Add(requestSettle)))
	reqs := apiRequests(b, filepath.Join(dir, "logs", sandbox.AuditLog), start, lastRunning.Add(requestSettle))
	b.ReportMetric(float64(nodeforgeRequests(reqs))/float64(replicas), "floor-api-requests/pod")
	b.ReportMetric(float64(reqs.Total[auditlog.SimulatedCloud])/float64(replicas), "floor-"+auditlog.SimulatedCloud+"-api-requests/pod")
	b.Logf("floor: API requests from the scale call to 5 s after the last pod Running, by program, verb and resource:\n%s", reqs.Top(8))
	return percentile(lat, 0.99)
}

// keepBenchLogs copies the sandbox's component logs (not the audit log)
// to $NODEFORGE_BENCH_LOGS/<benchmark>-<time>, when it is set: the
// sandbox's directory goes with the benchmark.
func keepBenchLogs(b *testing.B, dir string) {
	root := os.Getenv("NODEFORGE_BENCH_LOGS")
	if root == "" {
		return
	}
	dst := filepath.Join(root, b.Name()+"-"+time.Now().Format("150405"))
	names, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, name := range names {
		if strings.HasPrefix(filepath.Base(name), "audit") {
			continue
		}
		raw, err := os.ReadFile(name)
		if err == nil {
			err = os.MkdirAll(dst, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, filepath.Base(name)), raw, 0o644)
		}
		if err != nil {
			b.Logf("keeping the logs: %v", err)
			return
		}
	}
	b.Logf("component logs kept in %s", dst)
}

// scaleInSteps scales the Deployment "scale" to replicas: at once when
// perSecond is 0, otherwise by perSecond more each second, in the
// background, where a step that fails ends w's wait with its error (all
// replicas Running means every step was taken). Each step patches the
// scale subresource: an update would conflict with the Deployment
// controller's status writes, as often as every pod becoming ready.
func scaleInSteps(b *testing.B, cs kubernetes.Interface, w *podWatch, replicas, perSecond int) {
	b.Helper()
	if perSecond <= 0 {
		scaleTo(b, cs, "scale", int32(replicas))
		return
	}
	go func() {
		start := time.Now()
		for step := 1; ; step++ {
			n := min(step*perSecond, replicas)
			patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
			if _, err := cs.AppsV1().Deployments("default").Patch(context.Background(), "scale", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
				w.fail(fmt.Errorf("scaling to %d: %w", n, err))
				return
			}
			if n == replicas {
				return
			}
			time.Sleep(time.Until(start.Add(time.Duration(step) * time.Second)))
		}
	}()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// percentile of sorted xs, nearest rank.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(math.Ceil(q*float64(len(xs))))-1)]
}

// podWatch records when each pod matching a selector was first seen, and
// first seen Running.
type podWatch struct {
	mu      sync.Mutex
	created map[types.UID]time.Time
	running map[types.UID]time.Time
	// nominated and bound: when the pod was first seen with a nominated
	// node, and with a node, to tell which step the time went to.
	nominated, bound map[types.UID]time.Time
	failed           error
	// progress is signalled on each event, and closed (closed set, under
	// mu) when the watch ends.
	progress chan struct{}
	closed   bool
}

func watchPods(ctx context.Context, b *testing.B, cs kubernetes.Interface, selector string) *podWatch {
	b.Helper()
	w := &podWatch{created: map[types.UID]time.Time{}, running: map[types.UID]time.Time{}, nominated: map[types.UID]time.Time{}, bound: map[types.UID]time.Time{}, progress: make(chan struct{}, 1)}
	// A watch the API server ends (it did, twice, under this load) is
	// taken up again from the last version seen, so no event is lost.
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		b.Fatal(err)
	}
	wi, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, podWatcher{cs, selector})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			now := time.Now()
			p, ok := ev.Object.(*corev1.Pod)
			w.mu.Lock()
			if !ok {
				w.failed = fmt.Errorf("watch: %v", ev.Object)
				w.mu.Unlock()
				break
			}
			if _, seen := w.created[p.UID]; !seen {
				w.created[p.UID] = now
			}
			if _, seen := w.nominated[p.UID]; !seen && p.Status.NominatedNodeName != "" {
				w.nominated[p.UID] = now
			}
			if _, seen := w.bound[p.UID]; !seen && p.Spec.NodeName != "" {
				w.bound[p.UID] = now
			}
			if _, seen := w.running[p.UID]; !seen && p.Status.Phase == corev1.PodRunning {
				w.running[p.UID] = now
			}
			w.mu.Unlock()
			select {
			case w.progress <- struct{}{}:
			default:
			}
		}
		w.mu.Lock()
		if w.failed == nil {
			w.failed = fmt.Errorf("the pod watch ended")
		}
		close(w.progress)
		w.closed = true
		w.mu.Unlock()
	}()
	return w
}

// podWatcher watches the default namespace's pods matching a selector.
type podWatcher struct {
	cs       kubernetes.Interface
	selector string
}

func (w podWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.LabelSelector = w.selector
	return w.cs.CoreV1().Pods("default").Watch(ctx, o)
}

// fail ends wait with err.
func (w *podWatch) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = err
	}
	if !w.closed {
		select {
		case w.progress <- struct{}{}:
		default:
		}
	}
}

// wait returns the times once n pods have been seen Running.
func (w *podWatch) wait(n int, timeout time.Duration) (map[types.UID]time.Time, map[types.UID]time.Time, error) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		if len(w.running) >= n {
			defer w.mu.Unlock()
			return maps.Clone(w.created), maps.Clone(w.running), nil
		}
		failed, got := w.failed, len(w.running)
		w.mu.Unlock()
		if failed != nil {
			return nil, nil, failed
		}
		select {
		case <-w.progress:
		case <-deadline:
			return nil, nil, fmt.Errorf("%d of %d Running after %s", got, n, timeout)
		}
	}
}

// procStat is a sandbox program's processes (the chart runs two replicas,
// one leader), with their CPU time when found.
type procStat struct {
	name string
	pids []int
	cpu  float64 // seconds
}

// findProcess finds the processes of program that belong to the sandbox
// in dir (their command line or environment names dir).
func findProcess(b *testing.B, dir, program string) *procStat {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	p := &procStat{name: program}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0])) != program {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if bytes.Contains(cmdline, []byte(dir)) || bytes.Contains(environ, []byte(dir)) {
			p.pids = append(p.pids, pid)
		}
	}
	if len(p.pids) == 0 {
		b.Fatalf("no %s process of the sandbox in %s", program, dir)
	}
	p.cpu, _ = p.read()
	return p
}

// read returns the processes' CPU seconds (user and system), summed, and
// the largest peak resident memory of one, in MiB.
func (p *procStat) read() (float64, float64) {
	var cpu, rss float64
	for _, pid := range p.pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		cpu += (utime + stime) / 100 // USER_HZ
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				rss = max(rss, kb/1024)
			}
		}
	}
	return cpu, rss
}

// machineCPU returns the machine's busy and total CPU time so far, in
// clock ticks summed over its cores (/proc/stat's first line; idle and
// iowait are not busy; guest time is already in user time).
func machineCPU(b *testing.B) (busy, total float64) {
	b.Helper()
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)[1:]
	for i, f := range fields[:min(8, len(fields))] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// since returns the CPU seconds used since the process was found, and its
// peak resident memory.
func (p *procStat) since() (float64, float64) {
	cpu, rss := p.read()
	return cpu - p.cpu, rss
}

// schedulerAttempts reads the metrics of the nodeforge-scheduler replica
// whose port the sandbox's endpoints file names: its scheduling attempts
// (scheduler_schedule_attempts_total, every result), and the lines of
// scheduler_queue_incoming_pods_total (which events moved pods between
// its queues). Zero when that replica is not the leader.
func schedulerAttempts(b *testing.B, dir, kubeconfig string) (float64, string) {
	b.Helper()
	body, err := schedulerGet(dir, kubeconfig, "/metrics", 30*time.Second)
	if err != nil {
		b.Fatalf("reading the scheduler's metrics: %v", err)
	}
	var attempts float64
	var queued strings.Builder
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "scheduler_schedule_attempts_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			attempts += v
		}
		if strings.HasPrefix(line, "scheduler_queue_incoming_pods_total{") {
			queued.WriteString("  " + line + "\n")
		}
	}
	return attempts, queued.String()
}

// profileScheduler, when NODEFORGE_BENCH_PROFILE names a directory,
// records the CPU profile of the scheduler replica the sandbox publishes
// (kube-scheduler's /debug/pprof, which the sandbox's chart values turn
// on: scheduler.profiling) for the first
// NODEFORGE_BENCH_PROFILE_SECONDS (default 30) after the scale call, into
// scheduler-<N>.pprof there; the function it returns waits for it.
// Without the variable it does nothing: the figures are taken without.
func profileScheduler(b *testing.B, dir, kubeconfig string) func() {
	out := os.Getenv("NODEFORGE_BENCH_PROFILE")
	if out == "" {
		return func() {}
	}
	seconds := 30
	if v, err := strconv.Atoi(os.Getenv("NODEFORGE_BENCH_PROFILE_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body, err := schedulerGet(dir, kubeconfig, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), time.Duration(seconds+60)*time.Second)
		if err != nil {
			b.Logf("profiling the scheduler: %v", err)
			return
		}
		path := filepath.Join(out, fmt.Sprintf("scheduler-%d.pprof", time.Now().Unix()))
		if err := os.WriteFile(path, body, 0o644); err != nil {
			b.Logf("profiling the scheduler: %v", err)
			return
		}
		b.Logf("the scheduler's CPU profile of the first %d s: %s", seconds, path)
	}()
	return func() { <-done }
}

// schedulerGet reads path from the secure port of the nodeforge-scheduler
// replica whose port the sandbox's endpoints file names.
func schedulerGet(dir, kubeconfig, path string, timeout time.Duration) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "endpoints"))
	if err != nil {
		return nil, err
	}
	var url string
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "scheduler-metrics="); ok {
			url = strings.TrimSuffix(v, "/metrics") + path
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	// The admin's client certificate, which the scheduler's delegated
	// authorization accepts; the scheduler serves a certificate it made
	// for itself, which no CA of the sandbox signed.
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = nil, true
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: timeout}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, nil
}

// nodeforgePrograms are the programs whose API requests api-requests/pod
// counts. The simulated cloud's (auditlog.SimulatedCloud), which run in
// the provisioner and play what a real cloud would, are reported apart.
var nodeforgePrograms = []string{"nodeforge-scheduler", "nodeforge-provisioner"}

// apiRequests counts the requests Nodeforge's programs and the simulated
// cloud made whose answer was complete between from and to, as the API
// server's audit log (sandbox.AuditLog) has them: by program (the
// service account's name, every replica, or auditlog.SimulatedCloud), of
// them the writes, and by verb and resource.
func apiRequests(b *testing.B, path string, from, to time.Time) auditlog.Counts {
	b.Helper()
	c, err := auditlog.Read(path, from, to)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// nodeforgeRequests is the sum of c's requests by Nodeforge's programs.
func nodeforgeRequests(c auditlog.Counts) int {
	n := 0
	for _, program := range nodeforgePrograms {
		n += c.Total[program]
	}
	return n
}

// lowerBound prices cpu cores and memory GiB at the catalog's cheapest
// offering per vCPU and per GiB; the fleet cannot cost less than either.
// latencies are each pod's seconds from created to running, sorted.
func latencies(created, running map[types.UID]time.Time) []float64 {
	var lat []float64
	for uid, r := range running {
		lat = append(lat, r.Sub(created[uid]).Seconds())
	}
	slices.Sort(lat)
	return lat
}

// fleetOf is every claim and the sum of the prices they launched at.
func fleetOf(ctx context.Context, b *testing.B, kube client.Client) (v1alpha1.NodeClaimList, float64) {
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		b.Fatal(err)
	}
	fleet := 0.0
	var nodes []string
	for _, nc := range claims.Items {
		p, _ := strconv.ParseFloat(nc.Status.Price, 64)
		fleet += p
		nodes = append(nodes, fmt.Sprintf("%s/%s/%s pods=%d", nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType, nc.Spec.NominatedPods))
	}
	slices.Sort(nodes)
	b.Logf("the fleet (instance type/zone/capacity type, pods nominated):\n%s", strings.Join(nodes, "\n"))
	return claims, fleet
}

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
