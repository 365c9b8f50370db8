package nodeclaim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/provisioner/repack"
	"github.com/nodeforge/nodeforge/simulator"
)

// Before a claim is launched, the closed claims of its batch (its pool and
// group, not launched yet) are packed again (provisioner/repack) into the
// cheapest set of nodes the scheduling simulator accepts, and the
// nominations move to that set. A claim is launched only once its Packed
// condition is True: a claim whose launch may have begun is never packed
// again.
//
// A plan is written on one claim that stays (AnnotationRepackPlan) before
// anything moves; a provisioner that restarts finishes it before it packs
// anything else. Then the staying claims get the instance types and
// resources of the plan, the pods move (status.nominatedNodeName), each
// emptied claim is annotated with where its pods went and deleted, and the
// staying claims are marked Packed, the plan's claim last.

// maxPlanBytes keeps a plan well inside what an object's annotations may
// hold (256 KiB); a larger batch launches as it is.
const maxPlanBytes = 128 << 10

// maxBatchClaims bounds what one repack takes on, so that the launches
// waiting behind it are not held up for long.
const maxBatchClaims = 50

// maxPackedOptions is how many instance types a repacked claim keeps, as
// VirtualNodes' maxInstanceTypes does by default.
const maxPackedOptions = 60

// repacker repacks the closed claims of a batch before they launch: the
// launcher asks it whether a claim may launch (mayLaunch).
type repacker struct {
	base
	// sim is the scheduling simulator a batch is repacked with
	// (Options.Repack); nil launches each claim as VirtualNodes packed it.
	sim *simulator.Scheduler
	// claims is Options.Claims, from which a batch's claims are read.
	claims client.Reader
	// batchIdle is Options.BatchIdle (closingWith).
	batchIdle time.Duration
	// mu is held through a repack: one batch at a time.
	mu    sync.Mutex
	packs *packMemory
}

// packMemory is what this process remembers of its repacks, ahead of the
// cache. done are the claims packed by this process: the cache may not
// show their Packed condition yet. emptied are the claims a repack of
// this process emptied: the cache may not show them annotated or deleted
// yet, and they must not launch. waiting is when each claim first waited
// for claims closing with it (closingWith), to bound the wait.
type packMemory struct {
	mu            sync.Mutex
	done, emptied map[types.UID]bool
	waiting       map[types.UID]time.Time
}

func newPackMemory() *packMemory {
	return &packMemory{done: map[types.UID]bool{}, emptied: map[types.UID]bool{}, waiting: map[types.UID]time.Time{}}
}

// closingWait bounds how long a claim waits for the claims of its batch
// another worker is closing at the same moment.
const closingWait = 2 * time.Second

func (p *packMemory) is(m map[types.UID]bool, uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return m[uid]
}

func (p *packMemory) mark(m map[types.UID]bool, uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m[uid] = true
}

// forget drops what is kept of a claim that is going.
func (p *packMemory) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.done, uid)
	delete(p.emptied, uid)
	delete(p.waiting, uid)
}

// waited is how long the claim has waited for claims closing with it,
// counting from now on its first call; done ends the count.
func (p *packMemory) waited(uid types.UID, now time.Time, done bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	first, ok := p.waiting[uid]
	switch {
	case done:
		delete(p.waiting, uid)
	case !ok:
		first = now
		p.waiting[uid] = first
	}
	return now.Sub(first)
}

// packPlan is a repack decided and written, not yet finished.
type packPlan struct {
	// Claims are the claims that stay, with what each is launched with.
	Claims map[string]packedClaim `json:"claims"`
	// Moves are the pods that change claim: by the claim they leave, pod
	// UID to the claim they go to.
	Moves map[string]map[types.UID]string `json:"moves,omitempty"`
	// Emptied are the claims left with no pod, deleted once their pods
	// have moved.
	Emptied []string `json:"emptied,omitempty"`
	How     string   `json:"how"`
	Before  float64  `json:"before"`
	After   float64  `json:"after"`
}

type packedClaim struct {
	InstanceTypes []string            `json:"instanceTypes"`
	Requests      corev1.ResourceList `json:"requests"`
	Pods          int32               `json:"pods"`
}

func isPacked(nc *v1alpha1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(nc.Status.Conditions, v1alpha1.ConditionPacked)
}

