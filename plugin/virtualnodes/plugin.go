// Package virtualnodes is the VirtualNodes scheduler plugin. When a pod fits
// no real node, its PostFilter nominates the pod onto a virtual node: a
// NodeClaim that the provisioner will turn into a real node. Fit is decided
// by the scheduler's own Filter plugins, configured as the profile
// configures them, on a view of the cluster that includes the virtual nodes
// and the pods nominated to them; so what is provisioned is what the
// scheduler will accept. See README.md.
package virtualnodes

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/simulator"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "VirtualNodes"

// syncWait is the longest PostFilter waits for the plugin's first sync
// with the API server before it refuses the pod for now.
const syncWait = 2 * time.Second

// notSyncedMessage is why a pod is refused while the plugin has not synced.
const notSyncedMessage = Name + " has not read NodePools, catalogs and NodeClaims from the API server yet"

// VirtualNodes is the PostFilter plugin.
type VirtualNodes struct {
	args   *Args
	lister *lister
	// devices is the simulation's DRA manager, with the devices planned
	// for pods on virtual nodes; nil where the scheduler has none.
	devices  *simulator.Devices
	recorder events.EventRecorder
	now      func() time.Time

	// synced is closed once pools are read from the API server and the
	// caches claims are rebuilt from have synced; until then PostFilter
	// waits, so that a restart never makes a second claim for a pod that
	// already has one.
	synced chan struct{}

	// activate moves pods back to the scheduler's active queue. Pods
	// VirtualNodes refused are retried through it when pools, catalogs or
	// claims change: kube-scheduler ignores the requeue events of PostFilter
	// plugins, and would otherwise wait minutes to retry them.
	activate func(map[string]*corev1.Pod)

	// nodes reads the scheduler's node informer: whether a claim's node
	// is open (see queue.go). Nil in unit tests without an API server.
	nodes corelisters.NodeLister

	// book holds the claims and nominations, under its own lock.
	book *book
	// decider chooses where a pod goes; PostFilter applies its choice
	// through book.
	decider *decider
	// metrics are the series PostFilter and the book write.
	metrics *decisionMetrics

	// mu serializes decisions (PostFilter) with the informer handlers and
	// the write loop, and guards what follows; whoever changes the book
	// holds it too (see book).
	mu      sync.Mutex
	refused map[types.UID]*corev1.Pod
	// requestPods are the pods of each ProvisioningRequest nominated to
	// claims (provreq.go), which exist only here.
	requestPods map[types.NamespacedName][]*corev1.Pod
	// bufferPods are the chunks of each CapacityBuffer nominated to
	// claims (buffers.go).
	bufferPods map[types.NamespacedName][]*corev1.Pod
	// requestSched places a request's pods on the nodes there and in
	// flight; requests serves the requests. Nil unless
	// Args.ProvisioningRequests.
	requestSched *simulator.Scheduler
	requests     *requests
	buffers      *buffers
	pools        map[string]*pool
	ordered      []*pool // by weight, highest first, then name
	// poolInputs are what the pools were last built from (resyncPools);
	// nil before the first build.
	poolInputs map[string]poolInput
	// rebuildFrom restores the claims from the API server; it runs once,
	// before the first decision (see rebuild). Nil in unit tests that
	// start from an empty cluster.
	rebuildFrom func(context.Context) error
	rebuilt     bool
}

// repackedMemory is how long a repacked claim's name is remembered: far
// longer than an informer lags.
const repackedMemory = 10 * time.Minute

var (
	_ fwk.PostFilterPlugin = &VirtualNodes{}
	_ fwk.FilterPlugin     = &VirtualNodes{}
	_ fwk.PreFilterPlugin  = &VirtualNodes{}
)

// nominationKey is where PreFilter leaves the pod's nomination for Filter.
const nominationKey fwk.StateKey = "PreFilter" + Name

// nomination is the claim a pod is nominated to and the node the claim
// has become ("" before it registers), as PreFilter found them.
type nomination struct{ claim, node string }

