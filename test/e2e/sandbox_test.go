package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// upSandbox runs `nodeforge-sandbox up --dir DIR` and waits for its ready
// line. env is added to its environment, which its components inherit
// (NODEFORGE_* variables set the provisioner's flags).
func upSandbox(t testing.TB, dir string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "nodeforge-sandbox"), "up", "--dir", dir)
	cmd.Dir = source
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		want := "ready kubeconfig=" + filepath.Join(dir, "kubeconfig")
		if !ok || line != want {
			t.Fatalf("first line of nodeforge-sandbox up: %q, want %q\nstderr:\n%s", line, want, stderr.String())
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		return cmd, filepath.Join(dir, "kubeconfig")
	case <-time.After(5 * time.Minute):
		t.Fatalf("no ready line after 5 minutes\nstderr:\n%s", stderr.String())
	}
	return nil, ""
}

func mustConfig(t testing.TB, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

func clientFor(t testing.TB, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(mustConfig(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func dynamicFor(t *testing.T, kubeconfig string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// nodeforgeClient is an admin client of the sandbox at kubeconfig that
// knows Nodeforge's types.
func nodeforgeClient(t testing.TB, kubeconfig string) client.Client {
	t.Helper()
	kube, err := (&sandbox.Sandbox{Config: mustConfig(t, kubeconfig)}).Client()
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// runningPods counts the pods matching selector in default that are
// Running and not being deleted.
func runningPods(ctx context.Context, cs kubernetes.Interface, selector string) (int, error) {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n, nil
}

func nodePools(t *testing.T, kubeconfig string) dynamic.ResourceInterface {
	return dynamicFor(t, kubeconfig).Resource(schema.GroupVersionResource{Group: "nodeforge.dev", Version: "v1alpha1", Resource: "nodepools"})
}

// TestSandbox starts the sandbox binary and checks what a user relies on:
// the version, the CRDs, the controller manager, kwok nodes and pods, the
// components' identities, a second sandbox beside it, and a clean stop.
func TestSandbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	cmd, kubeconfig := upSandbox(t, dir)
	cs := clientFor(t, kubeconfig)

	t.Run("the API server reports the Kubernetes version in go.mod", func(t *testing.T) {
		want, err := exec.Command("go", "list", "-C", source, "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if got.GitVersion != strings.TrimSpace(string(want)) {
			t.Fatalf("server version %s, want %s", got.GitVersion, want)
		}
	})

	t.Run("kubectl works with the written kubeconfig", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Skip("kubectl is not installed; the API checks above and below cover the kubeconfig")
		}
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "crd", "nodepools.nodeforge.dev", "nodeclaims.nodeforge.dev", "simulatednodeclasses.nodeforge.dev", "-o", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get crd: %v\n%s", err, out)
		}
		out, err = exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "nodepools").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "default") {
			t.Fatalf("kubectl get nodepools: %v\n%s", err, out)
		}
	})

	t.Run("a kwok node created by hand becomes Ready", func(t *testing.T) {
		node := sandbox.KwokNode("by-hand", map[string]string{"e2e": "sandbox"}, "4", "16Gi")
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "node by-hand Ready", func() (bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, "by-hand", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
	})

	t.Run("the provisioner counts a pool's nodes and capacity in its status", func(t *testing.T) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        "pool-node",
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{corev1.LabelHostname: "pool-node", "nodeforge.dev/nodepool": "default"},
		}, Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
		}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pools := nodePools(t, kubeconfig)
		poll(t, "nodepool default with 1 node of 8 cpu, Ready", func() (bool, error) {
			p, err := pools.Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			nodes, _, _ := unstructured.NestedInt64(p.Object, "status", "nodes")
			cpu, _, _ := unstructured.NestedString(p.Object, "status", "resources", "cpu")
			conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
			ready := false
			for _, c := range conds {
				c := c.(map[string]any)
				ready = ready || (c["type"] == "Ready" && c["status"] == "True")
			}
			return nodes == 1 && cpu == "8" && ready, nil
		})
	})

	t.Run("a pending pod is nominated to a claim from the published catalog, launched for, bound and counted in the metrics", func(t *testing.T) {
		dyn := dynamicFor(t, kubeconfig)
		gvr := func(r string) schema.GroupVersionResource {
			return schema.GroupVersionResource{Group: "nodeforge.dev", Version: "v1alpha1", Resource: r}
		}
		poll(t, "InstanceTypeCatalog objects of pool default with instance types", func() (bool, error) {
			cats, err := dyn.Resource(gvr("instancetypecatalogs")).List(ctx, metav1.ListOptions{LabelSelector: "nodeforge.dev/nodepool=default"})
			if err != nil {
				return false, nil
			}
			var n int64
			for _, c := range cats.Items {
				count, _, _ := unstructured.NestedInt64(c.Object, "spec", "instanceTypeCount")
				n += count
			}
			return n > 0, nil
		})
		// Only a new node can hold it: no node here has the capacity-type label.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler",
			NodeSelector:  map[string]string{"nodeforge.dev/capacity-type": "spot"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("3Gi")}}}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pod is nominated, its claim launched and the pod bound within
		// about a second (binding clears the nomination), so the claim is
		// found either way.
		var claim string
		poll(t, "pod pending nominated to a NodeClaim, or bound to its node", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.NominatedNodeName != "" {
				claim = p.Status.NominatedNodeName
				return true, nil
			}
			ncs, err := dyn.Resource(gvr("nodeclaims")).List(ctx, metav1.ListOptions{})
			if err != nil || p.Spec.NodeName == "" {
				return false, err
			}
			for _, nc := range ncs.Items {
				if node, _, _ := unstructured.NestedString(nc.Object, "status", "nodeName"); node == p.Spec.NodeName {
					claim = nc.GetName()
					return true, nil
				}
			}
			return false, nil
		})
		var node string
		poll(t, "nodeclaim "+claim+" of pool default Initialized with the pod", func() (bool, error) {
			nc, err := dyn.Resource(gvr("nodeclaims")).Get(ctx, claim, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pool, _, _ := unstructured.NestedString(nc.Object, "spec", "nodePool")
			pods, _, _ := unstructured.NestedInt64(nc.Object, "spec", "nominatedPods")
			phase, _, _ := unstructured.NestedString(nc.Object, "status", "phase")
			node, _, _ = unstructured.NestedString(nc.Object, "status", "nodeName")
			return pool == "default" && pods == 1 && phase == "Initialized", nil
		})
		poll(t, "pod pending Running on node "+node, func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == node, err
		})
		metrics := scrape(t, endpoint(t, dir, "provisioner-metrics"))
		// Create may be called again for the same claim (a retry after a
		// conflict; it is idempotent), so calls are at least one.
		for series, atLeast := range map[string]float64{
			`nodeforge_nodeclaims_launched_total{nodepool="default"}`:                               1,
			`nodeforge_cloudprovider_calls_total{method="Create",provider="simulated",result="ok"}`: 1,
			`nodeforge_pod_time_to_bound_seconds_count`:                                             1,
		} {
			if v := metricValue(metrics, series); v < atLeast {
				t.Errorf("provisioner metric %s = %v, want at least %v", series, v, atLeast)
			}
		}
		// The pool's usage counts the node (at least the pod's 2 cpu).
		if v := metricValue(metrics, `nodeforge_nodepool_usage{nodepool="default",resource="cpu"}`); v < 2 {
			t.Errorf("provisioner metric nodeforge_nodepool_usage of default's cpu = %v, want at least 2", v)
		}
		// The sandbox's one scheduler leads: it nominated the pod to a new claim.
		body, err := schedulerGet(dir, kubeconfig, "/metrics", 30*time.Second)
		if err != nil {
			t.Fatalf("reading the scheduler's metrics: %v", err)
		}
		if v := metricValue(string(body), `nodeforge_virtualnodes_nominations_total{result="newClaim"}`); v < 1 {
			t.Errorf("scheduler metric nodeforge_virtualnodes_nominations_total{result=\"newClaim\"} = %v, want at least 1", v)
		}
		// Both programs say which build runs, on the Kubernetes libraries of go.mod.
		kube, err := exec.Command("go", "list", "-C", source, "-m", "-f", "{{.Version}}", "k8s.io/kubernetes").Output()
		if err != nil {
			t.Fatal(err)
		}
		for program, exposition := range map[string]string{"provisioner": metrics, "scheduler": string(body)} {
			if !buildInfo(exposition, strings.TrimSpace(string(kube))) {
				t.Errorf("the %s's metrics have no nodeforge_build_info of 1 with kubernetesVersion %q", program, strings.TrimSpace(string(kube)))
			}
		}
		if err := cs.CoreV1().Pods("default").Delete(ctx, "pending", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a Deployment gets a ReplicaSet and Running pods from the controller manager, nodeforge-scheduler and kwok", func(t *testing.T) {
		labels := map[string]string{"app": "hello"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler",
				NodeSelector:  map[string]string{"e2e": "sandbox"},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
				}}},
			}},
		}}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "3 Running pods on node by-hand", func() (bool, error) {
			rs, err := cs.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
			if err != nil || len(rs.Items) != 1 {
				return false, err
			}
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
			if err != nil {
				return false, err
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "by-hand" {
					running++
				}
			}
			return running == 3, nil
		})
	})

	t.Run("each Nodeforge component has only the permissions its manifests grant", func(t *testing.T) {
		for _, component := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
			c := clientFor(t, filepath.Join(dir, "kubeconfigs", component+".kubeconfig"))
			if _, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("%s cannot list nodes: %v", component, err)
			}
			_, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s listing secrets: got %v, want Forbidden", component, err)
			} else if want := "system:serviceaccount:nodeforge:" + component; !strings.Contains(err.Error(), want) {
				t.Errorf("%s is not authenticated as %s: %v", component, want, err)
			}
		}
	})

	t.Run("a second sandbox runs beside the first", func(t *testing.T) {
		src, err := sandbox.FindSource()
		if err != nil {
			t.Fatal(err)
		}
		bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: src, KubernetesOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		second, err := sandbox.Start(ctx, sandbox.Options{Dir: t.TempDir(), Binaries: bins, ControlPlaneOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer second.Stop()
		first, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if first.Host == second.Config.Host {
			t.Fatalf("both sandboxes serve on %s", first.Host)
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, "by-hand", metav1.GetOptions{}); err != nil {
			t.Errorf("first sandbox after the second started: %v", err)
		}
	})

	t.Run("SIGTERM stops every component and frees every port", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if len(processesUnder(t, dir)) < 6 {
			t.Fatalf("expected six components running before SIGTERM, found %v", processesUnder(t, dir))
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("nodeforge-sandbox exited with %v after SIGTERM, want 0", err)
		}
		if left := processesUnder(t, dir); len(left) > 0 {
			t.Fatalf("processes left after SIGTERM: %v", left)
		}
		host := strings.TrimPrefix(cfg.Host, "https://")
		if conn, err := net.DialTimeout("tcp", host, time.Second); err == nil {
			conn.Close()
			t.Fatalf("the API server's port %s still accepts connections", host)
		}
	})
}

