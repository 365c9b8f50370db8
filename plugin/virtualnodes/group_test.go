package virtualnodes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// podGroup is a PodGroup's scheduling cycle as kube-scheduler passes it.
type podGroup struct {
	pg   *schedulingv1beta1.PodGroup
	pods []*corev1.Pod
}

func (g podGroup) GetUnscheduledPods() []*corev1.Pod                           { return g.pods }
func (g podGroup) GetName() string                                             { return g.pg.Name }
func (g podGroup) GetNamespace() string                                        { return g.pg.Namespace }
func (g podGroup) GetType() fwk.EntityKeyType                                  { return fwk.PodGroupKeyType }
func (g podGroup) GetKey() string                                              { return "podgroup/" + g.pg.Namespace + "/" + g.pg.Name }
func (g podGroup) GetPodGroup() *schedulingv1beta1.PodGroup                    { return g.pg }
func (g podGroup) GetCompositePodGroup() *schedulingv1alpha3.CompositePodGroup { return nil }
func (g podGroup) GetChildren() []fwk.PodGroupInfo                             { return nil }

// gang is a gang of minCount and n pods of 1 cpu, each on a node of its
// own (hostname anti-affinity).
func gang(minCount int32, n int) podGroup {
	g := podGroup{pg: &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}}}}
	for i := range n {
		p := testPod("worker-"+string(rune('a'+i)), "1", "1Gi")
		p.Labels = map[string]string{"app": "train"}
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}}, TopologyKey: corev1.LabelHostname}}}}
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &g.pg.Name}
		g.pods = append(g.pods, p)
	}
	return g
}

// TestAGangIsNominatedWholeOrNotAtAll: under a 3-cpu limit, beside a pod
// already nominated to an open claim of 1 cpu, a gang of 4 one-cpu pods
// that each need a node of their own cannot all have one: none is
// nominated, no claim is left of the gang, the open claim is as it was,
// and the refusal says how many could of how many needed. With the limit
// raised, all four are nominated, each to its own claim; a gang of
// minCount 2 of 4 pods under a 2-cpu limit gets the 2 that fit.
func TestAGangIsNominatedWholeOrNotAtAll(t *testing.T) {
	limited := func(cpu string) *pool {
		pl := benchPool(t)
		pl.np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse(cpu)}
		return pl
	}
	h := newHarness(t, []*pool{limited("3")})
	ctx := context.Background()
	solo, s := h.schedule(ctx, testPod("solo", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	options := len(solo.options)
	res, s := h.plugin.PodGroupPostFilter(ctx, nil, gang(4, 4), nil)
	if s.IsSuccess() || res != nil {
		t.Fatalf("a gang of 4 under a limit that leaves room for 2 nodes: %v, %v; want it refused whole", res, s)
	}
	if want := "pod group default/train is a gang of minCount 4 and only 2 of its 4 pods can have a node, so none is nominated and nothing is launched"; !strings.Contains(s.Message(), want) {
		t.Errorf("refusal %q, want it to say %q", s.Message(), want)
	}
	if n := h.plugin.book.count(); n != 1 || len(solo.pods) != 1 || len(solo.options) != options {
		t.Errorf("after the refused gang: %d claims, solo's claim with %d pods and %d options; want 1 claim of 1 pod and %d options", n, len(solo.pods), len(solo.options), options)
	}
	if w := h.plugin.book.dirty(); len(w) != 1 || w[0].cl != solo {
		t.Errorf("writes after the refused gang: %d, want solo's claim alone", len(w))
	}

	h.plugin.setPools([]*pool{limited("8")})
	g := gang(4, 4)
	res, s = h.plugin.PodGroupPostFilter(ctx, nil, g, nil)
	if !s.IsSuccess() || res == nil || len(res.NominatingInfos) != 4 {
		t.Fatalf("a gang of 4 under an 8-cpu limit: %v, %v; want all 4 nominated", res, s)
	}
	seen := map[string]bool{}
	for _, p := range g.pods {
		c := h.plugin.book.nominatedTo(p.UID)
		if c == nil || seen[c.name] {
			t.Fatalf("pod %s nominated to %v; want a claim of its own", p.Name, c)
		}
		seen[c.name] = true
		if ni := res.NominatingInfos[keyOf(p)]; ni == nil || ni.NominatedNodeName != c.name {
			t.Errorf("pod %s: nominating info %v, want %s", p.Name, ni, c.name)
		}
	}

	h = newHarness(t, []*pool{limited("2")})
	g = gang(2, 4)
	res, s = h.plugin.PodGroupPostFilter(ctx, nil, g, nil)
	if !s.IsSuccess() || res == nil || len(res.NominatingInfos) != 2 || h.plugin.book.count() != 2 {
		t.Fatalf("a gang of minCount 2 of 4 pods under a 2-cpu limit: %v, %v, %d claims; want 2 nominated", res, s, h.plugin.book.count())
	}
}

func keyOf(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// TestAGangOfOneZoneLandsInOneZone: three pods that spread over zones
// (maxSkew 1) each get a claim in another zone; the same pods in a gang
// whose PodGroup says its pods share a zone all get claims in one zone.
func TestAGangOfOneZoneLandsInOneZone(t *testing.T) {
	spread := func(g podGroup) podGroup {
		for _, p := range g.pods {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}}}}
		}
		return g
	}
	zones := func(h *harness, g podGroup) map[string]bool {
		out := map[string]bool{}
		for _, p := range g.pods {
			if c := h.plugin.book.nominatedTo(p.UID); c != nil {
				out[c.group.zone] = true
			}
		}
		return out
	}
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	free := spread(gang(3, 3))
	if _, s := h.plugin.PodGroupPostFilter(ctx, nil, free, nil); !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if z := zones(h, free); len(z) != 3 {
		t.Fatalf("a gang spread over zones has claims in zones %v, want 3", z)
	}
	h = newHarness(t, []*pool{benchPool(t)})
	one := spread(gang(3, 3))
	one.pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: corev1.LabelTopologyZone}}}
	res, s := h.plugin.PodGroupPostFilter(ctx, nil, one, nil)
	if !s.IsSuccess() || len(res.NominatingInfos) != 3 {
		t.Fatalf("a gang of one zone: %v %v, want 3 nominated", res, s)
	}
	if z := zones(h, one); len(z) != 1 || h.plugin.book.count() != 3 {
		t.Errorf("a gang of one zone has %d claims in zones %v, want 3 claims in one zone (the other zones tried and undone)", h.plugin.book.count(), z)
	}
}