// mayLaunch says whether the claim may launch now, and what to return
// when it may not: it is Packed (or a replacement, or repacking is off and
// no plan of its pool is left unfinished). A claim a repack emptied never
// launches; it is deleted.
func (r *repacker) mayLaunch(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, reconcile.Result, error) {
	if nc.Annotations[v1alpha1.AnnotationReplaces] != "" {
		return true, reconcile.Result{}, nil
	}
	if nc.Annotations[v1alpha1.AnnotationRepackedInto] != "" || r.packs.is(r.packs.emptied, nc.UID) {
		if nc.DeletionTimestamp.IsZero() && nc.Annotations[v1alpha1.AnnotationRepackedInto] != "" {
			// A repack emptied it and stopped before deleting it.
			klog.FromContext(ctx).Info("Deleting nodeclaim emptied by a repack", "nodeClaim", nc.Name)
			return false, reconcile.Result{}, client.IgnoreNotFound(r.kube.Delete(ctx, nc))
		}
		return false, reconcile.Result{}, nil
	}
	if isPacked(nc) {
		return true, reconcile.Result{}, nil
	}
	if r.packs.is(r.packs.done, nc.UID) {
		// Packed; launched once the cache shows it, with the spec the
		// repack gave it.
		return false, reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if r.sim == nil {
		// Off: a plan a run with it on left unfinished is finished
		// first, so that no claim launches between its spec and its pods.
		var claims v1alpha1.NodeClaimList
		if err := r.kube.List(ctx, &claims, client.MatchingFields{indexClaimPool: nc.Spec.NodePool}); err != nil {
			return false, reconcile.Result{}, err
		}
		if !slices.ContainsFunc(claims.Items, func(k v1alpha1.NodeClaim) bool { return pendingPlan(&k) }) {
			return true, reconcile.Result{}, nil
		}
	}
	res, err := r.pack(ctx, nc)
	if err == nil && isPacked(nc) {
		return true, reconcile.Result{}, nil
	}
	return false, res, err
}

// pendingPlan: the claim holds a repack plan not finished.
func pendingPlan(k *v1alpha1.NodeClaim) bool {
	return k.Annotations[v1alpha1.AnnotationRepackPlan] != "" && !isPacked(k) && k.DeletionTimestamp.IsZero()
}

// claimReader reads claims for a repack: the API server when given.
func (r *repacker) claimReader() client.Reader {
	if r.claims != nil {
		return r.claims
	}
	return r.kube
}

// pack repacks the batch of nc, or finishes a plan of its pool left
// unfinished, then has nc reconciled again.
func (r *repacker) pack(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.packs.is(r.packs.emptied, nc.UID) {
		return reconcile.Result{}, nil // deleted by its repack
	}
	if r.packs.is(r.packs.done, nc.UID) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	claims, err := r.poolClaims(ctx, nc.Spec.NodePool)
	if err != nil {
		return reconcile.Result{}, err
	}
	if i := slices.IndexFunc(claims, func(k v1alpha1.NodeClaim) bool { return pendingPlan(&k) }); i >= 0 {
		return r.finishPending(ctx, &claims[i])
	}
	if r.sim == nil {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	if k := r.closingWith(ctx, nc, claims); k != "" && r.packs.waited(nc.UID, r.now(), false) < closingWait {
		// Two claims of a batch due at one moment are closed by two
		// workers: the first here must not take itself for alone while
		// the other's close is still being written.
		klog.FromContext(ctx).V(1).Info("Waiting for a claim closing with this one's batch", "nodeClaim", k)
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	r.packs.waited(nc.UID, r.now(), true)
	batch, pool, why, err := r.batchMembers(ctx, nc, claims)
	if err != nil {
		return reconcile.Result{}, err
	}
	if why != "" {
		// Alone: it launches at once, as it is (mayLaunch).
		return reconcile.Result{}, r.markPacked(ctx, nc, "Kept", why)
	}
	plan, why, err := r.planBatch(ctx, nc, pool, batch, claims)
	if err != nil {
		return reconcile.Result{}, err
	}
	if plan == nil {
		return r.keep(ctx, nc, batch, why)
	}
	return r.writePlan(ctx, nc, batch, plan)
}

// poolClaims are the claims of the pool, read from Options.Claims when
// given.
func (r *repacker) poolClaims(ctx context.Context, pool string) ([]v1alpha1.NodeClaim, error) {
	var claims v1alpha1.NodeClaimList
	if r.claims != nil {
		if err := r.claims.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
			return nil, err
		}
	} else if err := r.kube.List(ctx, &claims, client.MatchingFields{indexClaimPool: pool}); err != nil {
		return nil, err
	}
	return claims.Items, nil
}

// finishPending finishes the plan k holds, left unfinished.
func (r *repacker) finishPending(ctx context.Context, k *v1alpha1.NodeClaim) (reconcile.Result, error) {
	var plan packPlan
	if err := json.Unmarshal([]byte(k.Annotations[v1alpha1.AnnotationRepackPlan]), &plan); err != nil {
		// Not ours to read: launch the claims as they are.
		klog.FromContext(ctx).Error(err, "Unreadable repack plan; launching its claims as they are", "nodeClaim", k.Name)
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, r.markPacked(ctx, k, "Kept", "unreadable repack plan: "+err.Error())
	}
	klog.FromContext(ctx).Info("Finishing a repack left unfinished", "nodeClaim", k.Name, "claims", len(plan.Claims), "emptied", len(plan.Emptied))
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: true}, r.finishPlan(ctx, k, &plan)
}

// keep marks every claim of the batch Packed as it is: no plan is
// cheaper, for why.
func (r *repacker) keep(ctx context.Context, nc *v1alpha1.NodeClaim, batch []batchMember, why string) (reconcile.Result, error) {
	metrics.Repacks.WithLabelValues(nc.Spec.NodePool, "Kept").Inc()
	klog.FromContext(ctx).V(1).Info("Batch launches as nominated", "nodeClaims", len(batch), "why", why)
	for _, b := range batch {
		k := b.nc
		if k.UID == nc.UID {
			k = nc // it launches in this reconcile (mayLaunch)
		}
		if err := r.markPacked(ctx, k, "Kept", why); err != nil {
			return reconcile.Result{}, err
		}
	}
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: !isPacked(nc)}, nil
}