// metricValue is the value of one series in a Prometheus text exposition,
// or -1 when it is absent.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

// buildInfo says whether exposition has a nodeforge_build_info series of
// value 1 labelled with kubernetesVersion kube.
func buildInfo(exposition, kube string) bool {
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, "nodeforge_build_info{") && strings.Contains(line, `kubernetesVersion="`+kube+`"`) && strings.HasSuffix(line, "} 1") {
			return true
		}
	}
	return false
}

// endpoint reads one line of the sandbox's DIR/endpoints.
func endpoint(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "endpoints"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k == name {
			return v
		}
	}
	t.Fatalf("no %s in %s/endpoints", name, dir)
	return ""
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test on loopback
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// processesUnder lists the processes whose command line mentions dir: the
// sandbox passes its directory to every component.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), dir) {
			continue
		}
		if strings.Contains(string(b), "nodeforge-sandbox") {
			continue // the sandbox itself, checked through cmd.Wait
		}
		out = append(out, fmt.Sprintf("%s:%s", e.Name(), strings.SplitN(string(b), "\x00", 2)[0]))
	}
	return out
}

// poll waits for cond, failing the test after two minutes: the wait bounds
// a hang, it does not assert speed.
func poll(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	pollFor(t, 2*time.Minute, what, cond)
}

