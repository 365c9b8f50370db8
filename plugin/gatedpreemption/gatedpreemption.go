// Package gatedpreemption is kube-scheduler's DefaultPreemption behind a
// gate: a pod that no pod on the nodes preemption would try can make room
// for, because none of them has a lower priority, is answered at once with
// the answer DefaultPreemption's dry run would give, and the dry run is
// skipped. Every other pod goes to DefaultPreemption unchanged.
//
// Why: nodeforge-scheduler runs preemption before VirtualNodes for every
// pod that fits no node, so that priorities keep their meaning. In a
// cluster whose pods share one priority (the common case: most have none)
// the dry run finds nothing, yet builds a victim for every pod on every
// node it tries, once for every pending pod: in a scale-up of thousands of
// pods, the largest part of the scheduler's CPU (docs/benchmarks.md,
// "Preemption only where it can preempt").
//
// The gate is exact, not a heuristic. DefaultPreemption's candidates are
// nodes the Filter plugins found Unschedulable (not
// UnschedulableAndUnresolvable), and its victims on such a node are pods
// with a lower priority than the preemptor (and IsEligiblePod, which
// allows every pod in the in-tree plugin). When no such node holds such a
// pod, its dry run (SelectVictimsOnNode) answers every candidate node
// "No preemption victims found for incoming pod" before running a single
// plugin, and Preempt returns a FitError built from those statuses with a
// cleared nomination. The gate builds the same statuses and the same
// FitError. It sends the pod to DefaultPreemption whenever its premises
// may not hold:
//   - the pod may not preempt (preemptionPolicy Never), or it is nominated
//     to a node in the snapshot: DefaultPreemption's eligibility check
//     answers those, and it is cheap;
//   - a pod on a candidate node belongs to a scheduling group: with the
//     GenericWorkload feature a group's victim priority is the group's,
//     not the pod's;
//   - there is no node at all (DefaultPreemption's error).
//
// Enable it in place of DefaultPreemption (its arguments are
// DefaultPreemption's):
//
//	plugins:
//	  postFilter:
//	    disabled:
//	    - name: DefaultPreemption
//	    enabled:
//	    - name: GatedPreemption
//	    - name: VirtualNodes
//	  podGroupPostFilter:
//	    disabled:
//	    - name: DefaultPreemption
//	    enabled:
//	    - name: GatedPreemption
//	    - name: VirtualNodes
//
// For a PodGroup (PodGroupPostFilter) it is DefaultPreemption, but for
// an answer that lets the plugins after it run.
package gatedpreemption

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "GatedPreemption"

// What DefaultPreemption answers for a node it tried and found no victim on,
// and for the nodes it did not try (preemption/preemption.go and
// defaultpreemption/default_preemption.go, Kubernetes 1.37).
const (
	noVictimsMsg  = "No preemption victims found for incoming pod"
	notHelpfulMsg = "Preemption is not helpful for scheduling"
)

// GatedPreemption is DefaultPreemption with the gate in front of its
// PostFilter. Its other extension points (PreEnqueue, the queueing hints,
// PodGroupPostFilter) are DefaultPreemption's own.
type GatedPreemption struct {
	*defaultpreemption.DefaultPreemption
	fh fwk.Handle

	mu sync.Mutex
	// nodes is what the gate knows of each node's pods, by node name, as
	// of the NodeInfo generation it was read at.
	nodes map[string]nodePods
}

// nodePods sums up the pods of one node for the gate.
type nodePods struct {
	generation int64
	// lowest is the lowest priority of a pod on the node; empty nodes
	// have none (any is false).
	lowest int32
	any    bool
	// grouped is whether a pod on the node belongs to a scheduling group.
	grouped bool
}

// dryRunsSkipped counts the pods the gate answered: beside
// scheduler_preemption_attempts_total (which counts them too), how much
// of preemption's work the gate saved.
var dryRunsSkipped = basemetrics.NewCounter(&basemetrics.CounterOpts{
	Name:           "nodeforge_preemption_dry_runs_skipped_total",
	Help:           "Pods GatedPreemption answered without DefaultPreemption's dry run, because no node preemption would try held a pod of lower priority.",
	StabilityLevel: basemetrics.ALPHA,
})

var registerOnce sync.Once

// RegisterMetrics registers the plugin's metric with component-base's
// legacy registry, which nodeforge-scheduler's /metrics serves. The plugin
// does when it is built; it registers once a process.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(dryRunsSkipped) })
}

var (
	_ fwk.PostFilterPlugin = &GatedPreemption{}
	_ fwk.PreEnqueuePlugin = &GatedPreemption{}
)

// New builds DefaultPreemption from args (DefaultPreemptionArgs, defaulted
// as kube-scheduler defaults them) and puts the gate in front of it.
func New(ctx context.Context, obj runtime.Object, fh fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	// The features as the scheduler's flags set them: plugins are built
	// after the flags are parsed, as the in-tree registry is.
	RegisterMetrics()
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	dp, err := defaultpreemption.New(ctx, args, fh, fts)
	if err != nil {
		return nil, err
	}
	return &GatedPreemption{DefaultPreemption: dp, fh: fh, nodes: map[string]nodePods{}}, nil
}

