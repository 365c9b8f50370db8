package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// topologyViolations reads the pool's nodes and the two workloads' bound
// pods and says what breaks their constraints now: app spread's pods
// skewed by more than 1 across the zones that have a node of the pool
// (the domains the scheduler counts), or two pods of app anti on one
// node. Nodes being removed, and their pods, are left out of the spread.
// It also returns how many nodes the pool has, not counting those.
func topologyViolations(ctx context.Context, cs kubernetes.Interface, pool string) ([]string, int, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodePool + "=" + pool})
	if err != nil {
		return nil, 0, err
	}
	// A node being removed (tainted, or deleting) is a step in progress:
	// its pods are moving, and the constraint is judged on the nodes that
	// stay, as the scheduler will judge the pods that move.
	zoneOf := map[string]string{}
	perZone := map[string]int{}
	live := 0
	for _, n := range nodes.Items {
		if n.DeletionTimestamp != nil || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }) {
			continue
		}
		zoneOf[n.Name] = n.Labels[corev1.LabelTopologyZone]
		perZone[n.Labels[corev1.LabelTopologyZone]] += 0
		live++
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app in (spread, anti)"})
	if err != nil {
		return nil, 0, err
	}
	var out []string
	onNode := map[string]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		switch p.Labels["app"] {
		case "spread":
			if z, ok := zoneOf[p.Spec.NodeName]; ok {
				perZone[z]++
			}
		case "anti":
			if other, ok := onNode[p.Spec.NodeName]; ok {
				out = append(out, fmt.Sprintf("anti pods %s and %s share node %s", other, p.Name, p.Spec.NodeName))
			}
			onNode[p.Spec.NodeName] = p.Name
		}
	}
	lo, hi := -1, 0
	for _, n := range perZone {
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if hi-lo > 1 {
		out = append(out, fmt.Sprintf("spread pods per zone %v: skew %d", perZone, hi-lo))
	}
	return out, live, nil
}

