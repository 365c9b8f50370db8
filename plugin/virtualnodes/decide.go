package virtualnodes

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// decider is VirtualNodes' decision: where a pod goes, given the claims in
// flight and the pools. It reads the book and never changes it; PostFilter
// applies what it chooses through the book (take). What it needs is here,
// passed in, so that it never calls back into the plugin.
type decider struct {
	fw   framework.Framework // the profile's plugins, on view
	view *lister
	book bookReader
	// maxClaimsTried and maxInstanceTypes are the plugin's arguments of
	// those names (Args).
	maxClaimsTried, maxInstanceTypes int
	// daemonSets returns the pods the cluster's DaemonSets would run on a
	// node; nil means none.
	daemonSets func(*corev1.Node) []*corev1.Pod
	// claims reads a ResourceClaim as the simulation sees it, for the
	// Events about devices; nil without DRA.
	claims func(namespace, name string) (*resourcev1.ResourceClaim, error)
	// pods reads the scheduler's pod informer: whether a pod the cycle
	// holds has been bound since it was queued (boundMeanwhile). Nil in
	// unit tests without an API server.
	pods corelisters.PodLister
}

// bookReader is what the decision reads of the book (*book) while it
// decides, besides the claims in flight it is given: the names taken, the
// pools' forecast usage, and whether a retried pod was moved or its claim
// repacked.
type bookReader interface {
	newName(pool string) string
	poolUsage(pl *pool, except *claim) corev1.ResourceList
	moves(pod *corev1.Pod, to string) bool
	wasRepacked(name string) bool
}

// choice is what the decider chose for a pod: the claim to nominate it to,
// with the options the claim keeps once it holds the pod, or per pool why
// none.
type choice struct {
	claim *claim
	opts  []*option
	// isNew: the claim was made for the pod; the book registers it.
	isNew bool
	// resized: the open claim's node became a larger instance type to
	// hold the pod, so its pods count under that node's labels.
	resized bool
	reasons []string // "pool default: no instance type has 300 cpu; the largest has 192"
	// state is the pod's cycle state, with its Filter verdict on the
	// chosen claim's node: the DRA devices planned from it (Plan).
	state fwk.CycleState
	// refusal is why not, for the metric: the first pool's reason.
	refusal refusal
}

// place chooses the claim for pod among the claims in flight: an open
// claim it fits, else a new claim from the first of pools (by weight) that
// can hold it. Fit is the simulation framework's Filter verdict on the
// claim's node, with PreFilter run over the view that includes every
// virtual node. The chosen claim's node is left as Filter accepted it;
// nothing else changes until the caller applies the choice (book.take).
// Callers hold VirtualNodes.mu.
func (d *decider) place(ctx context.Context, pod *corev1.Pod, claims inFlight, pools []*pool) choice {
	d.view.reset()
	defer d.view.reset()
	var nodeNames map[*pool]map[string]string
	if needsDevices(pod) {
		nodeNames = d.newNodeNames(pools)
		d.view.slices = virtualSlices(claims, nodeNames)
		defer func() { d.view.slices = nil }()
	}
	state := framework.NewCycleState()
	if _, s, _ := d.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() && !s.IsSkip() {
		return choice{reasons: []string{"no node can run it: " + s.Message()}, refusal: refusalPreFilter}
	}
	ch := d.choose(ctx, state, pod, claims, pools, nodeNames)
	ch.state = state
	return ch
}

