package virtualnodes

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

// spreadHits counts the saved PodTopologySpread states decisions used, in
// this package's tests.
var spreadHits atomic.Int64

// Every test of the package checks each saved PodTopologySpread state a
// decision uses against the state the plugin computes afresh for the pod:
// a change to the view that does not drop the saved states, a nomination
// or a joining node not added to them, fails whatever test made it.
func init() {
	checkSpreadHit = panicOnDiff("PodTopologySpread", &spreadHits, spreadStateDiff)
}

// spreadStateDiff says how two PodTopologySpread PreFilter states differ in
// what Filter reads: the constraints, the count of each domain, and the
// smallest counts (the critical paths' counts; which of several domains
// with the same count is named there is the order of a map's walk).
func spreadStateDiff(a, b fwk.StateData) string {
	if a == nil || b == nil {
		if (a == nil) != (b == nil) {
			return fmt.Sprintf("saved a state %v, fresh a state %v", a != nil, b != nil)
		}
		return ""
	}
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	if va.Type() != vb.Type() {
		return fmt.Sprintf("types %s and %s", va.Type(), vb.Type())
	}
	for _, f := range []string{"Constraints", "TpValueToMatchNum"} {
		if x, y := va.FieldByName(f).Interface(), vb.FieldByName(f).Interface(); !reflect.DeepEqual(x, y) {
			return fmt.Sprintf("%s: saved %v, fresh %v", f, x, y)
		}
	}
	pa, pb := va.FieldByName("CriticalPaths"), vb.FieldByName("CriticalPaths")
	if pa.Len() != pb.Len() {
		return fmt.Sprintf("%d critical paths saved, %d fresh", pa.Len(), pb.Len())
	}
	for i := range pa.Len() {
		for j := range 2 {
			x, y := pa.Index(i).Elem().Index(j).FieldByName("MatchNum").Int(), pb.Index(i).Elem().Index(j).FieldByName("MatchNum").Int()
			if x != y {
				return fmt.Sprintf("constraint %d: critical path %d counts %d saved, %d fresh", i, j, x, y)
			}
		}
	}
	return ""
}

// TestSpreadStateIsShapedAsRead: PodTopologySpread's PreFilter leaves its
// state under spreadStateKey, with the fields the saved states are brought
// up to date through; were it shaped otherwise, nothing would be saved
// (and this test says why decisions got slower).
func TestSpreadStateIsShapedAsRead(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	pod := benchPods(5)[1] // zone spread
	state := framework.NewCycleState()
	if _, s, _ := h.plugin.decider.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
		t.Fatal(s)
	}
	d, err := state.Read(spreadStateKey)
	if err != nil {
		t.Fatalf("no PodTopologySpread state under %q: %v", spreadStateKey, err)
	}
	if !spreadStateShapeOK(d) {
		t.Fatalf("PodTopologySpread's state %T is not shaped as spreadcache.go reads it", d)
	}
	if !selectorsCountable(d) {
		t.Fatal("the zone-spread pod's selector counts as empty")
	}
	// The smallest counts worked out again equal the plugin's own.
	fresh := d.Clone()
	setCriticalPaths(d)
	if diff := spreadStateDiff(d, fresh); diff != "" {
		t.Fatalf("critical paths worked out again differ from the plugin's: %s", diff)
	}
}

// TestSpreadClassIsWhatTheStateDependsOn: pods that differ in what the
// state depends on are of different classes; a pod without constraints of
// its own (the scheduler's defaults apply, built from the Services and
// workloads that select it) is not saved at all.
func TestSpreadClassIsWhatTheStateDependsOn(t *testing.T) {
	base := benchPods(5)[1]
	key, ok := spreadClass(base)
	if !ok {
		t.Fatal("the zone-spread pod has no class")
	}
	for name, change := range map[string]func(*corev1.Pod){
		"namespace":    func(p *corev1.Pod) { p.Namespace = "elsewhere" },
		"labels":       func(p *corev1.Pod) { p.Labels = map[string]string{"other": "x"} },
		"constraints":  func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints[0].MaxSkew = 7 },
		"nodeSelector": func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} },
		"nodeAffinity": func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpExists}}}}}}}
		},
		"tolerations": func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		},
	} {
		p := base.DeepCopy()
		change(p)
		if k, ok := spreadClass(p); !ok || k == key {
			t.Errorf("a pod with another %s is of the same class (or none)", name)
		}
	}
	same := base.DeepCopy()
	same.Name, same.UID = "other", "other"
	if k, _ := spreadClass(same); k != key {
		t.Error("a pod differing only in name and UID is of another class")
	}
	none := base.DeepCopy()
	none.Spec.TopologySpreadConstraints = nil
	if _, ok := spreadClass(none); ok {
		t.Error("a pod without constraints of its own is saved")
	}
}