// writePlan writes the plan on the first claim that stays, before
// anything moves, then carries it out. A plan too large to write is not
// carried out: the batch launches as it is.
func (r *repacker) writePlan(ctx context.Context, nc *v1alpha1.NodeClaim, batch []batchMember, plan *packPlan) (reconcile.Result, error) {
	holder := slices.Sorted(maps.Keys(plan.Claims))[0]
	var h *v1alpha1.NodeClaim
	for _, b := range batch {
		if b.nc.Name == holder {
			h = b.nc.DeepCopy()
		}
	}
	raw, err := json.Marshal(plan)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(raw) > maxPlanBytes {
		for _, b := range batch {
			if err := r.markPacked(ctx, b.nc, "Kept", fmt.Sprintf("the plan (%d bytes) is too large to record", len(raw))); err != nil {
				return reconcile.Result{}, err
			}
		}
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[v1alpha1.AnnotationRepackPlan] = string(raw)
	if err := r.kube.Update(ctx, h); err != nil {
		return reconcile.Result{}, err
	}
	metrics.Repacks.WithLabelValues(nc.Spec.NodePool, "Repacked").Inc()
	metrics.RepackSavings.WithLabelValues(nc.Spec.NodePool).Add(plan.Before - plan.After)
	moved := 0
	for _, m := range plan.Moves {
		moved += len(m)
	}
	klog.FromContext(ctx).Info("Repacking batch", "nodeClaims", len(batch), "keeps", len(plan.Claims), "emptied", plan.Emptied, "podsMoved", moved,
		"how", plan.How, "pricePerHourBefore", dollarsPerHour(plan.Before), "pricePerHourAfter", dollarsPerHour(plan.After), "plan", holder)
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: true}, r.finishPlan(ctx, h, plan)
}

// dollarsPerHour formats an hourly price in dollars, to the hundredth of
// a cent, as logs and Events show it ("0.0420").
func dollarsPerHour(p float64) string { return strconv.FormatFloat(p, 'f', 4, 64) }

// batchMember is a claim of the batch with its nominated pods.
type batchMember struct {
	nc   *v1alpha1.NodeClaim
	pods []corev1.Pod
}

// batchKey is what a batch shares: the group (zone, capacity type,
// architecture) and the pool template the claim was made from.
type batchKey struct {
	group    nodeshape.Group
	poolHash string
}

// batchKeyOf is the key of the claim's batch.
func batchKeyOf(nc *v1alpha1.NodeClaim) batchKey {
	return batchKey{group: nodeshape.ClaimGroup(nc), poolHash: nc.Annotations[v1alpha1.AnnotationNodePoolHash]}
}