// pollFor is poll with a longer bound, for what takes longer by design
// (a node lease running out, say).
func pollFor(t *testing.T, bound time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// TestDemo runs the walk-through `make demo` runs, with the simulated cloud
// and with the aws provider against the fake EC2 region, and checks it
// finishes every step and exits 0.
func TestDemo(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"simulated", "aws"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			// The demo makes its sandbox's directory under $TMPDIR: one of
			// its own, so that the processes left behind are this demo's.
			tmp := t.TempDir()
			// The walk-through with its waits shortened: the apps pool's
			// empty nodes go 5s after the scale to 0, not 30s, and a node
			// the pool's budget holds back is asked about every 2s.
			cmd := exec.Command(filepath.Join(binDir, "nodeforge-sandbox"), "demo", "--cloud-provider", provider, "--consolidate-after", "5s")
			cmd.Dir = source
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "NODEFORGE_DISRUPTION_BUDGET_RETRY=2s")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("nodeforge-sandbox demo: %v\n%s", err, out)
			}
			wants := []string{"1 pods Running", "6 pods Running", "0 pods Running", "apps nodes removed", `"Nominated pods to nodeclaim"`, `"Launched instance"`, `"Bound pods to node"`, `"Disrupting nodes"`, "Done: every step reached its expected state"}
			if provider == "aws" {
				wants = append(wants, `providerID="aws:///us-west-2`, `"Terminated instance"`)
			}
			for _, want := range wants {
				if !strings.Contains(string(out), want) {
					t.Errorf("demo output lacks %q:\n%s", want, out)
				}
			}
			if left := processesUnder(t, tmp+"/nodeforge-demo-"); len(left) > 0 {
				t.Errorf("the demo left processes behind: %v", left)
			}
		})
	}
}

