package virtualnodes

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// spreadHits counts the decisions whose PodTopologySpread state was
// computed over narrowed nodes, in this package's tests.
var spreadHits atomic.Int64

// Every test of the package checks each PodTopologySpread state computed
// over the narrowed nodes against the one computed over the full view: a
// pod left out that the plugin would count, a node left out, or a stale
// narrowed node fails whatever test made it.
func init() {
	checkSpreadHit = func(pod *v1.Pod, narrowed, full fwk.StateData) {
		spreadHits.Add(1)
		if diff := spreadStateDiff(narrowed, full); diff != "" {
			panic(fmt.Sprintf("PodTopologySpread state for pod %s/%s over the narrowed nodes differs from the full view's: %s", pod.Namespace, pod.Name, diff))
		}
	}
}

// spreadStateDiff says how two PodTopologySpread PreFilter states differ in
// what Filter reads: the constraints, the count of each domain, and the
// smallest counts (the critical paths' counts; which of several domains
// with the same count is named there is the order of a map's walk).
func spreadStateDiff(a, b fwk.StateData) string {
	if a == nil || b == nil {
		if (a == nil) != (b == nil) {
			return fmt.Sprintf("narrowed a state %v, full a state %v", a != nil, b != nil)
		}
		return ""
	}
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	if va.Type() != vb.Type() {
		return fmt.Sprintf("types %s and %s", va.Type(), vb.Type())
	}
	for _, f := range []string{"Constraints", "TpValueToMatchNum"} {
		if x, y := va.FieldByName(f).Interface(), vb.FieldByName(f).Interface(); !reflect.DeepEqual(x, y) {
			return fmt.Sprintf("%s: narrowed %v, full %v", f, x, y)
		}
	}
	pa, pb := va.FieldByName("CriticalPaths"), vb.FieldByName("CriticalPaths")
	if pa.Len() != pb.Len() {
		return fmt.Sprintf("%d critical paths narrowed, %d full", pa.Len(), pb.Len())
	}
	for i := range pa.Len() {
		for j := range 2 {
			x, y := pa.Index(i).Elem().Index(j).FieldByName("MatchNum").Int(), pb.Index(i).Elem().Index(j).FieldByName("MatchNum").Int()
			if x != y {
				return fmt.Sprintf("constraint %d: critical path %d counts %d narrowed, %d full", i, j, x, y)
			}
		}
	}
	return ""
}

// TestSpreadStateKeyIsThePlugins: PodTopologySpread's PreFilter leaves its
// state under spreadStateKey, which the check reads.
func TestSpreadStateKeyIsThePlugins(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	pod := benchPods(5)[1] // zone spread
	state := framework.NewCycleState()
	if _, s, _ := h.plugin.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
		t.Fatal(s)
	}
	if _, err := state.Read(spreadStateKey); err != nil {
		t.Fatalf("no PodTopologySpread state under %q: %v", spreadStateKey, err)
	}
}

// TestNarrowedSpreadDecidesAsTheFullView: the benchmark's 1,000 pods (two
// of its five groups spread by zone and by hostname) are placed, and every
// spread pod's state over the narrowed nodes equals the full view's (the
// package's check panics otherwise); the narrowing was used for them. A
// pod of another namespace with the same labels is not counted for the
// class, and a node holding none of the class's pods is still a domain.
func TestNarrowedSpreadDecidesAsTheFullView(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	pods := benchPods(1000)
	h := newHarness(t, []*pool{benchPool(t)})
	before := spreadHits.Load()
	for _, pod := range pods {
		if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
			t.Fatalf("pod %s: %v", pod.Name, s.Message())
		}
	}
	spread := 0
	for _, p := range pods {
		if _, _, ok := spreadClassOf(p); ok {
			spread++
		}
	}
	if spread == 0 {
		t.Fatal("the benchmark's pods have no hard spread constraints: nothing tested")
	}
	if got := spreadHits.Load() - before; got < int64(spread) {
		t.Fatalf("%d decisions checked against the full view, want at least the %d spread pods'", got, spread)
	}

	// The same labels in another namespace: the class's pods, and its
	// narrowed nodes, leave it out.
	var zoneSpread *v1.Pod
	for _, p := range pods {
		for _, c := range p.Spec.TopologySpreadConstraints {
			if c.TopologyKey == v1.LabelTopologyZone && c.WhenUnsatisfiable == v1.DoNotSchedule {
				zoneSpread = p
			}
		}
	}
	if zoneSpread == nil {
		t.Fatal("no zone-spread pod among the benchmark's")
	}
	other := zoneSpread.DeepCopy()
	other.Namespace, other.Name, other.UID = "elsewhere", "stranger", "stranger"
	key, sels, _ := spreadClassOf(zoneSpread)
	c := &spreadClass{namespace: zoneSpread.Namespace, selectors: sels, nodes: map[string]*narrowedNode{}}
	if c.counts(other) {
		t.Errorf("class %q counts a pod of another namespace", key)
	}
	if !c.counts(zoneSpread) {
		t.Errorf("class %q does not count its own pod", key)
	}
	empty := framework.NewNodeInfo()
	empty.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: map[string]string{v1.LabelTopologyZone: "zone-z"}}})
	empty.AddPod(other)
	got := c.narrow([]fwk.NodeInfo{empty})
	if len(got) != 1 || got[0].Node().Name != "bare" || len(got[0].GetPods()) != 0 {
		t.Errorf("a node with none of the class's pods narrowed to %d nodes (want it, with no pods)", len(got))
	}
	// A pod of the class added later is seen: the node's generation moved.
	mine := zoneSpread.DeepCopy()
	mine.Name, mine.UID = "mine", "mine"
	empty.AddPod(mine)
	if got := c.narrow([]fwk.NodeInfo{empty}); len(got[0].GetPods()) != 1 {
		t.Errorf("a pod of the class added to a node is not among its narrowed pods (%d pods)", len(got[0].GetPods()))
	}
	// A node gone from the view is forgotten.
	c.narrow(nil)
	if len(c.nodes) != 0 {
		t.Errorf("%d narrowed nodes kept after their nodes left the view", len(c.nodes))
	}
}
