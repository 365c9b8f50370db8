package disruption

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/cluster/bufferroom"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/simulator"
)

// Underutilized is the reason consolidation disrupts a node under.
const Underutilized = v1alpha1.DisruptionReasonUnderutilized

// Consolidation removes nodes of pools with consolidationPolicy
// WhenEmptyOrUnderutilized whose pods the scheduler would place on the
// rest of the cluster: several nodes at once when their pods fit
// elsewhere together, else one. Unlike the other methods it decides over
// the whole cluster, not one claim at a time, so it runs in rounds
// (Start) rather than per claim; its decisions are carried out by the
// Executor, as every method's are.
//
// Every pod it would evict is placed first by simulator.Scheduler, with
// the scheduler profile's own Filter and Score plugins, on the cluster
// without the nodes: a pod the scheduler would leave pending keeps its
// node. Soft preferences (preferred affinity, ScheduleAnyway spread) are
// scores, so they never keep a node; hard constraints always do.
type Consolidation struct {
	exec  *Executor
	cache client.Reader // decisions are made on the cache...
	live  client.Reader // ...and checked again on the API server's state
	sched *simulator.Scheduler
	now   func() time.Time

	// Interval between rounds.
	Interval time.Duration
	// Pause between tainting the chosen nodes and the last look at live
	// state: a pod the scheduler was binding there when they were chosen
	// shows up by then, and calls the decision off.
	Pause time.Duration
	// MaxCandidates bounds the multi-node search: the cheapest to disrupt
	// this many candidates are tried together.
	MaxCandidates int
	// Timeout bounds one round's search; candidates not reached are tried
	// in the next round.
	Timeout time.Duration
	// KeepBufferRoom: the ready CapacityBuffers' chunks must all still
	// have room once a node's pods are placed elsewhere, or the node is
	// kept. Their room counts as needed, but no real pod is ever moved to
	// make it: a node is kept, never drained, for a chunk.
	KeepBufferRoom bool

	stable  map[string]stability // node → its pods and since when
	blocked map[types.UID]string // claim → why it was last not consolidated, for Events
}

// stability is a node's set of pods and since when it has not changed.
type stability struct {
	pods  string
	since time.Time
}

// NewConsolidation returns the consolidation method of c's pools; sched
// places pods as the scheduler would.
func NewConsolidation(exec *Executor, cache, live client.Reader, sched *simulator.Scheduler, now func() time.Time) *Consolidation {
	return &Consolidation{exec: exec, cache: cache, live: live, sched: sched, now: now,
		Interval: 10 * time.Second, Pause: 5 * time.Second, MaxCandidates: 100, Timeout: 20 * time.Second,
		stable: map[string]stability{}, blocked: map[types.UID]string{}}
}

// Start runs rounds until ctx ends; only the leader runs it.
func (k *Consolidation) Start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("consolidation"))
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := k.Round(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Consolidation round failed")
		}
	}, k.Interval)
	return nil
}

// Round looks for nodes to consolidate and, on finding some, disrupts them.
func (k *Consolidation) Round(ctx context.Context) error {
	d, err := k.nextDecision(ctx)
	if err != nil || d == nil {
		return err
	}
	return k.execute(ctx, d)
}

// nextDecision reads the cache and decides, or finds nothing to do.
func (k *Consolidation) nextDecision(ctx context.Context) (*decision, error) {
	start := time.Now()
	s, err := k.observe(ctx, k.cache)
	if err != nil {
		return nil, err
	}
	if why := s.unsettled(); why != "" {
		klog.FromContext(ctx).V(3).Info("Not consolidating: the cluster is changing", "why", why)
		return nil, nil
	}
	d := k.decide(ctx, s, k.candidates(ctx, s))
	metrics.DisruptionDecisionDuration.WithLabelValues(string(Underutilized)).Observe(time.Since(start).Seconds())
	return d, nil
}

// candidate is a node consolidation may remove.
type candidate struct {
	claim *v1alpha1.NodeClaim
	node  *corev1.Node
	pool  *v1alpha1.NodePool
	pods  []*corev1.Pod // to move, in the scheduler's queue order
	price float64       // $/h; 0 when the catalog does not say
	offer string        // "c7.2xlarge spot in zone-a ($0.17/h)"
}

