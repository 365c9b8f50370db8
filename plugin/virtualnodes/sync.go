package virtualnodes

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
)

// startSync connects the plugin to the API server: it watches NodePools,
// their catalogs and NodeClaims, follows pods and DaemonSets through the
// scheduler's informers, rebuilds the open claims after a restart, and
// writes nominations in the background. The informers and their handlers
// are added in the order they must start.
func (p *VirtualNodes) startSync(ctx context.Context, h fwk.Handle) error {
	logger := klog.FromContext(ctx).WithName(Name)
	p.activate = func(pods map[string]*corev1.Pod) { h.Activate(logger, pods) }
	cache, c, err := newSyncClient(h)
	if err != nil {
		return err
	}
	resyncs, err := watchPools(ctx, cache)
	if err != nil {
		return err
	}
	if err := p.watchClaims(ctx, cache); err != nil {
		return err
	}
	pods := h.SharedInformerFactory().Core().V1().Pods()
	if err := p.watchPods(pods.Informer()); err != nil {
		return err
	}
	p.nodes = h.SharedInformerFactory().Core().V1().Nodes().Lister()
	if p.args.ProvisioningRequests {
		if p.requests, err = p.watchRequests(ctx, cache, c, p.nodes, pods.Lister()); err != nil {
			return err
		}
	}
	if p.args.CapacityBuffers {
		if p.buffers, err = p.watchBuffers(ctx, cache, c, p.nodes, pods.Lister()); err != nil {
			return err
		}
	}
	p.decider.daemonSets = daemonSetPods(logger, h.SharedInformerFactory().Apps().V1().DaemonSets().Lister())

	go func() {
		if err := cache.Start(ctx); err != nil {
			logger.Error(err, "Cache stopped")
		}
	}()
	go p.runSync(ctx, cache, c, resyncs, pods)
	if p.requests != nil || p.buffers != nil {
		go func() {
			select {
			case <-p.synced:
			case <-ctx.Done():
				return
			}
			if p.buffers != nil {
				go p.buffers.run(ctx)
			}
			if p.requests != nil {
				p.requests.run(ctx)
			}
		}()
	}
	return nil
}

// newSyncClient builds the cache and the client, reading through it, that
// the plugin uses for Nodeforge's types.
func newSyncClient(h fwk.Handle) (ctrlcache.Cache, client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := provreqv1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := bufferv1beta1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	// The scheduler speaks protobuf; Nodeforge's types are JSON only.
	cfg := rest.CopyConfig(h.KubeConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	cache, err := ctrlcache.New(cfg, ctrlcache.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: creating cache: %w", Name, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: cache}})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: creating client: %w", Name, err)
	}
	return cache, c, nil
}

// watchPools asks for a resync of the pools on every NodePool and catalog
// event, and returns the queue those requests go to. The queue is shut
// down when ctx ends.
//
// The queue holds one key: a burst of events makes one resync, one runs
// at a time, and a failed one is retried with backoff.
func watchPools(ctx context.Context, cache ctrlcache.Cache) (workqueue.TypedRateLimitingInterface[string], error) {
	resyncs := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, time.Minute))
	go func() { <-ctx.Done(); resyncs.ShutDown() }()
	resync := func() { resyncs.Add(resyncPoolsKey) }
	poolHandler := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { resync() }, UpdateFunc: func(any, any) { resync() }, DeleteFunc: func(any) { resync() },
	}
	for _, obj := range []client.Object{&v1alpha1.NodePool{}, &v1alpha1.InstanceTypeCatalog{}} {
		inf, err := cache.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(poolHandler); err != nil {
			return nil, err
		}
	}
	return resyncs, nil
}

// watchClaims follows NodeClaims: a claim added or changed goes to
// claimChanged, one deleted to claimDeleted.
func (p *VirtualNodes) watchClaims(ctx context.Context, cache ctrlcache.Cache) error {
	claimInf, err := cache.GetInformer(ctx, &v1alpha1.NodeClaim{})
	if err != nil {
		return err
	}
	_, err = claimInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.claimChanged(obj.(*v1alpha1.NodeClaim)) },
		UpdateFunc: func(_, obj any) { p.claimChanged(obj.(*v1alpha1.NodeClaim)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if nc, ok := obj.(*v1alpha1.NodeClaim); ok {
				p.claimDeleted(nc)
			}
		},
	})
	return err
}

