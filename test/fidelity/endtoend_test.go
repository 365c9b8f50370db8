package fidelity

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	schedulerOptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/simulator"
)

// TestFidelityEndToEnd runs every scenario of the differential suite
// through a whole sandbox: nodeforge-scheduler nominates, the provisioner
// launches, registers and binds (or hands the pod to the scheduler), kwok
// runs the pods. Each pod must end Running on a node where the stock
// scheduler's PreFilter and Filter plugins, with the profile's
// configuration, accept it beside the pods that are there; pods no pool
// can hold stay Pending with an Event and no claim. Scenarios sharing a
// plugin configuration share a sandbox, one after another.
func TestFidelityEndToEnd(t *testing.T) {
	byConfig := map[string][]int{}
	var order []string
	all := scenarios()
	for i, sc := range all {
		key, err := json.Marshal(sc.pluginConfig)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byConfig[string(key)]; !ok {
			order = append(order, string(key))
		}
		byConfig[string(key)] = append(byConfig[string(key)], i)
	}
	for _, key := range order {
		indexes := byConfig[key]
		func() {
			sb := startSandbox(t, all[indexes[0]].pluginConfig)
			for _, i := range indexes {
				sc := all[i]
				t.Run(sc.name, func(t *testing.T) { sc.endToEnd(t, i, sb) })
			}
		}()
	}
}

// startSandbox starts a sandbox whose scheduler (and so the provisioner's
// bind gate) runs the shipped profile with extra plugin configuration,
// without its example NodePool (scenarios bring their own), and points the
// package's clients at it until the test ends.
func startSandbox(t *testing.T, extra []map[string]any) *sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: bins, SchedulerConfig: schedulerConfig(t, true, extra)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Stop)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if logs := os.Getenv("NODEFORGE_E2E_LOGS"); logs != "" {
			if err := os.MkdirAll(logs, 0o755); err != nil {
				t.Logf("keeping logs: %v", err)
				return
			}
			kept, err := os.MkdirTemp(logs, t.Name()+"-")
			if err == nil {
				err = os.CopyFS(kept, os.DirFS(filepath.Join(dir, "logs")))
			}
			if err != nil {
				t.Logf("keeping logs: %v", err)
				return
			}
			t.Logf("sandbox logs kept in %s", kept)
		}
	})
	sbCS, sbKube, err := sb.Clients()
	if err != nil {
		t.Fatal(err)
	}
	// The scenario helpers use the package's clients; the control plane
	// of TestFidelity gets them back when this test ends.
	prevCS, prevKube, prevEnv := cs, kube, env
	cs, kube, env = sbCS, sbKube, sb
	t.Cleanup(func() { cs, kube, env = prevCS, prevKube, prevEnv })
	example := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if err := kube.Delete(ctx, example); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(example), example)
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the sandbox's example NodePool was not deleted")
	}
	return sb
}

