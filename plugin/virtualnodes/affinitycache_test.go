package virtualnodes

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// affinityHits counts the saved states decisions used, in this package's
// tests.
var affinityHits atomic.Int64

// Every test of the package checks each saved InterPodAffinity state a
// decision uses against the state the plugin computes afresh for the pod:
// a change to the view that does not drop the saved states, or a
// nomination not added to them, fails whatever test made it.
func init() {
	checkAffinityHit = panicOnDiff("InterPodAffinity", &affinityHits, affinityStateDiff)
}

// panicOnDiff is a check of saved states for plugin: it counts the states
// used in hits and panics when one differs from the fresh one (diff says
// how), failing whatever test made the decision.
func panicOnDiff(plugin string, hits *atomic.Int64, diff func(saved, fresh fwk.StateData) string) func(*corev1.Pod, fwk.StateData, fwk.StateData) {
	return func(pod *corev1.Pod, saved, fresh fwk.StateData) {
		hits.Add(1)
		if d := diff(saved, fresh); d != "" {
			panic(fmt.Sprintf("saved %s state for pod %s/%s differs from a fresh one: %s", plugin, pod.Namespace, pod.Name, d))
		}
	}
}

// affinityStateDiff names the first field in which two InterPodAffinity
// PreFilter states differ, leaving out the pod each was computed for.
func affinityStateDiff(a, b fwk.StateData) string {
	if a == nil && b == nil {
		return ""
	}
	if a == nil || b == nil {
		return fmt.Sprintf("saved a state %v (else a Skip), fresh a state %v", a != nil, b != nil)
	}
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	if va.Type() != vb.Type() {
		return fmt.Sprintf("types %s and %s", va.Type(), vb.Type())
	}
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if f.Name == "podInfo" {
			continue
		}
		x := reflect.NewAt(f.Type, unsafe.Pointer(va.Field(i).UnsafeAddr())).Elem().Interface()
		y := reflect.NewAt(f.Type, unsafe.Pointer(vb.Field(i).UnsafeAddr())).Elem().Interface()
		if !reflect.DeepEqual(x, y) {
			return fmt.Sprintf("%s: saved %v, fresh %v", f.Name, x, y)
		}
	}
	return ""
}

// TestAffinityStateKeyIsThePlugins: InterPodAffinity's PreFilter leaves its
// state under affinityStateKey, where the saved states are written back.
func TestAffinityStateKeyIsThePlugins(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	h := newHarness(t, []*pool{benchPool(t)})
	pod := benchPods(5)[4] // required hostname anti-affinity
	state := framework.NewCycleState()
	if _, s, _ := h.plugin.decider.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
		t.Fatal(s)
	}
	if _, err := state.Read(affinityStateKey); err != nil {
		t.Fatalf("no InterPodAffinity state under %q: %v", affinityStateKey, err)
	}
}

// TestSavedStatesDecideAsAfresh: 1,000 pods of the benchmark's five groups
// (zone spread, hostname spread, zone affinity, hostname anti-affinity,
// plain) nominated with the saved InterPodAffinity and PodTopologySpread
// states and without them land on the same claims, and the saved states
// were used, most spread pods' included while new claims joined the view
// between them (each checked against a fresh one, as in every test here).
func TestSavedStatesDecideAsAfresh(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	pods := benchPods(1000)
	spread := 0
	for _, p := range pods {
		if _, ok := spreadClass(p); ok {
			spread++
		}
	}
	if spread == 0 {
		t.Fatal("the benchmark's pods have no spread constraints: nothing tested")
	}
	type placed struct {
		on               map[string]string
		affinity, spread int64
		joins            int
	}
	place := func(cached bool) placed {
		h := newHarness(t, []*pool{benchPool(t)})
		affinity0, spread0 := affinityHits.Load(), spreadHits.Load()
		out := placed{on: map[string]string{}}
		for _, pod := range pods {
			if !cached {
				h.plugin.lister.changed()
			}
			claims := h.plugin.book.count()
			if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
				t.Fatalf("pod %s: %v", pod.Name, s.Message())
			}
			if h.plugin.book.count() > claims {
				out.joins++
			}
		}
		// Claim names are random: compare by the pods that share one.
		for _, c := range h.plugin.book.claims {
			var first string
			for _, p := range c.pods {
				if first == "" || p.Name < first {
					first = p.Name
				}
			}
			for _, p := range c.pods {
				out.on[p.Name] = first + "@" + c.group.zone + "/" + c.group.capacityType
			}
		}
		out.affinity, out.spread = affinityHits.Load()-affinity0, spreadHits.Load()-spread0
		return out
	}
	with, without := place(true), place(false)
	if with.affinity == 0 {
		t.Fatal("no decision used a saved InterPodAffinity state")
	}
	if with.spread < int64(spread)/2 {
		t.Fatalf("%d of %d spread decisions used a saved state", with.spread, spread)
	}
	if with.joins < 10 {
		t.Fatalf("only %d claims joined the view: the joining path is not tested", with.joins)
	}
	if without.affinity+without.spread != 0 {
		t.Fatalf("%d decisions used a saved state after the view changed", without.affinity+without.spread)
	}
	if len(with.on) != len(pods) || len(without.on) != len(pods) {
		t.Fatalf("%d pods on claims with the saved states, %d without, of %d", len(with.on), len(without.on), len(pods))
	}
	diffs := 0
	for name, w := range with.on {
		if without.on[name] != w {
			if diffs < 5 {
				t.Errorf("pod %s: %s with the saved states, %s without", name, w, without.on[name])
			}
			diffs++
		}
	}
	t.Logf("saved states used: InterPodAffinity %d of %d decisions, PodTopologySpread %d of %d spread decisions, %d claims joined; %d pods placed differently",
		with.affinity, len(pods), with.spread, spread, with.joins, diffs)
}