// noProgramCrashed fails the test if one of Nodeforge's programs panicked
// or died of a fatal error: the sandbox starts a program that exits again
// (as a kubelet would), so a crash would otherwise only cost time. Exits
// that are no crash (a lease lost while the API server was away) are
// logged with the number of restarts.
func noProgramCrashed(t *testing.T, sb *sandbox.Sandbox) {
	names, _ := filepath.Glob(filepath.Join(sb.Dir, "logs", "nodeforge-*.log"))
	for _, name := range names {
		component := strings.TrimSuffix(filepath.Base(name), ".log")
		if n := sb.Restarts(component); n > 0 {
			t.Logf("%s exited on its own and was started again %d times", component, n)
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "WARNING: DATA RACE") {
				t.Errorf("%s crashed: %s (see its log)", component, line)
				break
			}
		}
	}
}

// keepLogsOnFailure, when a test failed, logs the last lines of
// Nodeforge's own component logs (CI shows only the test output) and,
// when $NODEFORGE_E2E_LOGS is set, copies every component log to
// $NODEFORGE_E2E_LOGS/<test name>, since the sandbox's directory is
// removed with the test.
func keepLogsOnFailure(t *testing.T, sb *sandbox.Sandbox) {
	if !t.Failed() {
		return
	}
	logs := filepath.Join(sb.Dir, "logs")
	names, _ := filepath.Glob(filepath.Join(logs, "nodeforge-*.log"))
	for _, name := range names {
		raw, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		// The scheduler framework's own lines about each unschedulable
		// pod would fill the tail; Nodeforge's decisions are the rest.
		lines := slices.DeleteFunc(strings.Split(strings.TrimSpace(string(raw)), "\n"), func(l string) bool {
			return strings.Contains(l, "schedule_one.go:") || strings.Contains(l, "preemption.go:")
		})
		t.Logf("last lines of %s (the scheduler framework's per-pod lines left out):\n%s", filepath.Base(name), strings.Join(lines[max(0, len(lines)-25):], "\n"))
	}
	root := os.Getenv("NODEFORGE_E2E_LOGS")
	if root == "" {
		return
	}
	dst := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.CopyFS(dst, os.DirFS(logs)); err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	t.Logf("component logs kept in %s", dst)
}

