package disruption

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/simulator"
)

// Replacement capacity is launched before a node is drained, when the
// node's pods need it: the pods of a node being disrupted are placed
// first on the rest of the cluster, as the scheduler would place them
// (simulator.Scheduler); when some fit nowhere, a new NodeClaim of the
// pool's current template is made for them, and the node is drained only
// once that claim is Initialized. The old claim names its replacement
// (AnnotationReplacement) before the replacement is created, so a
// provisioner restarted in between picks up where it was: a replacement
// it cannot find is given up, and the node keeps running.
//
// Which new node: for each zone, capacity type and architecture the pool
// offers, the cheapest instance type that holds the pods that fit
// nowhere, with the daemonsets that would run there, is tried by placing
// every pod of the old node on the cluster with that node added. The
// cheapest that takes them all wins; the claim carries, as options, every
// instance type of that zone and capacity type that holds what was placed
// on it, so that the launch can fall back when the cheapest has no
// capacity.

// MinSpotOptions is how many instance types a spot replacement made to
// save money must be able to launch as, each cheaper than the node it
// replaces; with fewer, consolidation keeps the spot node. A replacement
// that could only become the one or two cheapest spot types would chase
// the offering most likely to be interrupted next, and be replaced again
// when it is. Karpenter applies the same rule with the same number (its
// documentation on spot-to-spot consolidation).
const MinSpotOptions = 15

// maxReplacementTries bounds the full simulations one replacement plan
// runs: one per zone, capacity type and architecture, cheapest first.
const maxReplacementTries = 8

// replacementWait is how often a claim waiting for its replacement looks
// at it; the replacement's progress does not enqueue the old claim.
const replacementWait = 2 * time.Second

// Replacer plans replacement capacity with the scheduler's own plugins.
type Replacer struct {
	cache  client.Reader
	live   client.Reader // the API server, for a replacement not yet in the cache
	sched  *simulator.Scheduler
	limits *limits.Ledger // the launches' own ledger: what a pool uses, launches in flight included
}

// NewReplacer returns a Replacer that reads the cluster from cache, places
// pods with sched, and keeps replacements within the pools' limits as
// ledger counts them (the NodeClaim controller's, which refuses launches
// past them).
func NewReplacer(cache, live client.Reader, sched *simulator.Scheduler, ledger *limits.Ledger) *Replacer {
	return &Replacer{cache: cache, live: live, sched: sched, limits: ledger}
}

// replacement is a NodeClaim to launch for the pods of a node that goes.
type replacement struct {
	claim *v1alpha1.NodeClaim
	// offer is the cheapest option, for Events: "c7.large spot in zone-a ($0.0500/h)".
	offer   string
	price   float64
	options int
	// placed: where the scheduler would put each pod of the old node,
	// the replacement's name for those it takes.
	placed map[string]string
	// unmet: which of the pool's minValues its options do not keep.
	unmet string
}

// describe: "nodeclaim p-x2k9f (3 instance type options)".
func (r *replacement) describe() string {
	options := "options"
	if r.options == 1 {
		options = "option"
	}
	return fmt.Sprintf("nodeclaim %s (%d instance type %s)", r.claim.Name, r.options, options)
}

// offerFilter says whether an offer may be the replacement's.
type offerFilter func(nodeshape.Offer) bool

