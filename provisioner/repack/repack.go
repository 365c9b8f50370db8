// Package repack packs a batch of closed, not yet launched NodeClaims
// again before launch, to launch a cheaper set of nodes for the same pods.
// VirtualNodes decides one pod at a time, as the pods come; the batch seen
// whole packs tighter. Three packings are made and the cheapest kept:
//
//   - the batch as it is, tightened: a node whose pods, some of them moved
//     into room other nodes have already paid for, fit a cheaper type
//     shrinks to it, and a node whose pods all fit elsewhere goes; most
//     pods keep their claim;
//   - the batch packed afresh: the pods whose place other pods constrain
//     (pod affinity, anti-affinity, spread) first, the others after, each
//     onto the node it makes dearer by least, then tightened the same way;
//   - the batch on nodes all of one instance type: the type that, filled
//     first fit by arithmetic, costs least (where each node holds as many
//     pods as its type allows, growing nodes one pod at a time overshoots),
//     then tightened the same way.
//
// Every placement is the shared scheduling simulator's: a pod goes to a
// node only where the scheduler's Filter plugins accept it, with every
// other node of the cluster and of the batch in view. The plan is kept
// only when a replay of all its placements, each node at its final type,
// is accepted too, and only when it costs less than the batch.
//
// A batch is one group of one pool: claims whose nodes differ only in
// instance type (one zone, one capacity type, one architecture, one
// template). Moving a pod between them changes no label a topology
// constraint counts by except the hostname, which the simulator judges,
// and the Filter plugins' verdict on the largest type holds for any type
// with room, as for VirtualNodes' claims.
package repack

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
)

// Option is an instance type a node of the batch can launch as.
type Option struct {
	Name  string
	Price float64
	// Node is the node it registers as, with the given name as its name
	// and hostname: labels, taints and allocatable.
	Node func(name string) *corev1.Node
	// Devices are the ResourceSlices its DRA drivers publish (the
	// catalog's templates): a node of the batch carries them, so the
	// simulator allocates its pods' claims there.
	Devices []v1alpha1.ResourceSliceTemplate

	alloc   *framework.Resource
	probe   *corev1.Node // Node("repack-probe"), for label matching
	devices string       // nodeshape.DevicesKey(Devices)
}

// Bin is one node to launch: a claim of the batch, or one the repack
// makes, with the pods nominated to it and the options it can launch as,
// cheapest first.
type Bin struct {
	Name    string
	Pods    []*corev1.Pod
	Options []*Option
}

// Price is what the bin costs: its cheapest option's price.
func (b *Bin) Price() float64 {
	if len(b.Options) == 0 {
		return 0
	}
	return b.Options[0].Price
}

// Problem is a batch to repack and the cluster around it.
type Problem struct {
	Scheduler *simulator.Scheduler
	// Nodes and Pods are the rest of the cluster: real nodes and the
	// nodes of claims outside the batch, with the pods bound or
	// nominated to them (Spec.NodeName set to the node).
	Nodes []*corev1.Node
	Pods  []*corev1.Pod
	// DaemonSetPods are the daemonset pods that would run on a node.
	DaemonSetPods func(*corev1.Node) []*corev1.Pod
	// Catalog is every option a node of the batch can launch as; Repack
	// reads each option's node once and keeps what it read on the option.
	Catalog []*Option
	Batch   []Bin
	// NewName names a node the batch did not have: one more than the
	// batch has claims.
	NewName func() string
}

// Plan is a repack's outcome.
type Plan struct {
	// Bins replace the batch: each is named as a batch claim while the
	// batch has one to spare (pods that come from elsewhere move to it),
	// the others are new claims (NewName); batch claims not named are
	// left with no pod. Bins is
	// the batch itself when Changed is false.
	Bins    []Bin
	Changed bool
	// Before and After are the batch's price and the plan's, per hour.
	Before, After float64
	// Moved counts pods whose claim the plan changes.
	Moved int
	// How says which packing the plan is ("tightened", "afresh" or "one
	// type"); Why
	// says why the batch was kept, when it was.
	How, Why string
}

// minSaving is the least a plan must save, per hour, to replace the
// batch: moving nominations for less is churn.
const minSaving = 1e-6

