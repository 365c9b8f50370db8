package virtualnodes

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// affinityStateKey is where InterPodAffinity keeps its PreFilter state in
// the cycle state ("PreFilter" + its name, in its filtering.go); a test
// checks the state is there.
const affinityStateKey fwk.StateKey = "PreFilter" + interpodaffinity.Name

// The InterPodAffinity PreFilter counts, for the pod being placed, every
// pod of the view its terms match and every pod whose anti-affinity
// matches it: a walk over all the pods of all the nodes, virtual ones
// included, for each decision. Pods of one class (namespace, labels,
// inter-pod affinity) get the same counts, and a pod nominated since
// changes them only by itself, exactly as the plugin's own AddPod adds it
// (the counts are sums per topology value). So the view keeps the state of
// each class it computed, with the nominations made since; a decision for
// a pod of that class adds those to it instead of walking every pod again.
// Anything else that changes the view (a pod leaving a virtual node, a
// virtual node leaving or relabelled, the placeholders, the scheduler's
// snapshot of real nodes) drops every saved state.

// addition is a pod nominated to a virtual node since the saved states;
// joined marks the first addition of a node that joined the view with it.
type addition struct {
	pod    fwk.PodInfo
	node   fwk.NodeInfo
	joined bool
}

// affinityEntry is a class's saved state: as of additions[:n], at version.
// A Skip is saved too, with the pod it was computed for: it holds while no
// pod added since has anti-affinity that could concern the class.
type affinityEntry struct {
	version uint64
	real    realPrint
	n       int
	state   fwk.StateData
	skip    *corev1.Pod
}

// realPrint identifies the real nodes of the scheduler's snapshot as they
// are: a NodeInfo's generation is taken from one counter and moves on
// every change, so a node added or changed raises the highest, and one
// removed lowers the count.
type realPrint struct {
	nodes int
	gen   int64
}

// maxSavedStates bounds the saved states of each plugin; past it they
// start over.
const maxSavedStates = 512

// checkAffinityHit, when set (by tests), is given each saved state a
// decision used and the state the plugin computes afresh for the same pod.
var checkAffinityHit func(pod *corev1.Pod, saved, fresh fwk.StateData)

// changed records a change to the view that is not a nomination: every
// saved state is dropped.
func (v *lister) changed() {
	v.version++
	v.additions = nil
	clear(v.affinity)
	clear(v.spread)
}

// added records pods put on a virtual node already in the view by a
// nomination.
func (v *lister) added(node fwk.NodeInfo, pods ...*corev1.Pod) { v.add(node, false, pods) }

// joined records a new virtual node joining the view with pods.
func (v *lister) joined(node fwk.NodeInfo, pods ...*corev1.Pod) { v.add(node, true, pods) }

func (v *lister) add(node fwk.NodeInfo, joined bool, pods []*corev1.Pod) {
	for i, pod := range pods {
		pi, err := framework.NewPodInfo(pod)
		if err != nil {
			v.changed()
			return
		}
		v.additions = append(v.additions, addition{pod: pi, node: node, joined: joined && i == 0})
	}
}

// print is realPrint of the snapshot now, worked out once a decision (both
// saving plugins ask, and it walks every real node).
func (v *lister) print() (realPrint, bool) {
	if v.printed != nil {
		return *v.printed, true
	}
	if v.real == nil {
		return realPrint{}, true
	}
	nodes, err := v.real.List()
	if err != nil {
		return realPrint{}, false
	}
	rp := realPrint{nodes: len(nodes)}
	for _, n := range nodes {
		rp.gen = max(rp.gen, n.GetGeneration())
	}
	v.printed = &rp
	return rp, true
}

// affinityClass is what InterPodAffinity's PreFilter state depends on in
// the pod itself: its namespace, labels and inter-pod affinity.
func affinityClass(pod *corev1.Pod) (string, bool) {
	var aff struct {
		A *corev1.PodAffinity     `json:"a,omitempty"`
		N *corev1.PodAntiAffinity `json:"n,omitempty"`
	}
	if pod.Spec.Affinity != nil {
		aff.A, aff.N = pod.Spec.Affinity.PodAffinity, pod.Spec.Affinity.PodAntiAffinity
	}
	b, err := json.Marshal([]any{pod.Namespace, pod.Labels, aff})
	return string(b), err == nil
}

// cachedAffinity is InterPodAffinity with its PreFilter state saved per
// class on the view; everything else is the plugin's own.
type cachedAffinity struct {
	*interpodaffinity.InterPodAffinity
	lister *lister
	// fastPath: the plugin also declines to Skip while any pod has
	// anti-affinity by hostname (feature InterPodAffinityHostnameFastPath).
	fastPath bool
}