// decision is the nodes to remove together, and why.
type decision struct {
	nodes []*candidate
	why   string
	// placed: where the scheduler would put each of their pods.
	placed map[types.UID]string
	// replacement, for one node whose pods need a cheaper new node.
	replacement *replacement
}

func (d *decision) names() []string {
	out := make([]string, len(d.nodes))
	for i, c := range d.nodes {
		out[i] = c.node.Name
	}
	return out
}

func (d *decision) savings() float64 {
	var s float64
	for _, c := range d.nodes {
		s += c.price
	}
	return s
}

// candidates are the nodes consolidation may remove now, cheapest to
// disrupt first: fewest pods, then the most expensive.
func (k *Consolidation) candidates(ctx context.Context, s *state) []*candidate {
	now := k.now()
	var out []*candidate
	seen := map[string]bool{}
	prices := map[string][]v1alpha1.InstanceType{}
	for _, nc := range s.claims {
		node := s.nodes[nc.Status.NodeName]
		if node == nil || nc.Status.Phase != v1alpha1.NodeClaimInitialized || isDisrupting(nc) || k.exec.Busy(nc.UID) || k.exec.BackedOff(nc.UID, Underutilized) > 0 {
			continue // in a command, or not a node yet
		}
		seen[node.Name] = true
		pods := s.onNode[node.Name]
		fp := fingerprint(pods)
		st, ok := k.stable[node.Name]
		if !ok || st.pods != fp {
			st = stability{pods: fp, since: now}
			k.stable[node.Name] = st
		}
		pool := s.pools[nc.Spec.NodePool]
		// A fixed-size pool keeps its count whatever its nodes run.
		if pool == nil || pool.Fixed() || pool.Spec.Disruption.ConsolidationPolicy != v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized {
			continue
		}
		after, ok, err := pool.Spec.Disruption.ConsolidateAfter.Duration()
		if err != nil || !ok || now.Sub(st.since) < after {
			continue
		}
		if slices.ContainsFunc(node.Spec.Taints, isDisruptedTaint) {
			continue
		}
		if held, why, _ := cluster.RequestHolds(ctx, k.cache, nc); held {
			k.unconsolidatable(ctx, nc, why)
			continue
		}
		movable, why := k.movable(nc, node, pods, s)
		if why != "" {
			k.unconsolidatable(ctx, nc, why)
			continue
		}
		if len(movable) == 0 {
			continue // empty: Emptiness's to remove
		}
		if _, ok := prices[pool.Name]; !ok {
			types, err := cluster.InstanceTypesOf(ctx, k.cache, pool.Name)
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Reading the catalog failed", "nodePool", pool.Name, "err", err)
			}
			prices[pool.Name] = types
		}
		price := priceOf(prices[pool.Name], nc)
		out = append(out, &candidate{claim: nc, node: node, pool: pool, pods: movable, price: price,
			offer: fmt.Sprintf("%s %s in %s ($%.4f/h)", nc.Status.InstanceType, nc.Status.CapacityType, nc.Status.Zone, price)})
	}
	for name := range k.stable {
		if !seen[name] {
			delete(k.stable, name)
		}
	}
	slices.SortFunc(out, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(len(a.pods), len(b.pods)), cmp.Compare(b.price, a.price), cmp.Compare(a.node.Name, b.node.Name))
	})
	return out
}