// Repack packs the batch again and returns the plan: a cheaper set of
// nodes that the simulator accepts every pod on, or the batch unchanged.
func Repack(ctx context.Context, p Problem) (Plan, error) {
	keep := Plan{Bins: p.Batch}
	for _, b := range p.Batch {
		keep.Before += b.Price()
	}
	keep.After = keep.Before
	if len(p.Batch) == 0 {
		return keep, nil
	}
	var pods []*corev1.Pod
	from := map[*corev1.Pod]string{}
	for _, b := range p.Batch {
		for _, pod := range b.Pods {
			pods = append(pods, pod)
			from[pod] = b.Name
		}
	}
	slices.SortStableFunc(pods, simulator.BindOrder)
	catalog := prepare(p.Catalog)
	if len(catalog) == 0 {
		keep.Why = "no instance type to launch"
		return keep, nil
	}
	s := &solver{Problem: &p, catalog: catalog, requests: map[*corev1.Pod]*framework.Resource{}, pinned: map[*corev1.Pod]string{}}
	for _, pod := range pods {
		s.requests[pod] = framework.NewResource(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
	}
	for _, b := range p.Batch {
		for _, pod := range b.Pods {
			if len(pod.Spec.ResourceClaims) > 0 && len(b.Options) > 0 {
				s.pinned[pod] = nodeshape.DevicesKey(b.Options[0].Devices)
			}
		}
	}

	var best *packing
	var whys []string
	for _, how := range []string{"tightened", "afresh", "one type"} {
		var pk *packing
		var err error
		switch how {
		case "tightened":
			pk, err = s.asIs(ctx)
		case "afresh":
			pk, err = s.afresh(ctx, pods)
		default:
			pk, err = s.oneType(ctx, pods)
		}
		if err != nil {
			return keep, err
		}
		if pk.why == "" {
			if err := s.tighten(ctx, pk); err != nil {
				return keep, err
			}
			pk.why, err = s.verify(ctx, pk)
			if err != nil {
				return keep, err
			}
		}
		if pk.why != "" {
			whys = append(whys, how+": "+pk.why)
			continue
		}
		if best == nil || pk.price() < best.price() {
			best = pk
		}
	}
	if best == nil {
		keep.Why = fmt.Sprint(whys)
		return keep, nil
	}
	if best.price() > keep.Before-minSaving {
		keep.Why = fmt.Sprintf("no cheaper: %.4f/h against %.4f/h", best.price(), keep.Before)
		return keep, nil
	}
	plan := Plan{Before: keep.Before, After: best.price(), Changed: true, How: best.how}
	batchNames := make([]string, len(p.Batch))
	for i, b := range p.Batch {
		batchNames[i] = b.Name
	}
	names := stableNames(best.bins, from, batchNames, p.NewName)
	for i, b := range best.bins {
		if len(b.pods) == 0 {
			continue
		}
		out := Bin{Name: names[i], Pods: b.pods, Options: holding(catalog, b.allowed, b.used, b.count, b.cur)}
		for _, pod := range b.pods {
			if from[pod] != out.Name {
				plan.Moved++
			}
		}
		plan.Bins = append(plan.Bins, out)
	}
	return plan, nil
}

// solver holds what the packings share.
type solver struct {
	*Problem
	catalog  []*Option // cheapest first
	requests map[*corev1.Pod]*framework.Resource
	masks    map[*corev1.Pod][]bool // see mask
	fresh    map[*Option]*packed    // see freshUsage
	// pinned are the pods with ResourceClaims, each with the devices its
	// claim's types publish (nodeshape.DevicesKey): VirtualNodes planned
	// its devices on such a node, and every type it may move to publishes
	// the same, so that the plan holds on whichever type launches.
	pinned map[*corev1.Pod]string
}

// packing is one way to put the batch's pods on nodes, with the view the
// simulator judged it in: every node at the type it was opened as (the
// largest its pods may run on; for "one type", that type).
type packing struct {
	how  string
	view *simulator.View
	bins []*packed
	why  string // why it cannot be used; "" when it can
}

func (pk *packing) price() float64 {
	sum := 0.0
	for _, b := range pk.bins {
		if len(b.pods) > 0 {
			sum += b.price
		}
	}
	return sum
}

// packed is a node a packing fills.
type packed struct {
	name  string
	pods  []*corev1.Pod
	used  *framework.Resource // pods and daemonset pods
	count int
	// allowed are the catalog's options every pod of the node may run on
	// (required node affinity, node selector), as indexes, cheapest
	// first; big is the largest of them when the node was opened, as the
	// view has it.
	allowed []int
	big     *Option
	cur     int // index in the catalog of the cheapest allowed option that holds used
	price   float64
}

// asIs is the batch as VirtualNodes packed it, each claim a node.
func (s *solver) asIs(ctx context.Context) (*packing, error) {
	pk := &packing{how: "tightened", view: simulator.NewCluster(s.Nodes, s.Pods).Without()}
	of := map[string]*packed{}
	for _, c := range s.Batch {
		b, err := s.open(pk.view, c.Name, s.allowedFor(nil, c.Pods...), nil)
		if err != nil {
			return nil, err
		}
		if b == nil {
			pk.why = fmt.Sprintf("no instance type all the pods of claim %s may run on", c.Name)
			return pk, nil
		}
		pk.bins = append(pk.bins, b)
		of[c.Name] = b
		for _, pod := range c.Pods {
			if err := pk.view.Bind(pod, b.name); err != nil {
				return nil, err
			}
			b.add(pod, s.requests[pod])
		}
		if !s.resize(b) {
			pk.why = fmt.Sprintf("claim %s holds more than any instance type its pods may run on", c.Name)
			return pk, nil
		}
	}
	return pk, nil
}

// afresh packs the pods anew: those whose place other pods constrain
// first (they decide how many nodes there must be), then the others, each
// in bind order, onto the node it makes dearer by least.
func (s *solver) afresh(ctx context.Context, pods []*corev1.Pod) (*packing, error) {
	pk := &packing{how: "afresh", view: simulator.NewCluster(s.Nodes, s.Pods).Without()}
	order := slices.Clone(pods)
	slices.SortStableFunc(order, func(a, b *corev1.Pod) int { return compareBool(constrained(b), constrained(a)) })
	for _, pod := range order {
		req := s.requests[pod]
		allowed := s.allowedFor(nil, pod)
		if len(allowed) == 0 {
			pk.why = fmt.Sprintf("no instance type pod %s/%s may run on", pod.Namespace, pod.Name)
			return pk, nil
		}
		big := s.largestOf(allowed)
		fresh := s.freshUsage(big)
		addTo(fresh.used, req)
		newPrice := big.Price
		if i := nextHolding(s.catalog, allowed, 0, fresh.used, fresh.count+1); i >= 0 {
			newPrice = s.catalog[i].Price
		}
		at, err := s.placeCheapest(ctx, pk, pod, nil, newPrice)
		if err != nil {
			return nil, err
		}
		if at != nil {
			continue
		}
		b, err := s.open(pk.view, s.NewName(), allowed, nil)
		if err != nil {
			return nil, err
		}
		if _, st := s.Scheduler.PlaceAmong(ctx, pk.view, pod, []string{b.name}); !st.IsSuccess() {
			pk.why = fmt.Sprintf("pod %s/%s fits no new node of the largest type it may run on, %s: %s", pod.Namespace, pod.Name, b.big.Name, st.Message())
			return pk, nil
		}
		b.add(pod, req)
		if !s.resize(b) {
			pk.why = fmt.Sprintf("pod %s/%s fits no instance type", pod.Namespace, pod.Name)
			return pk, nil
		}
		pk.bins = append(pk.bins, b)
	}
	return pk, nil
}

// oneType packs the pods, in bind order, first fit onto nodes all of one
// instance type: the type that, filled by arithmetic alone (each pod onto
// the first node with room, every node then shrunk to the cheapest type
// that holds it), costs least, or the next of the three cheapest when the
// simulator refuses a pod a node of it. Where every node holds as many
// pods as its type allows, or a larger type costs less per resource, this
// beats growing nodes one pod at a time.
func (s *solver) oneType(ctx context.Context, pods []*corev1.Pod) (*packing, error) {
	allowed := s.allowedFor(nil, pods...)
	if len(allowed) == 0 {
		return &packing{how: "one type", why: "no instance type every pod may run on"}, nil
	}
	type estimate struct {
		i    int
		cost float64
	}
	// A bound first, from the batch's totals (the nodes of a type it
	// needs at least, by cpu, memory and pod count, at that type's
	// price); only the eight types with the lowest bound are filled.
	total := &framework.Resource{}
	for _, pod := range pods {
		addTo(total, s.requests[pod])
	}
	var bounds []estimate
	for _, i := range allowed {
		a := s.catalog[i].alloc
		if a.MilliCPU <= 0 || a.Memory <= 0 || a.AllowedPodNumber <= 0 {
			continue
		}
		n := max(math.Ceil(float64(total.MilliCPU)/float64(a.MilliCPU)), math.Ceil(float64(total.Memory)/float64(a.Memory)), math.Ceil(float64(len(pods))/float64(a.AllowedPodNumber)))
		bounds = append(bounds, estimate{i, n * s.catalog[i].Price})
	}
	slices.SortStableFunc(bounds, func(a, b estimate) int { return cmp.Compare(a.cost, b.cost) })
	var ests []estimate
	for _, bound := range bounds[:min(8, len(bounds))] {
		i := bound.i
		fresh := s.freshUsage(s.catalog[i])
		var nodes []*packed
		ok := true
		for _, pod := range pods {
			req := s.requests[pod]
			at := slices.IndexFunc(nodes, func(b *packed) bool { return nodeshape.FitsBeside(s.catalog[i].alloc, b.used, req, b.count+1) })
			if at < 0 {
				if !nodeshape.FitsBeside(s.catalog[i].alloc, fresh.used, req, fresh.count+1) {
					ok = false
					break
				}
				b := &packed{used: fresh.used.Clone(), count: fresh.count, allowed: allowed}
				nodes = append(nodes, b)
				at = len(nodes) - 1
			}
			nodes[at].add(pod, req)
		}
		if !ok {
			continue
		}
		cost := 0.0
		for _, b := range nodes {
			if !s.resize(b) {
				ok = false
				break
			}
			cost += b.price
		}
		if ok {
			ests = append(ests, estimate{i, cost})
		}
	}
	slices.SortStableFunc(ests, func(a, b estimate) int { return cmp.Compare(a.cost, b.cost) })
	why := "no instance type holds every pod"
	for _, e := range ests[:min(3, len(ests))] {
		pk, err := s.fill(ctx, pods, allowed, e.i)
		if err != nil || pk.why == "" {
			return pk, err
		}
		why = pk.why
	}
	return &packing{how: "one type", why: why}, nil
}

// fill places pods in order, first fit, onto nodes of option i, a new one
// when none with room takes the pod; then shrinks each node to the
// cheapest allowed type that holds it.
func (s *solver) fill(ctx context.Context, pods []*corev1.Pod, allowed []int, i int) (*packing, error) {
	pk := &packing{how: "one type", view: simulator.NewCluster(s.Nodes, s.Pods).Without()}
	for _, pod := range pods {
		req := s.requests[pod]
		var names []string
		for _, b := range pk.bins {
			if nodeshape.FitsBeside(s.catalog[i].alloc, b.used, req, b.count+1) {
				names = append(names, b.name)
			}
		}
		at := ""
		if len(names) > 0 {
			at, _ = s.Scheduler.PlaceAmong(ctx, pk.view, pod, names)
		}
		if at == "" {
			b, err := s.open(pk.view, s.NewName(), allowed, s.catalog[i])
			if err != nil {
				return nil, err
			}
			if _, st := s.Scheduler.PlaceAmong(ctx, pk.view, pod, []string{b.name}); !st.IsSuccess() {
				pk.why = fmt.Sprintf("pod %s/%s fits no new node of type %s: %s", pod.Namespace, pod.Name, s.catalog[i].Name, st.Message())
				return pk, nil
			}
			pk.bins = append(pk.bins, b)
			at = b.name
		}
		for _, b := range pk.bins {
			if b.name == at {
				b.add(pod, req)
			}
		}
	}
	for _, b := range pk.bins {
		if !s.resize(b) {
			pk.why = fmt.Sprintf("node %s holds more than any type", b.name)
			return pk, nil
		}
	}
	return pk, nil
}

// placeCheapest places pod on the node of pk it makes dearer by least,
// less than limit, where the simulator accepts it: room already paid for
// first, and among equal rises the node whose cpu and memory it leaves
// filled most evenly. except is left out. It returns the node, nil when
// none takes it.
func (s *solver) placeCheapest(ctx context.Context, pk *packing, pod *corev1.Pod, except *packed, limit float64) (*packed, error) {
	req := s.requests[pod]
	type cand struct {
		b         *packed
		rise      float64
		next      int
		imbalance float64
		allowed   []int
	}
	var cands []cand
	for _, b := range pk.bins {
		if b == except || len(b.pods) == 0 || !nodeshape.FitsBeside(b.big.alloc, b.used, req, b.count+1) {
			continue
		}
		after := b.used.Clone()
		addTo(after, req)
		allowed := s.allowedFor(b.allowed, pod)
		i := nextHolding(s.catalog, allowed, b.cur, after, b.count+1)
		if i < 0 {
			continue
		}
		rise := s.catalog[i].Price - b.price
		if rise > limit {
			continue
		}
		a := s.catalog[i].alloc
		imbalance := math.Abs(float64(after.MilliCPU)/float64(max(a.MilliCPU, 1)) - float64(after.Memory)/float64(max(a.Memory, 1)))
		cands = append(cands, cand{b, rise, i, imbalance, allowed})
	}
	if len(cands) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(cands, func(x, y cand) int {
		return cmp.Or(cmp.Compare(x.rise, y.rise), cmp.Compare(x.imbalance, y.imbalance))
	})
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.b.name
	}
	at, _ := s.Scheduler.PlaceAmong(ctx, pk.view, pod, names)
	for _, c := range cands {
		if c.b.name == at {
			c.b.add(pod, req)
			c.b.allowed = c.allowed
			c.b.cur, c.b.price = c.next, s.catalog[c.next].Price
			return c.b, nil
		}
	}
	return nil, nil
}

