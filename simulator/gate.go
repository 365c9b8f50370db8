package simulator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	toolscache "k8s.io/client-go/tools/cache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

// Shared is the state the scheduler shares between its plugins.
type Shared struct {
	// Options carry it to a framework: clientset, informers, the DRA and
	// CSI managers.
	Options []frameworkruntime.Option
	// DRA is the DRA manager among Options.
	DRA fwk.SharedDRAManager
	// PodGroups are the cluster's PodGroups, as the scheduler's snapshot
	// lists them to its plugins; nil while GenericWorkload is off.
	// DynamicResources reads a pod's PodGroup, once
	// DRAWorkloadResourceClaims is on, to tell a claim the group shares
	// (reserved for the group) from the pod's own, and refuses the pod
	// when its group cannot be read.
	PodGroups fwk.PodGroupLister
}

// SharedState returns the state the scheduler shares between its
// plugins, made as kube-scheduler makes it from inf.
func SharedState(ctx context.Context, cs kubernetes.Interface, inf informers.SharedInformerFactory) (Shared, error) {
	dra, err := newDRAManager(ctx, cs, inf)
	if err != nil {
		return Shared{}, err
	}
	shared := Shared{DRA: dra, Options: []frameworkruntime.Option{
		frameworkruntime.WithClientSet(cs),
		frameworkruntime.WithInformerFactory(inf),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(inf.Storage().V1().CSINodes().Lister())),
	}}
	shared.PodGroups = PodGroups(inf)
	return shared, nil
}

// PodGroups lists the cluster's PodGroups from inf's informer, for a
// simulation's SharedLister (DynamicResources reads a pod's group through
// it); nil while GenericWorkload is off: the API server serves PodGroups
// only then, and internal/skew turns the gate off against one that does
// not, so the informer is made only when it can sync.
func PodGroups(inf informers.SharedInformerFactory) fwk.PodGroupLister {
	if !utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		return nil
	}
	groups := inf.Scheduling().V1beta1().PodGroups()
	groups.Informer()
	return podGroupLister{groups.Lister()}
}

// podGroupLister answers the framework's PodGroup lookups from an
// informer's lister.
type podGroupLister struct {
	l schedulinglisters.PodGroupLister
}

func (l podGroupLister) Get(namespace, name string) (*schedulingv1beta1.PodGroup, error) {
	return l.l.PodGroups(namespace).Get(name)
}

// newDRAManager is the DRA manager kube-scheduler makes (its New and
// addAllEventHandlers, v1.37): the ResourceSlice tracker applies
// DeviceTaintRules and tracks consumable capacity as the gates say, and
// the extended resources DeviceClasses name (DRAExtendedResource) are
// resolved from a cache fed by the DeviceClass informer. Without them the
// simulation would schedule onto devices a DeviceTaintRule has tainted,
// and refuse a pod asking for a DRA-backed extended resource.
func newDRAManager(ctx context.Context, cs kubernetes.Interface, inf informers.SharedInformerFactory) (fwk.SharedDRAManager, error) {
	claims := assumecache.NewAssumeCache(klog.FromContext(ctx), inf.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	opts := resourceslicetracker.Options{
		EnableDeviceTaintRules:   utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaintRules),
		EnableConsumableCapacity: utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity),
		SliceInformer:            inf.Resource().V1().ResourceSlices(),
		KubeClient:               cs,
	}
	if opts.EnableDeviceTaintRules {
		opts.TaintInformer = inf.Resource().V1().DeviceTaintRules()
	}
	tracker, err := resourceslicetracker.StartTracker(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("starting the ResourceSlice tracker: %w", err)
	}
	dra := dynamicresources.NewDRAManager(ctx, claims, tracker, inf)
	if utilfeature.DefaultFeatureGate.Enabled(features.DRAExtendedResource) {
		// kube-scheduler's own DRA manager resolves with an
		// ExtendedResourceCache; a resolver of another type would be a
		// change of kube-scheduler's to follow here.
		resolver, ok := dra.DeviceClassResolver().(toolscache.ResourceEventHandler)
		if !ok {
			return nil, fmt.Errorf("the DRA manager's DeviceClassResolver is a %T, which takes no DeviceClass events", dra.DeviceClassResolver())
		}
		if _, err := inf.Resource().V1().DeviceClasses().Informer().AddEventHandler(resolver); err != nil {
			return nil, fmt.Errorf("feeding DeviceClasses to the extended resource cache: %w", err)
		}
	}
	return dra, nil
}

