package simulator

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Scheduler places pods on a View the way kube-scheduler's scheduling
// cycle does: the profile's PreFilter and Filter plugins find the nodes
// that can take the pod, its PreScore and Score plugins rank them, and
// the best is chosen. It answers "if these pods were pending now, where
// would the scheduler put them?", which is what a disruption decision
// must know of every pod it would evict.
type Scheduler struct {
	fw      framework.Framework
	current *viewLister
	percent *int32
	// devices is the DRA manager the framework reads, over the shared
	// one, with each view's plans and the slices of the nodes it adds
	// (nil without DRA).
	devices *Devices

	mu sync.Mutex // one placement at a time: the view is the framework's
}

// NewScheduler builds a Scheduler from profile (as it is in the
// scheduler's configuration), its plugins from registry
// (plugin/registry.All); shared is the scheduler's shared state
// (SharedState), its DRA manager read through each view's device plans.
// exclude are plugins the scheduler registers that the simulator does not
// run (VirtualNodes). percentageOfNodesToScore is the configuration's
// global value, used when the profile sets none.
func NewScheduler(ctx context.Context, registry frameworkruntime.Registry, profile *config.KubeSchedulerProfile, percentageOfNodesToScore *int32, shared Shared, exclude ...string) (*Scheduler, error) {
	s := &Scheduler{current: &viewLister{groups: shared.PodGroups}, percent: profile.PercentageOfNodesToScore}
	if s.percent == nil {
		s.percent = percentageOfNodesToScore
	}
	s.current.set(NewCluster(nil, nil).Without())
	opts := shared.Options
	if shared.DRA != nil {
		s.devices = NewDevices(shared.DRA, func() []*resourcev1.ResourceSlice { return s.current.get().slices })
		registry = s.devices.Registry(registry)
		opts = append(slices.Clone(opts), frameworkruntime.WithSharedDRAManager(s.devices))
	}
	var err error
	s.fw, err = New(ctx, registry, Profile(profile, "disruption", exclude...), append(opts, frameworkruntime.WithSnapshotSharedLister(s.current))...)
	if err != nil {
		return nil, fmt.Errorf("building the disruption simulator from profile %s: %w", profile.SchedulerName, err)
	}
	return s, nil
}

// Place finds the node the scheduler would bind pod to in view, and binds
// it there in the view, so that the next pod placed sees it. When no node
// can take the pod, the status says which plugin refused it where.
func (s *Scheduler) Place(ctx context.Context, view *View, pod *corev1.Pod) (string, *fwk.Status) {
	return s.place(ctx, view, pod, false)
}

// PlaceAny is Place without the scoring: the pod goes to the first node,
// in the view's order, that the Filter plugins accept. It answers "does
// the pod fit somewhere?" faster, for a search over many what-ifs; where
// the scheduler would really put it, Place says.
func (s *Scheduler) PlaceAny(ctx context.Context, view *View, pod *corev1.Pod) (string, *fwk.Status) {
	return s.place(ctx, view, pod, true)
}

// PlaceAmong places pod on the first of the named nodes, in that order,
// that the profile's PreFilter and Filter plugins accept in view, and
// binds it there in the view: "which of these new nodes takes this pod?",
// for a repack that decides where each pod of a batch goes.
func (s *Scheduler) PlaceAmong(ctx context.Context, view *View, pod *corev1.Pod, names []string) (string, *fwk.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setView(view)
	state, pod, pre, status := s.preFilter(ctx, pod)
	if status != nil {
		return "", status
	}
	last := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "none of the nodes offered")
	for _, name := range names {
		if pre != nil && !pre.AllNodes() && !pre.NodeNames.Has(name) {
			continue
		}
		ni, err := view.NodeInfos().Get(name)
		if err != nil {
			return "", fwk.AsStatus(err)
		}
		if st := s.fw.RunFilterPlugins(ctx, state, pod, ni); !st.IsSuccess() {
			last = st
			continue
		}
		return name, s.bind(ctx, view, state, pod, name)
	}
	return "", last
}

func (s *Scheduler) place(ctx context.Context, view *View, pod *corev1.Pod, first bool) (string, *fwk.Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setView(view)
	state, pod, pre, status := s.preFilter(ctx, pod)
	if status != nil {
		return "", status
	}
	node, status := s.choose(ctx, view, state, pod, pre, first)
	if !status.IsSuccess() {
		return "", status
	}
	if st := s.bind(ctx, view, state, pod, node); !st.IsSuccess() {
		return "", st
	}
	return node, nil
}

// setView points the framework at view: its nodes, and its device plans,
// made on first use with the claims of the pods it evicts released.
func (s *Scheduler) setView(view *View) {
	s.current.set(view)
	if s.devices == nil {
		return
	}
	if view.plans == nil {
		view.plans = newDevicePlans()
		s.devices.release(view.plans, view.evicted())
	}
	s.devices.use(view.plans)
}

// bind counts pod (the copy PreFilter ran for) on node in view, and plans
// the devices the DynamicResources plugin allocated it there, so that the
// next pod placed finds them taken.
func (s *Scheduler) bind(ctx context.Context, view *View, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	if s.devices != nil && len(pod.Spec.ResourceClaims) > 0 {
		if st := s.devices.Plan(ctx, state, pod, node); !st.IsSuccess() {
			return st
		}
	}
	return fwk.AsStatus(view.Bind(pod, node))
}

