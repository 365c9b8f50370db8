package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/simulator"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// consolidationFixture is a pool of 4-cpu nodes, one claim per node, and
// the pods on them; live is the API server's state when it differs from
// the cache's (kube).
type consolidationFixture struct {
	objs []client.Object
	live []client.Object // extra objects only the API server has
	// keepBufferRoom sets Consolidation.KeepBufferRoom.
	keepBufferRoom bool
}

func (f *consolidationFixture) node(name string) {
	f.objs = append(f.objs,
		testobj.Node(name).Label(corev1.LabelHostname, name).Label(corev1.LabelTopologyZone, "zone-a").
			Capacity("cpu", "4", "memory", "16Gi", "pods", "110").Ready().Obj(),
		testobj.Claim("p-"+name).UID("uid-"+name).Pool("p").
			Phase(v1alpha1.NodeClaimInitialized).NodeName(name).Launched("c7.xlarge", "zone-a", "on-demand").Obj())
}

// pod is a 1-cpu pod of ReplicaSet rs bound to node.
func pod(name, node string, edit ...func(*corev1.Pod)) *corev1.Pod {
	p := testobj.Pod(name).UID("uid-"+name).Label("app", "web").OwnedBy("ReplicaSet", "rs").
		Node(node).Req("cpu", "1").Phase(corev1.PodRunning).Obj()
	for _, e := range edit {
		e(p)
	}
	return p
}

func antiAffinity(required bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: corev1.LabelHostname}
		if required {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
		} else {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}}}
		}
	}
}

// run builds the consolidation over the fixture and runs one round; it
// returns the nodes whose claims were disrupted, and the Events.
func (f *consolidationFixture) run(t *testing.T) (disrupted []string, evs []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := testobj.Pool("p").ConsolidationPolicy(v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized).ConsolidateAfter("30s").Budget("100%").Obj()
	build := func(objs []client.Object) client.Client {
		var cp []client.Object
		for _, o := range objs {
			cp = append(cp, o.DeepCopyObject().(client.Object))
		}
		return testobj.Client(append(cp, pool.DeepCopy())...)
	}
	kube := build(f.objs)
	live := kube
	if len(f.live) > 0 {
		live = build(append(append([]client.Object{}, f.objs...), f.live...))
	}
	sched := newScheduler(ctx, t)
	rec := events.NewFakeRecorder(100)
	now := time.Now()
	clock := func() time.Time { return now }
	k := NewConsolidation(NewExecutor(kube, kube, kubefake.NewClientset(), rec, clock), kube, live, sched, clock)
	k.Pause, k.KeepBufferRoom = 0, f.keepBufferRoom
	// The first round sees each node's pods for the first time; a round
	// consolidateAfter later may act.
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != countClaims(f.objs) {
		t.Fatalf("disrupted before consolidateAfter: %d claims left of %d", len(claims.Items), countClaims(f.objs))
	}
	now = now.Add(31 * time.Second)
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, nc := range claims.Items {
		left[nc.Status.NodeName] = true
	}
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok && !left[nc.Status.NodeName] {
			disrupted = append(disrupted, nc.Status.NodeName)
		}
	}
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if left[n.Name] && len(n.Spec.Taints) > 0 {
			t.Errorf("node %s kept, but tainted %v", n.Name, n.Spec.Taints)
		}
	}
	for len(rec.Events) > 0 {
		evs = append(evs, <-rec.Events)
	}
	return disrupted, evs
}

// newScheduler is the simulator with kube-scheduler's default profile.
func newScheduler(ctx context.Context, tb testing.TB) *simulator.Scheduler {
	tb.Helper()
	s, err := simulator.DefaultScheduler(ctx, kubefake.NewClientset())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func countClaims(objs []client.Object) int {
	n := 0
	for _, o := range objs {
		if _, ok := o.(*v1alpha1.NodeClaim); ok {
			n++
		}
	}
	return n
}

func TestConsolidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		// nodes n1..nN and their pods (node name → pods)
		nodes int
		pods  []*corev1.Pod
		extra []client.Object
		live  []client.Object
		// want: the nodes disrupted; an Event containing wantEvent
		want      []string
		wantEvent string
	}{{
		name:  "two nodes of one pod each are removed together; their pods fit on the third",
		nodes: 3, pods: []*corev1.Pod{pod("a", "n1"), pod("b", "n2"), pod("c", "n3"), pod("d", "n3")},
		want: []string{"n1", "n2"}, wantEvent: "the pods of 2 nodes fit on the other nodes",
	}, {
		name:  "a node whose pods fit nowhere else stays, and the Event names the pod and the plugin",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", antiAffinity(true)), pod("b", "n2", antiAffinity(true))},
		wantEvent: "fits no other node: InterPodAffinity",
	}, {
		name:  "soft preferences do not keep a node",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", antiAffinity(false)), pod("b", "n2", antiAffinity(false)), pod("c", "n2", antiAffinity(false))},
		want: []string{"n1"},
	}, {
		name:  "a pod with do-not-disrupt keeps its node (the other node's pods move to it)",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", func(p *corev1.Pod) { p.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"} }), pod("b", "n2"), pod("c", "n2")},
		want: []string{"n2"}, wantEvent: "pod default/a has nodeforge.dev/do-not-disrupt=true",
	}, {
		name:  "a pod with Karpenter's do-not-disrupt keeps its node the same way",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", func(p *corev1.Pod) {
			p.Annotations = map[string]string{v1alpha1.AnnotationKarpenterDoNotDisrupt: "true"}
		}), pod("b", "n2"), pod("c", "n2")},
		want: []string{"n2"}, wantEvent: "pod default/a has karpenter.sh/do-not-disrupt=true",
	}, {
		name:  "a pod without a controller keeps its node: evicting it would lose it (the other node's pods move to it)",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", func(p *corev1.Pod) { p.OwnerReferences = nil }), pod("b", "n2"), pod("c", "n2")},
		want: []string{"n2"}, wantEvent: "pod default/a has no controller",
	}, {
		name:  "a pod of a PodGroup keeps its node: a gang is not moved in part (the other node's pods move to it)",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1", func(p *corev1.Pod) {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
		}), pod("b", "n2"), pod("c", "n2")},
		want: []string{"n2"}, wantEvent: "pod default/a belongs to PodGroup default/train, which consolidation does not move",
	}, {
		name:  "a PodDisruptionBudget that allows no eviction now keeps the node",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1"), pod("b", "n2"), pod("c", "n2")},
		extra: []client.Object{&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}},
		wantEvent: "PodDisruptionBudget default/web allows 0 disruptions now",
	}, {
		name:  "a pod bound to the chosen node after the decision calls it off",
		nodes: 2, pods: []*corev1.Pod{pod("a", "n1"), pod("b", "n2"), pod("c", "n2")},
		live: []client.Object{pod("late", "n1")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &consolidationFixture{live: tc.live}
			for i := 1; i <= tc.nodes; i++ {
				f.node(fmt.Sprintf("n%d", i))
			}
			for _, p := range tc.pods {
				f.objs = append(f.objs, p)
			}
			f.objs = append(f.objs, tc.extra...)
			got, evs := f.run(t)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("disrupted %v, want %v; events:\n%s", got, tc.want, strings.Join(evs, "\n"))
			}
			if tc.wantEvent != "" && !strings.Contains(strings.Join(evs, "\n"), tc.wantEvent) {
				t.Errorf("no Event saying %q; events:\n%s", tc.wantEvent, strings.Join(evs, "\n"))
			}
		})
	}
}