func (n *nomination) Clone() fwk.StateData { return n }

// PreFilter looks the pod's nomination up once per scheduling cycle. A pod
// VirtualNodes has not nominated, nearly every pod that fits a real node,
// skips Filter: VirtualNodes then costs the scheduler one map lookup per
// pod, not a lock per node.
func (p *VirtualNodes) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	n := p.nominationOf(pod)
	if n == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	state.Write(nominationKey, n)
	return nil, nil
}

// PreFilterExtensions returns nil: no other pod changes what PreFilter found.
func (p *VirtualNodes) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func readState(state fwk.CycleState) (fwk.StateData, error) {
	if state == nil {
		return nil, fwk.ErrNotFound
	}
	return state.Read(nominationKey)
}

// nominationOf returns the claim pod is nominated to, or nil. It takes
// the book's lock only: PreFilter runs for every pod and must not wait for
// a decision.
func (p *VirtualNodes) nominationOf(pod *corev1.Pod) *nomination {
	return p.book.nominationOf(pod.UID)
}

// Filter keeps a pod nominated to a nodeclaim for that claim's node: until
// the claim is deleted or the pod's nomination cleared, no other real node
// passes. The pod was placed on the claim with every other pod counted;
// bound on whichever node opens first, it would break the spread and
// affinity that placement kept (all pods of a zone spread in the zone
// whose node registered first) and leave its own node empty. Pods
// VirtualNodes has not nominated pass.
func (p *VirtualNodes) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	var n *nomination
	if d, err := readState(state); err == nil {
		n = d.(*nomination)
	} else {
		// A profile that enables Filter without PreFilter.
		n = p.nominationOf(pod)
	}
	if n == nil || ni.Node() == nil || ni.Node().Name == n.node {
		return nil
	}
	return fwk.NewStatus(fwk.Unschedulable, "the pod waits for the node of nodeclaim "+n.claim+", which it was nominated to")
}

// Name returns the plugin's name.
func (p *VirtualNodes) Name() string { return Name }

// profileNamer is what the scheduler's framework handle tells of its profile.
type profileNamer interface{ ProfileName() string }

// NewFactory returns the plugin factory for a scheduler started with cfg
// whose plugins newRegistry returns (plugin/registry.All): the plugin
// builds its simulation framework from the profile it runs in, with that
// profile's plugins and their arguments.
//
// The registry is built when the plugin is, not before: kube-scheduler's
// in-tree registry reads the feature gates as it is built, and the
// scheduler sets them (--feature-gates, then the features the API server
// cannot serve turned off) only once its command runs. A registry built
// with the command would simulate with the default gates while the
// scheduler runs with others.
func NewFactory(cfg *config.KubeSchedulerConfiguration, newRegistry func() (frameworkruntime.Registry, error)) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		args, err := DecodeArgs(obj)
		if err != nil {
			return nil, err
		}
		registry, err := newRegistry()
		if err != nil {
			return nil, err
		}
		pn, ok := h.(profileNamer)
		if !ok {
			return nil, fmt.Errorf("%s: the framework handle does not name its profile", Name)
		}
		var profile *config.KubeSchedulerProfile
		for i := range cfg.Profiles {
			if cfg.Profiles[i].SchedulerName == pn.ProfileName() {
				profile = &cfg.Profiles[i]
			}
		}
		if profile == nil {
			return nil, fmt.Errorf("%s: profile %q is not in the configuration", Name, pn.ProfileName())
		}
		p, err := newPlugin(ctx, registry, args, profile, h)
		if err != nil {
			return nil, err
		}
		p.decider.pods = h.SharedInformerFactory().Core().V1().Pods().Lister()
		if args.ProvisioningRequests || args.CapacityBuffers {
			if p.requestSched, err = requestScheduler(ctx, cfg, profile, newRegistry, h); err != nil {
				return nil, err
			}
		}
		if err := p.startSync(ctx, h); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// newPlugin builds the plugin's decision engine; it does not talk to the