// movable returns the node's pods that would have to move, in the order
// the scheduler's queue would take them (priority, then age), or why the
// node must not be consolidated.
func (k *Consolidation) movable(nc *v1alpha1.NodeClaim, node *corev1.Node, pods []*corev1.Pod, s *state) ([]*corev1.Pod, string) {
	if k := v1alpha1.DoNotDisrupt(nc.Annotations); k != "" {
		return nil, "the NodeClaim has " + k + "=true"
	}
	if k := v1alpha1.DoNotDisrupt(node.Annotations); k != "" {
		return nil, "the node has " + k + "=true"
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if cluster.OwnedByDaemonSet(p) || cluster.IsMirror(p) {
			continue
		}
		if k := v1alpha1.DoNotDisrupt(p.Annotations); k != "" {
			return nil, fmt.Sprintf("pod %s has %s=true", klog.KObj(p), k)
		}
		if g := p.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
			// Evicted, it would wait for its gang's group cycle, which
			// binds no part of a group: the gang would run in part.
			return nil, fmt.Sprintf("pod %s belongs to PodGroup %s/%s, which consolidation does not move", klog.KObj(p), p.Namespace, *g.PodGroupName)
		}
		if metav1.GetControllerOf(p) == nil {
			return nil, fmt.Sprintf("pod %s has no controller: evicting it would delete it for good", klog.KObj(p))
		}
		out = append(out, p)
	}
	if why := s.pdbsRefuse(out); why != "" {
		return nil, why
	}
	slices.SortStableFunc(out, simulator.BindOrder)
	return out, ""
}

// decide finds the nodes to remove: first the most nodes at once among
// the MaxCandidates cheapest to disrupt (their pods placed together), then
// any single node, within the pools' budgets and the round's Timeout.
func (k *Consolidation) decide(ctx context.Context, s *state, cands []*candidate) *decision {
	if len(cands) == 0 {
		return nil
	}
	deadline := k.now().Add(k.Timeout)
	room := map[string]int{}
	for _, c := range cands {
		if _, ok := room[c.pool.Name]; !ok {
			room[c.pool.Name] = s.budgetRoom(c.pool, k.now())
		}
	}
	var multi []*candidate
	left := maps.Clone(room)
	for _, c := range cands {
		if len(multi) < k.MaxCandidates && left[c.pool.Name] > 0 {
			left[c.pool.Name]--
			multi = append(multi, c)
		}
	}
	// The largest prefix whose pods all fit elsewhere, by bisection: a
	// prefix that fits usually means every shorter one does.
	best := 0
	for lo, hi := 2, len(multi); lo <= hi && k.now().Before(deadline); {
		mid := (lo + hi) / 2
		if _, _, ok := k.fits(ctx, s, multi[:mid]); ok {
			best, lo = mid, mid+1
		} else {
			hi = mid - 1
		}
	}
	// The search placed pods first-fit; the prefix found is simulated in
	// full (Filter and Score) before it is a decision.
	if placed := map[types.UID]string{}; best >= 2 {
		if _, _, ok := k.place(ctx, s, multi[:best], k.sched.Place, placed); ok {
			d := &decision{nodes: multi[:best], placed: placed}
			d.why = fmt.Sprintf("the pods of %d nodes fit on the other nodes, saves $%.4f/h", best, d.savings())
			return d
		}
	}
	// Then any single node: deleted if its pods fit elsewhere, else
	// replaced by a cheaper node if one holds them; a deletion anywhere
	// saves more than a replacement, so all are tried first.
	var keep []*candidate
	var nofit []string
	for _, c := range cands {
		if room[c.pool.Name] <= 0 {
			continue
		}
		if k.now().After(deadline) {
			klog.FromContext(ctx).V(2).Info("Consolidation round out of time; the rest next round", "timeout", k.Timeout)
			return nil
		}
		pod, st, ok := k.fits(ctx, s, []*candidate{c})
		placed := map[types.UID]string{}
		if ok {
			pod, st, ok = k.place(ctx, s, []*candidate{c}, k.sched.Place, placed)
		}
		if ok {
			delete(k.blocked, c.claim.UID)
			return &decision{nodes: []*candidate{c}, placed: placed, why: fmt.Sprintf("deleting %s: %s on the other nodes, saves $%.4f/h", c.offer, podsFit(len(c.pods)), c.price)}
		}
		if pod != nil && nodeshape.IsBufferPod(pod) {
			// Kept for a buffer's room: no replacement either, which
			// would move real pods to a node without that room.
			k.unconsolidatable(ctx, c.claim, sayWhy(st))
			continue
		}
		keep = append(keep, c)
		nofit = append(nofit, fmt.Sprintf("pod %s fits no other node: %s", klog.KObj(pod), sayWhy(st)))
	}
	// Then several nodes of one pool into one cheaper new node.
	if d := k.merge(ctx, s, cands, room, deadline); d != nil {
		return d
	}
	return k.replaceOne(ctx, s, keep, nofit, deadline)
}