// plan decides whether the pods of cands (nodes of one pool) need a
// replacement and, if so, which: one new node of the pool for them all.
// It returns nil, "" when they all fit on the rest of the cluster; nil and
// why not when no offer of the pool (that accept allows) takes them.
func (r *Replacer) plan(ctx context.Context, s *state, cands []*candidate, accept offerFilter) (*replacement, string, error) {
	c := cands[0]
	names := make([]string, len(cands))
	var pods []*corev1.Pod
	for i, c := range cands {
		names[i] = c.node.Name
		pods = append(pods, c.pods...)
	}
	slices.SortStableFunc(pods, simulator.BindOrder)
	need := r.fitNowhereElse(ctx, s, names, pods)
	if len(need) == 0 {
		return nil, "", nil
	}
	template := nodeshape.ForPool(c.pool)
	offers, full, err := r.offersFor(ctx, c.pool, template, accept)
	if err != nil {
		return nil, "", err
	}
	if full != "" {
		return nil, full, nil
	}
	dss, err := r.daemonSets(ctx)
	if err != nil {
		return nil, "", err
	}
	name := newReplacementName(c.pool.Name)
	// The cheapest offer of each group that holds what fits nowhere else.
	tried := map[nodeshape.Group]bool{}
	var why string
	for _, o := range offers {
		group := o.Group()
		if tried[group] {
			continue
		}
		node := template.Node(name, &o.InstanceType, o.Zone, o.CapacityType)
		ds := simulator.DaemonSetPods(dss, node)
		if !holds(node, slices.Concat(ds, need)) {
			continue
		}
		tried[group] = true
		if len(tried) > maxReplacementTries {
			break
		}
		placed, onNew, unfit, err := r.placeBeside(ctx, s, names, o, node, ds, pods)
		if err != nil {
			return nil, "", err
		}
		if unfit != "" {
			why = unfit
			continue
		}
		if len(onNew) == 0 {
			// Scored elsewhere once the first pass had placed others:
			// every pod fits without the new node after all.
			return nil, "", nil
		}
		rep := r.claimFor(cands, template, name, o, offers, slices.Concat(ds, onNew))
		if rep.unmet != "" {
			why = rep.unmet
			continue
		}
		rep.placed = placed
		return rep, "", nil
	}
	if why == "" {
		why = fmt.Sprintf("no instance type of nodepool %s holds pod %s with the daemonsets that would run beside it", c.pool.Name, klog.KObj(need[0]))
	}
	return nil, why, nil
}

// fitNowhereElse returns those of pods that the scheduler places nowhere
// but on the nodes named, which are being replaced.
func (r *Replacer) fitNowhereElse(ctx context.Context, s *state, names []string, pods []*corev1.Pod) []*corev1.Pod {
	// The nodes replaced stay in the view, empty and tainted, as the
	// scheduler sees them while they are drained (consolidation's place
	// does the same): a zone spread still counts their zones.
	view := s.cluster().Draining(disruptedTaint, names...)
	var need []*corev1.Pod
	for _, p := range pods {
		if to, st := r.sched.Place(ctx, view, p); !st.IsSuccess() || view.IsDraining(to) {
			need = append(need, p)
		}
	}
	return need
}

// offersFor returns the offers of pool that accept allows (all when it is
// nil) and that fit under the pool's limits, or why none fits there.
func (r *Replacer) offersFor(ctx context.Context, pool *v1alpha1.NodePool, template nodeshape.Template, accept offerFilter) ([]nodeshape.Offer, string, error) {
	types, err := cluster.InstanceTypesOf(ctx, r.cache, pool.Name)
	if err != nil {
		return nil, "", err
	}
	offers, err := nodeshape.Offers(template, types, pool.Spec.Template.Spec.Requirements)
	if err != nil {
		return nil, "", err
	}
	if accept != nil {
		offers = slices.DeleteFunc(offers, func(o nodeshape.Offer) bool { return !accept(o) })
	}
	// The replacement runs beside the nodes it replaces until they are
	// drained: it must fit under the pool's limits with them counted, or
	// the launch would be refused, the nodes untainted, and chosen again.
	if limits := pool.Spec.Limits; len(limits) > 0 && len(offers) > 0 {
		used, err := r.limits.Usage(ctx, pool.Name)
		if err != nil {
			return nil, "", err
		}
		within := slices.DeleteFunc(slices.Clone(offers), func(o nodeshape.Offer) bool {
			return !nodeshape.WithinLimits(limits, used, o.InstanceType.Capacity)
		})
		if len(within) == 0 {
			return nil, "nodepool " + pool.Name + "'s limits leave no room for a replacement beside the node: " + nodeshape.ExceedsLimits(limits, used, offers[0].InstanceType.Capacity, offers[0].InstanceType.Name), nil
		}
		offers = within
	}
	return offers, "", nil
}