// wrapPlugin replaces name's factory in registry with one that hands the
// plugin it builds, when it is a T, to wrap, and returns what wrap makes.
func wrapPlugin[T fwk.Plugin](registry frameworkruntime.Registry, name string, wrap func(T) fwk.Plugin) {
	build := registry[name]
	if build == nil {
		return
	}
	registry[name] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := build(ctx, args, h)
		if t, ok := pl.(T); ok && err == nil {
			return wrap(t), nil
		}
		return pl, err
	}
}

// PreFilter computes the state, or adds the nominations since to the one
// saved for the pod's class.
func (c *cachedAffinity) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	v := c.lister
	class, ok := affinityClass(pod)
	rp, printed := v.print()
	if !ok || !printed {
		return c.InterPodAffinity.PreFilter(ctx, state, pod, nodes)
	}
	if e := v.affinity[class]; e != nil && e.version == v.version && e.real == rp && e.skip != nil {
		if c.skipHolds(e.skip, v.additions[e.n:]) {
			e.n = len(v.additions)
			checkSaved(ctx, checkAffinityHit, c.InterPodAffinity, affinityStateKey, pod, nodes, nil)
			return nil, fwk.NewStatus(fwk.Skip)
		}
		delete(v.affinity, class)
	} else if e != nil && e.version == v.version && e.real == rp {
		scratch := framework.NewCycleState()
		scratch.Write(affinityStateKey, e.state)
		replayed := true
		for _, a := range v.additions[e.n:] {
			if s := c.InterPodAffinity.AddPod(ctx, scratch, pod, a.pod, a.node); !s.IsSuccess() {
				replayed = false
				break
			}
		}
		if replayed {
			e.n = len(v.additions)
			state.Write(affinityStateKey, e.state.Clone())
			checkSaved(ctx, checkAffinityHit, c.InterPodAffinity, affinityStateKey, pod, nodes, e.state)
			return nil, nil
		}
		delete(v.affinity, class)
	}
	res, s := c.InterPodAffinity.PreFilter(ctx, state, pod, nodes)
	entry := &affinityEntry{version: v.version, real: rp, n: len(v.additions)}
	switch d, err := state.Read(affinityStateKey); {
	case s.IsSkip():
		// A pod of the scheduling queue has no resize deferred, the
		// other reason the plugin skips: this Skip is the class's.
		entry.skip = pod
	case !s.IsSuccess():
		return res, s
	case err == nil:
		entry.state = d.Clone()
	default:
		klog.FromContext(ctx).V(5).Info("InterPodAffinity left no PreFilter state to save", "key", affinityStateKey, "err", err)
		return res, s
	}
	if len(v.affinity) >= maxSavedStates {
		clear(v.affinity)
	}
	if v.affinity == nil {
		v.affinity = map[string]*affinityEntry{}
	}
	v.affinity[class] = entry
	return res, s
}

// skipHolds says whether the plugin still skips pod, which it skipped
// before the pods added since: it skips a pod without inter-pod affinity
// of its own while no pod's required anti-affinity matches it (and, on
// the fast path, while no pod has it by hostname). An added pod's term
// is taken to match when its label selector does, whatever the
// namespaces: a Skip is given up sooner, never kept wrongly.
func (c *cachedAffinity) skipHolds(pod *corev1.Pod, added []addition) bool {
	set := labels.Set(pod.Labels)
	for _, a := range added {
		for _, t := range a.pod.GetRequiredAntiAffinityTerms() {
			if t.Selector.Matches(set) || c.fastPath && t.TopologyKey == corev1.LabelHostname {
				return false
			}
		}
	}
	return true
}

// checkSaved hands hook, when set, the saved state a decision used (nil
// for a Skip) and the state pl's own PreFilter computes afresh for pod
// (nil when it skips too), read under key. pl is the plugin itself, not
// its saving wrapper.
func checkSaved(ctx context.Context, hook func(*corev1.Pod, fwk.StateData, fwk.StateData), pl fwk.PreFilterPlugin, key fwk.StateKey, pod *corev1.Pod, nodes []fwk.NodeInfo, saved fwk.StateData) {
	if hook == nil {
		return
	}
	fresh := framework.NewCycleState()
	var d fwk.StateData
	if _, s := pl.PreFilter(ctx, fresh, pod, nodes); s.IsSuccess() {
		d, _ = fresh.Read(key)
	}
	hook(pod, saved, d)
}