// TestSpreadEmptySelectorIsNotSaved: a constraint whose selector is empty
// counts no pod in the plugin's PreFilter but every pod in its AddPod, so
// its state is never saved; the pod is still placed.
func TestSpreadEmptySelectorIsNotSaved(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	pod := benchPods(5)[1].DeepCopy()
	pod.Spec.TopologySpreadConstraints[0].LabelSelector = &metav1.LabelSelector{}
	for i := range 3 {
		p := pod.DeepCopy()
		p.Name = fmt.Sprintf("empty-%d", i)
		p.UID = types.UID(p.Name)
		if _, s := h.schedule(ctx, p); !s.IsSuccess() {
			t.Fatalf("pod %s: %v", p.Name, s.Message())
		}
	}
	if n := len(h.plugin.lister.spread); n != 0 {
		t.Fatalf("%d spread states saved for a constraint with an empty selector", n)
	}
}

// TestSpreadCacheKeepsEveryConstraintExact: spread pods of several shapes
// (minDomains, a node selector the constraint honours or ignores, the
// taints policy, matchLabelKeys, two constraints at once), interleaved
// with plain pods that open claims of their own, are placed with the
// saved states; each state used equals a fresh one (the package's check
// panics otherwise) and saved states were used for each shape.
func TestSpreadCacheKeepsEveryConstraintExact(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	honor, ignore := corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore
	shapes := map[string]func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint{
		"minDomains": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel, MinDomains: ptr.To[int32](3)}}
		},
		"affinityHonored": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel, NodeAffinityPolicy: &honor}}
		},
		"affinityIgnored": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel, NodeAffinityPolicy: &ignore}}
		},
		"taintsHonored": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel, NodeTaintsPolicy: &honor}}
		},
		"matchLabelKeys": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel, MatchLabelKeys: []string{"revision"}}}
		},
		"twoConstraints": func(sel *metav1.LabelSelector) []corev1.TopologySpreadConstraint {
			return []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel},
				{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel},
			}
		},
	}
	plain := benchPods(5)[0]
	hits := map[string]int64{}
	i := 0
	for round := range 30 {
		for name, constraints := range shapes {
			labels := map[string]string{"shape": name, "revision": fmt.Sprint(round % 2)}
			pod := plain.DeepCopy()
			pod.Name, pod.UID, pod.Labels = fmt.Sprintf("%s-%d", name, round), types.UID(fmt.Sprintf("%s-%d", name, round)), labels
			pod.Spec.TopologySpreadConstraints = constraints(&metav1.LabelSelector{MatchLabels: map[string]string{"shape": name}})
			if name == "affinityHonored" || name == "affinityIgnored" {
				pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "zone-a"}
			}
			before := spreadHits.Load()
			if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
				t.Fatalf("pod %s: %v", pod.Name, s.Message())
			}
			hits[name] += spreadHits.Load() - before
			// A plain pod large enough to open a claim of its own, joining
			// the view between two spread decisions.
			big := plain.DeepCopy()
			big.Name, big.UID = fmt.Sprintf("big-%d", i), types.UID(fmt.Sprintf("big-%d", i))
			big.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("300"), corev1.ResourceMemory: resource.MustParse("1Gi")}
			if _, s := h.schedule(ctx, big); !s.IsSuccess() {
				t.Fatalf("pod %s: %v", big.Name, s.Message())
			}
			i++
		}
	}
	for name, n := range hits {
		if n == 0 {
			t.Errorf("no %s decision used a saved state", name)
		}
	}
	t.Logf("saved states used, by shape: %v", hits)
}