// watchPods follows pods through the scheduler's informer: bound, their
// nomination cleared or moved, or deleted.
func (p *VirtualNodes) watchPods(inf toolscache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			pod := obj.(*corev1.Pod)
			switch {
			case pod.Spec.NodeName != "":
				p.podGone(pod, false)
			case pod.Status.NominatedNodeName == "":
				// The provisioner cleared the nomination: the pod did not
				// fit the node after all and must be decided again.
				p.nominationCleared(pod)
			default:
				// The provisioner may have moved it to another closed
				// claim of its batch (a repack before launch).
				p.nominationMoved(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.podGone(pod, true)
			}
		},
	})
	return err
}

// daemonSetPods returns the function that lists the pods the DaemonSets
// in dsLister would put on a node.
func daemonSetPods(logger klog.Logger, dsLister appslisters.DaemonSetLister) func(*corev1.Node) []*corev1.Pod {
	return func(node *corev1.Node) []*corev1.Pod {
		dss, err := dsLister.List(labels.Everything())
		if err != nil {
			// An informer's lister reads its local store and does not
			// fail today; were it to, say what the decision lacks.
			logger.Error(err, "Listing daemonsets; sizing the node without their pods", "node", node.Name)
			return nil
		}
		return simulator.DaemonSetPods(dss, node)
	}
}

// runSync waits for the caches, resyncs the pools until one resync
// succeeds, lets decisions rebuild the open claims, marks the plugin
// synced and writes nominations until ctx ends.
func (p *VirtualNodes) runSync(ctx context.Context, cache ctrlcache.Cache, c client.Client, resyncs workqueue.TypedRateLimitingInterface[string], pods coreinformers.PodInformer) {
	if !cache.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		return
	}
	// No decision before the pools are known: resync until one
	// succeeds, then keep resyncing on events in the background.
	resyncs.Add(resyncPoolsKey)
	for !p.resyncNext(ctx, c, resyncs) {
		if ctx.Err() != nil {
			return
		}
	}
	go func() {
		for ctx.Err() == nil {
			p.resyncNext(ctx, c, resyncs)
		}
	}()
	p.mu.Lock()
	p.rebuildFrom = func(ctx context.Context) error { return p.rebuild(ctx, c, pods.Lister().List) }
	p.mu.Unlock()
	close(p.synced)
	p.writeLoop(ctx, c)
}

// resyncPoolsKey is the one key of the pool resync queue.
const resyncPoolsKey = "pools"

// resyncNext takes the next resync request off q and runs it: whether it
// succeeded. A failure is logged and put back with backoff; the pools stay
// as they were meanwhile. It returns false at once when q is shut down.
func (p *VirtualNodes) resyncNext(ctx context.Context, c client.Reader, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := p.resyncPools(ctx, c); err != nil {
		klog.FromContext(ctx).Error(err, "Rebuilding pools from nodepools and catalogs; keeping the pools as they were and retrying", "retries", q.NumRequeues(key))
		q.AddRateLimited(key)
		return false
	}
	q.Forget(key)
	return true
}

// resyncPools rebuilds the pools from the cached NodePools and catalogs.
func (p *VirtualNodes) resyncPools(ctx context.Context, c client.Reader) error {
	var nps v1alpha1.NodePoolList
	var cats v1alpha1.InstanceTypeCatalogList
	if err := c.List(ctx, &nps); err != nil {
		return fmt.Errorf("listing nodepools: %w", err)
	}
	if err := c.List(ctx, &cats); err != nil {
		return fmt.Errorf("listing instancetypecatalogs: %w", err)
	}
	byPool := v1alpha1.ByPool(cats.Items)
	pools, errs := poolsFrom(nps.Items, byPool)
	for _, err := range errs {
		klog.FromContext(ctx).Error(err, "Ignoring nodepool")
	}
	inputs := poolInputsOf(pools, byPool)
	p.mu.Lock()
	defer p.mu.Unlock()
	// A pool's status written, a catalog part of a pool not yet whole:
	// nothing a decision reads changed, so nothing is rebuilt and no
	// refused pod is tried again. A new pool's catalog is written one
	// family object at a time; its pods are tried once it is whole, not
	// once per object.
	if p.poolInputs != nil && equality.Semantic.DeepEqual(p.poolInputs, inputs) {
		klog.FromContext(ctx).V(4).Info("Pools unchanged", "pools", len(pools))
		return nil
	}
	p.poolInputs = inputs
	// Open claims keep pointing at their old pool objects; their options
	// stay as they were nominated.
	p.setPools(pools)
	p.retryRefused("pools or catalogs changed")
	klog.FromContext(ctx).V(2).Info("Pools updated", "pools", len(pools))
	return nil
}