// choose is place's choice once PreFilter has run: an open claim first,
// else a new one (nodeNames: a pod with claims' new node names,
// newNodeNames).
func (d *decider) choose(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, claims inFlight, pools []*pool, nodeNames map[*pool]map[string]string) choice {
	logger := klog.FromContext(ctx)
	req := framework.NewResource(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))

	// First the claims the pod fits without a larger instance type: room
	// already paid for. Tightest first, so that small claims fill up
	// before a node grows or a new one is made.
	if ch := d.fillSlack(ctx, state, pod, req, claims); ch.claim != nil {
		return ch
	}
	// Then the claims that hold it on a larger instance type, the
	// smallest increase in price first.
	ch, tried := d.grow(ctx, state, pod, req, claims)
	if ch.claim != nil {
		return ch
	}
	logger.V(4).Info("No open nodeclaim fits the pod", "pod", klog.KObj(pod), "claimsTried", tried, "openClaims", len(claims.open))

	var reasons []string
	first := refusalNoNodePool
	for i, pl := range pools {
		ch, why, reason := d.newClaim(ctx, state, pod, req, pl, nodeNames[pl])
		if ch.claim != nil {
			return ch
		}
		if i == 0 {
			first = why
		}
		reasons = append(reasons, fmt.Sprintf("pool %s: %s", pl.np.Name, reason))
	}
	if len(pools) == 0 {
		reasons = append(reasons, "no NodePool has a published instance type catalog")
	}
	return choice{reasons: reasons, refusal: first}
}

// fillSlack chooses an open claim whose cheapest open option holds pod as
// it is, trying at most MaxClaimsTried of them: the hint first, then the
// claims left with the least room once the pod is in. Its choice has no
// claim when none takes the pod.
func (d *decider) fillSlack(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, req *framework.Resource, claims inFlight) choice {
	type slack struct {
		c     *claim
		left  float64 // the larger of the fractions of cpu and memory the cheapest option has left
		order int     // among equals, the claim's place among the open claims
	}
	// Only the first MaxClaimsTried in that order are tried: keep those,
	// not every claim sorted.
	fits := firstK[slack]{k: d.maxClaimsTried, cmp: func(a, b slack) int {
		return cmp.Or(cmp.Compare(a.left, b.left), cmp.Compare(a.order, b.order))
	}}
	for i, c := range claims.open {
		if len(c.options) == 0 {
			continue
		}
		alloc := c.options[0].alloc
		if left, ok := room(alloc, c.info.Requested, req, len(c.info.Pods)+1); ok {
			if c == claims.hint {
				left = -1
			}
			fits.add(slack{c: c, left: left, order: i})
		}
	}
	for _, f := range fits.items {
		if ch, ok := d.tryClaim(ctx, state, pod, req, f.c); ok {
			return ch
		}
	}
	return choice{}
}

// firstK keeps the k smallest items added under cmp, in order: the first k
// of a sort of them all, without sorting them all. cmp must order every
// two distinct items (no ties), as a stable sort's order would.
type firstK[T any] struct {
	k     int
	cmp   func(a, b T) int
	items []T
}

func (f *firstK[T]) add(x T) {
	if f.k <= 0 {
		return
	}
	if len(f.items) == f.k && f.cmp(x, f.items[f.k-1]) >= 0 {
		return
	}
	i, _ := slices.BinarySearchFunc(f.items, x, f.cmp)
	if len(f.items) < f.k {
		f.items = append(f.items, x)
	}
	copy(f.items[i+1:], f.items[i:len(f.items)-1])
	f.items[i] = x
}

// grow chooses an open claim that holds pod once it becomes a larger
// instance type, trying at most MaxClaimsTried of them, those whose price
// rises least first (the hint, then the newest, among equals). It returns
// the choice (without a claim when none takes the pod) and how many
// claims were tried.
func (d *decider) grow(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, req *framework.Resource, claims inFlight) (choice, int) {
	type growth struct {
		c     *claim
		rise  float64
		order int
	}
	fits := firstK[growth]{k: d.maxClaimsTried, cmp: func(a, b growth) int {
		return cmp.Or(cmp.Compare(a.rise, b.rise), cmp.Compare(a.order, b.order))
	}}
	for i, c := range claims.open {
		// The claim's node is its largest option.
		if _, ok := room(c.info.Allocatable, c.info.Requested, req, len(c.info.Pods)+1); len(c.options) == 0 || !ok {
			continue
		}
		for _, o := range c.options {
			if _, ok := room(o.alloc, c.info.Requested, req, len(c.info.Pods)+1); ok {
				if idleAtPodCap(o.alloc, c.info.Requested, req, len(c.info.Pods)+1) {
					// Its pods could not fill the larger type: a new
					// claim costs less than the room left idle.
					break
				}
				g := growth{c: c, rise: o.price - c.options[0].price, order: -i}
				if c == claims.hint {
					g.order = -len(claims.open)
				}
				fits.add(g)
				break
			}
		}
	}
	tried := 0
	for _, g := range fits.items {
		tried++
		if ch, ok := d.tryClaim(ctx, state, pod, req, g.c); ok {
			return ch, tried
		}
	}
	return choice{}, tried
}