// API server (startSync does).
func newPlugin(ctx context.Context, registry frameworkruntime.Registry, args *Args, profile *config.KubeSchedulerProfile, h fwk.Handle) (*VirtualNodes, error) {
	v := &lister{SharedLister: h.SnapshotSharedLister(), byName: map[string]fwk.NodeInfo{}}
	if v.SharedLister != nil {
		v.real = v.SharedLister.NodeInfos()
	}
	if inf := h.SharedInformerFactory(); inf != nil {
		v.groups = simulator.PodGroups(inf)
	}
	// The scheduler's DRA manager, with the virtual nodes' slices and the
	// devices planned for their pods (devices.go).
	var devices *simulator.Devices
	dra := h.SharedDRAManager()
	registry = withSavedStates(registry, v)
	if dra != nil {
		devices = simulator.NewDevices(dra, func() []*resourcev1.ResourceSlice { return v.slices })
		registry, dra = devices.Registry(registry), devices
	}
	fw, err := simulator.New(ctx, registry, simulator.Profile(profile, strings.ToLower(Name), Name),
		frameworkruntime.WithClientSet(h.ClientSet()),
		frameworkruntime.WithKubeConfig(h.KubeConfig()),
		frameworkruntime.WithInformerFactory(h.SharedInformerFactory()),
		frameworkruntime.WithSharedDRAManager(dra),
		frameworkruntime.WithSharedCSIManager(h.SharedCSIManager()),
		frameworkruntime.WithSnapshotSharedLister(v),
		frameworkruntime.WithEventRecorder(h.EventRecorder()),
		// PreFilter walks every node, virtual ones included; one worker
		// per core is as fast as the scheduler's 16 here and cheaper on
		// small clusters.
		frameworkruntime.WithParallelism(goruntime.GOMAXPROCS(0)),
	)
	if err != nil {
		return nil, fmt.Errorf("%s: building the simulation framework for profile %s: %w", Name, profile.SchedulerName, err)
	}
	m := pluginMetrics()
	dec := &decider{fw: fw, view: v, maxClaimsTried: args.MaxClaimsTried, maxInstanceTypes: args.MaxInstanceTypes}
	if devices != nil {
		dec.claims = devices.ResourceClaims().Get
	}
	b := newBook(v, m.open)
	if devices != nil {
		b.plans = devices
	}
	dec.book = b
	return &VirtualNodes{
		args:        args,
		lister:      v,
		devices:     devices,
		recorder:    h.EventRecorder(),
		now:         time.Now,
		book:        b,
		decider:     dec,
		metrics:     m,
		pools:       map[string]*pool{},
		refused:     map[types.UID]*corev1.Pod{},
		requestPods: map[types.NamespacedName][]*corev1.Pod{},
		bufferPods:  map[types.NamespacedName][]*corev1.Pod{},
		synced:      make(chan struct{}),
	}, nil
}

// PostFilter nominates a pod that fits no real node to a virtual node,
// and counts what it decided and how long the scheduling cycle waited.
func (p *VirtualNodes) PostFilter(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	start := time.Now()
	res, status, r, why := p.postFilter(ctx, pod)
	if r < numResults { // not a cancelled cycle
		p.metrics.observe(r, why, time.Since(start))
	}
	return res, status
}