// replaceOne looks, node by node among keep (whose pods fit nowhere
// else, nofit saying why), for one a cheaper new node can replace.
func (k *Consolidation) replaceOne(ctx context.Context, s *state, keep []*candidate, nofit []string, deadline time.Time) *decision {
	for i, c := range keep {
		if k.exec.replacer == nil || c.price == 0 {
			k.unconsolidatable(ctx, c.claim, nofit[i])
			continue
		}
		if why := k.bufferShort(ctx, s, []*candidate{c}); why != "" {
			k.unconsolidatable(ctx, c.claim, nofit[i]+"; and replacing it "+why)
			continue
		}
		if k.now().After(deadline) {
			klog.FromContext(ctx).V(2).Info("Consolidation round out of time; the rest next round", "timeout", k.Timeout)
			return nil
		}
		rep, why, err := k.exec.replacer.plan(ctx, s, []*candidate{c}, cheaperThan([]*candidate{c}))
		if err == nil && rep != nil {
			why = tooFewSpotOptions(rep)
		}
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Planning a replacement failed", "node", c.node.Name, "err", err)
		case rep != nil && why == "":
			delete(k.blocked, c.claim.UID)
			return &decision{nodes: []*candidate{c}, placed: placedByUID(c.pods, rep.placed), replacement: rep,
				why: replacingWhy([]*candidate{c}, rep)}
		case rep == nil && why == "":
			// Fits after all, placed as the scheduler scores: the
			// deletion is found next round.
		default:
			k.unconsolidatable(ctx, c.claim, nofit[i]+"; and no cheaper node holds its pods: "+why)
		}
	}
	return nil
}

// replacingWhy: "replacing c7.2xlarge spot in zone-a ($0.1700/h) with
// c7.large spot in zone-a ($0.0500/h), saves $0.1200/h"; several nodes:
// "replacing 3 nodes ($0.5100/h) with …".
func replacingWhy(cands []*candidate, rep *replacement) string {
	what, total := cands[0].offer, cands[0].price
	if len(cands) > 1 {
		total = 0
		for _, c := range cands {
			total += c.price
		}
		what = fmt.Sprintf("%d nodes ($%.4f/h)", len(cands), total)
	}
	return fmt.Sprintf("replacing %s with %s, saves $%.4f/h", what, rep.offer, total-rep.price)
}

// maxMerged bounds how many nodes consolidation tries to replace with one.
const maxMerged = 10

// merge looks, pool by pool, for the most of the pool's first maxMerged
// candidates (by bisection, as for deletion) whose pods one cheaper new
// node holds with the rest of the cluster.
func (k *Consolidation) merge(ctx context.Context, s *state, cands []*candidate, room map[string]int, deadline time.Time) *decision {
	if k.exec.replacer == nil {
		return nil
	}
	byPool := map[string][]*candidate{}
	var pools []string
	for _, c := range cands {
		if c.price == 0 || len(byPool[c.pool.Name]) >= min(maxMerged, room[c.pool.Name]) {
			continue
		}
		if _, ok := byPool[c.pool.Name]; !ok {
			pools = append(pools, c.pool.Name)
		}
		byPool[c.pool.Name] = append(byPool[c.pool.Name], c)
	}
	for _, name := range pools {
		group := byPool[name]
		var best []*candidate
		var bestRep *replacement
		for lo, hi := 2, len(group); lo <= hi && k.now().Before(deadline); {
			mid := (lo + hi) / 2
			var pods []*corev1.Pod
			for _, c := range group[:mid] {
				pods = append(pods, c.pods...)
			}
			if s.pdbsRefuse(pods) != "" || k.bufferShort(ctx, s, group[:mid]) != "" {
				hi = mid - 1
				continue
			}
			rep, why, err := k.exec.replacer.plan(ctx, s, group[:mid], cheaperThan(group[:mid]))
			if err == nil && rep != nil && why == "" && tooFewSpotOptions(rep) == "" {
				best, bestRep, lo = group[:mid], rep, mid+1
			} else {
				hi = mid - 1
			}
		}
		if bestRep != nil {
			var pods []*corev1.Pod
			for _, c := range best {
				pods = append(pods, c.pods...)
				delete(k.blocked, c.claim.UID)
			}
			return &decision{nodes: best, placed: placedByUID(pods, bestRep.placed), replacement: bestRep, why: replacingWhy(best, bestRep)}
		}
	}
	return nil
}