// minFillAtPodCap is how much of its cpu or memory a node must be able to
// use before its pod cap binds, for a claim to grow onto it.
const minFillAtPodCap = 0.95

// idleAtPodCap reports whether a node of allocatable alloc, holding used
// plus req on pods pods, and then filled up to its pod cap with pods of
// the same average size, would still leave more than 5% of both its cpu
// and its memory unused. Growing a claim onto such a type pays for room
// no pod can take: 110 pods of 500m use 55 of a 64-cpu node's cpu, where
// two claims on 48-cpu nodes use all of theirs. Pods that request other
// resources (GPUs, say) are sized by those: the rule does not apply.
func idleAtPodCap(alloc *framework.Resource, used fwk.Resource, req *framework.Resource, pods int) bool {
	if len(req.ScalarResources) > 0 || pods <= 0 || alloc.AllowedPodNumber <= 0 {
		return false
	}
	scale := float64(alloc.AllowedPodNumber) / float64(pods)
	cpu := float64(used.GetMilliCPU()+req.MilliCPU) * scale
	mem := float64(used.GetMemory()+req.Memory) * scale
	return cpu < minFillAtPodCap*float64(alloc.MilliCPU) && mem < minFillAtPodCap*float64(alloc.Memory)
}

// room reports whether alloc holds used plus req with pods pods, and the
// larger of the fractions of its cpu and memory left then.
func room(alloc *framework.Resource, used fwk.Resource, req *framework.Resource, pods int) (float64, bool) {
	cpu, mem := used.GetMilliCPU()+req.MilliCPU, used.GetMemory()+req.Memory
	if cpu > alloc.MilliCPU || mem > alloc.Memory || used.GetEphemeralStorage()+req.EphemeralStorage > alloc.EphemeralStorage || int64(pods) > int64(alloc.AllowedPodNumber) {
		return 0, false
	}
	for name, q := range req.ScalarResources {
		if q > 0 && used.GetScalarResources()[name]+q > alloc.ScalarResources[name] {
			return 0, false
		}
	}
	var c, m float64
	if alloc.MilliCPU > 0 {
		c = float64(alloc.MilliCPU-cpu) / float64(alloc.MilliCPU)
	}
	if alloc.Memory > 0 {
		m = float64(alloc.Memory-mem) / float64(alloc.Memory)
	}
	return max(c, m), true
}

// tryClaim chooses c for pod if the options left can hold it and the
// Filter plugins accept it on c's node, which is then left on the largest
// of those options.
func (d *decider) tryClaim(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, req *framework.Resource, c *claim) (choice, bool) {
	opts := c.group.narrow(c.template, c.options, sum(c.info.Requested, req), len(c.info.Pods)+1, pod)
	if needsDevices(pod) && len(c.options) > 0 {
		// Only the devices of the node DynamicResources saw (devices.go).
		opts = sameDevices(opts, largest(c.options).devices)
	}
	// Growing a claim may need a larger instance type: the pool's limits
	// hold for that too.
	if opts = d.withinLimits(c.group.pool, opts, c); len(opts) == 0 || c.group.minValuesUnmet(opts) != "" {
		return choice{}, false
	}
	before := c.info.Node()
	if big := largest(opts); big.name != before.Labels[corev1.LabelInstanceTypeStable] {
		c.info.SetNode(c.node(big))
	}
	if s := d.fw.RunFilterPlugins(ctx, state, pod, c.info); !s.IsSuccess() {
		if c.info.Node() != before {
			c.info.SetNode(before)
		}
		klog.FromContext(ctx).V(5).Info("Nodeclaim rejected the pod", "pod", klog.KObj(pod), "nodeClaim", c.name, "reasons", s.Reasons())
		return choice{}, false
	}
	return choice{claim: c, opts: opts, resized: c.info.Node() != before}, true
}