// poolInput is what a pool is built from: its NodePool (its UID, which
// its claims' owner references carry, and its spec) and its merged
// catalog's instance types. Not the NodePool's status, which the
// provisioner writes as its nodes change.
//
// Its fields are exported for equality.Semantic, which compares
// quantities by value and refuses unexported fields.
type poolInput struct {
	UID   types.UID
	Spec  v1alpha1.NodePoolSpec
	Types []v1alpha1.InstanceType
}

// poolInputsOf is what pools were built from, by pool name.
func poolInputsOf(pools []*pool, cats map[string]*v1alpha1.InstanceTypeCatalog) map[string]poolInput {
	out := make(map[string]poolInput, len(pools))
	for _, pl := range pools {
		out[pl.np.Name] = poolInput{UID: pl.np.UID, Spec: pl.np.Spec, Types: cats[pl.np.Name].Spec.InstanceTypes}
	}
	return out
}

// rebuild replaces the claims held in memory with the ones in the API
// server: the NodeClaims still Nominating and the pods whose
// nominatedNodeName names them. It runs before this process makes its
// first decision, which is after it became the leader: a standby that
// takes over rebuilds from what the old leader wrote, not from what it saw
// when it started. Callers hold p.mu.
func (p *VirtualNodes) rebuild(ctx context.Context, c client.Reader, listPods func(labels.Selector) ([]*corev1.Pod, error)) error {
	logger := klog.FromContext(ctx)
	var ncs v1alpha1.NodeClaimList
	if err := c.List(ctx, &ncs); err != nil {
		return fmt.Errorf("listing nodeclaims to rebuild: %w", err)
	}
	pods, err := listPods(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods to rebuild: %w", err)
	}
	p.book.reset()
	byClaim := map[string][]*corev1.Pod{}
	for _, pod := range pods {
		if pod.Spec.NodeName == "" && pod.Status.NominatedNodeName != "" {
			byClaim[pod.Status.NominatedNodeName] = append(byClaim[pod.Status.NominatedNodeName], pod)
		}
	}
	restored := 0
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if p.book.claim(nc.Name) != nil || nc.DeletionTimestamp != nil {
			continue
		}
		if nc.Status.Phase != "" && nc.Status.Phase != v1alpha1.NodeClaimNominating {
			// Closed: its pods keep their nomination while it launches,
			// and count on its node until they are bound; they wait for
			// its node (Filter).
			if cl := p.restore(nc, byClaim[nc.Name]); cl != nil {
				cl.nodeName = nc.Status.NodeName
				p.book.restore(cl)
				p.book.close(cl)
			} else {
				p.book.restoreClosed(nc.Name, nc.Status.NodeName, byClaim[nc.Name])
			}
			continue
		}
		cl := p.restore(nc, byClaim[nc.Name])
		// A claim made for a ProvisioningRequest or a CapacityBuffer
		// counts pods that are not API objects: its spec is kept as
		// written, or it would launch for its daemonsets alone.
		virtual := nc.Annotations[v1alpha1.AnnotationProvisioningRequest] != "" || nc.Annotations[v1alpha1.AnnotationCapacityBuffer] != ""
		if cl != nil && int32(len(cl.pods)) != nc.Spec.NominatedPods && !virtual {
			// Nominations made after the claim's last write, before the
			// restart: written again, or the provisioner waits for a
			// write that would not come (schedulerAhead).
			cl.dirty = true
		}
		if cl == nil {
			logger.Info("Cannot restore nodeclaim: its pool or instance types are gone", "nodeClaim", klog.KObj(nc), "nodePool", nc.Spec.NodePool)
			continue
		}
		p.book.restore(cl)
		restored++
	}
	p.replanDevices(ctx)
	logger.Info("Restored open nodeclaims", "nodeClaims", restored, "nominatedPods", p.book.nominations())
	return nil
}

