package virtualnodes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/plugin/registry"
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

// groupClaimHarness is a harness, with GenericWorkload and
// DRAWorkloadResourceClaims on, whose pool has benchDevicesPool's GPU
// types, and a gang train of n one-cpu pods sharing its PodGroup's
// ResourceClaim for gpus GPUs of gpu.example.com, each pod asking for
// cpu.
func groupClaimHarness(t *testing.T, n int, cpu string, gpus int64) (*harness, podGroup) {
	t.Helper()
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.DRAWorkloadResourceClaims: true})
	g := podGroup{pg: &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", UID: "uid-train"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(n)}},
		ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("train-gpus")}}}}}
	for i := range n {
		p := testPod(fmt.Sprintf("worker-%d", i), cpu, "1Gi")
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &g.pg.Name}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("train-gpus")}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		g.pods = append(g.pods, p)
	}
	reg, err := registry.All()
	if err != nil {
		t.Fatal(err)
	}
	// DefaultPreemption, with GenericWorkload on, needs the PodGroup
	// manager only kube-scheduler has.
	noPreemption := func(p *config.KubeSchedulerProfile) {
		p.Plugins.MultiPoint.Enabled = slices.DeleteFunc(p.Plugins.MultiPoint.Enabled, func(pl config.Plugin) bool { return pl.Name == names.DefaultPreemption })
	}
	h := newHarnessOf(t, reg, []*pool{benchDevicesPool(t)}, noPreemption, g.pg,
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "train-gpus", Namespace: "default", UID: "uid-claim"}, Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: gpus}}}}}})
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := h.plugin.devices.ResourceClaims().Get("default", "train-gpus")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the group's claim never reached the DRA manager: %v", err)
	}
	if _, err := h.plugin.lister.PodGroups().Get("default", "train"); err != nil {
		t.Fatalf("the plugin does not list PodGroup train: %v", err)
	}
	return h, g
}

// TestAGangSharingItsPodGroupsClaimLandsWithItsDevices: the three pods of
// a gang share their PodGroup's claim for two GPUs; the claim is planned
// once, for the first pod, and all three are nominated to that one
// virtual node, whose types are one type alone (the one whose devices
// the plan holds on): g2, the cheapest with two GPUs, when it holds the
// three pods; g3 when they need more cpu than g2 has (16), since the
// node chosen for the first must hold the pods that follow its claim.
// Forgotten, as a restart forgets them, the plans are made again on that
// node from the cluster's PodGroups.
func TestAGangSharingItsPodGroupsClaimLandsWithItsDevices(t *testing.T) {
	for _, tc := range []struct {
		name, cpu, want string
	}{
		{name: "pods of 1 cpu fit the cheapest type with two GPUs", cpu: "1", want: "g2"},
		{name: "pods of 6 cpu need more than it has", cpu: "6", want: "g3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, g := groupClaimHarness(t, 3, tc.cpu, 2)
			res, s := h.plugin.PodGroupPostFilter(context.Background(), nil, g, nil)
			if !s.IsSuccess() || res == nil || len(res.NominatingInfos) != 3 {
				t.Fatalf("a gang of 3 sharing a two-GPU claim: %v, %v; want all 3 nominated", res, s)
			}
			c := h.plugin.book.nominatedTo(g.pods[0].UID)
			for _, p := range g.pods {
				if got := h.plugin.book.nominatedTo(p.UID); got == nil || got != c {
					t.Errorf("pod %s nominated to %v, want %s with the other pods of the group", p.Name, got, c.name)
				}
			}
			if h.plugin.book.count() != 1 || len(c.options) == 0 {
				t.Fatalf("%d claims, options %v; want one claim with options", h.plugin.book.count(), c.options)
			}
			for _, o := range c.options {
				if o.it.Name != tc.want {
					t.Errorf("option %s: want only %s", o.it.Name, tc.want)
				}
			}
			if n := h.plugin.devices.Planned(); n != 1 {
				t.Errorf("%d claims planned, want the group's one", n)
			}
			// A restarted plugin plans its restored pods' devices again
			// (replanDevices) before the scheduler's first cycle, its
			// snapshot holding no PodGroup yet.
			for _, p := range g.pods {
				h.plugin.devices.Forget(p.UID)
			}
			for _, p := range g.pods {
				if why := h.plugin.decider.replan(context.Background(), c, p, h.plugin.devices.Plan); why != "" {
					t.Errorf("planning pod %s again on %s: %s", p.Name, c.name, why)
				}
			}
			if n := h.plugin.devices.Planned(); n != 1 {
				t.Errorf("%d claims planned again, want the group's one", n)
			}
		})
	}
}

// TestAGangWhosePodGroupsClaimNoTypeHoldsGetsNothing: a gang sharing a
// claim for nine GPUs, more than any type has, is nominated nowhere, no
// claim is made, and the refusal names the claim and its request and
// says no type's devices satisfy it.
func TestAGangWhosePodGroupsClaimNoTypeHoldsGetsNothing(t *testing.T) {
	h, g := groupClaimHarness(t, 3, "1", 9)
	res, s := h.plugin.PodGroupPostFilter(context.Background(), nil, g, nil)
	if s.IsSuccess() || res != nil {
		t.Fatalf("a gang sharing a claim no type holds: %v, %v; want it refused", res, s)
	}
	for _, want := range []string{"only 0 of its 3 pods can have a node", "no instance type's devices satisfy claim default/train-gpus (request gpus: 9 of gpu)"} {
		if !strings.Contains(s.Message(), want) {
			t.Errorf("refusal %q, want it to say %q", s.Message(), want)
		}
	}
	if n := h.plugin.book.count(); n != 0 {
		t.Errorf("%d claims after the refused gang, want none", n)
	}
	if n := h.plugin.devices.Planned(); n != 0 {
		t.Errorf("%d claims planned after the refused gang, want none", n)
	}
}
