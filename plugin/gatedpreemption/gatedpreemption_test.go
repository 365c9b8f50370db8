package gatedpreemption

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"

	"github.com/nodeforge/nodeforge/simulator"
)

// cluster is what one comparison runs on: nodes, the pods bound to them,
// PodDisruptionBudgets, and the pod that fits no node.
type cluster struct {
	nodes     []*corev1.Node
	pods      []*corev1.Pod
	pdbs      []*policyv1.PodDisruptionBudget
	preemptor *corev1.Pod
}

// answer is a PostFilter's answer, as the scheduler uses it.
type answer struct {
	nominated *string // nil: the result leaves the nomination alone
	code      fwk.Code
	message   string
}

func (a answer) String() string {
	n := "<unchanged>"
	if a.nominated != nil {
		n = fmt.Sprintf("%q", *a.nominated)
	}
	return fmt.Sprintf("nominated %s, %s: %s", n, a.code, a.message)
}

// postFilter runs the default profile, with preemption as plugin (DefaultPreemption
// or GatedPreemption), for the preemptor of c: PreFilter, Filter on every
// node, then the PostFilter plugins, in a framework of its own with its own
// fake API, as the scheduler would in one cycle.
func postFilter(t *testing.T, plugin string, c cluster) answer {
	t.Helper()
	ctx := klog.NewContext(t.Context(), klog.Background().V(0))
	schedmetrics.Register()
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	profile := &cfg.Profiles[0]
	if plugin == Name {
		profile.Plugins.PostFilter = config.PluginSet{
			Disabled: []config.Plugin{{Name: defaultpreemption.Name}},
			Enabled:  []config.Plugin{{Name: Name}},
		}
	}
	reg := plugins.NewInTreeRegistry()
	if err := reg.Register(Name, New); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for _, n := range c.nodes {
		objs = append(objs, n)
	}
	for _, p := range append(c.pods, c.preemptor) {
		objs = append(objs, p)
	}
	for _, p := range c.pdbs {
		objs = append(objs, p)
	}
	cs := kubefake.NewClientset(objs...)
	inf := informers.NewSharedInformerFactory(cs, 0)
	shared, err := simulator.SharedState(ctx, cs, inf)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := cache.NewSnapshot(c.pods, c.nodes)
	fw, err := frameworkruntime.NewFramework(ctx, reg, profile, append(shared.Options,
		frameworkruntime.WithSnapshotSharedLister(snapshot), frameworkruntime.WithMutableSnapshotLister(snapshot), frameworkruntime.WithPodNominator(noNominations{}), frameworkruntime.WithPodActivator(noActivations{}),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()), frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}))...)
	if err != nil {
		t.Fatal(err)
	}
	// What preemption reads through informers: the preemptor, PDBs.
	inf.Core().V1().Pods().Lister()
	inf.Policy().V1().PodDisruptionBudgets().Lister()
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())

	state := framework.NewCycleState()
	statuses := framework.NewDefaultNodeToStatus()
	if _, s, _ := fw.RunPreFilterPlugins(ctx, state, c.preemptor); !s.IsSuccess() {
		statuses.SetAbsentNodesStatus(s)
	} else {
		nodes, _ := snapshot.NodeInfos().List()
		for _, ni := range nodes {
			if s := fw.RunFilterPluginsWithNominatedPods(ctx, state, c.preemptor, ni); !s.IsSuccess() {
				statuses.Set(ni.Node().Name, s)
			} else {
				t.Fatalf("the preemptor fits node %s: the case tests nothing", ni.Node().Name)
			}
		}
	}
	res, s := fw.RunPostFilterPlugins(ctx, state, c.preemptor, statuses)
	a := answer{code: s.Code(), message: s.Message()}
	if res != nil && res.NominatingInfo != nil {
		a.nominated = ptr.To(res.NominatedNodeName)
	}
	return a
}

// noNominations is the scheduling queue's nominator in a cluster where no
// pod is nominated to a node yet (the cases here).
type noNominations struct{}

func (noNominations) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominations) DeleteNominatedPodIfExists(*corev1.Pod)                        {}
func (noNominations) UpdateNominatedPod(klog.Logger, *corev1.Pod, fwk.PodInfo)      {}
func (noNominations) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }

// noActivations is the queue's activator: no pod here waits in a queue.
type noActivations struct{}

func (noActivations) Activate(klog.Logger, map[string]*corev1.Pod) {}