// tighten moves pods out of nodes into room other nodes have paid for:
// a node whose pods all go elsewhere is dropped, and a node that sheds
// enough of its smallest pods shrinks to a cheaper type. It repeats while
// a round saves something.
func (s *solver) tighten(ctx context.Context, pk *packing) error {
	for round := 0; round < 4; round++ {
		saved := false
		// Cheapest nodes first: they are the likeliest to empty.
		bins := slices.Clone(pk.bins)
		slices.SortStableFunc(bins, func(a, b *packed) int { return cmp.Compare(a.price, b.price) })
		for _, b := range bins {
			if len(b.pods) == 0 {
				continue
			}
			ok, err := s.shed(ctx, pk, b, b.pods)
			if err != nil {
				return err
			}
			if ok {
				saved = true
				continue
			}
			// Shrink by one price step: shed the smallest pods until
			// the rest fit the next cheaper type that could hold them.
			target := s.cheaperTarget(b)
			if target < 0 {
				continue
			}
			smallest := slices.Clone(b.pods)
			slices.SortStableFunc(smallest, func(x, y *corev1.Pod) int {
				return cmp.Or(cmp.Compare(size(s.requests[x]), size(s.requests[y])), simulator.BindOrder(x, y))
			})
			rest := b.used.Clone()
			var out []*corev1.Pod
			for _, pod := range smallest {
				if nodeshape.Fits(s.catalog[target].alloc, rest, b.count-len(out)) {
					break
				}
				sub(rest, s.requests[pod])
				out = append(out, pod)
			}
			if len(out) == len(b.pods) {
				continue // emptying it was tried above
			}
			ok, err = s.shed(ctx, pk, b, out)
			if err != nil {
				return err
			}
			saved = saved || ok
		}
		if !saved {
			return nil
		}
	}
	return nil
}