// newClaim makes a claim in pool pl for pod, in the group whose cheapest
// fitting instance type is cheapest among those the Filter plugins accept;
// the book registers it once the choice is applied. It returns why not
// otherwise, and that in a sentence for the pod's Event.
func (d *decider) newClaim(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, req *framework.Resource, pl *pool, nodeNames map[string]string) (choice, refusal, string) {
	type candidate struct {
		g    *group
		name string
		info *framework.NodeInfo
		ds   []*corev1.Pod
		opts []*option
	}
	if np := pl.np; np.Fixed() {
		return choice{}, refusalFixedSize, fixedSizeReason(np)
	}
	var candidates []candidate
	noSize, noLabels, noFlex := 0, 0, ""
	for _, s := range d.newNodes(pl, nodeNames) {
		g, name := s.g, s.name
		node := g.node(pl.template, name, s.largest)
		info := framework.NewNodeInfo()
		info.SetNode(node)
		ds := d.daemonSetPods(node)
		for _, d := range ds {
			info.AddPod(d)
		}
		total := sum(info.Requested, req)
		opts := g.narrow(pl.template, s.options, total, len(info.Pods)+1)
		if len(opts) == 0 {
			noSize++
			continue
		}
		if selectsOnNodeLabels(pod) {
			if opts = g.narrow(pl.template, opts, total, len(info.Pods)+1, pod); len(opts) == 0 {
				noLabels++
				continue
			}
		}
		if why := g.minValuesUnmet(opts); why != "" {
			noFlex = why
			continue
		}
		if within := d.withinLimits(pl, opts, nil); len(within) > 0 && g.minValuesUnmet(within) == "" {
			opts = within
		} else {
			return choice{}, refusalLimitReached, d.limitReason(pl, opts[0])
		}
		candidates = append(candidates, candidate{g: g, name: name, info: info, ds: ds, opts: opts})
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].opts[0].price < candidates[j].opts[0].price })
	filterReasons := map[string]bool{}
	devicesRefused := false
	for _, cand := range candidates {
		if big := largest(cand.opts); big.name != cand.info.Node().Labels[corev1.LabelInstanceTypeStable] {
			cand.info.SetNode(cand.g.node(pl.template, cand.name, big))
		}
		s := d.fw.RunFilterPlugins(ctx, state, pod, cand.info)
		if !s.IsSuccess() {
			for _, r := range s.Reasons() {
				filterReasons[r] = true
			}
			devicesRefused = devicesRefused || s.Plugin() == names.DynamicResources
			continue
		}
		c := &claim{name: cand.name, group: cand.g, template: pl.template, poolHash: pl.hash, info: cand.info, dsPods: cand.ds, pods: map[types.UID]*corev1.Pod{}, open: true}
		return choice{claim: c, opts: cand.g.cheapest(cand.opts, d.maxInstanceTypes), isNew: true}, refusalNone, ""
	}
	switch {
	case len(filterReasons) > 0:
		rs := make([]string, 0, len(filterReasons))
		for r := range filterReasons {
			rs = append(rs, r)
		}
		slices.Sort(rs)
		if devicesRefused && needsDevices(pod) {
			return choice{}, refusalFilter, "no instance type's devices satisfy " + d.describeClaims(pod) + "; the scheduler refuses every node the pool can launch: " + strings.Join(rs, ", ")
		}
		return choice{}, refusalFilter, "the scheduler refuses every node the pool can launch: " + strings.Join(rs, ", ")
	case noFlex != "":
		return choice{}, refusalMinValues, noFlex
	case noSize > 0 && noLabels == 0:
		return choice{}, refusalTooLarge, sizeReason(pl, req)
	case noLabels > 0:
		return choice{}, refusalNoMatch, "no instance type matches the pod's node selector or affinity"
	}
	return choice{}, refusalNoOffering, "the pool has no available offering"
}

