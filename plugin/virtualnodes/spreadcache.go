package virtualnodes

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// spreadStateKey is where PodTopologySpread keeps its PreFilter state in
// the cycle state ("PreFilter" + its name, in its filtering.go); a test
// checks the state is there.
const spreadStateKey fwk.StateKey = "PreFilter" + podtopologyspread.Name

// PodTopologySpread's PreFilter counts, for each hard constraint of the
// pod being placed, the pods its selector matches on every node the
// constraint counts, summed per topology value (domain), every domain
// included, empty ones too; Filter then reads a node's domain count and
// the smallest count (and, with minDomains, how many domains there are).
// A walk over every node of the view, virtual ones included, for each
// decision: at thousands of pending pods, the largest part of the
// plugin's time (docs/benchmarks.md).
//
// Pods of one class (namespace, labels, spread constraints, node
// selection, tolerations: all the state depends on in the pod) get the
// same counts. So, as for InterPodAffinity (affinitycache.go), the view
// keeps the state of each class it computed, and the next pod of the
// class brings it up to date with the nominations made since instead of
// walking again:
//
//   - a pod nominated to a node the state counted is added by the plugin's
//     own AddPod, which applies the same node and pod checks as its
//     PreFilter and adds one to the pod's domain;
//   - a node that joined the view since (a new claim, with its daemonset
//     pods and first pod) is counted by the plugin's own PreFilter over
//     that node alone, whose counts are added to the state's, a new
//     domain included;
//   - then each constraint's two smallest counts are worked out again from
//     all the counts: AddPod keeps them only approximately (it updates the
//     two it tracks), which a fresh PreFilter would not.
//
// Anything else that changes the view (a pod leaving it, a node leaving or
// relabelled, the placeholders, the scheduler's snapshot of real nodes)
// drops every saved state, as for InterPodAffinity. The counts and
// smallest counts are read and written through the exported fields of
// the plugin's state (TpValueToMatchNum, CriticalPaths); if a future
// version's state does not have them as expected, nothing is saved and
// every decision walks as before (spreadStateShapeOK).

// spreadEntry is a class's saved state: as of additions[:n], at version.
type spreadEntry struct {
	version uint64
	real    realPrint
	n       int
	state   fwk.StateData
}

// checkSpreadHit, when set (by tests), is given each saved state a
// decision used and the state the plugin computes afresh for the same pod.
var checkSpreadHit func(pod *corev1.Pod, saved, fresh fwk.StateData)

// spreadClass is what PodTopologySpread's PreFilter state depends on in the
// pod itself: its namespace and labels (the selectors and matchLabelKeys),
// its constraints, its node selection and tolerations (which nodes a
// constraint counts). A pod without constraints of its own gets the
// scheduler's default constraints, built from the Services and workloads
// that select it: not saved (false).
func spreadClass(pod *corev1.Pod) (string, bool) {
	if len(pod.Spec.TopologySpreadConstraints) == 0 {
		return "", false
	}
	var na *corev1.NodeAffinity
	if pod.Spec.Affinity != nil {
		na = pod.Spec.Affinity.NodeAffinity
	}
	b, err := json.Marshal([]any{pod.Namespace, pod.Labels, pod.Spec.TopologySpreadConstraints, pod.Spec.NodeSelector, na, pod.Spec.Tolerations})
	return string(b), err == nil
}

// cachedSpread is PodTopologySpread with its PreFilter state saved per
// class on the view; everything else is the plugin's own.
type cachedSpread struct {
	*podtopologyspread.PodTopologySpread
	lister *lister
}

// withSavedStates returns a copy of registry with InterPodAffinity and
// PodTopologySpread saving their PreFilter states on v. The registry given
// is left as it was: the scheduler's other profiles, and the simulators
// built from it, must run the plugins unwrapped.
func withSavedStates(registry frameworkruntime.Registry, v *lister) frameworkruntime.Registry {
	registry = maps.Clone(registry)
	fastPath := utilfeature.DefaultFeatureGate.Enabled(features.InterPodAffinityHostnameFastPath)
	wrapPlugin(registry, interpodaffinity.Name, func(ipa *interpodaffinity.InterPodAffinity) fwk.Plugin {
		return &cachedAffinity{InterPodAffinity: ipa, lister: v, fastPath: fastPath}
	})
	wrapPlugin(registry, podtopologyspread.Name, func(pts *podtopologyspread.PodTopologySpread) fwk.Plugin {
		return &cachedSpread{PodTopologySpread: pts, lister: v}
	})
	return registry
}

// PreFilter computes the state, or brings the one saved for the pod's
// class up to date with the nominations since.
func (c *cachedSpread) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	v := c.lister
	class, ok := spreadClass(pod)
	if !ok {
		return c.PodTopologySpread.PreFilter(ctx, state, pod, nodes)
	}
	rp, printed := v.print()
	if !printed {
		return c.PodTopologySpread.PreFilter(ctx, state, pod, nodes)
	}
	if e := v.spread[class]; e != nil && e.version == v.version && e.real == rp {
		if c.catchUp(ctx, pod, e) {
			state.Write(spreadStateKey, e.state.Clone())
			checkSaved(ctx, checkSpreadHit, c.PodTopologySpread, spreadStateKey, pod, nodes, e.state)
			return nil, nil
		}
		delete(v.spread, class)
	}
	res, s := c.PodTopologySpread.PreFilter(ctx, state, pod, nodes)
	if !s.IsSuccess() {
		return res, s // a Skip (no hard constraints), or an error: not saved
	}
	d, err := state.Read(spreadStateKey)
	if err != nil || !spreadStateShapeOK(d) || !selectorsCountable(d) {
		return res, s
	}
	if len(v.spread) >= maxSavedStates {
		clear(v.spread)
	}
	if v.spread == nil {
		v.spread = map[string]*spreadEntry{}
	}
	v.spread[class] = &spreadEntry{version: v.version, real: rp, n: len(v.additions), state: d.Clone()}
	return res, s
}