// replanDevices plans again the DRA devices of the restored claims' pods,
// which a restart forgot: each pod with ResourceClaims, on its claim's
// node, as when it was nominated, in name order. A pod its node no longer
// takes keeps its nomination; the provisioner's gate judges it on the real
// node, and it is decided afresh if refused there.
func (p *VirtualNodes) replanDevices(ctx context.Context) {
	if p.devices == nil {
		return
	}
	for _, c := range p.book.restored() {
		pods := slices.Collect(maps.Values(c.pods))
		slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
		for _, pod := range pods {
			if !needsDevices(pod) {
				continue
			}
			if why := p.decider.replan(ctx, c, pod, p.devices.Plan); why != "" {
				klog.FromContext(ctx).Info("Cannot plan the devices of a restored pod on its claim's node; the node will judge it", "pod", klog.KObj(pod), "nodeClaim", c.name, "reason", why)
			}
		}
	}
}

// restore builds one claim from its NodeClaim, open, with its pods, for
// the book to restore; nil when its group no longer exists.
func (p *VirtualNodes) restore(nc *v1alpha1.NodeClaim, pods []*corev1.Pod) *claim {
	pl := p.pools[nc.Spec.NodePool]
	if pl == nil {
		return nil
	}
	// The claim's requirements pin its zone, capacity type and
	// architecture and list its open instance types: its options are the
	// pool's that meet them, read as the scheduler reads node affinity.
	template := nodeshape.ForClaim(nc)
	for _, g := range pl.groups {
		var opts []*option
		for _, o := range g.options {
			if ok, _ := nodeshape.Accepts(template, nc.Spec.Requirements, o.it, g.zone, g.capacityType); ok {
				opts = append(opts, o)
			}
		}
		if len(opts) == 0 {
			continue
		}
		cl := &claim{name: nc.Name, group: g, template: template, info: framework.NewNodeInfo(), pods: map[types.UID]*corev1.Pod{}, created: nc.CreationTimestamp.Time, open: true, written: nc}
		cl.setOptions(opts)
		cl.dsPods = p.decider.daemonSetPods(cl.info.Node())
		for _, d := range cl.dsPods {
			cl.info.AddPod(d)
		}
		for _, pod := range pods {
			cl.pods[pod.UID] = pod
			cl.info.AddPod(pod)
		}
		if nc.Spec.LastNominationTime != nil {
			cl.lastAdded = nc.Spec.LastNominationTime.Time
		}
		return cl
	}
	return nil
}