func (sc scenario) endToEnd(t *testing.T, index int, sb *sandbox.Sandbox) {
	ctx := context.Background()
	ns := fmt.Sprintf("e2e-%d-%s", index, utilrand.String(4))
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	// The service account controller makes it too; whichever is first.
	if err := kube.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(t, ns, sc.pools) })
	// The provisioner publishes the pools' catalogs itself; the pods come
	// once it has (before, VirtualNodes refuses them, and their retries,
	// spread by backoff, would land in separate batches).
	for _, np := range sc.pools {
		mustCreate(t, np.DeepCopy())
	}
	for _, np := range sc.pools {
		// Whole: the catalog is one object per family, written one by one.
		types, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(np), np.Spec.Template.Spec.Requirements, catalog)
		if err != nil {
			t.Fatal(err)
		}
		want := len(types)
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var cats v1alpha1.InstanceTypeCatalogList
			err := kube.List(ctx, &cats, client.MatchingLabels{v1alpha1.LabelNodePool: np.Name})
			c := v1alpha1.ByPool(cats.Items)[np.Name]
			return err == nil && c != nil && len(c.Spec.InstanceTypes) == want, nil
		}); err != nil {
			t.Fatalf("the catalog of pool %s was not published: %v", np.Name, err)
		}
	}
	if sc.setup != nil {
		sc.setup(t, ns)
	}
	// (onNode is what the DaemonSet controller does on a new node; here
	// kube-controller-manager's own runs.) Startup taints are lifted 5 s
	// after the node registers, by the agent that owns them.
	agent, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go liftStartupTaints(agent, t, sc.pools, 5*time.Second)
	var pods, refused []*corev1.Pod
	for _, p := range sc.pods {
		pods = append(pods, createPod(t, ns, p))
	}
	for _, p := range sc.refused {
		refused = append(refused, createPod(t, ns, p))
	}

	var last string
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Spec.NodeName == "" || got.Status.Phase != corev1.PodRunning {
				last = fmt.Sprintf("pod %s on %q, %s", p.Name, got.Spec.NodeName, got.Status.Phase)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("pods not all Running (%s): %v\n%s", last, err, schedulingEvents(t, ns, nil))
	}
	// The provisioner lifts a node's binding taint just after binding its
	// pods (kwok may report them Running between the two): judge the
	// cluster once every node is open.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: scenarioNodes})
		if err != nil {
			return false, err
		}
		for _, n := range nodes.Items {
			if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding }) {
				last = "node " + n.Name + " still held for binding"
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("nodes not all open (%s): %v", last, err)
	}
	for _, p := range refused {
		waitRefused(t, ns, p, sc.refusal)
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "" || got.Status.NominatedNodeName != "" {
			t.Errorf("pod %s, which no pool can hold, is on %q, nominated to %q", p.Name, got.Spec.NodeName, got.Status.NominatedNodeName)
		}
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	if sc.check != nil {
		sc.check(t, claims.Items)
	}

	// The stock scheduler's verdict on where each pod ended up, with the
	// same profile: a gate that holds nothing back, started now so its
	// informers read the cluster as it has settled.
	gate := stockGate(t, sb)
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, got.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		there, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
		if err != nil {
			t.Fatal(err)
		}
		var others []*corev1.Pod
		for i := range there.Items {
			if o := &there.Items[i]; o.UID != got.UID && o.Status.Phase != corev1.PodSucceeded && o.Status.Phase != corev1.PodFailed {
				others = append(others, o)
			}
		}
		if s, _ := gate.Check(ctx, got, node, others); !s.IsSuccess() {
			t.Errorf("pod %s runs on %s (taints %v), which the scheduler's %s refuses: %s", got.Name, node.Name, node.Spec.Taints, s.Plugin(), s.Message())
		}
	}
}

// stockGate judges with the profile the sandbox's scheduler runs, without
// VirtualNodes and holding back no taint.
func stockGate(t *testing.T, sb *sandbox.Sandbox) *simulator.Gate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg, err := schedulerOptions.LoadConfigFromFile(klog.Background(), filepath.Join(sb.Dir, "nodeforge-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	profile, err := simulator.FindProfile(cfg, "nodeforge-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.All()
	if err != nil {
		t.Fatal(err)
	}
	gate, err := simulator.NewGate(ctx, reg, cs, profile, "", "VirtualNodes")
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	return gate
}

// liftStartupTaints is the agent that owns the pools' startup taints (a
// CNI, a storage driver): it removes them from each of the pools' nodes
// after the node has been registered for after.
func liftStartupTaints(ctx context.Context, t *testing.T, pools []*v1alpha1.NodePool, after time.Duration) {
	startup := map[string][]string{}
	for _, np := range pools {
		for _, taint := range np.Spec.Template.Spec.StartupTaints {
			startup[np.Name] = append(startup[np.Name], taint.Key)
		}
	}
	if len(startup) == 0 {
		return
	}
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: scenarioNodes})
		if err != nil {
			return false, nil
		}
		for i := range nodes.Items {
			node := &nodes.Items[i]
			keys := startup[node.Labels[v1alpha1.LabelNodePool]]
			if len(keys) == 0 || time.Since(node.CreationTimestamp.Time) < after {
				continue
			}
			kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(taint corev1.Taint) bool { return slices.Contains(keys, taint.Key) })
			if len(kept) == len(node.Spec.Taints) {
				continue
			}
			node.Spec.Taints = kept
			if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				t.Logf("lifting the startup taints of %s: %v (retrying)", node.Name, err)
			}
		}
		return false, nil
	})
}