// newNode is a new node a pool can launch: a group, and the options of it
// its node may become, under the name it is tried as.
type newNode struct {
	g       *group
	name    string
	options []*option
	largest *option
}

// newNodes are the new nodes newClaim tries in pl: each group under one
// new name; for a pod with claims (names from newNodeNames), each group
// once for each set of devices its types publish, under that set's name,
// so that the slices DynamicResources listed are the node's.
func (d *decider) newNodes(pl *pool, nodeNames map[string]string) []newNode {
	var out []newNode
	if nodeNames == nil {
		name := d.book.newName(pl.np.Name)
		for _, g := range pl.groups {
			out = append(out, newNode{g: g, name: name, options: g.options, largest: g.largest})
		}
		return out
	}
	for _, g := range pl.groups {
		byKey := map[string][]*option{}
		var keys []string
		for _, o := range g.options {
			if _, ok := byKey[o.devices]; !ok {
				keys = append(keys, o.devices)
			}
			byKey[o.devices] = append(byKey[o.devices], o)
		}
		for _, k := range keys {
			out = append(out, newNode{g: g, name: nodeNames[k], options: byKey[k], largest: largest(byKey[k])})
		}
	}
	return out
}

// daemonSetPods returns the daemonset pods that would run on node.
func (d *decider) daemonSetPods(node *corev1.Node) []*corev1.Pod {
	if d.daemonSets == nil {
		return nil
	}
	return d.daemonSets(node)
}

// sizeReason says which resource the pod wants more of than any instance
// type has: "no instance type has 300 cpu; the largest has 192", or that
// no type offers a resource at all: "no instance type offers
// ephemeral-storage, which the pod requests (2Gi)".
func sizeReason(pl *pool, req *framework.Resource) string {
	want := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(req.MilliCPU, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(req.Memory, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(req.EphemeralStorage, resource.BinarySI),
	}
	for name, q := range req.ScalarResources {
		want[name] = *resource.NewQuantity(q, resource.DecimalSI)
	}
	var parts []string
	for _, name := range sortedNames(want) {
		q := want[name]
		if q.IsZero() {
			continue
		}
		most, ok := pl.maxAllocatable[name]
		if !ok || most.IsZero() {
			parts = append(parts, fmt.Sprintf("no instance type offers %s, which the pod requests (%s)", name, nodeshape.Readable(name, q)))
			continue
		}
		if q.Cmp(most) > 0 {
			parts = append(parts, fmt.Sprintf("no instance type has %s %s; the largest has %s (%s)", nodeshape.Readable(name, q), name, nodeshape.Readable(name, most), pl.maxType[name]))
		}
	}
	if len(parts) == 0 {
		return "no instance type has room for the pod's requests together with the daemonsets that would run there"
	}
	return strings.Join(parts, "; ")
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// sum returns a + b as a new Resource.
func sum(a fwk.Resource, b *framework.Resource) *framework.Resource {
	out := &framework.Resource{
		MilliCPU:         a.GetMilliCPU() + b.MilliCPU,
		Memory:           a.GetMemory() + b.Memory,
		EphemeralStorage: a.GetEphemeralStorage() + b.EphemeralStorage,
	}
	for name, q := range a.GetScalarResources() {
		out.SetScalar(name, q)
	}
	for name, q := range b.ScalarResources {
		out.AddScalar(name, q)
	}
	return out
}

// fixedSizeReason is why a fixed-size pool takes no pod: the provisioner
// keeps its count, and pods reach its nodes through the scheduler alone.
func fixedSizeReason(np *v1alpha1.NodePool) string {
	return fmt.Sprintf("nodepool %s is fixed-size (spec.replicas %d): it launches no node for pending pods; a pod runs on its nodes only when the scheduler finds room there", np.Name, *np.Spec.Replicas)
}