// placeBeside places pods on s's cluster with node, the replacement of
// offer o, added (with the ResourceSlices its type's DRA drivers will
// publish) and its daemonset pods ds bound to it, and the nodes named
// draining. It returns where each pod went (by namespace/name) and
// the pods that went to node, or why one of pods fits nowhere.
func (r *Replacer) placeBeside(ctx context.Context, s *state, names []string, o nodeshape.Offer, node *corev1.Node, ds, pods []*corev1.Pod) (placed map[string]string, onNew []*corev1.Pod, why string, err error) {
	view := s.cluster().Draining(disruptedTaint, names...)
	view.Add(node, nodeshape.ResourceSlices(node.Name, o.InstanceType.ResourceSlices)...)
	for _, p := range ds {
		if err := view.Bind(p, node.Name); err != nil {
			return nil, nil, "", err
		}
	}
	placed = map[string]string{}
	for _, p := range pods {
		to, st := r.sched.Place(ctx, view, p)
		if st.IsSuccess() && view.IsDraining(to) {
			st = fwk.NewStatus(fwk.Unschedulable, "it tolerates the disruption taint and would be placed back on node "+to+", which is being removed")
		}
		if !st.IsSuccess() {
			return nil, nil, fmt.Sprintf("pod %s fits neither elsewhere nor on a new %s in %s: %s", klog.KObj(p), o.InstanceType.Name, o.Zone, sayWhy(st)), nil
		}
		placed[p.Namespace+"/"+p.Name] = to
		if to == node.Name {
			onNew = append(onNew, p)
		}
	}
	return placed, onNew, "", nil
}

// holds reports whether node's allocatable holds pods' requests and the
// node affinity of each (a node's labels depend on its instance type).
func holds(node *corev1.Node, pods []*corev1.Pod) bool {
	if !nodeshape.Holds(node, pods) {
		return false
	}
	for _, p := range pods {
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(node); !ok {
			return false
		}
	}
	return true
}

// claimFor is the replacement claim: the pool's template as it is now,
// the options of chosen's group that hold pods, cheapest first. When a
// pod has ResourceClaims, only types whose nodes publish the devices
// chosen's do: its devices were allocated on chosen's slices.
func (r *Replacer) claimFor(cands []*candidate, t nodeshape.Template, name string, chosen nodeshape.Offer, offers []nodeshape.Offer, pods []*corev1.Pod) *replacement {
	var names []string
	var its []*v1alpha1.InstanceType
	devices := slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 })
	for _, o := range offers {
		if o.Group() != chosen.Group() || slices.Contains(names, o.InstanceType.Name) {
			continue
		}
		if devices && !nodeshape.SameDevices(o.InstanceType.ResourceSlices, chosen.InstanceType.ResourceSlices) {
			continue
		}
		if holds(t.Node(name, &o.InstanceType, o.Zone, o.CapacityType), pods) {
			names = append(names, o.InstanceType.Name)
			its = append(its, &o.InstanceType)
		}
	}
	np := cands[0].pool
	reqs := nodeshape.ClaimRequirements(np.Spec.Template.Spec.Requirements, names, chosen.Zone, chosen.CapacityType, chosen.InstanceType.Labels[corev1.LabelArchStable])
	labels := maps.Clone(t.Labels)
	old := make([]string, len(cands))
	for i, c := range cands {
		old[i] = c.claim.Name
	}
	annotations := map[string]string{v1alpha1.AnnotationReplaces: strings.Join(old, ",")}
	if hash, err := nodeshape.PoolHash(np); err == nil {
		annotations[v1alpha1.AnnotationNodePoolHash] = hash
		annotations[v1alpha1.AnnotationNodePoolHashVersion] = nodeshape.PoolHashVersion
	}
	nc := &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: np.Name}, Annotations: annotations, OwnerReferences: nodeshape.OwnedBy(np)},
		Spec: v1alpha1.NodeClaimSpec{
			NodePool:               np.Name,
			Requirements:           reqs,
			Resources:              v1alpha1.ResourceRequirements{Requests: nodeshape.RequestList(pods)},
			Labels:                 labels,
			Annotations:            t.Annotations,
			Taints:                 t.Taints,
			StartupTaints:          t.StartupTaints,
			NodeClassRef:           np.Spec.Template.Spec.NodeClassRef,
			ExpireAfter:            np.Spec.Template.Spec.ExpireAfter,
			TerminationGracePeriod: np.Spec.Template.Spec.TerminationGracePeriod.DeepCopy(),
		},
	}
	return &replacement{claim: nc, price: chosen.Price, options: len(names),
		unmet: nodeshape.MinValuesUnmet(t, np.Spec.Template.Spec.Requirements, its, chosen.Zone, chosen.CapacityType),
		offer: fmt.Sprintf("%s %s in %s ($%.4f/h)", chosen.InstanceType.Name, chosen.CapacityType, chosen.Zone, chosen.Price)}
}