// instanceTypes are the instance types a claim may launch as, in its
// requirements' order (cheapest first, as written).
func instanceTypes(nc *v1alpha1.NodeClaim) []string {
	for _, r := range nc.Spec.Requirements {
		if r.Key == corev1.LabelInstanceTypeStable && r.Operator == corev1.NodeSelectorOpIn {
			return r.Values
		}
	}
	return nil
}

// unpackable says why a claim cannot be repacked with others, or "".
func (r *repacker) unpackable(nc *v1alpha1.NodeClaim, pods int) string {
	switch {
	case nc.Status.Phase != v1alpha1.NodeClaimLaunching || !nc.DeletionTimestamp.IsZero() || nc.Status.ProviderID != "" ||
		meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionLaunched) != nil:
		return "it is launching"
	case isPacked(nc) || r.packs.is(r.packs.done, nc.UID) || r.packs.is(r.packs.emptied, nc.UID) || nc.Annotations[v1alpha1.AnnotationRepackedInto] != "":
		return "it is packed"
	case nc.Annotations[v1alpha1.AnnotationReplaces] != "":
		return "it is a replacement"
	case nodeshape.HasMinValues(nc.Spec.Requirements):
		return "its pool sets minValues"
	case nodeshape.ClaimGroup(nc).Zone == "" || nodeshape.ClaimGroup(nc).CapacityType == "" || len(instanceTypes(nc)) == 0:
		return "its requirements do not name one zone, one capacity type and its instance types"
	case pods == 0:
		return "it has no nominated pod"
	case int32(pods) != nc.Spec.NominatedPods:
		// The scheduler's nominations have not all reached the cache.
		return fmt.Sprintf("%d of its %d nominated pods are seen", pods, nc.Spec.NominatedPods)
	}
	return ""
}

// batchMembers are the claims of nc's batch: those of its pool and group
// that are closed, not launched and not packed, with their pods. It says
// why not when nc cannot be repacked or has no claim to be repacked with.
func (r *repacker) batchMembers(ctx context.Context, nc *v1alpha1.NodeClaim, claims []v1alpha1.NodeClaim) ([]batchMember, *v1alpha1.NodePool, string, error) {
	key := batchKeyOf(nc)
	var batch []batchMember
	for i := range claims {
		k := &claims[i]
		if k.UID != nc.UID && (k.Status.Phase != v1alpha1.NodeClaimLaunching || batchKeyOf(k) != key) {
			continue
		}
		pods, err := r.nominatedPods(ctx, k.Name)
		if err != nil {
			return nil, nil, "", err
		}
		why := r.unpackable(k, len(pods))
		if k.UID == nc.UID && why != "" {
			return nil, nil, why, nil
		}
		if why == "" {
			batch = append(batch, batchMember{nc: k, pods: pods})
		}
	}
	if len(batch) == 0 {
		return nil, nil, "no claim of its batch is waiting to launch", nil
	}
	if len(batch) > maxBatchClaims {
		// nc and the oldest others: the rest make the next batch.
		i := slices.IndexFunc(batch, func(b batchMember) bool { return b.nc.UID == nc.UID })
		batch[0], batch[i] = batch[i], batch[0]
		slices.SortStableFunc(batch[1:], func(a, b batchMember) int {
			return cmp.Or(a.nc.CreationTimestamp.Compare(b.nc.CreationTimestamp.Time), cmp.Compare(a.nc.Name, b.nc.Name))
		})
		batch = batch[:maxBatchClaims]
	}
	var pool v1alpha1.NodePool
	if err := r.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, "its pool is gone", nil
		}
		return nil, nil, "", err
	}
	if hash, err := nodeshape.PoolHash(&pool); err != nil || hash != nc.Annotations[v1alpha1.AnnotationNodePoolHash] {
		return nil, nil, "its pool changed since it was made", nil
	}
	// A claim outside its pool is refused at its own launch; no pod moves
	// onto it meanwhile. nc was checked before it got here.
	batch = slices.DeleteFunc(batch, func(b batchMember) bool { return b.nc.UID != nc.UID && nodeshape.WithinPool(b.nc, &pool) != nil })
	return batch, &pool, "", nil
}