// Gate answers, for the provisioner, whether the scheduler would accept a
// pod on a node as the cluster is now: the profile's PreFilter and Filter
// plugins, run over a snapshot of every node and every pod bound to one,
// with the judged node and its pods as the caller sees them. Nodes are
// judged without ignore, the taint the provisioner holds new nodes under
// until their pods are bound.
type Gate struct {
	fw      framework.Framework
	inf     informers.SharedInformerFactory
	nodes   corelisters.NodeLister
	pods    corelisters.PodLister
	ignore  string
	current *viewLister
	// always names the profile's plugins a direct bind would skip for
	// every pod (Permit, PostBind, a Bind other than DefaultBinder, a
	// Reserve without a PreBind); empty when there are none.
	always string
	// prebind are the profile's PreBind plugins, in order.
	prebind []string

	mu sync.Mutex // one check at a time: the snapshot is the framework's

	// infos are the PodInfos of the bound pods the last session read, as
	// of the pod object the informer held, their resources worked out
	// before any session shares them. A session reads every bound pod,
	// and working out each one's requests anew for every session would be
	// a large part of the provisioner's CPU in a scale-up
	// (docs/benchmarks.md).
	infoMu sync.Mutex
	infos  map[types.UID]podInfoOf

	// for Scheduler: the shared state, registry and profile, as given.
	shared   Shared
	registry frameworkruntime.Registry
	profile  *config.KubeSchedulerProfile
	exclude  []string
}

// NewGate builds a gate for profile (as it is in the scheduler's
// configuration), its plugins from registry (plugin/registry.All), that
// reads the cluster through cs. exclude are plugins
// the scheduler registers that the simulator does not run (VirtualNodes).
// Start it before the first Check.
func NewGate(ctx context.Context, registry frameworkruntime.Registry, cs kubernetes.Interface, profile *config.KubeSchedulerProfile, ignoreTaint string, exclude ...string) (*Gate, error) {
	inf := informers.NewSharedInformerFactory(cs, 0)
	shared, err := SharedState(ctx, cs, inf)
	if err != nil {
		return nil, err
	}
	g := &Gate{inf: inf, nodes: inf.Core().V1().Nodes().Lister(), pods: inf.Core().V1().Pods().Lister(), ignore: ignoreTaint, current: &viewLister{groups: shared.PodGroups},
		shared: shared, registry: registry, profile: profile, exclude: exclude}
	g.current.set(NewCluster(nil, nil).Without())
	g.fw, err = New(ctx, registry, Profile(profile, "bind-gate", exclude...), append(slices.Clone(shared.Options), frameworkruntime.WithSnapshotSharedLister(g.current))...)
	if err != nil {
		return nil, fmt.Errorf("building the bind gate from profile %s: %w", profile.SchedulerName, err)
	}
	plugins := g.fw.ListPlugins()
	g.always = bindingCycleOnly(plugins)
	for _, pl := range plugins.PreBind.Enabled {
		g.prebind = append(g.prebind, pl.Name)
	}
	return g, nil
}

// Scheduler builds a Scheduler from the gate's profile, sharing the
// gate's informers and shared state (one DRA and CSI manager per process,
// as in kube-scheduler). Build it before Start, which starts the
// informers its plugins asked for too. percentageOfNodesToScore is the
// scheduler configuration's global value.
func (g *Gate) Scheduler(ctx context.Context, percentageOfNodesToScore *int32) (*Scheduler, error) {
	return NewScheduler(ctx, g.registry, g.profile, percentageOfNodesToScore, g.shared, g.exclude...)
}

// bindingCycleOnly names the plugins of a profile that act in the
// scheduler's binding cycle whatever the pod, which a direct bind would
// skip: Permit (it may hold or reject a pod), PostBind, a Bind plugin
// other than DefaultBinder, and a Reserve plugin that is not also a
// PreBind plugin (whose work for a pod PreBindPreFlight tells).
func bindingCycleOnly(ps *config.Plugins) string {
	if ps == nil {
		return ""
	}
	names := func(set config.PluginSet) []string {
		var out []string
		for _, pl := range set.Enabled {
			out = append(out, pl.Name)
		}
		return out
	}
	prebind := names(ps.PreBind)
	var why []string
	if p := names(ps.Permit); len(p) > 0 {
		why = append(why, fmt.Sprintf("Permit plugins %v", p))
	}
	if p := slices.DeleteFunc(names(ps.Reserve), func(n string) bool { return slices.Contains(prebind, n) }); len(p) > 0 {
		why = append(why, fmt.Sprintf("Reserve plugins %v", p))
	}
	if p := names(ps.Bind); len(p) > 0 && !slices.Equal(p, []string{"DefaultBinder"}) {
		why = append(why, fmt.Sprintf("Bind plugins %v", p))
	}
	if p := names(ps.PostBind); len(p) > 0 {
		why = append(why, fmt.Sprintf("PostBind plugins %v", p))
	}
	return strings.Join(why, ", ")
}

