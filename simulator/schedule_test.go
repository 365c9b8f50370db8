package simulator

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
)

func newTestScheduler(t *testing.T) *Scheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubefake.NewClientset()
	inf := informers.NewSharedInformerFactory(cs, 0)
	opts, err := SharedState(ctx, cs, inf)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(ctx, plugins.NewInTreeRegistry(), &cfg.Profiles[0], cfg.PercentageOfNodesToScore, opts)
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	return s
}

func bound(p *corev1.Pod, node string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.NodeName = node
	return p
}

func antiAffine(p *corev1.Pod, app string) *corev1.Pod {
	p.Labels = map[string]string{"app": app}
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: corev1.LabelHostname,
	}}}}
	return p
}

// TestPlaceWithoutANodeCountsWhatIsLeft: pods of a node taken away are
// placed on the nodes left, each seeing the ones placed before it; a pod
// no node left can hold is refused with the plugin that refused it; the
// cluster under the view is not changed.
func TestPlaceWithoutANodeCountsWhatIsLeft(t *testing.T) {
	s := newTestScheduler(t)
	ctx := context.Background()
	// Nodes of 4 cpu. a runs two 1-cpu pods of app web (one per node:
	// hostname anti-affinity); b runs one web pod and 2 cpu of other
	// work; c runs nothing.
	pods := []*corev1.Pod{
		bound(antiAffine(gatePod("web-a", 0), "web"), "a"),
		bound(gatePod("batch-a", 0), "a"),
		bound(antiAffine(gatePod("web-b", 0), "web"), "b"),
		bound(gatePod("x-b", 0), "b"), bound(gatePod("y-b", 0), "b"),
	}
	cluster := NewCluster([]*corev1.Node{gateNode("a"), gateNode("b"), gateNode("c")}, pods)

	view := cluster.Without("a")
	node, st := s.Place(ctx, view, antiAffine(gatePod("web-a", 0), "web"))
	if !st.IsSuccess() || node != "c" {
		t.Fatalf("web-a placed on %q (%v), want c: b runs a web pod already", node, st)
	}
	if node, st := s.Place(ctx, view, antiAffine(gatePod("web-new", 0), "web")); st.IsSuccess() {
		t.Fatalf("a third web pod placed on %q; b and c each run one now", node)
	} else if st.Plugin() != "InterPodAffinity" {
		t.Errorf("refused by %q (%s), want InterPodAffinity", st.Plugin(), st.Message())
	}
	if got := len(cluster.Node("c").GetPods()); got != 0 {
		t.Errorf("the cluster's node c has %d pods after a view placed one there", got)
	}
	if got := len(cluster.Node("a").GetPods()); got != 2 {
		t.Errorf("the cluster's node a has %d pods, want its 2", got)
	}

	// Without b and c, a pod of 4 cpu fits nowhere: a is used.
	big := gatePod("big", 0)
	big.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
	if _, st := s.Place(ctx, cluster.Without("b", "c"), big); st.IsSuccess() || st.Plugin() != "NodeResourcesFit" {
		t.Errorf("4-cpu pod on a node with 2 cpu used: %v, want refused by NodeResourcesFit", st)
	}
}

// TestDrainingNodesStillCountAsSpreadDomains: a pod spread across zones
// (maxSkew 1, DoNotSchedule) from the only node of zone c fits on the
// nodes of zones a and b when c's node is gone, but not while it is being
// drained: the scheduler still counts zone c, empty, as a domain. The
// draining node holds none of its pods, carries the taint, and is told
// apart by IsDraining; the cluster under the view is not changed.
func TestDrainingNodesStillCountAsSpreadDomains(t *testing.T) {
	s := newTestScheduler(t)
	ctx := context.Background()
	zoned := func(name, zone string) *corev1.Node {
		n := gateNode(name)
		n.Labels[corev1.LabelTopologyZone] = zone
		return n
	}
	spread := func(name string) *corev1.Pod {
		p := gatePod(name, 0)
		p.Labels = map[string]string{"app": "spread"}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		return p
	}
	cluster := NewCluster(
		[]*corev1.Node{zoned("a1", "zone-a"), zoned("a2", "zone-a"), zoned("b1", "zone-b"), zoned("c1", "zone-c")},
		[]*corev1.Pod{bound(spread("s-a"), "a1"), bound(spread("s-b"), "b1"), bound(spread("s-c"), "c1")})
	taint := corev1.Taint{Key: "example.com/disrupted", Effect: corev1.TaintEffectNoSchedule}

	if node, st := s.Place(ctx, cluster.Without("c1"), spread("s-c")); !st.IsSuccess() {
		t.Fatalf("without c1, s-c was refused (%v); zones a and b hold one spread pod each", st)
	} else {
		t.Logf("without c1, s-c goes to %s", node)
	}
	view := cluster.Draining(taint, "c1")
	if node, st := s.Place(ctx, view, spread("s-c")); st.IsSuccess() {
		t.Fatalf("while c1 drains, s-c was placed on %s; zone c, empty, still counts (skew 2)", node)
	} else if st.Plugin() != "PodTopologySpread" && st.Plugin() != "TaintToleration" {
		t.Errorf("refused by %q (%s), want the spread constraint", st.Plugin(), st.Message())
	}
	if !view.IsDraining("c1") || view.IsDraining("a1") {
		t.Errorf("IsDraining(c1)=%v IsDraining(a1)=%v, want true and false", view.IsDraining("c1"), view.IsDraining("a1"))
	}
	drained, err := view.NodeInfos().Get("c1")
	if err != nil {
		t.Fatal(err)
	}
	if len(drained.GetPods()) != 0 || len(drained.Node().Spec.Taints) != 1 {
		t.Errorf("the draining node has %d pods and taints %v, want none and the taint", len(drained.GetPods()), drained.Node().Spec.Taints)
	}
	if got := len(cluster.Node("c1").GetPods()); got != 1 || len(cluster.Node("c1").Node().Spec.Taints) != 0 {
		t.Errorf("the cluster's node c1 changed under the view: %d pods, taints %v", got, cluster.Node("c1").Node().Spec.Taints)
	}
	// A pod that tolerates the taint may be placed on the draining node;
	// callers tell it with IsDraining.
	tolerant := spread("s-c")
	tolerant.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	if node, st := s.Place(ctx, view, tolerant); !st.IsSuccess() || !view.IsDraining(node) {
		t.Errorf("a pod tolerating every taint went to %q (%v), want the draining c1, the only node of zone c", node, st)
	}
}