// cheaperTarget is the index of the dearest option cheaper than b's that
// holds b's daemonset pods and at least one of its pods, -1 when none.
func (s *solver) cheaperTarget(b *packed) int {
	for _, i := range slices.Backward(b.allowed) {
		if s.catalog[i].Price < b.price && s.catalog[i].alloc.AllowedPodNumber > b.count-len(b.pods) {
			return i
		}
	}
	return -1
}

// shed moves pods off b onto other nodes without making any of them
// dearer, and resizes b: whether all moved and b now costs less. When
// some cannot move, every pod moved is put back.
func (s *solver) shed(ctx context.Context, pk *packing, b *packed, pods []*corev1.Pod) (bool, error) {
	pods = slices.Clone(pods)
	type move struct {
		pod *corev1.Pod
		to  *packed
	}
	var moves []move
	undo := func() error {
		for _, m := range slices.Backward(moves) {
			if err := pk.view.Unbind(m.pod, m.to.name); err != nil {
				return err
			}
			m.to.remove(m.pod, s.requests[m.pod])
			m.to.allowed = s.allowedFor(s.allowedFor(nil), m.to.pods...)
			s.resize(m.to)
			if err := pk.view.Bind(m.pod, b.name); err != nil {
				return err
			}
			b.add(m.pod, s.requests[m.pod])
		}
		b.allowed = s.allowedFor(s.allowedFor(nil), b.pods...)
		s.resize(b)
		return nil
	}
	before := b.price
	for _, pod := range pods {
		if err := pk.view.Unbind(pod, b.name); err != nil {
			return false, err
		}
		b.remove(pod, s.requests[pod])
		to, err := s.placeCheapest(ctx, pk, pod, b, 0)
		if err != nil {
			return false, err
		}
		if to == nil {
			if err := pk.view.Bind(pod, b.name); err != nil {
				return false, err
			}
			b.add(pod, s.requests[pod])
			return false, undo()
		}
		moves = append(moves, move{pod, to})
	}
	b.allowed = s.allowedFor(s.allowedFor(nil), b.pods...)
	if !s.resize(b) || len(b.pods) > 0 && b.price >= before {
		return false, undo()
	}
	return true, nil
}