// preFilter runs the PreFilter plugins for a copy of pod, unbound, as a
// pending pod: its cycle state, the copy, what PreFilter narrowed the
// nodes to, and a status only when the pod can go nowhere.
func (s *Scheduler) preFilter(ctx context.Context, pod *corev1.Pod) (fwk.CycleState, *corev1.Pod, *fwk.PreFilterResult, *fwk.Status) {
	state := framework.NewCycleState()
	pod = pod.DeepCopy()
	pod.Spec.NodeName = ""
	pre, status, _ := s.fw.RunPreFilterPlugins(ctx, state, pod)
	if !status.IsSuccess() && !status.IsSkip() {
		return nil, nil, nil, status
	}
	return state, pod, pre, nil
}

func (s *Scheduler) choose(ctx context.Context, view *View, state fwk.CycleState, pod *corev1.Pod, pre *fwk.PreFilterResult, first bool) (string, *fwk.Status) {
	all, _ := view.NodeInfos().List()
	want := feasibleToFind(s.percent, len(all))
	if first {
		want = 1
	}
	var feasible []fwk.NodeInfo
	var last *fwk.Status
	for _, ni := range all {
		if pre != nil && !pre.AllNodes() && !pre.NodeNames.Has(ni.Node().Name) {
			continue
		}
		st := s.fw.RunFilterPlugins(ctx, state, pod, ni)
		if !st.IsSuccess() {
			last = st
			continue
		}
		if feasible = append(feasible, ni); len(feasible) >= want {
			break
		}
	}
	switch len(feasible) {
	case 0:
		if last == nil {
			last = fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "no node left to place it on")
		}
		return "", last
	case 1:
		return feasible[0].Node().Name, nil
	}
	if st := s.fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() {
		return "", st
	}
	scores, st := s.fw.RunScorePlugins(ctx, state, pod, feasible)
	if !st.IsSuccess() {
		return "", st
	}
	// The highest total wins; the scheduler breaks ties at random, the
	// simulator by the view's order, so that a decision can be replayed.
	best := 0
	for i := range scores {
		if scores[i].TotalScore > scores[best].TotalScore {
			best = i
		}
	}
	return scores[best].Name, nil
}

// feasibleToFind is how many feasible nodes the scheduler looks for before
// it stops filtering and scores them: kube-scheduler's
// numFeasibleNodesToFind (pkg/scheduler/schedule_one.go, v1.37): every
// node below 100 nodes; otherwise percentageOfNodesToScore of them, which
// by default is 50% less 1% per 125 nodes, at least 5%, and never fewer
// than 100 nodes.
func feasibleToFind(percent *int32, nodes int) int {
	const minNodes, minPercent = 100, 5
	if nodes < minNodes {
		return nodes
	}
	p := 0
	if percent != nil {
		p = int(*percent)
	}
	if p == 0 {
		p = max(50-nodes/125, minPercent)
	}
	return max(nodes*p/100, minNodes)
}

// viewLister is the SharedLister the framework holds from its creation;
// Place points it at the view being placed on. Its PodGroups are the
// cluster's (Shared.PodGroups) whatever the view, when there are any.
type viewLister struct {
	mu     sync.RWMutex
	v      *View
	groups fwk.PodGroupLister
}

func (w *viewLister) set(v *View) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.v = v
}

func (w *viewLister) get() *View {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.v
}

var _ fwk.SharedLister = &viewLister{}

func (w *viewLister) NodeInfos() fwk.NodeInfoLister       { return w.get().NodeInfos() }
func (w *viewLister) StorageInfos() fwk.StorageInfoLister { return w.get().StorageInfos() }
func (w *viewLister) PodGroupStates() fwk.PodGroupStateLister {
	return w.get().PodGroupStates()
}
func (w *viewLister) PodGroups() fwk.PodGroupLister {
	if w.groups != nil {
		return w.groups
	}
	return w.get().PodGroups()
}
func (w *viewLister) CompositePodGroupStates() fwk.CompositePodGroupStateLister {
	return w.get().CompositePodGroupStates()
}
func (w *viewLister) CompositePodGroups() fwk.CompositePodGroupLister {
	return w.get().CompositePodGroups()
}

// DefaultScheduler is a Scheduler of kube-scheduler's default profile
// (in-tree plugins only, no VirtualNodes), its shared state (volumes, DRA) read from cs through
// informers started here until ctx ends: for tests and tools that judge
// placements as a stock scheduler would.
func DefaultScheduler(ctx context.Context, cs kubernetes.Interface) (*Scheduler, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	inf := informers.NewSharedInformerFactory(cs, 0)
	opts, err := SharedState(ctx, cs, inf)
	if err != nil {
		return nil, err
	}
	s, err := NewScheduler(ctx, plugins.NewInTreeRegistry(), &cfg.Profiles[0], cfg.PercentageOfNodesToScore, opts)
	if err != nil {
		return nil, err
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	return s, nil
}
