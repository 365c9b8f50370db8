package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// driftPool is a copy of the sandbox's default pool named name, launching
// only c7.large (2 CPU), so that each pod of driftWorkload gets a node of
// its own, never emptied by consolidation.
func driftPool(t *testing.T, kube client.Client, name, class string) *v1alpha1.NodePool {
	t.Helper()
	return poolFromDefault(t, kube, name, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"generation": "1"}
		np.Spec.Template.ObjectMeta.Annotations = map[string]string{"example.com/owner": "team-" + name}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7.large"}},
		}
		if class != "" {
			np.Spec.Template.Spec.NodeClassRef.Name = class
		}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1", Reasons: []v1alpha1.DisruptionReason{"Drifted"}}}
	})
}

// driftWorkload runs replicas pods of 1.2 CPU (two do not fit a
// c7.large) on the pool's nodes, selected by the pool's label, which
// drift does not change.
func driftWorkload(t *testing.T, cs kubernetes.Interface, pool string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": pool}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector: map[string]string{v1alpha1.LabelNodePool: pool},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1200m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// poolClaims lists the pool's claims.
func poolClaims(ctx context.Context, kube client.Client, pool string) ([]v1alpha1.NodeClaim, error) {
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		return nil, err
	}
	return claims.Items, nil
}

// disruptionEvent is the Disrupting Event's note on the claim for reason, "" if none.
func disruptionEvent(t *testing.T, cs kubernetes.Interface, claim string, reason v1alpha1.DisruptionReason) string {
	t.Helper()
	evs, err := cs.EventsV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=" + claim})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == v1alpha1.ReasonDisrupting && e.Action == string(reason) {
			return e.Note
		}
	}
	return ""
}

// TestChangedPoolTemplateReplacesEveryNodeOneAtATime: three nodes of a
// pool with a budget of one node for reason Drifted; its template label
// changes. Every claim is disrupted for drift, saying the template
// changed; a poller sees, throughout, never more than one of the pool's
// nodes disrupting (tainted nodeforge.dev/disrupted, or its claim
// Disrupting or deleted), and never more than one pod not Running: each
// node's pod fits on no other, so each is replaced before it is drained.
// In the end every node of the pool carries the new label and the
// template's annotation, and all three pods run.
func TestChangedPoolTemplateReplacesEveryNodeOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	const pool, replicas = "drifting", 3
	np := driftPool(t, kube, pool, "")
	driftWorkload(t, cs, pool, replicas)
	poll(t, fmt.Sprintf("%d pods Running", replicas), func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+pool)
		return n == replicas, err
	})
	var old []string
	poll(t, "the pool's claims Initialized", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, pool)
		old = old[:0]
		for _, nc := range claims {
			if nc.Status.Phase == v1alpha1.NodeClaimInitialized {
				old = append(old, nc.Name)
			}
		}
		return len(old) == replicas, err
	})
	nodes := func() ([]corev1.Node, error) {
		var list corev1.NodeList
		err := kube.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: pool})
		return list.Items, err
	}
	before, err := nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range before {
		if n.Annotations["example.com/owner"] != "team-"+pool {
			t.Errorf("node %s lacks the template's annotation: %v", n.Name, n.Annotations)
		}
	}

	// Watch disruption throughout, from before the change.
	var (
		mu          sync.Mutex
		most        int
		seenDrifted = map[string]string{} // claim → Drifted message
		fewest      = replicas            // pods Running at the worst moment
	)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			claims, err1 := poolClaims(ctx, kube, pool)
			ns, err2 := nodes()
			running, err3 := runningPods(ctx, cs, "app="+pool)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			disrupting := map[string]bool{}
			mu.Lock()
			for _, nc := range claims {
				if nc.Status.Phase == v1alpha1.NodeClaimDisrupting || nc.DeletionTimestamp != nil {
					disrupting["claim:"+nc.Name] = true
					if nc.Status.NodeName != "" {
						disrupting["node:"+nc.Status.NodeName] = true
						delete(disrupting, "claim:"+nc.Name)
					}
				}
				if c := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionDrifted); c != nil && c.Status == metav1.ConditionTrue {
					seenDrifted[nc.Name] = c.Message
				}
			}
			for _, n := range ns {
				if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }) {
					disrupting["node:"+n.Name] = true
				}
			}
			most = max(most, len(disrupting))
			fewest = min(fewest, running)
			mu.Unlock()
		}
	}()
	stopWatching := sync.OnceFunc(func() { close(stop); <-watched })
	defer stopWatching()

	update(t, kube, np, func() { np.Spec.Template.ObjectMeta.Labels["generation"] = "2" })

	// Three replacements in turn take longer than one poll's two minutes.
	var left []string
	var ns []corev1.Node
	var allNew bool
	var running int
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 6*time.Minute, true, func(context.Context) (bool, error) {
		claims, err := poolClaims(ctx, kube, pool)
		if err != nil {
			return false, nil
		}
		if ns, err = nodes(); err != nil {
			return false, nil
		}
		if running, err = runningPods(ctx, cs, "app="+pool); err != nil {
			return false, nil
		}
		left = slices.DeleteFunc(slices.Clone(old), func(name string) bool {
			return !slices.ContainsFunc(claims, func(nc v1alpha1.NodeClaim) bool { return nc.Name == name })
		})
		allNew = len(ns) > 0 && !slices.ContainsFunc(ns, func(n corev1.Node) bool { return n.Labels["generation"] != "2" })
		return len(left) == 0 && allNew && running == replicas, nil
	})
	if err != nil {
		t.Fatalf("not every node replaced: old claims left %v, %d nodes (all generation 2: %v), %d of %d pods Running", left, len(ns), allNew, running, replicas)
	}
	for _, n := range ns {
		if n.Annotations["example.com/owner"] != "team-"+pool {
			t.Errorf("replacement node %s lacks the template's annotation: %v", n.Name, n.Annotations)
		}
	}

	stopWatching()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("at most %d of the pool's nodes disrupting at once; %d claims seen Drifted; at least %d of %d pods Running throughout", most, len(seenDrifted), fewest, replicas)
	// Each node is replaced before it is drained, one at a time: only the
	// pod of the node being drained is ever not Running.
	if fewest < replicas-1 {
		t.Errorf("only %d of %d pods Running at one point: nodes were drained before their replacements were up", fewest, replicas)
	}
	if most > 1 {
		t.Errorf("%d of the pool's nodes were disrupting at once under a Drifted budget of one node", most)
	}
	if most == 0 {
		t.Error("the poller never saw a node disrupting; it cannot have checked the budget")
	}
	for _, name := range old {
		note := disruptionEvent(t, cs, name, "Drifted")
		if !strings.Contains(note, "NodePool drifting template changed") {
			t.Errorf("nodeclaim %s: Disrupting Event for Drifted %q, want it to say the template changed", name, note)
		}
		if !strings.Contains(note, "replaced by node") {
			t.Errorf("nodeclaim %s: Disrupting Event for Drifted %q, want it to name the replacement its pod needed", name, note)
		}
	}
	if len(seenDrifted) == 0 {
		t.Error("no claim was seen with condition Drifted")
	}
	for name, msg := range seenDrifted {
		if !slices.Contains(old, name) {
			t.Errorf("replacement claim %s was Drifted: %s", name, msg)
		} else if msg != "NodePool drifting template changed" {
			t.Errorf("claim %s Drifted with message %q", name, msg)
		}
	}
}