// Start starts the informers the profile's plugins use and waits, at most
// timeout, until they are synced; it names those that are not (RBAC).
func (g *Gate) Start(ctx context.Context, timeout time.Duration) error {
	g.inf.Start(ctx.Done())
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var unsynced []string
	for typ, ok := range g.inf.WaitForCacheSync(wait.Done()) {
		if !ok {
			unsynced = append(unsynced, typ.String())
		}
	}
	if len(unsynced) > 0 {
		slices.Sort(unsynced)
		return fmt.Errorf("the bind gate's informers did not sync within %s (can the provisioner list and watch them?): %v", timeout, unsynced)
	}
	return nil
}

// Check runs the profile's PreFilter and Filter plugins for pod on node,
// with onNode counted on it; handOff, for a pod accepted, names what only
// the scheduler's binding cycle would do for it there (volumes to bind,
// devices to allocate: PreBind plugins with work, as their
// PreBindPreFlight says; Permit, Reserve, Bind and PostBind plugins
// beyond the defaults), and is empty when a direct bind is all it would do. The caller's node and pods are the ones it
// has just judged ready (its own cache, or pods it has just bound): they
// replace the gate's informer copies, which may lag behind (a not-ready
// taint already lifted, a pod bound a moment ago), so lag in the gate's
// own informers never refuses a pod the node can take. A nil or Success
// status means the scheduler would accept the pod there; otherwise the
// status says which plugin refused and why.
func (g *Gate) Check(ctx context.Context, pod *corev1.Pod, node *corev1.Node, onNode []*corev1.Pod) (s *fwk.Status, handOff string) {
	session, err := g.Session(node, slices.DeleteFunc(slices.Clone(onNode), func(p *corev1.Pod) bool { return p.UID == pod.UID }))
	if err != nil {
		return fwk.AsStatus(err), ""
	}
	return session.Check(ctx, pod)
}

// GateSession judges the pods of one node in turn, as Check does, on the
// cluster as the gate's informers had it when the session began: the
// cluster (every node and bound pod) is read once for the node's pods,
// not once for each, and each pod the caller binds or hands off there
// (Placed) counts on the node for the pods judged after it.
type GateSession struct {
	g    *Gate
	node string
	view *View
	// elsewhere are the pods the informers have bound to other nodes, by
	// UID: a pod judged is left out of the cluster, wherever it is.
	elsewhere map[types.UID]*corev1.Pod
}

// Session begins judging pods for node, with onNode counted on it (see
// Check for what the caller's node and pods replace).
func (g *Gate) Session(node *corev1.Node, onNode []*corev1.Pod) (*GateSession, error) {
	cached, err := g.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	// The taint held back is lifted from every node, not only the judged
	// one: the other nodes that carry it are having their pods bound and
	// will be open in a moment, and constraints that count only nodes a
	// pod tolerates (topology spread with nodeTaintsPolicy Honor) must
	// count them as they will be.
	unheld := func(n *corev1.Node) *corev1.Node {
		if g.ignore == "" || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == g.ignore }) {
			return n
		}
		n = n.DeepCopy()
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == g.ignore })
		return n
	}
	nodes := []*corev1.Node{unheld(node)}
	for _, n := range cached {
		if n.Name != node.Name {
			nodes = append(nodes, unheld(n))
		}
	}
	all, err := g.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	seen := map[types.UID]bool{}
	elsewhere := map[types.UID]*corev1.Pod{}
	var bound []*corev1.Pod
	for _, p := range onNode {
		if !seen[p.UID] {
			seen[p.UID] = true
			p = p.DeepCopy()
			p.Spec.NodeName = node.Name
			bound = append(bound, p)
		}
	}
	for _, p := range all {
		// The judged node's pods are the caller's alone.
		if p.Spec.NodeName != "" && p.Spec.NodeName != node.Name && !podutil.IsPodTerminal(p) && !seen[p.UID] {
			bound = append(bound, p)
			elsewhere[p.UID] = p
		}
	}
	infos := g.podInfos(all)
	infoOf := func(p *corev1.Pod) *framework.PodInfo {
		if e, ok := infos[p.UID]; ok && e.pod == p {
			return e.pi
		}
		return nil // the judged node's pods: copies made for this session
	}
	return &GateSession{g: g, node: node.Name, view: newCluster(nodes, bound, infoOf).Without(), elsewhere: elsewhere}, nil
}