// verify replays the packing: the pods placed again in the order the
// provisioner binds them (priority, then age: the order VirtualNodes
// nominated them in), each on its node, every node at the cheapest type that holds what
// it ends with and added when its first pod is placed. It says why the
// simulator refuses the packing, "" when it accepts every placement.
func (s *solver) verify(ctx context.Context, pk *packing) (string, error) {
	view := simulator.NewCluster(s.Nodes, s.Pods).Without()
	of := map[*corev1.Pod]*packed{}
	for _, b := range pk.bins {
		for _, pod := range b.pods {
			of[pod] = b
		}
	}
	order := slices.Collect(maps.Keys(of))
	slices.SortStableFunc(order, simulator.BindOrder)
	added := map[*packed]bool{}
	for _, pod := range order {
		b := of[pod]
		if !added[b] {
			added[b] = true
			node := s.catalog[b.cur].Node(b.name)
			view.Add(node, nodeshape.ResourceSlices(b.name, s.catalog[b.cur].Devices)...)
			if s.DaemonSetPods != nil {
				for _, ds := range s.DaemonSetPods(node) {
					if err := view.Bind(ds, b.name); err != nil {
						return "", err
					}
				}
			}
		}
		if _, st := s.Scheduler.PlaceAmong(ctx, view, pod, []string{b.name}); !st.IsSuccess() {
			return fmt.Sprintf("replayed at its final type %s, node %s refuses pod %s/%s: %s", s.catalog[b.cur].Name, b.name, pod.Namespace, pod.Name, st.Message()), nil
		}
	}
	return "", nil
}