// postFilter is PostFilter's work: once the plugin has synced, it reads
// the pod's nomination from the book, asks the decider what a pod retried
// on its claim does and where a pod goes, and applies each choice through
// the book. It returns the result and, for a refused pod, the reason; the
// result is numResults when there was nothing to decide (the cycle was
// cancelled, or the pod was bound meanwhile).
func (p *VirtualNodes) postFilter(ctx context.Context, pod *corev1.Pod) (*fwk.PostFilterResult, *fwk.Status, result, refusal) {
	logger := klog.FromContext(ctx)
	unlock, st, notSynced := p.lockSynced(ctx, klog.KObj(pod))
	if unlock == nil {
		return nil, st, notSynced, refusalNotSynced
	}
	defer unlock()
	// A pod retried while nominated to a claim is decided from that claim
	// first: it leaves it only to be placed afresh.
	if c := p.book.nominatedTo(pod.UID); c != nil {
		r := p.decider.retried(ctx, pod, c)
		if r != retryAfresh {
			return p.applyRetried(pod, c, r)
		}
		p.book.unview(c, pod)
	}
	p.book.settle()
	ch := p.decider.place(ctx, pod, p.book.inFlight(pod), p.ordered)
	if ch.claim == nil {
		msg := "no NodePool can launch a node for this pod: " + strings.Join(ch.reasons, "; ")
		logger.V(2).Info("No virtual node for pod", "pod", klog.KObj(pod), "reasons", ch.reasons)
		p.event(pod, corev1.EventTypeWarning, v1alpha1.ReasonNoInstanceType, v1alpha1.ActionProvisioning, msg)
		p.refused[pod.UID] = pod
		return nil, fwk.NewStatus(fwk.Unschedulable, msg), resultRefused, ch.refusal
	}
	p.book.take(pod, ch, p.now())
	c := ch.claim
	if p.devices != nil && needsDevices(pod) {
		if s := p.devices.Plan(ctx, ch.state, pod, c.name); !s.IsSuccess() {
			// Filter accepted the node: its devices are there. The pod
			// stays nominated; the provisioner's gate judges it again on
			// the real node.
			logger.Error(s.AsError(), "Planning the pod's devices on its virtual node", "pod", klog.KObj(pod), "nodeClaim", c.name)
		}
	}
	delete(p.refused, pod.UID)
	logger.V(4).Info("Nominated pod to virtual node", "pod", klog.KObj(pod), "nodeClaim", c.name, "nodePool", c.group.pool.np.Name,
		"new", ch.isNew, "zone", c.group.zone, "capacityType", c.group.capacityType, "instanceTypes", len(c.options), "pods", len(c.pods))
	r := resultExisting
	if ch.isNew {
		r = resultNew
	}
	return nominateTo(c), nominatedStatus(c), r, refusalNone
}

// lockSynced waits for the plugin's first sync with the API server and
// takes p.mu, rebuilding the book from the API server on the first
// decision; it returns the unlock. Not synced within syncWait, it does
// not hold the scheduling loop: a plugin that cannot read the API (RBAC,
// a down server) refuses what it decides for now (nil unlock, the
// status, resultRefused), which the scheduler retries with backoff. A
// cancelled cycle gets an error status and numResults.
func (p *VirtualNodes) lockSynced(ctx context.Context, what klog.ObjectRef) (func(), *fwk.Status, result) {
	logger := klog.FromContext(ctx)
	wait := time.NewTimer(syncWait)
	defer wait.Stop()
	select {
	case <-p.synced:
	case <-wait.C:
		logger.Info("Not synced with the API server yet; will be retried", "object", what, "waited", syncWait)
		return nil, fwk.NewStatus(fwk.Unschedulable, notSyncedMessage), resultRefused
	case <-ctx.Done():
		return nil, fwk.AsStatus(ctx.Err()), numResults
	}
	p.mu.Lock()
	if !p.rebuilt && p.rebuildFrom != nil {
		if err := p.rebuildFrom(ctx); err != nil {
			p.mu.Unlock()
			logger.Error(err, "Rebuilding nodeclaims before the first decision; will be retried", "object", what)
			return nil, fwk.NewStatus(fwk.Unschedulable, notSyncedMessage), resultRefused
		}
		p.rebuilt = true
	}
	return p.mu.Unlock, nil, 0
}

