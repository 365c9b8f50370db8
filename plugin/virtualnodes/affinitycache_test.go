package virtualnodes

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
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
	checkAffinityHit = func(pod *v1.Pod, saved, fresh fwk.StateData) {
		affinityHits.Add(1)
		if diff := affinityStateDiff(saved, fresh); diff != "" {
			panic(fmt.Sprintf("saved InterPodAffinity state for pod %s/%s differs from a fresh one: %s", pod.Namespace, pod.Name, diff))
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
	if _, s, _ := h.plugin.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
		t.Fatal(s)
	}
	if _, err := state.Read(affinityStateKey); err != nil {
		t.Fatalf("no InterPodAffinity state under %q: %v", affinityStateKey, err)
	}
}

// TestAffinityCacheDecidesAsAfresh: 1,000 pods of the benchmark's five
// groups (zone spread, hostname spread, zone affinity, hostname
// anti-affinity, plain) nominated with the saved states and without them
// land on the same claims, and the saved states were used (each checked
// against a fresh one, as in every test here).
func TestAffinityCacheDecidesAsAfresh(t *testing.T) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(0))
	pods := benchPods(1000)
	place := func(cached bool) (map[string]string, int64) {
		h := newHarness(t, []*pool{benchPool(t)})
		before := affinityHits.Load()
		out := map[string]string{}
		for _, pod := range pods {
			if !cached {
				h.plugin.view.changed()
			}
			if _, s := h.schedule(ctx, pod); !s.IsSuccess() {
				t.Fatalf("pod %s: %v", pod.Name, s.Message())
			}
		}
		// Claim names are random: compare by the pods that share one.
		for _, c := range h.plugin.claims {
			var first string
			for _, p := range c.pods {
				if first == "" || p.Name < first {
					first = p.Name
				}
			}
			for _, p := range c.pods {
				out[p.Name] = first + "@" + c.group.zone + "/" + c.group.capacityType
			}
		}
		return out, affinityHits.Load() - before
	}
	with, hits := place(true)
	without, hitsWithout := place(false)
	if hits == 0 {
		t.Fatal("no decision used a saved state")
	}
	if hitsWithout != 0 {
		t.Fatalf("%d decisions used a saved state after the view changed", hitsWithout)
	}
	if len(with) != len(pods) || len(without) != len(pods) {
		t.Fatalf("%d pods on claims with the saved states, %d without, of %d", len(with), len(without), len(pods))
	}
	diffs := 0
	for name, w := range with {
		if without[name] != w {
			if diffs < 5 {
				t.Errorf("pod %s: %s with the saved states, %s without", name, w, without[name])
			}
			diffs++
		}
	}
	t.Logf("%d of %d decisions used a saved state; %d pods placed differently", hits, len(pods), diffs)
}