// closingWith names a claim of nc's batch that is still open but idle for
// half the idle window with pods nominated to it: closeWithBatch closes
// such a claim with nc, and a worker of its own may be closing it at this
// moment. "" when there is none.
func (r *repacker) closingWith(ctx context.Context, nc *v1alpha1.NodeClaim, claims []v1alpha1.NodeClaim) string {
	now := r.now()
	for i := range claims {
		k := &claims[i]
		if !idleInBatchOf(k, nc, now, r.batchIdle) {
			continue
		}
		// One the scheduler is ahead of closes in its own window, once
		// written, not with this batch (closeWithBatch): no wait for it.
		if pods, err := r.nominatedPods(ctx, k.Name); err == nil && len(pods) > 0 && !schedulerAhead(k, len(pods)) {
			return k.Name
		}
	}
	return ""
}

// planBatch repacks the batch; nil (and why) when it stays as it is.
func (r *repacker) planBatch(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool, batch []batchMember, claims []v1alpha1.NodeClaim) (*packPlan, string, error) {
	options, why, err := r.optionsFor(ctx, nc, pool)
	if err != nil || why != "" {
		return nil, why, err
	}
	dss, err := cluster.DaemonSets(ctx, r.kube)
	if err != nil {
		return nil, "", err
	}
	if len(batch) == 1 && !options.cheaperHolds(batch[0], dss) {
		return nil, "alone in its batch, on the cheapest type that holds its pods", nil
	}
	nodes, pods, err := r.around(ctx, batch, claims)
	if err != nil {
		return nil, "", err
	}
	prob, from, why := r.problem(options, batch, nodes, pods, dss)
	if why != "" {
		return nil, why, nil
	}
	result, err := repack.Repack(ctx, prob)
	if err != nil {
		// The simulator failed on this batch: it launches as it is.
		klog.FromContext(ctx).Error(err, "Repacking failed; launching the batch as nominated", "nodeClaims", len(batch))
		return nil, "repacking failed: " + err.Error(), nil
	}
	if !result.Changed {
		return nil, "no cheaper packing: " + result.Why, nil
	}
	inBatch := map[string]bool{}
	for _, b := range batch {
		inBatch[b.nc.Name] = true
	}
	for _, bin := range result.Bins {
		if !inBatch[bin.Name] {
			return nil, "the cheaper packing needs more nodes than the batch has claims", nil
		}
	}
	return planOf(result, batch, from, dss), "", nil
}

// packOptions are the instance types the claims of nc's batch may be
// repacked onto: the pool's offerings in the batch's group that are
// available now, one per instance type.
type packOptions struct {
	byName map[string]*repack.Option
	// all are the options in the catalog's order.
	all []*repack.Option
}