// open adds a node named name to view, of option as (the largest of the
// allowed options when nil), with its daemonset pods; nil when no option
// is allowed.
func (s *solver) open(view *simulator.View, name string, allowed []int, as *Option) (*packed, error) {
	if len(allowed) == 0 {
		return nil, nil
	}
	big := as
	if big == nil {
		big = s.largestOf(allowed)
	}
	node := big.Node(name)
	view.Add(node, nodeshape.ResourceSlices(name, big.Devices)...)
	b := &packed{name: name, used: &framework.Resource{}, allowed: allowed, big: big}
	if s.DaemonSetPods != nil {
		for _, ds := range s.DaemonSetPods(node) {
			if err := view.Bind(ds, name); err != nil {
				return nil, err
			}
			b.used.Add(resourcehelper.PodRequests(ds, resourcehelper.PodResourcesOptions{}))
			b.count++
		}
	}
	return b, nil
}

// freshUsage is what a new node of option o holds before any pod of the
// batch: its daemonset pods. The daemonsets are asked once an option; the
// caller gets its own copy to add to.
func (s *solver) freshUsage(o *Option) *packed {
	b, ok := s.fresh[o]
	if !ok {
		b = &packed{used: &framework.Resource{}}
		if s.DaemonSetPods != nil {
			for _, ds := range s.DaemonSetPods(o.probe) {
				b.used.Add(resourcehelper.PodRequests(ds, resourcehelper.PodResourcesOptions{}))
				b.count++
			}
		}
		if s.fresh == nil {
			s.fresh = map[*Option]*packed{}
		}
		s.fresh[o] = b
	}
	return &packed{used: b.used.Clone(), count: b.count}
}