// placedByUID keys a plan's placements (namespace/name) by pod UID.
func placedByUID(pods []*corev1.Pod, placed map[string]string) map[types.UID]string {
	out := make(map[types.UID]string, len(pods))
	for _, p := range pods {
		out[p.UID] = placed[p.Namespace+"/"+p.Name]
	}
	return out
}

// simulate places the pods of cands, in queue order, on the cluster
// without their nodes (and, several nodes at once, only if their PDBs
// allow evicting them all); on failure it returns the first pod that does not
// fit and the scheduler's reason.
func (k *Consolidation) simulate(ctx context.Context, s *state, cands []*candidate) (*corev1.Pod, *fwk.Status, bool) {
	return k.place(ctx, s, cands, k.sched.Place, nil)
}

// fits is simulate with the first node that fits each pod rather than
// the one the scheduler would score best: quicker, for the search; the
// decision found is then simulated in full.
func (k *Consolidation) fits(ctx context.Context, s *state, cands []*candidate) (*corev1.Pod, *fwk.Status, bool) {
	return k.place(ctx, s, cands, k.sched.PlaceAny, nil)
}

func (k *Consolidation) place(ctx context.Context, s *state, cands []*candidate, place func(context.Context, *simulator.View, *corev1.Pod) (string, *fwk.Status), placed map[types.UID]string) (*corev1.Pod, *fwk.Status, bool) {
	names := make([]string, len(cands))
	var pods []*corev1.Pod
	for i, c := range cands {
		names[i] = c.node.Name
		pods = append(pods, c.pods...)
	}
	if len(cands) > 1 && s.pdbsRefuse(pods) != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, s.pdbsRefuse(pods)), false
	}
	slices.SortStableFunc(pods, simulator.BindOrder)
	// The nodes stay in the view, empty and tainted, as the scheduler sees
	// them while they are drained: a spread constraint still counts their
	// zones, and a pod that needs one of them would be left pending (and
	// provisioned for) until they are gone.
	view := s.cluster().Draining(disruptedTaint, names...)
	for _, p := range pods {
		node, st := place(ctx, view, p)
		if st.IsSuccess() && view.IsDraining(node) {
			// A pod that tolerates the taint goes back to a node being
			// removed, and is left without one when it goes.
			st = fwk.NewStatus(fwk.Unschedulable, "it tolerates the disruption taint and would be placed back on node "+node+", which is being removed")
		}
		if !st.IsSuccess() {
			return p, st, false
		}
		if placed != nil {
			placed[p.UID] = node
		}
	}
	if short, st, ok := bufferroom.Room(ctx, k.sched, view, s.buffers); !ok {
		return bufferPod(s.buffers, short), fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("removing it leaves CapacityBuffer %s's chunks without room (%s)", short, sayWhy(st))), false
	}
	return nil, nil, true
}

// bufferShort says why removing the nodes of cands for a replacement
// would leave a ready buffer's chunk without room: the chunks are placed
// on the cluster without those nodes, their pods gone to the new node,
// whose own room is not counted (it is sized for the pods).
func (k *Consolidation) bufferShort(ctx context.Context, s *state, cands []*candidate) string {
	if len(s.buffers) == 0 {
		return ""
	}
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.node.Name
	}
	if short, st, ok := bufferroom.Room(ctx, k.sched, s.cluster().Draining(disruptedTaint, names...), s.buffers); !ok {
		return fmt.Sprintf("leaves CapacityBuffer %s's chunks without room (%s)", short, sayWhy(st))
	}
	return ""
}