// claimChanged closes a claim the provisioner has closed to nominations,
// and counts it against its pool's limits from then on.
func (p *VirtualNodes) claimChanged(nc *v1alpha1.NodeClaim) {
	p.requests.claimEvent(nc)
	if nc.Status.Phase == "" || nc.Status.Phase == v1alpha1.NodeClaimNominating {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := slices.DeleteFunc(p.book.committedChanged(nc), isVirtualPod)
	if nc.Status.Phase == v1alpha1.NodeClaimInitialized {
		p.dropVirtual(nc.Name)
	}
	// The claim's node was named after it opened (the two informers
	// do not keep each other's order): the queueing hint could not tie
	// the node to the claim, so its gated pods are sent back here.
	if len(pods) > 0 && p.nodeOpen(nc.Status.NodeName) && p.activate != nil {
		batch := make(map[string]*corev1.Pod, len(pods))
		for _, pod := range pods {
			batch[pod.Namespace+"/"+pod.Name] = pod
		}
		klog.Background().V(2).Info("Sending pods back to the scheduler: their claim's node is open", "nodeClaim", nc.Name, "node", nc.Status.NodeName, "pods", len(batch))
		p.activate(batch)
	}
}

// dropVirtual takes a ProvisioningRequest's pods and a CapacityBuffer's
// chunks off a claim whose node is initialized (untainted, ready): the
// node itself holds their room now. Callers hold p.mu.
func (p *VirtualNodes) dropVirtual(name string) {
	c := p.book.claim(name)
	if c == nil {
		return
	}
	for _, pod := range slices.Collect(maps.Values(c.pods)) {
		if isVirtualPod(pod) && p.book.nominatedTo(pod.UID) == c {
			p.book.podGone(pod, true)
		}
	}
}

// claimDeleted forgets a claim; pods nominated to it get a new one on
// retry, but for those a repack moved to another claim of its batch
// (AnnotationRepackedInto), which count there from now on.
func (p *VirtualNodes) claimDeleted(deleted *v1alpha1.NodeClaim) {
	p.requests.claimEvent(deleted)
	name := deleted.Name
	var into map[types.UID]string
	if raw := deleted.Annotations[v1alpha1.AnnotationRepackedInto]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &into); err != nil {
			klog.Background().Error(err, "Reading where a repacked nodeclaim's pods went; deciding them again", "nodeClaim", name)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	why := "nodeclaim " + name + " deleted"
	if c := p.book.deleted(name, into != nil, p.now()); c != nil {
		for uid, pod := range c.pods {
			if to, ok := into[uid]; ok {
				// The repack's own record: a move, even back to a claim
				// the pod was taken off before.
				p.book.forgetLeft(uid)
				p.book.follow(pod, to)
			}
		}
		p.forget(c, why)
		return
	}
	// Capacity it held is free again: pods refused at a limit may fit.
	p.retryRefused(why)
}

// forget drops a claim and sends its pods back to be decided again at
// once, not after minutes. Callers hold p.mu.
func (p *VirtualNodes) forget(c *claim, why string) {
	for _, pod := range p.book.forget(c) {
		if !isVirtualPod(pod) { // its request or buffer decides it again
			p.refused[pod.UID] = pod
		}
	}
	p.retryRefused(why)
}

// nominationCleared forgets the claim of a pod whose nomination the
// provisioner cleared. Claims still open are left alone: the scheduler
// writes a new nomination only after PostFilter returns.
func (p *VirtualNodes) nominationCleared(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.book.nominatedTo(pod.UID); c != nil && !c.open {
		p.book.unview(c, pod)
		p.refused[pod.UID] = pod
		p.retryRefused("nomination cleared")
	}
}

// nominationMoved follows a pod the provisioner moved from one closed
// claim to another (a repack). A pod with ResourceClaims has its devices
// planned again on its new claim's node, which publishes the same devices
// as its old one (the repack keeps it on such types): its plan there went
// with the move.
func (p *VirtualNodes) nominationMoved(pod *corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.book.follow(pod, pod.Status.NominatedNodeName) || p.devices == nil || !needsDevices(pod) {
		return
	}
	c := p.book.nominatedTo(pod.UID)
	if c == nil {
		return
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	if why := p.decider.replan(ctx, c, pod, p.devices.Plan); why != "" {
		klog.Background().Info("Cannot plan the devices of a pod moved to another nodeclaim; the node will judge it", "pod", klog.KObj(pod), "nodeClaim", c.name, "reason", why)
	}
}

// podGone takes a pod that was bound or deleted off its claim (see
// book.podGone); it is no longer refused.
func (p *VirtualNodes) podGone(pod *corev1.Pod, deleted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.book.podGone(pod, deleted) {
		delete(p.refused, pod.UID)
	}
}

// errNotOurs says a claim's name is taken by a claim this plugin did not
// make.
var errNotOurs = errors.New("a nodeclaim of that name already exists and is not this one")

// adoptExisting handles a create that found the claim already there. When
// it is this claim (an earlier create whose answer was lost, same UID not
// known yet but still open and nominating), the write goes on as an
// update of it; anything else is a conflict, so the claim is forgotten
// and its pods are retried (errNotOurs). A claim of the same pool made
// from another template or node class is not this one either: the API
// server refuses the update, as those fields are immutable.
func (p *VirtualNodes) adoptExisting(ctx context.Context, c client.Client, obj *v1alpha1.NodeClaim) error {
	var existing v1alpha1.NodeClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &existing); err != nil {
		return err
	}
	if existing.Spec.NodePool != obj.Spec.NodePool || existing.DeletionTimestamp != nil ||
		(existing.Status.Phase != "" && existing.Status.Phase != v1alpha1.NodeClaimNominating) {
		return fmt.Errorf("%w: pool %s, phase %q", errNotOurs, existing.Spec.NodePool, existing.Status.Phase)
	}
	obj.ResourceVersion, obj.UID = existing.ResourceVersion, existing.UID
	err := c.Update(ctx, obj)
	if apierrors.IsInvalid(err) {
		return fmt.Errorf("%w: %w", errNotOurs, err)
	}
	return err
}

// writeLoop writes dirty claims every WriteInterval until ctx ends.
func (p *VirtualNodes) writeLoop(ctx context.Context, c client.Client) {
	t := time.NewTicker(p.args.WriteInterval.Duration)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.flush(ctx, c)
		}
	}
}