// resize sets b's type to the cheapest that holds what it has: whether
// one does.
func (s *solver) resize(b *packed) bool {
	i := nextHolding(s.catalog, b.allowed, 0, b.used, b.count)
	if i < 0 {
		return false
	}
	b.cur, b.price = i, s.catalog[i].Price
	return true
}

func (b *packed) add(pod *corev1.Pod, req *framework.Resource) {
	b.pods = append(b.pods, pod)
	addTo(b.used, req)
	b.count++
}

func (b *packed) remove(pod *corev1.Pod, req *framework.Resource) {
	b.pods = slices.DeleteFunc(b.pods, func(p *corev1.Pod) bool { return p == pod })
	sub(b.used, req)
	b.count--
}

// addTo adds req to sum; sub takes it away.
func addTo(sum, req *framework.Resource) {
	sum.MilliCPU += req.MilliCPU
	sum.Memory += req.Memory
	sum.EphemeralStorage += req.EphemeralStorage
	for name, q := range req.ScalarResources {
		sum.AddScalar(name, q)
	}
}

func sub(sum, req *framework.Resource) {
	sum.MilliCPU -= req.MilliCPU
	sum.Memory -= req.Memory
	sum.EphemeralStorage -= req.EphemeralStorage
	for name, q := range req.ScalarResources {
		sum.AddScalar(name, -q)
	}
}

// size orders pods for shedding: the larger of cpu cores and memory GiB.
func size(r *framework.Resource) float64 {
	return max(float64(r.MilliCPU)/1000, float64(r.Memory)/(1<<30))
}

// nextHolding is the index in catalog (cheapest first) of the first
// allowed option, from index from on, that holds used in count pods; -1
// when none does.
func nextHolding(catalog []*Option, allowed []int, from int, used *framework.Resource, count int) int {
	for _, i := range allowed {
		if i >= from && nodeshape.Fits(catalog[i].alloc, used, count) {
			return i
		}
	}
	return -1
}

// holding are the allowed options of catalog from index from on that
// hold used in count pods, cheapest first: a bin's launch options.
func holding(catalog []*Option, allowed []int, used *framework.Resource, count, from int) []*Option {
	var out []*Option
	for _, i := range allowed {
		if i >= from && nodeshape.Fits(catalog[i].alloc, used, count) {
			out = append(out, catalog[i])
		}
	}
	return out
}

// allowedFor narrows allowed (every option of the catalog when nil) to
// the options all of pods may run on by their required node affinity and
// node selector.
func (s *solver) allowedFor(allowed []int, pods ...*corev1.Pod) []int {
	if allowed == nil {
		allowed = make([]int, len(s.catalog))
		for i := range allowed {
			allowed[i] = i
		}
	}
	var masks [][]bool
	for _, pod := range pods {
		if m := s.mask(pod); m != nil {
			masks = append(masks, m)
		}
	}
	if len(masks) == 0 {
		return allowed
	}
	return slices.DeleteFunc(slices.Clone(allowed), func(i int) bool {
		return slices.ContainsFunc(masks, func(m []bool) bool { return !m[i] })
	})
}