// observe is the package's observe, with the ready CapacityBuffers'
// chunks read from the cache when KeepBufferRoom.
func (k *Consolidation) observe(ctx context.Context, r client.Reader) (*state, error) {
	s, err := observe(ctx, r)
	if err != nil || !k.KeepBufferRoom {
		return s, err
	}
	s.buffers, err = bufferroom.Ready(ctx, k.cache)
	return s, err
}

// bufferPod is the first chunk of the named buffer.
func bufferPod(buffers []bufferroom.Chunks, key types.NamespacedName) *corev1.Pod {
	for _, b := range buffers {
		if b.Buffer == key && len(b.Pods) > 0 {
			return b.Pods[0]
		}
	}
	return nil
}

func podsFit(n int) string {
	if n == 1 {
		return "its pod fits"
	}
	return fmt.Sprintf("its %d pods fit", n)
}

// sayWhy says in a sentence which plugin refused and why.
func sayWhy(st *fwk.Status) string {
	if st == nil {
		return "no reason given"
	}
	msg := strings.Join(st.Reasons(), "; ")
	if err := st.AsError(); msg == "" && err != nil {
		msg = err.Error()
	}
	if st.Plugin() != "" {
		return st.Plugin() + ": " + msg
	}
	return msg
}

// unconsolidatable records, once per reason, why a node is kept.
func (k *Consolidation) unconsolidatable(ctx context.Context, nc *v1alpha1.NodeClaim, why string) {
	if k.blocked[nc.UID] == why {
		return
	}
	k.blocked[nc.UID] = why
	klog.FromContext(ctx).V(1).Info("Not consolidating node", "node", nc.Status.NodeName, "nodeClaim", klog.KObj(nc), "why", why)
	if k.exec.recorder != nil {
		k.exec.recorder.Eventf(nc, nil, corev1.EventTypeNormal, v1alpha1.ReasonUnconsolidatable, string(Underutilized), "node %s: %s", nc.Status.NodeName, why)
	}
}

// execute hands the decision to the executor: budgets reserved, nodes
// tainted, a pause, then the last look at live state (stillFits); any pod
// bound or nominated to them meanwhile, or a pod that no longer fits
// elsewhere, calls it off.
func (k *Consolidation) execute(ctx context.Context, d *decision) error {
	var rep *replacement
	cmd := &Command{Reason: Underutilized, Why: d.why, Budgeted: true, Voluntary: true, Pause: k.Pause}
	for _, c := range d.nodes {
		why := fmt.Sprintf("%s; %s", c.offer, d.why)
		if len(d.nodes) == 1 {
			why = d.why
		}
		cmd.Targets = append(cmd.Targets, Target{Claim: c.claim, Pool: c.pool, Why: why})
	}
	cmd.Check = func(ctx context.Context) (string, error) {
		why, r, err := k.stillFits(ctx, d)
		rep = r
		return why, err
	}
	cmd.Replacement = func(ctx context.Context) (*replacement, string, error) {
		if rep == nil {
			return nil, "", nil
		}
		// Planned again on the API server's state: the offer may differ.
		cmd.Why = replacingWhy(d.nodes, rep)
		for i := range cmd.Targets {
			cmd.Targets[i].Why = ""
		}
		klog.FromContext(ctx).Info("Consolidating by replacement", "reason", Underutilized, "nodes", d.names(), "why", cmd.Why)
		return rep, "", nil
	}
	cmd.OnDone = func(rep *replacement) { saved(d, rep) }
	_, err := k.exec.Run(ctx, cmd)
	return ignoreGoing(err)
}

// saved counts what a carried-out decision saves per hour: each node's
// price under its own pool when they are deleted; their price less the
// replacement's, under their one pool, when they are replaced.
func saved(d *decision, rep *replacement) {
	if rep == nil {
		for _, c := range d.nodes {
			metrics.DisruptionSavings.WithLabelValues(c.pool.Name, string(Underutilized)).Add(c.price)
		}
		return
	}
	metrics.DisruptionSavings.WithLabelValues(d.nodes[0].pool.Name, string(Underutilized)).Add(d.savings() - rep.price)
}