// catchUp adds to e the nominations made since it was saved: those on nodes
// it counted through the plugin's AddPod, the nodes that joined since
// through its PreFilter over each alone; then works out the smallest
// counts again. False when the plugin refused one: e is then unusable.
func (c *cachedSpread) catchUp(ctx context.Context, pod *corev1.Pod, e *spreadEntry) bool {
	added := c.lister.additions[e.n:]
	if len(added) == 0 {
		return true
	}
	scratch := framework.NewCycleState()
	scratch.Write(spreadStateKey, e.state)
	var joined []fwk.NodeInfo
	isNew := map[fwk.NodeInfo]bool{}
	for _, a := range added {
		if a.joined {
			joined = append(joined, a.node)
			isNew[a.node] = true
		}
		if isNew[a.node] {
			continue // counted with its node, below
		}
		if s := c.PodTopologySpread.AddPod(ctx, scratch, pod, a.pod, a.node); !s.IsSuccess() {
			return false
		}
	}
	counts := spreadCounts(e.state)
	for _, node := range joined {
		alone := framework.NewCycleState()
		if _, s := c.PodTopologySpread.PreFilter(ctx, alone, pod, []fwk.NodeInfo{node}); !s.IsSuccess() {
			return false
		}
		d, err := alone.Read(spreadStateKey)
		if err != nil {
			return false
		}
		more := spreadCounts(d)
		if len(more) != len(counts) {
			return false
		}
		for i, m := range more {
			for value, n := range m {
				counts[i][value] += n
			}
		}
	}
	setCriticalPaths(e.state)
	e.n = len(c.lister.additions)
	return true
}

// spreadStateShapeOK says whether d is a pointer to a struct with the
// fields catchUp reads and writes: TpValueToMatchNum []map[string]int, and
// CriticalPaths, a slice of pointers to two {TopologyValue string;
// MatchNum int}, one of each per constraint.
func spreadStateShapeOK(d fwk.StateData) bool {
	v := reflect.ValueOf(d)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	counts := v.Elem().FieldByName("TpValueToMatchNum")
	if !counts.IsValid() || counts.Type() != reflect.TypeFor[[]map[string]int]() {
		return false
	}
	paths := v.Elem().FieldByName("CriticalPaths")
	if !paths.IsValid() || paths.Kind() != reflect.Slice || paths.Len() != counts.Len() {
		return false
	}
	t := paths.Type().Elem()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Array || t.Elem().Len() != 2 {
		return false
	}
	pair := t.Elem().Elem()
	if pair.Kind() != reflect.Struct {
		return false
	}
	tv, ok1 := pair.FieldByName("TopologyValue")
	mn, ok2 := pair.FieldByName("MatchNum")
	return ok1 && ok2 && tv.Type.Kind() == reflect.String && mn.Type.Kind() == reflect.Int
}

// selectorsCountable: no constraint of the state has an empty selector.
// The plugin's PreFilter counts no pod for one, but its AddPod counts
// every pod: a saved state would not stay the fresh one.
func selectorsCountable(d fwk.StateData) bool {
	cs := reflect.ValueOf(d).Elem().FieldByName("Constraints")
	if !cs.IsValid() || cs.Kind() != reflect.Slice || cs.Type().Elem().Kind() != reflect.Struct {
		return false
	}
	for i := range cs.Len() {
		f := cs.Index(i).FieldByName("Selector")
		if !f.IsValid() || !f.CanInterface() {
			return false
		}
		sel, ok := f.Interface().(labels.Selector)
		if !ok || sel == nil || sel.Empty() {
			return false
		}
	}
	return true
}

// spreadCounts is the state's count per domain, per constraint (its own
// maps: adding to them adds to the state).
func spreadCounts(d fwk.StateData) []map[string]int {
	return reflect.ValueOf(d).Elem().FieldByName("TpValueToMatchNum").Interface().([]map[string]int)
}

// setCriticalPaths sets each constraint's two critical paths to its two
// smallest domain counts, as the plugin's PreFilter does from all of them
// (which of several domains with the same count is named is the order of
// a map's walk there too).
func setCriticalPaths(d fwk.StateData) {
	s := reflect.ValueOf(d).Elem()
	paths := s.FieldByName("CriticalPaths")
	for i, counts := range spreadCounts(d) {
		type path struct {
			value string
			num   int
		}
		first, second := path{num: math.MaxInt32}, path{num: math.MaxInt32}
		for value, num := range counts {
			switch {
			case num < first.num:
				first, second = path{value, num}, first
			case num < second.num:
				second = path{value, num}
			}
		}
		p := paths.Index(i).Elem()
		for j, x := range []path{first, second} {
			p.Index(j).FieldByName("TopologyValue").SetString(x.value)
			p.Index(j).FieldByName("MatchNum").SetInt(int64(x.num))
		}
	}
}