// TestChangedNodeClassDriftsItsNode: a field of the SimulatedNodeClass a
// node was launched from changes; the node's claim becomes Drifted saying
// so, and is replaced, its pod Running on a new node.
func TestChangedNodeClassDriftsItsNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	const pool = "classdrift"
	var def v1alpha1.SimulatedNodeClass
	poll(t, "the sandbox's default SimulatedNodeClass", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: *def.Spec.DeepCopy()}
	if err := kube.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	driftPool(t, kube, pool, pool)
	driftWorkload(t, cs, pool, 1)
	var old v1alpha1.NodeClaim
	poll(t, "the pod Running and its claim Initialized", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+pool)
		if err != nil || n != 1 {
			return false, err
		}
		claims, err := poolClaims(ctx, kube, pool)
		if err != nil || len(claims) != 1 || claims[0].Status.Phase != v1alpha1.NodeClaimInitialized {
			return false, err
		}
		old = claims[0]
		return true, nil
	})
	if old.Annotations[v1alpha1.AnnotationNodeClassHash] == "" {
		t.Fatalf("the launched claim carries no node class hash: %v", old.Annotations)
	}
	update(t, kube, class, func() { class.Spec.Tags = map[string]string{"image": "v2"} })
	poll(t, "the old claim gone and the pod Running on a new node", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, pool)
		if err != nil || slices.ContainsFunc(claims, func(nc v1alpha1.NodeClaim) bool { return nc.Name == old.Name }) {
			return false, err
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Spec.NodeName != old.Status.NodeName
		}), nil
	})
	want := "SimulatedNodeClass " + pool + " changed"
	if note := disruptionEvent(t, cs, old.Name, "Drifted"); !strings.Contains(note, want) {
		t.Errorf("Disrupting Event for Drifted on %s: %q, want it to say %q", old.Name, note, want)
	}
}