// stillFits looks at the API server's state, not the cache: the decided
// nodes run exactly the pods decided on (none bound or nominated since),
// and those pods still all fit on the rest of the cluster as it is now,
// or, for a replacement, on the rest and a cheaper new node (which it
// returns, planned again on this state).
func (k *Consolidation) stillFits(ctx context.Context, d *decision) (string, *replacement, error) {
	s, err := k.observe(ctx, k.live)
	if err != nil {
		return "", nil, err
	}
	var fresh []*candidate
	for _, c := range d.nodes {
		decided := map[types.UID]bool{}
		for _, p := range c.pods {
			decided[p.UID] = true
		}
		for _, p := range s.onNode[c.node.Name] {
			if !cluster.OwnedByDaemonSet(p) && !cluster.IsMirror(p) && !decided[p.UID] {
				return fmt.Sprintf("pod %s was bound or nominated to node %s", klog.KObj(p), c.node.Name), nil, nil
			}
			if k := v1alpha1.DoNotDisrupt(p.Annotations); k != "" {
				return fmt.Sprintf("pod %s was annotated %s=true", klog.KObj(p), k), nil, nil
			}
		}
		node := s.nodes[c.node.Name]
		if node == nil {
			return "node " + c.node.Name + " is gone", nil, nil
		}
		if k := v1alpha1.DoNotDisrupt(node.Annotations); k != "" {
			return "node " + c.node.Name + " was annotated " + k + "=true", nil, nil
		}
		cp := *c
		cp.node = node
		cp.pods = slices.DeleteFunc(slices.Clone(s.onNode[c.node.Name]), func(p *corev1.Pod) bool { return cluster.OwnedByDaemonSet(p) || cluster.IsMirror(p) })
		if why := s.pdbsRefuse(cp.pods); why != "" {
			return why, nil, nil
		}
		slices.SortStableFunc(cp.pods, simulator.BindOrder)
		fresh = append(fresh, &cp)
	}
	if d.replacement != nil {
		var pods []*corev1.Pod
		for _, c := range fresh {
			pods = append(pods, c.pods...)
		}
		if why := s.pdbsRefuse(pods); why != "" {
			return why, nil, nil
		}
		rep, why, err := k.exec.replacer.plan(ctx, s, fresh, cheaperThan(fresh))
		if err == nil && rep != nil {
			why = tooFewSpotOptions(rep)
		}
		if err != nil || why != "" {
			return cmp.Or(why, "no replacement"), nil, err
		}
		if rep == nil {
			// Every pod fits elsewhere now: deleting is cheaper still.
			return "", nil, nil
		}
		return "", rep, nil
	}
	if pod, st, ok := k.simulate(ctx, s, fresh); !ok {
		if nodeshape.IsBufferPod(pod) {
			return sayWhy(st), nil, nil
		}
		return fmt.Sprintf("pod %s no longer fits elsewhere: %s", klog.KObj(pod), sayWhy(st)), nil, nil
	}
	return "", nil, nil
}

// fingerprint names a node's pods, to tell when a pod came or went.
func fingerprint(pods []*corev1.Pod) string {
	uids := make([]string, 0, len(pods))
	for _, p := range pods {
		if !cluster.OwnedByDaemonSet(p) {
			uids = append(uids, string(p.UID))
		}
	}
	slices.Sort(uids)
	return strings.Join(uids, ",")
}

// priceOf is the catalog's price of the claim's offering, 0 if the
// catalog no longer lists it.
func priceOf(types []v1alpha1.InstanceType, nc *v1alpha1.NodeClaim) float64 {
	for _, it := range types {
		if it.Name != nc.Status.InstanceType {
			continue
		}
		for _, o := range it.Offerings {
			if o.Zone == nc.Status.Zone && string(o.CapacityType) == nc.Status.CapacityType {
				price, _ := strconv.ParseFloat(o.Price, 64)
				return price
			}
		}
	}
	return 0
}