// optionsFor reads the options of nc's batch from its pool's catalog; it
// says why not when the catalog cannot be read.
func (r *repacker) optionsFor(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (*packOptions, string, error) {
	group := nodeshape.ClaimGroup(nc)
	zone, capacityType := group.Zone, group.CapacityType
	its, err := cluster.InstanceTypesOf(ctx, r.kube, pool.Name)
	if err != nil {
		return nil, "", err
	}
	template := nodeshape.ForClaim(nc)
	offers, err := nodeshape.Offers(template, its, pool.Spec.Template.Spec.Requirements)
	if err != nil {
		return nil, "the pool's catalog cannot be read: " + err.Error(), nil
	}
	options := &packOptions{byName: map[string]*repack.Option{}}
	for _, o := range offers {
		if !group.Has(o) {
			continue
		}
		if gone, _ := r.unavailable.Unavailable(o.InstanceType.Name, o.Zone, o.CapacityType); gone || options.byName[o.InstanceType.Name] != nil {
			continue
		}
		it := o.InstanceType
		opt := &repack.Option{Name: it.Name, Price: o.Price, Devices: it.ResourceSlices, Node: func(name string) *corev1.Node { return template.Node(name, &it, zone, capacityType) }}
		options.byName[it.Name] = opt
		options.all = append(options.all, opt)
	}
	return options, "", nil
}

// cheaperHolds says whether an option cheaper than the first the claim
// may launch as has room for its pods. Alone in its batch, a claim can
// only shrink: the simulator is asked only then (some pods left while it
// was open, and VirtualNodes does not widen a claim again).
func (o *packOptions) cheaperHolds(b batchMember, dss []*appsv1.DaemonSet) bool {
	pods := make([]*corev1.Pod, len(b.pods))
	for i := range b.pods {
		pods[i] = &b.pods[i]
	}
	var first *repack.Option
	for _, name := range instanceTypes(b.nc) {
		if first = o.byName[name]; first != nil {
			break
		}
	}
	return first != nil && slices.ContainsFunc(o.all, func(opt *repack.Option) bool {
		return opt.Price < first.Price && nodeshape.Holds(opt.Node(b.nc.Name), slices.Concat(pods, simulator.DaemonSetPods(dss, opt.Node(b.nc.Name))))
	})
}

// problem is the batch for repack.Repack, each claim a bin of its pods
// and its available instance types, cheapest first, in the cluster
// around it; with the claim each pod comes from. It says why not when a
// claim has no instance type left.
func (r *repacker) problem(options *packOptions, batch []batchMember, nodes []*corev1.Node, pods []*corev1.Pod, dss []*appsv1.DaemonSet) (repack.Problem, map[types.UID]string, string) {
	fresh := 0
	prob := repack.Problem{
		Scheduler: r.sim, Nodes: nodes, Pods: pods, Catalog: options.all,
		DaemonSetPods: func(n *corev1.Node) []*corev1.Pod { return simulator.DaemonSetPods(dss, n) },
		NewName:       func() string { fresh++; return fmt.Sprintf("repack-%d", fresh) },
	}
	from := map[types.UID]string{}
	for _, b := range batch {
		bin := repack.Bin{Name: b.nc.Name}
		for _, name := range instanceTypes(b.nc) {
			if o := options.byName[name]; o != nil {
				bin.Options = append(bin.Options, o)
			}
		}
		if len(bin.Options) == 0 {
			return repack.Problem{}, nil, "claim " + b.nc.Name + " has no available instance type left"
		}
		slices.SortStableFunc(bin.Options, func(a, b *repack.Option) int { return cmp.Compare(a.Price, b.Price) })
		for i := range b.pods {
			bin.Pods = append(bin.Pods, &b.pods[i])
			from[b.pods[i].UID] = b.nc.Name
		}
		prob.Batch = append(prob.Batch, bin)
	}
	return prob, from, ""
}

// planOf is the plan of a repack's result: what each staying claim is
// launched with, the pods that move (from says where each pod was), and
// the claims emptied.
func planOf(result repack.Plan, batch []batchMember, from map[types.UID]string, dss []*appsv1.DaemonSet) *packPlan {
	plan := &packPlan{Claims: map[string]packedClaim{}, Moves: map[string]map[types.UID]string{}, How: result.How, Before: result.Before, After: result.After}
	for _, bin := range result.Bins {
		name := bin.Name
		pc := packedClaim{Pods: int32(len(bin.Pods))}
		for _, o := range bin.Options {
			if len(pc.InstanceTypes) == maxPackedOptions {
				break
			}
			pc.InstanceTypes = append(pc.InstanceTypes, o.Name)
		}
		pc.Requests = nodeshape.RequestList(slices.Concat(bin.Pods, simulator.DaemonSetPods(dss, bin.Options[0].Node(name))))
		plan.Claims[name] = pc
		for _, pod := range bin.Pods {
			if src := from[pod.UID]; src != name {
				if plan.Moves[src] == nil {
					plan.Moves[src] = map[types.UID]string{}
				}
				plan.Moves[src][pod.UID] = name
			}
		}
	}
	for _, b := range batch {
		if _, ok := plan.Claims[b.nc.Name]; !ok {
			plan.Emptied = append(plan.Emptied, b.nc.Name)
		}
	}
	slices.Sort(plan.Emptied)
	return plan
}

// around is the cluster outside the batch, as the simulator sees it: the
// real nodes (the binding taint lifted, as the bind gate lifts it) with
// the pods bound or being bound to them, and the node of every other claim
// not registered yet with the pods nominated to it.
func (r *repacker) around(ctx context.Context, batch []batchMember, claims []v1alpha1.NodeClaim) ([]*corev1.Node, []*corev1.Pod, error) {
	var nodeList corev1.NodeList
	var podList corev1.PodList
	var all v1alpha1.NodeClaimList
	for _, l := range []client.ObjectList{&nodeList, &podList, &all} {
		if err := r.kube.List(ctx, l); err != nil {
			return nil, nil, err
		}
	}
	inBatch := map[string]bool{}
	for _, b := range batch {
		inBatch[b.nc.Name] = true
	}
	// Every claim outside the batch counts: on its node once it has one,
	// else on a node of its own (Launching), at the instance type it
	// launched as or its cheapest option. Claims being deleted do not:
	// their room is going.
	opts := simulator.SnapshotOptions{LiftTaint: v1alpha1.TaintBinding, ClaimNodes: map[string]string{}, Skip: inBatch}
	typesOf := map[string][]v1alpha1.InstanceType{}
	for i := range all.Items {
		k := &all.Items[i]
		if inBatch[k.Name] || !k.DeletionTimestamp.IsZero() {
			continue
		}
		if k.Status.NodeName != "" {
			opts.ClaimNodes[k.Name] = k.Status.NodeName
			continue
		}
		name := k.Status.InstanceType
		if name == "" && len(instanceTypes(k)) > 0 {
			name = instanceTypes(k)[0]
		}
		if _, ok := typesOf[k.Spec.NodePool]; !ok {
			ts, err := cluster.InstanceTypesOf(ctx, r.kube, k.Spec.NodePool)
			if err != nil {
				return nil, nil, err
			}
			typesOf[k.Spec.NodePool] = ts
		}
		ts := typesOf[k.Spec.NodePool]
		if i := slices.IndexFunc(ts, func(it v1alpha1.InstanceType) bool { return it.Name == name }); i >= 0 {
			g := nodeshape.ClaimGroup(k)
			opts.Launching = append(opts.Launching, nodeshape.ForClaim(k).Node(k.Name, &ts[i], cmp.Or(k.Status.Zone, g.Zone), cmp.Or(k.Status.CapacityType, g.CapacityType)))
		}
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	pods := make([]*corev1.Pod, len(podList.Items))
	for i := range podList.Items {
		pods[i] = &podList.Items[i]
	}
	nodes, pods = simulator.Snapshot(nodes, pods, opts)
	return nodes, pods, nil
}

// finishPlan carries out plan, written on holder: idempotent, so that a
// restart after any step finishes it. Claims already Packed or launched
// (a run that got further) are left as they are.
func (r *repacker) finishPlan(ctx context.Context, holder *v1alpha1.NodeClaim, plan *packPlan) error {
	// The staying claims get their instance types and resources first:
	// none launches before it is marked Packed, last.
	staying, missing, err := r.respec(ctx, holder, plan)
	if err != nil {
		return err
	}
	if err := r.movePods(ctx, plan, missing); err != nil {
		return err
	}
	if err := r.deleteEmptied(ctx, plan); err != nil {
		return err
	}
	return r.markPlanPacked(ctx, holder, plan, staying)
}

// respec gives each staying claim of the plan its instance types,
// resources and pod count, and returns them as written, by name, but for
// those already Packed or launched; missing are those deleted meanwhile.
func (r *repacker) respec(ctx context.Context, holder *v1alpha1.NodeClaim, plan *packPlan) (staying map[string]*v1alpha1.NodeClaim, missing map[string]bool, err error) {
	reader := r.claimReader()
	staying, missing = map[string]*v1alpha1.NodeClaim{}, map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(plan.Claims)) {
		pc := plan.Claims[name]
		k := holder.DeepCopy()
		if name != holder.Name {
			k = &v1alpha1.NodeClaim{}
			if err := reader.Get(ctx, client.ObjectKey{Name: name}, k); err != nil {
				if apierrors.IsNotFound(err) {
					missing[name] = true // deleted meanwhile: the scheduler decides its pods again
					continue
				}
				return nil, nil, err
			}
		}
		if !k.DeletionTimestamp.IsZero() {
			missing[name] = true
			continue
		}
		if isPacked(k) || k.Status.ProviderID != "" {
			continue
		}
		reqs := slices.Clone(k.Spec.Requirements)
		for i := range reqs {
			if reqs[i].Key == corev1.LabelInstanceTypeStable {
				reqs[i].Values = pc.InstanceTypes
			}
		}
		if !equality.Semantic.DeepEqual(reqs, k.Spec.Requirements) || !equality.Semantic.DeepEqual(pc.Requests, k.Spec.Resources.Requests) ||
			k.Spec.NominatedPods != pc.Pods {
			k.Spec.Requirements, k.Spec.Resources.Requests, k.Spec.NominatedPods = reqs, pc.Requests, pc.Pods
			if err := r.kube.Update(ctx, k); err != nil {
				return nil, nil, err
			}
		}
		staying[name] = k
	}
	return staying, missing, nil
}

// movePods moves the plan's pods: each pod still nominated to the claim
// it leaves goes to the claim the plan gives it, unless that claim is
// missing. The patch holds only while the pod is still nominated where
// the plan found it.
func (r *repacker) movePods(ctx context.Context, plan *packPlan, missing map[string]bool) error {
	for src, moves := range plan.Moves {
		pods, err := r.nominatedPods(ctx, src)
		if err != nil {
			return err
		}
		for i := range pods {
			p := &pods[i]
			to, ok := moves[p.UID]
			if !ok || missing[to] {
				continue
			}
			patch := client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, `[{"op":"test","path":"/status/nominatedNodeName","value":%q},{"op":"replace","path":"/status/nominatedNodeName","value":%q}]`, src, to))
			if err := r.kube.Status().Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
				return err
			}
			crashpoint.Hit(crashpoint.MidRepack)
		}
	}
	return nil
}