// mayPreempt is what the gate must find, worked out apart from it: whether
// a node the Filter plugins found Unschedulable (not unresolvable) holds
// a pod of lower priority than the preemptor.
func mayPreempt(c cluster, unresolvable map[string]bool) bool {
	for _, p := range c.pods {
		if !unresolvable[p.Spec.NodeName] && ptr.Deref(p.Spec.Priority, 0) < ptr.Deref(c.preemptor.Spec.Priority, 0) {
			return true
		}
	}
	return false
}

func node(name, zone, cpu string, taint bool) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}},
	}
	if taint {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

func pod(name, nodeName, cpu string, priority int32, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			Priority: ptr.To(priority),
			Containers: []corev1.Container{{Name: "c", Image: "pause", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("100Mi"),
			}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// randomCluster is a small cluster whose nodes are full for its preemptor:
// nodes of 2–4 CPU, some tainted, in two zones; pods of several priorities,
// some under a PDB; a preemptor that fits no node as it is, of a priority
// drawn from the same set, sometimes with preemptionPolicy Never, a zone
// selector (the other zone's nodes become unresolvable), or a nomination.
func randomCluster(r *rand.Rand) cluster {
	priorities := []int32{0, 0, 0, 10, 1000, -5}
	var c cluster
	for i := range 1 + r.IntN(5) {
		name := fmt.Sprintf("node-%d", i)
		cpu := []string{"2", "3", "4"}[r.IntN(3)]
		c.nodes = append(c.nodes, node(name, []string{"zone-a", "zone-b"}[r.IntN(2)], cpu, r.IntN(5) == 0))
		// Fill the node to within 500m of its CPU.
		left := map[string]int{"2": 1500, "3": 2500, "4": 3500}[cpu]
		for j := 0; left > 0; j++ {
			m := min(left, 500+250*r.IntN(4))
			left -= m
			app := []string{"web", "batch"}[r.IntN(2)]
			c.pods = append(c.pods, pod(fmt.Sprintf("%s-p%d", name, j), name, fmt.Sprintf("%dm", m), priorities[r.IntN(len(priorities))], app))
		}
	}
	if r.IntN(2) == 0 {
		c.pdbs = append(c.pdbs, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromString("90%")), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
		})
	}
	p := pod("preemptor", "", "1", priorities[r.IntN(len(priorities))], "preemptor")
	p.Status.Phase = corev1.PodPending
	switch r.IntN(6) {
	case 0:
		p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	case 1:
		p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	case 2:
		p.Status.NominatedNodeName = c.nodes[0].Name
	case 3:
		p.Status.NominatedNodeName = "nodeforge-claim-x" // a virtual node: not in the snapshot
	}
	c.preemptor = p
	return c
}

// unresolvableNodes are the nodes the preemptor cannot use whatever is
// preempted: tainted, or in the other zone than its selector asks.
func unresolvableNodes(c cluster) map[string]bool {
	out := map[string]bool{}
	for _, n := range c.nodes {
		if len(n.Spec.Taints) > 0 {
			out[n.Name] = true
		}
		if z, ok := c.preemptor.Spec.NodeSelector[corev1.LabelTopologyZone]; ok && n.Labels[corev1.LabelTopologyZone] != z {
			out[n.Name] = true
		}
	}
	return out
}

// TestGatedPreemptionAnswersAsDefaultPreemption runs random clusters
// through the scheduler's path twice, once with DefaultPreemption and once
// with GatedPreemption in its place: where no node preemption would try
// holds a pod of lower priority, the gate answers (the skip counter moves)
// with exactly DefaultPreemption's result and status; elsewhere it runs
// DefaultPreemption, which nominates a node or not as the unwrapped one
// does (which node may differ: DefaultPreemption starts its dry run at a
// random node).
func TestGatedPreemptionAnswersAsDefaultPreemption(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 44))
	var skipped, ran int
	for i := range 300 {
		c := randomCluster(r)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			before, err := testutil.GetCounterMetricValue(dryRunsSkipped)
			if err != nil {
				t.Fatal(err)
			}
			want := postFilter(t, defaultpreemption.Name, c)
			got := postFilter(t, Name, c)
			after, _ := testutil.GetCounterMetricValue(dryRunsSkipped)
			answered := after > before

			inSnapshot := c.preemptor.Status.NominatedNodeName == c.nodes[0].Name
			never := c.preemptor.Spec.PreemptionPolicy != nil
			shouldAnswer := !never && !inSnapshot && !mayPreempt(c, unresolvableNodes(c))
			if answered != shouldAnswer {
				t.Fatalf("the gate answered: %t, want %t (never %t, nominated in the snapshot %t)\ncluster: %s", answered, shouldAnswer, never, inSnapshot, describe(c))
			}
			if answered {
				skipped++
				if got.String() != want.String() {
					t.Fatalf("the gate's answer differs from DefaultPreemption's\n got: %s\nwant: %s\ncluster: %s", got, want, describe(c))
				}
				return
			}
			ran++
			if got.code != want.code || (got.nominated != nil && *got.nominated != "") != (want.nominated != nil && *want.nominated != "") {
				t.Fatalf("DefaultPreemption behind the gate answered otherwise\n got: %s\nwant: %s\ncluster: %s", got, want, describe(c))
			}
		})
	}
	// Both paths must have been taken often enough to mean something.
	if skipped < 50 || ran < 50 {
		t.Errorf("the gate answered %d clusters and sent %d on; want at least 50 of each", skipped, ran)
	}
	t.Logf("the gate answered %d clusters and sent %d to DefaultPreemption", skipped, ran)
}

