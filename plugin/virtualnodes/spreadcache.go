package virtualnodes

import (
	"context"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// spreadStateKey is where PodTopologySpread keeps its PreFilter state in
// the cycle state ("PreFilter" + its name, in its filtering.go).
const spreadStateKey fwk.StateKey = "PreFilter" + podtopologyspread.Name

// The PodTopologySpread PreFilter counts, for each hard (DoNotSchedule)
// constraint of the pod being placed, the pods of each node of the view
// its selector matches in the pod's namespace: a walk over all the pods of
// all the nodes, virtual ones included, for each decision (about 40% of
// the time of a burst of spread pods). Its state cannot be saved and
// added to as InterPodAffinity's is: its AddPod keeps only the two
// smallest domains up to date, which after several additions can differ
// from a fresh count.
//
// What can be saved is which pods are worth counting. The plugin reads a
// node only through its labels and taints and its pods; a pod counts only
// if it is in the namespace and matches a constraint's selector. So the
// plugin is handed, for each node, a NodeInfo with the same node and only
// the pods of the namespace that match one of the constraints' label
// selectors (a superset of what it counts: matchLabelKeys only narrow a
// selector, and it skips terminating pods itself), kept per class of pods
// (namespace and selectors) and rebuilt for a node only when its NodeInfo
// changed (its generation moves on every pod added or removed and every
// change of its node). Every node is handed over, matching pods or not: a
// node with none is still a domain with a count of zero. The counts, the
// domains and so the decisions are those of the full walk; every test of
// the package checks each state against one computed over the full view
// (checkSpreadHit).

// checkSpreadHit, when set (by tests), is given for each decision the state
// computed over the narrowed nodes and the one computed over the full view.
var checkSpreadHit func(pod *v1.Pod, narrowed, full fwk.StateData)

// maxSpreadClasses bounds the classes kept; past it they start over.
const maxSpreadClasses = 64

// narrowedSpread is PodTopologySpread handed only the pods it may count.
type narrowedSpread struct {
	*podtopologyspread.PodTopologySpread

	mu      sync.Mutex
	classes map[string]*spreadClass
}

// spreadClass is the narrowed nodes of one class of pods.
type spreadClass struct {
	namespace string
	selectors []labels.Selector
	nodes     map[string]*narrowedNode
	list      []fwk.NodeInfo
	round     uint64
}

// narrowedNode is a node's NodeInfo narrowed to the class's pods, as of
// the source NodeInfo at generation gen.
type narrowedNode struct {
	src   fwk.NodeInfo
	gen   int64
	round uint64
	info  *framework.NodeInfo
}

// withNarrowedSpread returns registry with PodTopologySpread handed only
// the pods it may count.
func withNarrowedSpread(registry frameworkruntime.Registry) frameworkruntime.Registry {
	build := registry[podtopologyspread.Name]
	if build == nil {
		return registry
	}
	registry[podtopologyspread.Name] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := build(ctx, args, h)
		if pts, ok := pl.(*podtopologyspread.PodTopologySpread); ok && err == nil {
			return &narrowedSpread{PodTopologySpread: pts}, nil
		}
		return pl, err
	}
	return registry
}

// spreadClassOf is the class of a pod with hard topology spread
// constraints of its own: its namespace and their label selectors. A pod
// without any (the plugin may give it default constraints) has none.
func spreadClassOf(pod *v1.Pod) (string, []labels.Selector, bool) {
	var key strings.Builder
	var sels []labels.Selector
	key.WriteString(pod.Namespace)
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != v1.DoNotSchedule {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			return "", nil, false
		}
		sels = append(sels, sel)
		key.WriteByte(0)
		key.WriteString(sel.String())
	}
	return key.String(), sels, len(sels) > 0
}

// PreFilter runs the plugin's PreFilter over the class's narrowed nodes.
func (n *narrowedSpread) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key, sels, ok := spreadClassOf(pod)
	if !ok {
		return n.PodTopologySpread.PreFilter(ctx, state, pod, nodes)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.classes[key]
	if c == nil {
		if len(n.classes) >= maxSpreadClasses || n.classes == nil {
			n.classes = map[string]*spreadClass{}
		}
		c = &spreadClass{namespace: pod.Namespace, selectors: sels, nodes: map[string]*narrowedNode{}}
		n.classes[key] = c
	}
	res, s := n.PodTopologySpread.PreFilter(ctx, state, pod, c.narrow(nodes))
	n.check(ctx, pod, nodes, state, s)
	return res, s
}

// narrow gives the class's narrowed NodeInfo of each node, in order,
// rebuilding those whose NodeInfo changed, and forgets nodes gone.
func (c *spreadClass) narrow(nodes []fwk.NodeInfo) []fwk.NodeInfo {
	c.round++
	c.list = c.list[:0]
	for _, src := range nodes {
		node := src.Node()
		if node == nil {
			continue // the plugin reads every node's labels; the view lists none without one
		}
		nn := c.nodes[node.Name]
		if nn == nil {
			nn = &narrowedNode{info: framework.NewNodeInfo()}
			c.nodes[node.Name] = nn
		}
		if nn.src != src || nn.gen != src.GetGeneration() {
			// A claim tried on a larger instance type and put back
			// moves its generation on with the same node: set the node
			// only when it is another, and read the pods again.
			nn.src, nn.gen = src, src.GetGeneration()
			if nn.info.Node() != node {
				nn.info.SetNode(node)
			}
			nn.info.Pods = nn.info.Pods[:0]
			for _, p := range src.GetPods() {
				if c.counts(p.GetPod()) {
					nn.info.Pods = append(nn.info.Pods, p)
				}
			}
		}
		nn.round = c.round
		c.list = append(c.list, nn.info)
	}
	if len(c.nodes) > len(c.list) {
		for name, nn := range c.nodes {
			if nn.round != c.round {
				delete(c.nodes, name)
			}
		}
	}
	return c.list
}

// counts says whether the plugin may count p for the class: in its
// namespace, matched by one of its selectors.
func (c *spreadClass) counts(p *v1.Pod) bool {
	if p.Namespace != c.namespace {
		return false
	}
	set := labels.Set(p.Labels)
	for _, s := range c.selectors {
		if s.Matches(set) {
			return true
		}
	}
	return false
}

// check hands checkSpreadHit, when set, the state computed over the
// narrowed nodes and one computed over the full view.
func (n *narrowedSpread) check(ctx context.Context, pod *v1.Pod, nodes []fwk.NodeInfo, state fwk.CycleState, s *fwk.Status) {
	if checkSpreadHit == nil {
		return
	}
	var narrowed, full fwk.StateData
	if s.IsSuccess() {
		narrowed, _ = state.Read(spreadStateKey)
	}
	fresh := framework.NewCycleState()
	if _, fs := n.PodTopologySpread.PreFilter(ctx, fresh, pod, nodes); fs.IsSuccess() {
		full, _ = fresh.Read(spreadStateKey)
	}
	checkSpreadHit(pod, narrowed, full)
}