// deleteEmptied annotates each claim the plan empties with where its pods
// went, and deletes it.
func (r *repacker) deleteEmptied(ctx context.Context, plan *packPlan) error {
	reader := r.claimReader()
	for _, name := range plan.Emptied {
		var k v1alpha1.NodeClaim
		if err := reader.Get(ctx, client.ObjectKey{Name: name}, &k); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		r.packs.mark(r.packs.emptied, k.UID)
		if !k.DeletionTimestamp.IsZero() {
			continue
		}
		into, err := json.Marshal(plan.Moves[name])
		if err != nil {
			return err
		}
		if k.Annotations[v1alpha1.AnnotationRepackedInto] != string(into) {
			if k.Annotations == nil {
				k.Annotations = map[string]string{}
			}
			k.Annotations[v1alpha1.AnnotationRepackedInto] = string(into)
			if err := r.kube.Update(ctx, &k); err != nil {
				return err
			}
		}
		klog.FromContext(ctx).Info("Deleting nodeclaim emptied by a repack", "nodeClaim", name, "podsMoved", len(plan.Moves[name]))
		metrics.ClaimsDeleted.WithLabelValues(k.Spec.NodePool, "Repacked").Inc()
		r.event(&k, corev1.EventTypeNormal, v1alpha1.ReasonRepacked, v1alpha1.ActionDelete, fmt.Sprintf("its %d pods moved to cheaper claims of its batch; not launched", len(plan.Moves[name])))
		if err := client.IgnoreNotFound(r.kube.Delete(ctx, &k)); err != nil {
			return err
		}
	}
	return nil
}