// decodeArgs reads DefaultPreemptionArgs in the configuration's version
// (v1), with kube-scheduler's defaults, as the internal type
// DefaultPreemption takes.
func decodeArgs(obj runtime.Object) (*config.DefaultPreemptionArgs, error) {
	if a, ok := obj.(*config.DefaultPreemptionArgs); ok {
		return a, nil
	}
	in := &configv1.DefaultPreemptionArgs{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, in); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	scheme.Scheme.Default(in)
	out := &config.DefaultPreemptionArgs{}
	if err := scheme.Scheme.Convert(in, out, nil); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return out, nil
}

// Name returns the plugin's name.
func (pl *GatedPreemption) Name() string { return Name }

// PostFilter answers without a dry run when no candidate node holds a pod
// the pod could preempt, and otherwise runs DefaultPreemption.
func (pl *GatedPreemption) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	nodes, err := pl.fh.MutableSnapshotSharedLister().NodeInfos().List()
	if err != nil || len(nodes) == 0 {
		return pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
	}
	candidates, err := m.NodesForStatusCode(pl.fh.MutableSnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	if err != nil || !pl.gateMayAnswer(pod) || pl.someVictim(candidates, corev1helpers.PodPriority(pod), len(nodes)) {
		return pl.DefaultPreemption.PostFilter(ctx, state, pod, m)
	}
	schedmetrics.PreemptionAttempts.Inc() // an attempt, as DefaultPreemption counts it
	dryRunsSkipped.Inc()
	statuses := framework.NewDefaultNodeToStatus()
	for _, n := range candidates {
		statuses.Set(n.Node().Name, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noVictimsMsg))
	}
	statuses.SetAbsentNodesStatus(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, notHelpfulMsg))
	fitErr := &framework.FitError{Pod: pod, NumAllNodes: len(nodes), Diagnosis: framework.Diagnosis{NodeToStatus: statuses}}
	klog.FromContext(ctx).V(4).Info("No pod to preempt: no node preemption would try holds a pod of lower priority; dry run skipped",
		"pod", klog.KObj(pod), "priority", corev1helpers.PodPriority(pod), "nodesTried", len(candidates))
	// DefaultPreemption prefixes its message so, and clears the nomination.
	return framework.NewPostFilterResultWithNominatedNode(""), fwk.NewStatus(fwk.Unschedulable, "preemption: "+fitErr.Error())
}

// PodGroupPostFilter is DefaultPreemption's for a PodGroup whose group
// cycle failed, except that a group no preemption can help (no victims)
// is Unschedulable, not UnschedulableAndUnresolvable: kube-scheduler runs
// no PodGroupPostFilter plugin after an Unresolvable answer, and
// VirtualNodes, after this one, may provision nodes for the group.
func (pl *GatedPreemption) PodGroupPostFilter(ctx context.Context, state fwk.PodGroupCycleState, pg fwk.PodGroupInfo, schedule fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	res, s := pl.DefaultPreemption.PodGroupPostFilter(ctx, state, pg, schedule)
	if s.Code() == fwk.UnschedulableAndUnresolvable {
		return res, fwk.NewStatus(fwk.Unschedulable, s.Reasons()...)
	}
	return res, s
}

// gateMayAnswer reports whether the gate may answer for the pod: it may
// preempt, and it is not nominated to a node of the snapshot (where
// DefaultPreemption looks for victims it already chose).
func (pl *GatedPreemption) gateMayAnswer(pod *corev1.Pod) bool {
	if p := pod.Spec.PreemptionPolicy; p != nil && *p == corev1.PreemptNever {
		return false
	}
	if n := pod.Status.NominatedNodeName; n != "" {
		if ni, _ := pl.fh.MutableSnapshotSharedLister().NodeInfos().Get(n); ni != nil {
			return false
		}
	}
	return true
}

// someVictim reports whether a node of candidates holds a pod that could be
// a victim of a pod of the given priority: one of lower priority, or one
// of a scheduling group (whose priority the gate does not judge). total is
// the number of nodes in the snapshot.
func (pl *GatedPreemption) someVictim(candidates []fwk.NodeInfo, priority int32, total int) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.nodes) > 2*total+64 {
		clear(pl.nodes) // forget nodes that left the cluster
	}
	for _, ni := range candidates {
		s := pl.summary(ni)
		if s.grouped || s.any && s.lowest < priority {
			return true
		}
	}
	return false
}

// summary is the node's nodePods, read again only when its NodeInfo
// changed. Callers hold mu.
func (pl *GatedPreemption) summary(ni fwk.NodeInfo) nodePods {
	name := ni.Node().Name
	if s, ok := pl.nodes[name]; ok && s.generation == ni.GetGeneration() {
		return s
	}
	s := nodePods{generation: ni.GetGeneration()}
	for _, p := range ni.GetPods() {
		pod := p.GetPod()
		prio := corev1helpers.PodPriority(pod)
		if !s.any || prio < s.lowest {
			s.lowest, s.any = prio, true
		}
		if pod.Spec.SchedulingGroup != nil {
			s.grouped = true
		}
	}
	pl.nodes[name] = s
	return s
}
