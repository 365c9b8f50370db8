package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/sandbox"
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
// breaks a constraint), the pool is consolidated; a poller checks throughout, on the bound pods, that the
// spread never skews by more than 1 across the zones the pool has nodes
// in and that no two anti pods share a node. In the end the pool has
// fewer nodes than before the scale-down, consolidation did some of it
// (an Underutilized Disrupting Event), and all 5 pods are Running.
func TestConsolidationKeepsSpreadAndAntiAffinity(t *testing.T) {
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
	scaleTo(t, cs, "filler", 0)
	scaleTo(t, cs, "anti", 2)
	var before int
	poll(t, "the scale-down done: 3 spread and 2 anti pods, no filler", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app in (spread, anti, filler)"})
		if err != nil || len(pods.Items) != 5 {
			return false, err
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

	// Two anti pods need two nodes: the pool ends with at least two. It
	// must shrink below what the scale-down left.
	var after int
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		if _, after, err = topologyViolations(ctx, cs, pool); err != nil || after >= before {
			return false, nil
		}
		a, err1 := runningPods(ctx, cs, "app=spread")
		b, err2 := runningPods(ctx, cs, "app=anti")
		return err1 == nil && err2 == nil && a == 3 && b == 2, nil
	})
	if err != nil {
		t.Fatalf("the pool did not shrink below %d nodes with all 5 pods Running (now %d nodes)", before, after)
	}
	// The consolidation may go on a step; watch until it settles.
	time.Sleep(15 * time.Second)
	stopWatching()
	if _, final, err := topologyViolations(ctx, cs, pool); err == nil {
		after = final
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
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=Disrupting"})
	if err != nil {
		t.Fatal(err)
	}
	underutilized := 0
	for _, e := range evs.Items {
		if e.Action == string(Underutilized) {
			underutilized++
			t.Logf("event on %s: %s", e.Regarding.Name, e.Note)
		}
	}
	if underutilized == 0 {
		t.Error("no Disrupting Event with action Underutilized: consolidation did none of it")
	}
}