// podInfoOf is a pod object of the informer's and its PodInfo.
type podInfoOf struct {
	pod *corev1.Pod
	pi  *framework.PodInfo
}

// podInfos returns the PodInfo of each bound, unfinished pod of pods (the
// informer's objects): the last session's for a pod that is the same
// object, else a new one. They are kept for the next session, and the
// map returned is never written again.
func (g *Gate) podInfos(pods []*corev1.Pod) map[types.UID]podInfoOf {
	g.infoMu.Lock()
	defer g.infoMu.Unlock()
	next := make(map[types.UID]podInfoOf, len(g.infos))
	for _, p := range pods {
		if p.Spec.NodeName == "" || podutil.IsPodTerminal(p) {
			continue
		}
		if e, ok := g.infos[p.UID]; ok && e.pod == p {
			next[p.UID] = e
			continue
		}
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			continue
		}
		// Worked out here, once: the PodInfo keeps the result, and
		// sessions on other workers read it afterwards.
		pi.CalculateResource()
		next[p.UID] = podInfoOf{pod: p, pi: pi}
	}
	g.infos = next
	return next
}

// Placed counts pod on the session's node: the caller bound it there, or
// handed it to the scheduler to bind there.
func (s *GateSession) Placed(pod *corev1.Pod) error { return s.view.Bind(pod, s.node) }

// Check is Gate.Check for pod on the session's node, with the pods placed
// so far counted there. The pod must not be one of them.
func (gs *GateSession) Check(ctx context.Context, pod *corev1.Pod) (s *fwk.Status, handOff string) {
	g, view, nodeName := gs.g, gs.view, gs.node
	if p, ok := gs.elsewhere[pod.UID]; ok {
		// Bound elsewhere as the informers have it (a moment ahead of the
		// caller's cache): judged as if not there, as Check always did.
		if err := view.Unbind(p, p.Spec.NodeName); err == nil {
			defer func() { _ = view.Bind(p, p.Spec.NodeName) }()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current.set(view)
	state := framework.NewCycleState()
	pre, s, _ := g.fw.RunPreFilterPlugins(ctx, state, pod)
	if !s.IsSuccess() && !s.IsSkip() {
		return s, ""
	}
	if pre != nil && !pre.AllNodes() && !pre.NodeNames.Has(nodeName) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) didn't satisfy plugin(s) PreFilter result").WithPlugin("PreFilter"), ""
	}
	ni, err := view.NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(err), ""
	}
	if s := g.fw.RunFilterPlugins(ctx, state, pod, ni); !s.IsSuccess() {
		return s, ""
	}
	// PreBindPreFlight reads what Reserve decided (VolumeBinding: whether
	// every volume is bound once assumed); Reserve assumes in the gate's
	// own caches only, and Unreserve takes it back.
	if s := g.fw.RunReservePluginsReserve(ctx, state, pod, nodeName); !s.IsSuccess() {
		g.fw.RunReservePluginsUnreserve(ctx, state, pod, nodeName)
		return s, ""
	}
	defer g.fw.RunReservePluginsUnreserve(ctx, state, pod, nodeName)
	var why []string
	switch s := g.fw.RunPreBindPreFlights(ctx, state, pod, nodeName); {
	case s.Code() == fwk.Error:
		return s, ""
	case s.IsSuccess():
		var working []string
		skipped := state.GetSkipPreBindPlugins()
		for _, name := range g.prebind {
			if !skipped.Has(name) {
				working = append(working, name)
			}
		}
		why = append(why, fmt.Sprintf("PreBind plugins %v have work for it", working))
	}
	if g.always != "" {
		why = append(why, "the profile has "+g.always)
	}
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		// A bind of the pod alone would start part of a gang: the
		// scheduler's group cycle binds the group's pods together.
		why = append(why, "it belongs to PodGroup "+pod.Namespace+"/"+*sg.PodGroupName+", whose pods the scheduler binds together")
	}
	return nil, strings.Join(why, "; ")
}

// ErrNoProfile says the scheduler configuration has no profile of that name.
var ErrNoProfile = errors.New("no such profile")

// FindProfile returns the profile named name in cfg; with name empty and a
// single profile, that one.
func FindProfile(cfg *config.KubeSchedulerConfiguration, name string) (*config.KubeSchedulerProfile, error) {
	for i := range cfg.Profiles {
		if cfg.Profiles[i].SchedulerName == name || (name == "" && len(cfg.Profiles) == 1) {
			return &cfg.Profiles[i], nil
		}
	}
	return nil, fmt.Errorf("%w %q in the scheduler configuration", ErrNoProfile, name)
}