// mask says, per option of the catalog, whether pod may run on it; nil
// when the pod may run on any (no node selector, no required node
// affinity). Computed once a pod.
func (s *solver) mask(pod *corev1.Pod) []bool {
	if m, ok := s.masks[pod]; ok {
		return m
	}
	var m []bool
	a := pod.Spec.Affinity
	if len(pod.Spec.NodeSelector) > 0 || a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		req := nodeaffinity.GetRequiredNodeAffinity(pod)
		m = make([]bool, len(s.catalog))
		for i, o := range s.catalog {
			m[i], _ = req.Match(o.probe)
		}
	}
	if key, ok := s.pinned[pod]; ok {
		if m == nil {
			m = make([]bool, len(s.catalog))
			for i := range m {
				m[i] = true
			}
		}
		for i, o := range s.catalog {
			m[i] = m[i] && o.devices == key
		}
	}
	if s.masks == nil {
		s.masks = map[*corev1.Pod][]bool{}
	}
	s.masks[pod] = m
	return m
}

// largestOf is the largest of the allowed options.
func (s *solver) largestOf(allowed []int) *Option {
	i := slices.MaxFunc(allowed, func(x, y int) int {
		a, b := s.catalog[x].alloc, s.catalog[y].alloc
		return cmp.Or(cmp.Compare(a.MilliCPU, b.MilliCPU), cmp.Compare(a.Memory, b.Memory), cmp.Compare(a.AllowedPodNumber, b.AllowedPodNumber))
	})
	return s.catalog[i]
}

// prepare is catalog cheapest first, each option with its allocatable
// and a node to match labels against read once.
func prepare(catalog []*Option) []*Option {
	out := slices.Clone(catalog)
	for _, o := range out {
		o.probe = o.Node("repack-probe")
		o.alloc = framework.NewResource(o.probe.Status.Allocatable)
		o.devices = nodeshape.DevicesKey(o.Devices)
	}
	slices.SortStableFunc(out, func(a, b *Option) int { return cmp.Compare(a.Price, b.Price) })
	return out
}

// stableNames names each node with pods after the batch claim most of its
// pods come from, each claim name once, largest overlaps first. The rest
// keep their own name where it is a batch claim no node took, then take
// the batch claims still free in batch order, and only then a new name:
// every claim the batch already has is reused before one is made. Nodes
// left with no pod get no name (the caller skips them).
func stableNames(bins []*packed, from map[*corev1.Pod]string, batch []string, newName func() string) []string {
	type pair struct {
		bin   int
		claim string
		n     int
	}
	var pairs []pair
	for i, b := range bins {
		counts := map[string]int{}
		for _, pod := range b.pods {
			counts[from[pod]]++
		}
		for c, n := range counts {
			pairs = append(pairs, pair{i, c, n})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.bin, b.bin), cmp.Compare(a.claim, b.claim))
	})
	names := make([]string, len(bins))
	used := map[string]bool{}
	for _, pr := range pairs {
		if names[pr.bin] == "" && !used[pr.claim] {
			names[pr.bin], used[pr.claim] = pr.claim, true
		}
	}
	isBatch := map[string]bool{}
	for _, c := range batch {
		isBatch[c] = true
	}
	for i, b := range bins {
		if names[i] == "" && len(b.pods) > 0 && isBatch[b.name] && !used[b.name] {
			names[i], used[b.name] = b.name, true
		}
	}
	spare := slices.DeleteFunc(slices.Clone(batch), func(c string) bool { return used[c] })
	for i, b := range bins {
		if names[i] != "" || len(b.pods) == 0 {
			continue
		}
		if len(spare) > 0 {
			names[i], spare = spare[0], spare[1:]
		} else {
			names[i] = newName()
		}
		used[names[i]] = true
	}
	return names
}

// constrained says whether where the pod may go depends on other pods:
// required pod affinity or anti-affinity, or a topology spread constraint
// that must hold.
func constrained(pod *corev1.Pod) bool {
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
		if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	return slices.ContainsFunc(pod.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.WhenUnsatisfiable == corev1.DoNotSchedule
	})
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