func describe(c cluster) string {
	s := fmt.Sprintf("preemptor priority %d never=%t selector=%v nominated=%q;", ptr.Deref(c.preemptor.Spec.Priority, 0),
		c.preemptor.Spec.PreemptionPolicy != nil, c.preemptor.Spec.NodeSelector, c.preemptor.Status.NominatedNodeName)
	for _, n := range c.nodes {
		s += fmt.Sprintf(" %s(%s,%s,taint=%t)", n.Name, n.Labels[corev1.LabelTopologyZone], n.Status.Allocatable.Cpu(), len(n.Spec.Taints) > 0)
	}
	for _, p := range c.pods {
		s += fmt.Sprintf(" %s@%s/%d", p.Name, p.Spec.NodeName, *p.Spec.Priority)
	}
	return s
}

// TestAPodOfHigherPriorityStillPreempts: behind the gate a pod of higher
// priority than a pod on a full node still gets that node nominated, and
// the victim is deleted, as DefaultPreemption does.
func TestAPodOfHigherPriorityStillPreempts(t *testing.T) {
	c := cluster{
		nodes:     []*corev1.Node{node("n", "zone-a", "2", false)},
		pods:      []*corev1.Pod{pod("low", "n", "1500m", 0, "batch")},
		preemptor: pod("high", "", "1", 1000, "web"),
	}
	got := postFilter(t, Name, c)
	if got.code != fwk.Success || got.nominated == nil || *got.nominated != "n" {
		t.Fatalf("got %s, want node n nominated", got)
	}
}

// TestSameSchedulingGroupIsLeftToDefaultPreemption: a pod of a scheduling
// group on a candidate node sends the pod to DefaultPreemption, whatever
// the pods' priorities: a group's victim priority is the group's.
func TestSameSchedulingGroupIsLeftToDefaultPreemption(t *testing.T) {
	member := pod("member", "n", "1500m", 1000, "batch")
	member.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("g")}
	c := cluster{
		nodes:     []*corev1.Node{node("n", "zone-a", "2", false)},
		pods:      []*corev1.Pod{member},
		preemptor: pod("p", "", "1", 0, "web"),
	}
	before, _ := testutil.GetCounterMetricValue(dryRunsSkipped)
	postFilter(t, Name, c)
	if after, _ := testutil.GetCounterMetricValue(dryRunsSkipped); after != before {
		t.Errorf("the gate answered for a node with a grouped pod")
	}
}

// TestArgsAreDefaultPreemptionsDefaultedAsItsAre: arguments given under
// GatedPreemption's name reach DefaultPreemption, the missing ones
// defaulted as kube-scheduler defaults them, and bad ones are refused
// with DefaultPreemption's own validation.
func TestArgsAreDefaultPreemptionsDefaultedAsItsAre(t *testing.T) {
	got, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"minCandidateNodesAbsolute": 5}`), ContentType: runtime.ContentTypeJSON})
	if err != nil {
		t.Fatal(err)
	}
	if got.MinCandidateNodesAbsolute != 5 || got.MinCandidateNodesPercentage != 10 {
		t.Errorf("args %+v, want absolute 5 and the default percentage 10", got)
	}
	if got, err := decodeArgs(nil); err != nil || got.MinCandidateNodesAbsolute != 100 {
		t.Errorf("no args: %+v, %v; want the defaults", got, err)
	}
	// New validates before it touches the handle, as DefaultPreemption does.
	bad := &runtime.Unknown{Raw: []byte(`{"minCandidateNodesPercentage": 200}`), ContentType: runtime.ContentTypeJSON}
	if _, err := New(t.Context(), bad, nil); err == nil || !strings.Contains(err.Error(), "minCandidateNodesPercentage") {
		t.Errorf("minCandidateNodesPercentage 200: %v, want refused naming the field", err)
	}
}
