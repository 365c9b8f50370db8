package fidelity

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// scenarioNodes selects the nodes scenarios make: all but the control plane.
const scenarioNodes = "!node-role.kubernetes.io/control-plane"

// scenario is one case of the differential suite.
type scenario struct {
	name  string
	pools []*v1alpha1.NodePool
	// pods must each be nominated, then placed by the plain scheduler.
	pods []*corev1.Pod
	// refused must get no claim and an Event saying why.
	refused []*corev1.Pod
	// refusal is a phrase the refusal Event must contain.
	refusal string
	// pluginConfig is added to the profile (both schedulers).
	pluginConfig []map[string]any
	// setup creates what the pods need in namespace ns.
	setup func(t *testing.T, ns string)
	// onNode runs for each node made from a claim, before the plain
	// scheduler starts (e.g. the DaemonSet controller's part).
	onNode func(t *testing.T, ns string, node *corev1.Node)
	// check asserts on the claims made.
	check func(t *testing.T, claims []v1alpha1.NodeClaim)
}

// pool returns a NodePool over the simulated catalog.
func pool(name string, edit ...func(*v1alpha1.NodePool)) *v1alpha1.NodePool {
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{
			NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
		}},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "30s"},
	}}
	for _, e := range edit {
		e(np)
	}
	return np
}

func (sc scenario) run(t *testing.T, index int) {
	ctx := context.Background()
	// Unique per run: without a namespace controller, namespaces stay.
	ns := fmt.Sprintf("fidelity-%d-%s", index, utilrand.String(4))
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}})
	t.Cleanup(func() { cleanup(t, ns, sc.pools) })

	// The pools and, as the provisioner would publish them, their catalogs.
	for _, np := range sc.pools {
		np := np.DeepCopy()
		mustCreate(t, np)
		types, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(np), np.Spec.Template.Spec.Requirements, catalog)
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: np.Name, Labels: map[string]string{v1alpha1.LabelNodePool: np.Name}},
			Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: np.Name, Provider: "simulated", InstanceTypeCount: int32(len(types)), InstanceTypes: types}})
	}
	if sc.setup != nil {
		sc.setup(t, ns)
	}

	// 1. nodeforge-scheduler nominates.
	stop := startScheduler(t, "with-virtualnodes", true, sc.pluginConfig)
	var pods, refused []*corev1.Pod
	for _, p := range sc.pods {
		pods = append(pods, createPod(t, ns, p))
	}
	for _, p := range sc.refused {
		refused = append(refused, createPod(t, ns, p))
	}
	claims := waitNominated(t, ns, pods)
	for _, p := range refused {
		waitRefused(t, ns, p, sc.refusal)
	}
	stop()
	for _, p := range refused {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.NominatedNodeName != "" {
			t.Errorf("pod %s, which no instance type can hold, was nominated to %s", p.Name, got.Status.NominatedNodeName)
		}
	}
	if sc.check != nil {
		sc.check(t, claims)
	}

	// 2. The claims become nodes, as the provisioner would launch them.
	for _, nc := range claims {
		node := nodeFor(t, nc)
		created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = node.Status
		if created, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The API server tainted the new node not-ready; the node lifecycle
		// controller (not running here) lifts that once the node is Ready.
		created.Spec.Taints = node.Spec.Taints
		if created, err = cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if sc.onNode != nil {
			sc.onNode(t, ns, created)
		}
	}

	// 3. A scheduler without VirtualNodes must place every nominated pod.
	stop = startScheduler(t, "without-virtualnodes", false, sc.pluginConfig)
	defer stop()
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Spec.NodeName == "" {
				pending = append(pending, p.Name)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		pending = pending[:0]
		for _, p := range pods {
			if got, gerr := cs.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{}); gerr != nil || got.Spec.NodeName == "" {
				pending = append(pending, p.Name)
			}
		}
		t.Fatalf("the scheduler left %d of %d nominated pods Pending on the nodes made from %d claims (%v): %v\n%s",
			len(pending), len(pods), len(claims), err, pending, schedulingEvents(t, ns, pending))
	}
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := kube.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func createPod(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Namespace = ns
	created, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	return created
}