// logStateOnFailure, when a test failed, logs what the cluster holds:
// each NodeClaim (phase, node, nominated pods), each pod not yet Running
// or Succeeded (nomination, node, phase) and each node (its Nodeforge
// taints), so a failure seen only in CI's output says where things
// stood.
func logStateOnFailure(t *testing.T, cs kubernetes.Interface, kube client.Client) {
	if !t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		fmt.Fprintf(&b, "listing nodeclaims: %v\n", err)
	}
	for _, nc := range claims.Items {
		fmt.Fprintf(&b, "nodeclaim %s: phase %q, node %q, instance %q, nominated pods %d, created %s, deleting %v\n", nc.Name, nc.Status.Phase, nc.Status.NodeName,
			nc.Status.ProviderID, nc.Spec.NominatedPods, nc.CreationTimestamp.Format(time.TimeOnly), nc.DeletionTimestamp != nil)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "listing pods: %v\n", err)
	} else {
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			fmt.Fprintf(&b, "pod %s/%s: phase %s, nominated %q, node %q, deleting %v\n", p.Namespace, p.Name, p.Status.Phase, p.Status.NominatedNodeName, p.Spec.NodeName, p.DeletionTimestamp != nil)
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "listing nodes: %v\n", err)
	} else {
		for _, n := range nodes.Items {
			var taints []string
			for _, tn := range n.Spec.Taints {
				taints = append(taints, tn.Key+":"+string(tn.Effect))
			}
			fmt.Fprintf(&b, "node %s: taints %v, unschedulable %v\n", n.Name, taints, n.Spec.Unschedulable)
		}
	}
	t.Logf("cluster state at the failure:\n%s", b.String())
}

// quickTimers are the timers of every sandbox startSandbox starts, unless
// its test sets its own:
//   - a node whose kubelet stops is Unknown after 16s, not 50s, checked
//     every second; kwok renews each node's lease every 2s (an 8s lease),
//     so a healthy node on a busy machine still has eight renewals in
//     that window;
//   - a killed leader is replaced after 8s, not 15s; the leader gives up
//     when it could not renew for 6s (an API server answers a lease
//     renewal well within that on a loaded CI machine).
//
// Tests that kill the API server keep the real leader election timers:
// the leader must outlast the restart, as it does in production.
var quickTimers = sandbox.Timers{
	NodeMonitorGracePeriod: 16 * time.Second, NodeMonitorPeriod: time.Second, NodeLeaseDuration: 8 * time.Second,
	LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second,
}

// productionLeaderElection keeps quickTimers' node timers and leaves the
// leader election timers unset: the programs' own defaults (15s lease,
// 10s renew deadline), not a copy of them that could drift.
var productionLeaderElection = sandbox.Timers{
	NodeMonitorGracePeriod: quickTimers.NodeMonitorGracePeriod, NodeMonitorPeriod: quickTimers.NodeMonitorPeriod, NodeLeaseDuration: quickTimers.NodeLeaseDuration,
}

// quickProvisionerArgs come before a test's own ProvisionerArgs (which
// win where both set a flag): the disruption waits that wait on time, not
// on an event, shortened. A node chosen for a voluntary disruption is
// looked at again 2s after its taint; a held claim is asked about its
// budget again every 2s; a replacement named and not created is given up after 10s
// (creating it takes well under a second), and its node may be chosen
// again 5s later; unhealthy nodes are looked for every second.
var quickProvisionerArgs = []string{"--disruption-budget-retry=2s", "--disruption-validation-pause=2s", "--replacement-grace=10s", "--replacement-retry=5s", "--node-repair-interval=1s"}

// startSandbox starts a sandbox from the binaries under test with opts
// (Dir and Binaries are filled in when empty, Timers are quickTimers when
// unset, quickProvisionerArgs come first) and returns it with a clientset
// and a controller-runtime client. It is stopped when the test ends, after
// its logs are kept if the test failed.
func startSandbox(t *testing.T, opts sandbox.Options) (*sandbox.Sandbox, kubernetes.Interface, client.Client) {
	t.Helper()
	ctx := context.Background()
	if opts.Timers == (sandbox.Timers{}) {
		opts.Timers = quickTimers
	}
	opts.ProvisionerArgs = append(slices.Clone(quickProvisionerArgs), opts.ProvisionerArgs...)
	if opts.Binaries == nil {
		bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
		if err != nil {
			t.Fatal(err)
		}
		opts.Binaries = bins
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	sb, err := sandbox.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Stop)
	cs, kube, err := sb.Clients()
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the state is logged after the logs, so
	// that it ends the output CI shows the tail of.
	t.Cleanup(func() { logStateOnFailure(t, cs, kube) })
	t.Cleanup(func() { keepLogsOnFailure(t, sb) })
	t.Cleanup(func() { noProgramCrashed(t, sb) })
	return sb, cs, kube
}