// markPlanPacked marks the staying claims Packed, the plan's holder last:
// they may launch.
func (r *repacker) markPlanPacked(ctx context.Context, holder *v1alpha1.NodeClaim, plan *packPlan, staying map[string]*v1alpha1.NodeClaim) error {
	note := fmt.Sprintf("batch repacked (%s): $%s/h instead of $%s/h", plan.How, dollarsPerHour(plan.After), dollarsPerHour(plan.Before))
	names := slices.DeleteFunc(slices.Sorted(maps.Keys(staying)), func(n string) bool { return n == holder.Name })
	if staying[holder.Name] != nil {
		names = append(names, holder.Name)
	}
	for _, name := range names {
		k := staying[name]
		k.Status.InstanceTypeOptions = int32(len(plan.Claims[name].InstanceTypes))
		if err := r.markPacked(ctx, k, "Repacked", note); err != nil {
			return err
		}
	}
	if staying[holder.Name] != nil {
		r.event(holder, corev1.EventTypeNormal, v1alpha1.ReasonRepacked, v1alpha1.ActionLaunch, fmt.Sprintf("%s; %d claims kept, %d emptied", note, len(plan.Claims), len(plan.Emptied)))
	} else if !isPacked(holder) && holder.DeletionTimestamp.IsZero() {
		// The holder was launched or packed by a run that got further.
		return r.markPacked(ctx, holder, "Repacked", note)
	}
	return nil
}

// markPacked sets the claim's Packed condition True (on nc too): it may
// launch.
func (r *repacker) markPacked(ctx context.Context, nc *v1alpha1.NodeClaim, reason, message string) error {
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPacked, Status: metav1.ConditionTrue, Reason: reason, Message: message})
	if err := r.kube.Status().Update(ctx, nc); err != nil {
		return err
	}
	r.packs.mark(r.packs.done, nc.UID)
	klog.FromContext(ctx).V(2).Info("Nodeclaim packed", "nodeClaim", nc.Name, "reason", reason, "message", message)
	return nil
}