// TestConsolidationKeepsSpreadAndAntiAffinity: workloads on one pool of
// c7.xlarge nodes in three zones: app spread (3 pods of 1 cpu, zone
// spread maxSkew 1 DoNotSchedule), app anti (4 pods of 500m, required
// hostname anti-affinity) and a plain filler of 6 pods that makes the
// pool launch more nodes. The filler scaled to 0 and anti to 2 (neither
// breaks a constraint; the anti pods kept are chosen so that a node is
// left that consolidation can remove), the pool is consolidated; a poller
// checks throughout, on the bound pods, that the spread never skews by
// more than 1 across the zones the pool has nodes in and that no two anti
// pods share a node. In the end the pool has fewer nodes than after the
// scale-down, consolidation did some of it (an Underutilized Disrupting
// Event), and all 5 pods are Running.
func TestConsolidationKeepsSpreadAndAntiAffinity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	const pool = "topology"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7.xlarge"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
		}
		np.Spec.Disruption = v1alpha1.Disruption{
			ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized,
			ConsolidateAfter:    "10s",
			Budgets:             []v1alpha1.Budget{{Nodes: "100%"}},
		}
	})
	spread := deployment("spread", pool, 3, func(s *corev1.PodSpec) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
	})
	anti := deployment("anti", pool, 4, func(s *corev1.PodSpec) {
		s.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("500m")
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "anti"}}, TopologyKey: corev1.LabelHostname}}}}
	})
	// Filler: plain pods that make the pool launch more nodes, and leave.
	filler := deployment("filler", pool, 6)
	for _, dep := range []*appsv1.Deployment{spread, anti, filler} {
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "3 spread, 4 anti and 6 filler pods Running", func() (bool, error) {
		a, err1 := runningPods(ctx, cs, "app=spread")
		b, err2 := runningPods(ctx, cs, "app=anti")
		c, err3 := runningPods(ctx, cs, "app=filler")
		return a == 3 && b == 4 && c == 6, errors.Join(err1, err2, err3)
	})
	if v, _, err := topologyViolations(ctx, cs, pool); err != nil || len(v) > 0 {
		t.Fatalf("constraints broken before any consolidation (err %v): %v", err, v)
	}
	// Which anti pods stay decides whether a node can go at all: three
	// nodes left one per zone, each with a spread pod, cannot be
	// consolidated (a spread pod moved off one leaves its zone, still
	// counted while the node drains, one pod short). The 4 anti pods are
	// on 4 nodes; the 3 spread pods leave one of them, P, without any. P's
	// anti pod stays, and so does the one on a node Q that is neither P nor
	// a node T with a spread pod: the rest go. Then P holds one anti pod
	// that T has room for (T keeps at most 3 cpu of spread pods), and no
	// spread pod: its removal is an Underutilized consolidation however
	// the pods were placed. The ReplicaSet controller deletes the pods of
	// least pod-deletion-cost first.
	keep, err := antiPodsToKeep(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range keep {
		patch := []byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"}}}`)
		if _, err := cs.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("anti pods kept: %v", keep)
	scaleTo(t, cs, "filler", 0)
	scaleTo(t, cs, "anti", 2)
	var before int
	poll(t, "the scale-down done: 3 spread and 2 anti pods, no filler", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app in (spread, anti, filler)"})
		if err != nil || len(pods.Items) != 5 {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Labels["app"] == "anti" && !slices.Contains(keep, p.Name) {
				return false, fmt.Errorf("anti pod %s stayed, not one of %v", p.Name, keep)
			}
		}
		_, before, err = topologyViolations(ctx, cs, pool)
		return err == nil, err
	})
	if v, _, err := topologyViolations(ctx, cs, pool); err != nil || len(v) > 0 {
		t.Fatalf("constraints broken by the scale-down itself (err %v): %v", err, v)
	}

	var (
		mu         sync.Mutex
		violations []string
		checks     int
	)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			v, _, err := topologyViolations(ctx, cs, pool)
			if err != nil {
				continue
			}
			mu.Lock()
			checks++
			for _, s := range v {
				violations = append(violations, time.Now().Format(time.StampMilli)+": "+s)
			}
			mu.Unlock()
		}
	}()
	stopWatching := sync.OnceFunc(func() { close(stop); <-watched })
	defer stopWatching()

	// Done when consolidation has removed a node (an Underutilized
	// Disrupting Event), no node of the pool is being removed, and the 5
	// pods are Running: a step still draining is watched to its end.
	var after, underutilized int
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonDisrupting})
		if err != nil {
			return false, nil
		}
		underutilized = 0
		for _, e := range evs.Items {
			if e.Action == string(Underutilized) {
				underutilized++
			}
		}
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodePool + "=" + pool})
		if err != nil {
			return false, nil
		}
		if _, after, err = topologyViolations(ctx, cs, pool); err != nil || after != len(nodes.Items) {
			return false, nil
		}
		a, err1 := runningPods(ctx, cs, "app=spread")
		b, err2 := runningPods(ctx, cs, "app=anti")
		return underutilized > 0 && err1 == nil && err2 == nil && a == 3 && b == 2, nil
	})
	stopWatching()
	if err != nil {
		t.Fatalf("no Underutilized consolidation finished with all 5 pods Running (%d Underutilized Events, %d nodes)", underutilized, after)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the pool went from %d nodes to %d; %d checks of the constraints", before, after, checks)
	if len(violations) > 0 {
		t.Errorf("constraints broken %d times during consolidation; first: %s", len(violations), violations[0])
	}
	if checks == 0 {
		t.Error("the poller never checked the constraints")
	}
	for _, app := range []string{"spread", "anti"} {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s is %s after consolidation", p.Name, p.Status.Phase)
			}
		}
	}
	if after >= before {
		t.Errorf("the pool did not shrink: %d nodes after the scale-down, %d after consolidation", before, after)
	}
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonDisrupting})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Action == string(Underutilized) {
			t.Logf("event on %s: %s", e.Regarding.Name, e.Note)
		}
	}
}

// antiPodsToKeep names the two anti pods to keep for the scale-down to
// leave a node consolidation can remove (see its use): the one on a node
// P with no spread pod, and one on a node Q that is neither P nor a node
// T with a spread pod. The anti pods are one to a node, on 4 nodes, and
// the spread pods 3: so P exists, and Q does.
func antiPodsToKeep(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app in (spread, anti)"})
	if err != nil {
		return nil, err
	}
	antiOn := map[string]string{} // node → its anti pod
	spreadOn := map[string]bool{}
	for _, p := range pods.Items {
		switch {
		case p.Spec.NodeName == "" || p.DeletionTimestamp != nil:
			return nil, fmt.Errorf("pod %s is not bound, or is being deleted", p.Name)
		case p.Labels["app"] == "anti":
			antiOn[p.Spec.NodeName] = p.Name
		default:
			spreadOn[p.Spec.NodeName] = true
		}
	}
	if len(antiOn) != 4 {
		return nil, fmt.Errorf("4 anti pods should be on 4 nodes: %v", antiOn)
	}
	nodes := slices.Sorted(maps.Keys(antiOn))
	p := slices.IndexFunc(nodes, func(n string) bool { return !spreadOn[n] })
	if p < 0 || len(spreadOn) == 0 {
		return nil, fmt.Errorf("no node with anti and no spread pod, or no spread pod bound: anti %v, spread %v", antiOn, spreadOn)
	}
	t := slices.Sorted(maps.Keys(spreadOn))[0]
	q := slices.IndexFunc(nodes, func(n string) bool { return n != nodes[p] && n != t })
	return []string{antiOn[nodes[p]], antiOn[nodes[q]]}, nil
}