func (r *Replacer) daemonSets(ctx context.Context) ([]*appsv1.DaemonSet, error) {
	return cluster.DaemonSets(ctx, r.cache)
}

// newReplacementName is "<pool>-<5 random characters>", as a claim the
// scheduler plugin makes is named, known before it is created so that the
// old claim can name it first.
func newReplacementName(pool string) string { return pool + "-" + utilrand.String(5) }

// forClaim plans the replacement of one claim's node for a per-claim
// method (drift, expiration): any offer of the pool, whatever its price.
// The pods that would move are those a drain evicts and that come back:
// not daemonset, mirror or finished pods, nor pods with no controller.
func (r *Replacer) forClaim(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (*replacement, string, error) {
	s, err := observe(ctx, r.cache)
	if err != nil {
		return nil, "", err
	}
	node := s.nodes[nc.Status.NodeName]
	if node == nil {
		return nil, "", nil
	}
	var pods []*corev1.Pod
	for _, p := range s.onNode[node.Name] {
		if cluster.OwnedByDaemonSet(p) || cluster.IsMirror(p) || metav1.GetControllerOf(p) == nil {
			continue
		}
		pods = append(pods, p)
	}
	if pool.Fixed() {
		// A fixed-size pool's node is replaced whatever it runs: the
		// count holds while it goes.
		rep, why, err := r.plan(ctx, s, []*candidate{{claim: nc, node: node, pool: pool, pods: pods}}, nil)
		if rep != nil || why != "" || err != nil {
			return rep, why, err
		}
		return r.replica(ctx, nc, pool)
	}
	if len(pods) == 0 {
		return nil, "", nil
	}
	slices.SortStableFunc(pods, simulator.BindOrder)
	return r.plan(ctx, s, []*candidate{{claim: nc, node: node, pool: pool, pods: pods}}, nil)
}

// replica plans the replacement of a fixed-size pool's node whose pods
// fit elsewhere: a claim with no pod, as the pool's count makes
// (nodeshape.ReplicaClaim), within the pool's limits with the node counted.
func (r *Replacer) replica(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (*replacement, string, error) {
	offers, full, err := r.offersFor(ctx, pool, nodeshape.ForPool(pool), nil)
	if err != nil || full != "" {
		return nil, full, err
	}
	claim := nodeshape.ReplicaClaim(pool, newReplacementName(pool.Name), offers)
	if claim == nil {
		return nil, "nodepool " + pool.Name + " has no instance type to launch", nil
	}
	delete(claim.Annotations, v1alpha1.AnnotationReplica)
	claim.Annotations[v1alpha1.AnnotationReplaces] = nc.Name
	o, options := offers[0], 0
	for _, req := range claim.Spec.Requirements {
		if req.Key == corev1.LabelInstanceTypeStable {
			options = len(req.Values)
		}
	}
	return &replacement{claim: claim, price: o.Price, options: options,
		offer: fmt.Sprintf("%s %s in %s ($%.4f/h)", o.InstanceType.Name, o.CapacityType, o.Zone, o.Price)}, "", nil
}

// startReplacement names the replacement on the command's claims (read
// live), then creates it; the NodeClaim controller launches it as it
// launches any claim, and awaitReplacement drains each old node once it
// is Initialized. A claim that cannot be named keeps its node (its budget
// and taint go), and so do the others: the replacement, sized for all of
// them, is created only when every one names it.
func (e *Executor) startReplacement(ctx context.Context, cmd *Command, rep *replacement) error {
	logger := klog.FromContext(ctx)
	var named []Target
	var errs []error
	for _, t := range cmd.Targets {
		var marked *v1alpha1.NodeClaim
		err := retry.OnError(writeBackoff, transient, func() error {
			var fresh v1alpha1.NodeClaim
			if err := e.live.Get(ctx, client.ObjectKeyFromObject(t.Claim), &fresh); err != nil {
				return err
			}
			if fresh.Annotations == nil {
				fresh.Annotations = map[string]string{}
			}
			fresh.Annotations[v1alpha1.AnnotationReplacement] = rep.claim.Name
			fresh.Annotations[v1alpha1.AnnotationReplacementRequested] = e.now().UTC().Format(time.RFC3339)
			fresh.Annotations[v1alpha1.AnnotationDisruption] = string(cmd.Reason) + ": " + t.why(cmd)
			if !cmd.DrainStart.IsZero() {
				fresh.Annotations[v1alpha1.AnnotationDrainStart] = cmd.DrainStart.UTC().Format(time.RFC3339)
			}
			marked = &fresh
			return e.kube.Update(ctx, &fresh)
		})
		if err != nil {
			undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			errs = append(errs, fmt.Errorf("naming replacement %s on nodeclaim %s: %w", rep.claim.Name, t.Claim.Name, err), e.untaint(undo, t.Claim.Status.NodeName))
			cancel()
			e.budgets.release(t.Claim.UID)
			e.backOff(ctx, t.Claim, cmd.Reason)
			continue
		}
		named = append(named, Target{Claim: marked, Pool: t.Pool, Why: t.Why})
	}
	if len(named) == 0 {
		return errors.Join(errs...)
	}
	if len(named) < len(cmd.Targets) {
		// The replacement is sized for every claim of the command: for
		// some of them it would launch more than their pods need, and
		// the others would be chosen again beside it. The claims named
		// give it up (each read back as written, so no other command's
		// annotations go) and keep their nodes.
		why := fmt.Sprintf("replacement %s could not be named on every nodeclaim it was planned for", rep.claim.Name)
		for _, t := range named {
			_, err := e.giveUpReplacement(ctx, t.Claim, nil, cmd.Reason, why)
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	crashpoint.Hit(crashpoint.AfterReplacementNamed)
	if err := e.kube.Create(ctx, rep.claim); err != nil {
		// Given up on a later pass, when the replacement is not found.
		return errors.Join(append(errs, err)...)
	}
	metrics.DisruptionDecisions.WithLabelValues(string(cmd.Reason), "replacing").Inc()
	if cmd.OnDone != nil {
		cmd.OnDone(rep)
	}
	for _, t := range named {
		logger.Info("Launching a replacement before draining node", "node", t.Claim.Status.NodeName, "nodeClaim", klog.KObj(t.Claim), "reason", cmd.Reason, "why", t.why(cmd),
			"replacement", rep.claim.Name, "offer", rep.offer, "instanceTypeOptions", rep.options)
		e.event(t.Claim, corev1.EventTypeNormal, v1alpha1.ReasonReplacing, cmd.Reason, "node %s: %s; launching %s for its pods before draining it", t.Claim.Status.NodeName, t.why(cmd), rep.describe())
	}
	return errors.Join(errs...)
}

// awaitReplacement drains the claim's node once its replacement is
// Initialized. A replacement that is gone (its launch failed, or was never
// created) calls the disruption off; so does a do-not-disrupt annotation
// that appeared meanwhile, and then a replacement not yet Initialized is
// deleted.
func (e *Executor) awaitReplacement(ctx context.Context, nc *v1alpha1.NodeClaim, name string) (reconcile.Result, error) {
	reason, why, _ := strings.Cut(nc.Annotations[v1alpha1.AnnotationDisruption], ": ")
	var rep v1alpha1.NodeClaim
	err := e.kube.Get(ctx, client.ObjectKey{Name: name}, &rep)
	if client.IgnoreNotFound(err) == nil && err != nil {
		// Just created, perhaps, and not in the cache yet.
		err = e.live.Get(ctx, client.ObjectKey{Name: name}, &rep)
	}
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	if err != nil {
		// Named first, created next: not there yet, or never will be
		// (the provisioner stopped in between).
		requested, perr := time.Parse(time.RFC3339, nc.Annotations[v1alpha1.AnnotationReplacementRequested])
		if left := e.timers.ReplacementGrace - e.now().Sub(requested); perr == nil && left > 0 {
			if by, ok := drainStart(nc); ok && by.Sub(e.now()) < min(left, replacementWait) {
				return e.drainWithoutReplacement(ctx, nc, v1alpha1.DisruptionReason(reason), why, name, by)
			}
			return reconcile.Result{RequeueAfter: min(left, replacementWait)}, nil
		}
		return e.replacementGone(ctx, nc, v1alpha1.DisruptionReason(reason), why, name)
	}
	if !rep.DeletionTimestamp.IsZero() {
		return e.replacementGone(ctx, nc, v1alpha1.DisruptionReason(reason), why, name)
	}
	// Repair and interruption are involuntary and expiry forceful:
	// do-not-disrupt holds every other reason.
	if involuntary := v1alpha1.DisruptionReason(reason) == Unhealthy || v1alpha1.DisruptionReason(reason) == Interrupted || forceful(v1alpha1.DisruptionReason(reason)); !involuntary {
		held, err := heldBy(ctx, nc.Status.NodeName, cachedHolders{e.kube})
		if err != nil {
			return reconcile.Result{}, err
		}
		if k := v1alpha1.DoNotDisrupt(nc.Annotations); held == "" && k != "" {
			held = "the NodeClaim has " + k + "=true"
		}
		if held != "" {
			return e.giveUpReplacement(ctx, nc, &rep, v1alpha1.DisruptionReason(reason), held)
		}
	}
	if rep.Status.Phase != v1alpha1.NodeClaimInitialized {
		if by, ok := drainStart(nc); ok && by.Sub(e.now()) < replacementWait {
			return e.drainWithoutReplacement(ctx, nc, v1alpha1.DisruptionReason(reason), why, name, by)
		}
		klog.FromContext(ctx).V(2).Info("Waiting for the replacement before draining node", "node", nc.Status.NodeName, "replacement", name, "phase", rep.Status.Phase)
		return reconcile.Result{RequeueAfter: replacementWait}, nil
	}
	klog.FromContext(ctx).Info("Disrupting node: its replacement is initialized", "node", nc.Status.NodeName, "reason", reason, "why", why, "replacement", name, "replacementNode", rep.Status.NodeName)
	metrics.DisruptionDecisions.WithLabelValues(reason, "disrupted").Inc()
	return e.removeWaiting(ctx, nc, v1alpha1.DisruptionReason(reason), fmt.Sprintf("%s; replaced by node %s (%s)", why, rep.Status.NodeName, rep.Name))
}

// drainWithoutReplacement drains the node of a claim whose replacement is not
// ready when its AnnotationDrainStart comes, or waits for it.
func (e *Executor) drainWithoutReplacement(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why, name string, by time.Time) (reconcile.Result, error) {
	if left := by.Sub(e.now()); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	klog.FromContext(ctx).Info("Disrupting node before its replacement is ready: its instance is about to go", "node", nc.Status.NodeName, "reason", reason, "why", why, "replacement", name, "drainStart", by)
	metrics.DisruptionDecisions.WithLabelValues(string(reason), "disrupted").Inc()
	return e.removeWaiting(ctx, nc, reason, fmt.Sprintf("%s; draining at %s, before replacement %s is ready", why, by.UTC().Format(time.RFC3339), name))
}

// removeWaiting removes a claim that waited for its replacement. If it
// cannot be marked, it stays tainted, waiting, and is tried again: it is
// still committed to going.
func (e *Executor) removeWaiting(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why string) (reconcile.Result, error) {
	_, err := e.remove(ctx, nc, reason, why)
	return reconcile.Result{}, err
}

// drainStart is the claim's AnnotationDrainStart (or, written by an older
// provisioner, AnnotationDrainStartBefore), if it has one.
func drainStart(nc *v1alpha1.NodeClaim) (time.Time, bool) {
	v, ok := nc.Annotations[v1alpha1.AnnotationDrainStart]
	if !ok {
		v = nc.Annotations[v1alpha1.AnnotationDrainStartBefore]
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// replacementGone: a voluntary disruption is called off when its
// replacement could not be launched; an interruption is not, as the
// instance goes anyway: its node is drained, and its pods, pending, get
// new capacity as any pending pod does.
func (e *Executor) replacementGone(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why, name string) (reconcile.Result, error) {
	if reason == Interrupted {
		klog.FromContext(ctx).Info("Disrupting node without its replacement: its instance is going", "node", nc.Status.NodeName, "reason", reason, "why", why, "replacement", name)
		metrics.DisruptionDecisions.WithLabelValues(string(reason), "disrupted").Inc()
		return e.removeWaiting(ctx, nc, reason, fmt.Sprintf("%s; replacement %s could not be launched, draining anyway", why, name))
	}
	return e.giveUpReplacement(ctx, nc, nil, reason, fmt.Sprintf("replacement %s is gone: it could not be launched", name))
}

// replacementAnnotations are what a claim waiting for its replacement
// carries, and giving the replacement up removes.
var replacementAnnotations = []string{v1alpha1.AnnotationReplacement, v1alpha1.AnnotationReplacementRequested, v1alpha1.AnnotationDisruption,
	v1alpha1.AnnotationDrainStart, v1alpha1.AnnotationDrainStartBefore}

// errDisruptionChanged: the claim's disruption annotations are no longer
// the ones a give-up was decided on.
var errDisruptionChanged = errors.New("the nodeclaim's disruption changed meanwhile")

// giveUpReplacement calls a disruption waiting for its replacement off:
// the replacement goes unless it is already a node, the old claim forgets
// it and its node takes pods again. The method may choose the claim again
// after Timers.ReplacementRetry (backOff).
//
// The annotations are removed only if they are still the ones nc was
// read with: an interruption may have made the wait its own meanwhile
// (Interruption.annotate), and its queue message is already
// acknowledged, so erasing it would leave the spot node to be reclaimed
// undrained. Then nothing is given up, and the claim is looked at again.
func (e *Executor) giveUpReplacement(ctx context.Context, nc *v1alpha1.NodeClaim, rep *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why string) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	// Counted against the budget until the taint is lifted, though the
	// annotations that count it go first.
	e.budgets.keep(nc.UID, nc.Spec.NodePool)
	err := retry.OnError(writeBackoff, transient, func() error {
		var fresh v1alpha1.NodeClaim
		if err := e.live.Get(ctx, client.ObjectKeyFromObject(nc), &fresh); err != nil {
			return err
		}
		if fresh.UID != nc.UID {
			return apierrors.NewNotFound(v1alpha1.SchemeGroupVersion.WithResource("nodeclaims").GroupResource(), nc.Name)
		}
		for _, k := range replacementAnnotations {
			if fresh.Annotations[k] != nc.Annotations[k] {
				return errDisruptionChanged
			}
		}
		for _, k := range replacementAnnotations {
			delete(fresh.Annotations, k)
		}
		// The update carries fresh's resourceVersion: a write since the
		// read above is a conflict, and the retry compares again.
		return e.kube.Update(ctx, &fresh)
	})
	if errors.Is(err, errDisruptionChanged) {
		logger.Info("Not giving up the replacement: the claim's disruption changed meanwhile", "node", nc.Status.NodeName, "nodeClaim", klog.KObj(nc), "reason", reason, "why", why)
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	logger.Info("Not disrupting node: called its replacement off", "node", nc.Status.NodeName, "reason", reason, "why", why)
	e.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonDisruptionBlocked, reason, "node %s: %s; it keeps running", nc.Status.NodeName, why)
	metrics.DisruptionDecisions.WithLabelValues(string(reason), "aborted").Inc()
	e.backOff(ctx, nc, reason)
	var errs []error
	if rep != nil && rep.Status.Phase != v1alpha1.NodeClaimInitialized && rep.DeletionTimestamp.IsZero() {
		errs = append(errs, client.IgnoreNotFound(e.kube.Delete(ctx, rep)))
	}
	errs = append(errs, e.untaint(ctx, nc.Status.NodeName))
	e.budgets.release(nc.UID)
	return reconcile.Result{RequeueAfter: e.BackedOff(nc.UID, reason)}, errors.Join(errs...)
}

// replacing reports whether nc is a replacement its old claim still
// waits for or is being drained into: it is not disrupted until the old
// node is gone, or it could be taken for empty before the pods it was
// launched for arrive. A replacement its old claim gave up is a node like
// any other.
func (e *Executor) replacing(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, error) {
	for _, old := range strings.Split(nc.Annotations[v1alpha1.AnnotationReplaces], ",") {
		if old == "" {
			continue
		}
		var o v1alpha1.NodeClaim
		if err := e.kube.Get(ctx, client.ObjectKey{Name: old}, &o); client.IgnoreNotFound(err) != nil {
			return false, err
		} else if err == nil && o.Annotations[v1alpha1.AnnotationReplacement] == nc.Name {
			return true, nil
		}
	}
	return false, nil
}

// cheaperThan is consolidation's filter on replacements: cheaper than the
// nodes replaced together, in their capacity type (an on-demand node is
// not replaced by spot, nor spot by on-demand; nodes of both are not
// replaced together).
func cheaperThan(cands []*candidate) offerFilter {
	var total float64
	for _, c := range cands {
		total += c.price
		if c.claim.Status.CapacityType != cands[0].claim.Status.CapacityType {
			return func(nodeshape.Offer) bool { return false }
		}
	}
	return func(o nodeshape.Offer) bool {
		return o.Price < total && o.CapacityType == cands[0].claim.Status.CapacityType
	}
}

// tooFewSpotOptions says why a spot replacement is refused under
// MinSpotOptions, or "".
func tooFewSpotOptions(rep *replacement) string {
	if rep.claim == nil || rep.options >= MinSpotOptions {
		return ""
	}
	for _, r := range rep.claim.Spec.Requirements {
		if r.Key == v1alpha1.LabelCapacityType && slices.Contains(r.Values, string(v1alpha1.CapacityTypeSpot)) {
			return fmt.Sprintf("a spot replacement could be only %d instance types cheaper than this node, fewer than %d: it would chase the cheapest spot offerings", rep.options, MinSpotOptions)
		}
	}
	return ""
}