// applyRetried applies what the decision chose, r (anything but
// retryAfresh), for pod, retried while nominated to claim c, and answers
// the scheduler.
func (p *VirtualNodes) applyRetried(pod *corev1.Pod, c *claim, r retry) (*fwk.PostFilterResult, *fwk.Status, result, refusal) {
	node := pod.Status.NominatedNodeName
	switch r {
	case retryFollow:
		p.book.follow(pod, node) // the move the decision found (book.moves)
		to := p.book.claim(node)
		return nominateTo(to), nominatedStatus(to), resultKept, refusalNone
	case retryHandOff:
		return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: node, NominatingMode: fwk.ModeOverride}},
			fwk.NewStatus(fwk.Success, "nominated to node "+node+" of nodeclaim "+c.name+", which the scheduler binds it to once the node is open"), resultKept, refusalNone
	case retryBound:
		// Not counted as a decision.
		return nil, fwk.NewStatus(fwk.Unschedulable, "bound to a node since this scheduling cycle began"), numResults, refusalNone
	}
	return nominateTo(c), nominatedStatus(c), resultKept, refusalNone
}

func nominateTo(c *claim) *fwk.PostFilterResult {
	return &fwk.PostFilterResult{NominatingInfo: &fwk.NominatingInfo{NominatedNodeName: c.name, NominatingMode: fwk.ModeOverride}}
}

// nominatedStatus is PostFilter's answer for a pod nominated to c. Its
// message ends kube-scheduler's FailedScheduling Event and the pod's
// PodScheduled condition, which are the pod's record of the nomination:
// VirtualNodes writes no Event of its own on the pod (one request a pod
// fewer). The message names only what stays true while the claim fills
// (not its pod count or options), so that a pod tried again with the same
// nomination makes the same Event, which the scheduler's recorder counts
// as a series instead of writing anew.
func nominatedStatus(c *claim) *fwk.Status {
	msg := "nominated to nodeclaim " + c.name
	if c.group != nil {
		msg += fmt.Sprintf(" of pool %s in %s (%s)", c.group.pool.np.Name, c.group.zone, c.group.capacityType)
	}
	return fwk.NewStatus(fwk.Success, msg+"; its node is launched for the pod, which is bound there once it is ready")
}

func (p *VirtualNodes) event(pod *corev1.Pod, typ, reason, action, note string) {
	if p.recorder != nil {
		p.recorder.Eventf(pod, nil, typ, reason, action, "%s", note)
	}
}

// setPools replaces the pools, as their NodePools and catalogs change.
func (p *VirtualNodes) setPools(pools []*pool) {
	p.book.poolsChanged()
	// The placeholders leaving are the old pools' own nodes, known by
	// identity: a claim's name can start like a placeholder's (a pool
	// named "placeholder" names its claims "placeholder-...").
	leaving := map[fwk.NodeInfo]bool{}
	for _, pl := range p.pools {
		for _, g := range pl.groups {
			leaving[g.placeholder] = true
		}
	}
	p.pools = map[string]*pool{}
	p.ordered = slices.Clone(pools)
	slices.SortFunc(p.ordered, func(a, b *pool) int {
		if a.weight != b.weight {
			return int(b.weight - a.weight)
		}
		return strings.Compare(a.np.Name, b.np.Name)
	})
	// Placeholders: one empty node per group, so each zone a pool can
	// launch in is a topology domain and a new node is always possible.
	p.lister.changed()
	p.lister.virtual = slices.DeleteFunc(p.lister.virtual, func(n fwk.NodeInfo) bool { return leaving[n] })
	for _, pl := range p.ordered {
		p.pools[pl.np.Name] = pl
		for _, g := range pl.groups {
			p.lister.virtual = append(p.lister.virtual, g.placeholder)
		}
	}
}

// retryRefused sends the pods refused so far back to the scheduler's
// active queue: something that could change the answer has changed.
// Callers hold p.mu.
func (p *VirtualNodes) retryRefused(why string) {
	if len(p.refused) == 0 || p.activate == nil {
		return
	}
	pods := make(map[string]*corev1.Pod, len(p.refused))
	for _, pod := range p.refused {
		pods[pod.Namespace+"/"+pod.Name] = pod
	}
	clear(p.refused)
	klog.Background().V(2).Info("Retrying refused pods", "pods", len(pods), "reason", why)
	p.activate(pods)
}