// startScheduler runs nodeforge-scheduler with the shipped profile, with or
// without VirtualNodes, plus the scenario's plugin configuration.
func startScheduler(t *testing.T, name string, virtualNodes bool, extra []map[string]any) func() {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(schedulerConfig(t, virtualNodes, extra), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := env.StartScheduler(context.Background(), name, schedulerBin, out)
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

// schedulerConfig is the shipped scheduler configuration with extra plugin
// configuration in its profile, with or without VirtualNodes.
func schedulerConfig(t *testing.T, virtualNodes bool, extra []map[string]any) []byte {
	t.Helper()
	raw, err := manifests.FS.ReadFile("scheduler/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	profile := cfg["profiles"].([]any)[0].(map[string]any)
	pc, _ := profile["pluginConfig"].([]any)
	for _, e := range extra {
		pc = append(pc, e)
	}
	profile["pluginConfig"] = pc
	if !virtualNodes {
		delete(profile, "plugins")
		profile["pluginConfig"] = slices.DeleteFunc(pc, func(e any) bool { return e.(map[string]any)["name"] == "VirtualNodes" })
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitNominated waits until every pod is nominated and every claim they
// name is written with all of them, and returns those claims.
func waitNominated(t *testing.T, ns string, pods []*corev1.Pod) []v1alpha1.NodeClaim {
	t.Helper()
	ctx := context.Background()
	var claims []v1alpha1.NodeClaim
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		perClaim := map[string]int32{}
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.NominatedNodeName == "" {
				last = "pod " + p.Name + " not nominated"
				return false, nil
			}
			perClaim[got.Status.NominatedNodeName]++
		}
		claims = claims[:0]
		for _, name := range slices.Sorted(maps.Keys(perClaim)) {
			var nc v1alpha1.NodeClaim
			if err := kube.Get(ctx, client.ObjectKey{Name: name}, &nc); err != nil {
				last = fmt.Sprintf("nodeclaim %s: %v", name, err)
				return false, nil
			}
			if nc.Spec.NominatedPods != perClaim[name] {
				last = fmt.Sprintf("nodeclaim %s records %d pods, %d are nominated to it", name, nc.Spec.NominatedPods, perClaim[name])
				return false, nil
			}
			claims = append(claims, nc)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("nominations: %v (%s)\n%s", err, last, schedulingEvents(t, ns, nil))
	}
	return claims
}

// waitRefused waits for the Event that says why no pool can run the pod.
func waitRefused(t *testing.T, ns string, p *corev1.Pod, phrase string) {
	t.Helper()
	var notes []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = notes[:0]
		for _, e := range evs.Items {
			if e.Regarding.Name == p.Name && e.Reason == v1alpha1.ReasonNoInstanceType {
				notes = append(notes, e.Note)
				if strings.Contains(e.Note, phrase) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: no NoInstanceType Event containing %q; got %q", p.Name, phrase, notes)
	}
}

// nodeFor is the node the provisioner would launch for a claim: its
// cheapest offer, as nodeshape builds it for the claim's template.
func nodeFor(t *testing.T, nc v1alpha1.NodeClaim) *corev1.Node {
	t.Helper()
	offers, err := nodeshape.Offers(nodeshape.ForClaim(&nc), catalog, nc.Spec.Requirements)
	if err != nil || len(offers) == 0 {
		t.Fatalf("nodeclaim %s: no offer in the catalog meets its requirements (err %v)", nc.Name, err)
	}
	o := offers[0]
	node := nodeshape.ForClaim(&nc).Node(nc.Name, &o.InstanceType, o.Zone, o.CapacityType)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}}
	return node
}

// schedulingEvents prints the scheduling Events of the namespace (of the
// named pods, if any), to explain a failure.
func schedulingEvents(t *testing.T, ns string, names []string) string {
	evs, err := cs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		if len(names) == 0 || slices.Contains(names, e.Regarding.Name) {
			fmt.Fprintf(&b, "  %s %s: %s\n", e.Regarding.Name, e.Reason, e.Note)
		}
	}
	return b.String()
}

func cleanup(t *testing.T, ns string, pools []*v1alpha1.NodePool) {
	ctx := context.Background()
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_ = cs.AppsV1().DaemonSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = cs.AppsV1().ReplicaSets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: scenarioNodes})
	_ = kube.DeleteAllOf(ctx, &v1alpha1.NodeClaim{})
	for _, np := range pools {
		_ = kube.Delete(ctx, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: np.Name}})
		_ = kube.DeleteAllOf(ctx, &v1alpha1.InstanceTypeCatalog{}, client.MatchingLabels{v1alpha1.LabelNodePool: np.Name})
	}
	// Nothing of this scenario may remain for the next one.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: scenarioNodes})
		if err != nil {
			return false, err
		}
		var ncs v1alpha1.NodeClaimList
		if err := kube.List(ctx, &ncs); err != nil {
			return false, err
		}
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		dss, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, np := range pools {
			err := kube.Get(ctx, client.ObjectKey{Name: np.Name}, &v1alpha1.NodePool{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			// The provisioner may have written some between the two
			// deletes; the garbage collector takes them once the pool is gone.
			var cats v1alpha1.InstanceTypeCatalogList
			if err := kube.List(ctx, &cats, client.MatchingLabels{v1alpha1.LabelNodePool: np.Name}); err != nil || len(cats.Items) > 0 {
				return false, err
			}
		}
		return len(nodes.Items) == 0 && len(ncs.Items) == 0 && len(pods.Items) == 0 && len(dss.Items) == 0, nil
	}); err != nil {
		t.Errorf("scenario namespace %s not cleaned up (nodes, claims, pods, daemonsets, pools or catalogs remain): %v", ns, err)
	}
}