// flush writes every claim changed since the last flush, in one request
// each: its create, or an update of its spec (requirements, resources,
// nominated pods and last nomination time). A conflict means the
// provisioner closed the claim: it is taken out of the view and its
// newest nominations are retried by the scheduler.
func (p *VirtualNodes) flush(ctx context.Context, c client.Client) {
	logger := klog.FromContext(ctx)
	p.mu.Lock()
	writes := p.book.dirty()
	p.mu.Unlock()

	for _, w := range writes {
		var err error
		if w.create {
			err = c.Create(ctx, w.obj)
			if apierrors.IsAlreadyExists(err) {
				err = p.adoptExisting(ctx, c, w.obj)
			}
			if err == nil {
				crashpoint.Hit(crashpoint.SchedulerAfterClaimCreate)
			}
		} else {
			err = c.Update(ctx, w.obj)
		}
		p.mu.Lock()
		switch {
		case err == nil:
			w.cl.specPods = w.pods
			w.cl.written = w.obj
			logger.Info("Nominated pods to nodeclaim", "nodeClaim", w.cl.name, "nodePool", w.cl.group.pool.np.Name, "zone", w.cl.group.zone,
				"capacityType", w.cl.group.capacityType, "pods", len(w.cl.pods), "instanceTypes", len(w.cl.options), "cheapest", w.cl.describe())
		case apierrors.IsConflict(err):
			// The provisioner closed the claim with the spec it last read,
			// which counts only the pods of the last spec written: the
			// instance it launches holds those. The pods nominated since
			// are decided again now, rather than found not to fit once
			// the node is up (in a paced scale-up, a claim closed between
			// two bursts of pods left 12 pods waiting 2 s each for their
			// refusal to be confirmed, then for a new node).
			late := p.book.closeAt(w.cl, w.cl.specPods)
			logger.Info("Nodeclaim changed under the scheduler; closing it to nominations", "nodeClaim", w.cl.name, "podsDecidedAgain", len(late))
			if len(late) > 0 {
				for _, pod := range late {
					if isVirtualPod(pod) {
						p.lateVirtual(pod)
						continue
					}
					p.refused[pod.UID] = pod
				}
				p.retryRefused("nodeclaim " + w.cl.name + " closed before its last nominations were written")
			}
		case errors.Is(err, errNotOurs):
			logger.Info("Nodeclaim name taken by another claim; its pods will be nominated again", "nodeClaim", w.cl.name, "reason", err.Error())
			p.forget(w.cl, "nodeclaim name "+w.cl.name+" taken")
		case apierrors.IsNotFound(err) && !w.create:
			// The provisioner deleted the claim (it had no nominated pod
			// when it looked) and no delete event came: the informer never
			// saw the claim, as when the API server restarted between its
			// create and its delete. Retrying would fail for ever; it is
			// forgotten as claimDeleted forgets it. Seen under load:
			// TestCrashes, kube-apiserver SIGKILLed as a drain starts.
			why := "nodeclaim " + w.cl.name + " deleted"
			logger.Info("Nodeclaim deleted under the scheduler; its pods will be nominated again", "nodeClaim", w.cl.name)
			if c := p.book.deleted(w.cl.name, false, p.now()); c != nil {
				p.forget(c, why)
			} else {
				p.retryRefused(why)
			}
		default:
			logger.Error(err, "Writing nodeclaim; will retry", "nodeClaim", w.cl.name)
			w.cl.dirty = true
		}
		p.mu.Unlock()
	}
}
