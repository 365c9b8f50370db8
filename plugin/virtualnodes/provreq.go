package virtualnodes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
)

// A ProvisioningRequest (autoscaling.x-k8s.io/v1) asks for capacity for
// pods that do not exist yet. VirtualNodes serves two classes, with
// Args.ProvisioningRequests on (docs/api.md):
//
//   - check-capacity: the request's pods are placed, by the profile's own
//     plugins, on the nodes that exist and on the virtual nodes already in
//     flight, with every pod there counted. Provisioned is True
//     (CapacityIsFound) when all fit, False (CapacityIsNotFound) when not,
//     and checked again with backoff; Failed with noRetry. Nothing is
//     launched.
//   - best-effort-atomic-scale-up: when the pods fit as above, Provisioned
//     is True (CapacityIsFound) and nothing is launched. Otherwise they
//     are decided as a gang whose minCount is all of them (the PodGroup
//     path): nominated to virtual nodes all, or none. The claims carry
//     v1alpha1.AnnotationProvisioningRequest, the provisioner launches
//     them with no pod (they exist only here) and releases them all when
//     one is given up; the request is then decided afresh. Provisioned is
//     True (CapacityIsProvisioned) once every claim's node is
//     Initialized: the capacity is in the cluster when Kueue admits the
//     workload. The claims are listed in the status's
//     provisioningClassDetails (DetailNodeClaims).
//
// Provisioned True books the capacity for bookingTime: the provisioner
// does not remove the nodes as empty or underused meanwhile. Then
// BookingExpired is True. As with Cluster Autoscaler, other pods may use
// booked room: nothing fences it.

// bookingTime is how long capacity stays booked after Provisioned is
// True: Cluster Autoscaler's 10 minutes.
const bookingTime = 10 * time.Minute

// maxRequestPods bounds the pods of one request, which are held in memory.
const maxRequestPods = 5000

// requestPodPrefix starts the UID of every pod of a ProvisioningRequest:
// they are never API objects.
const requestPodPrefix = "provisioningrequest:"

// claimPoll is how often a request whose claims launch is looked at
// again, claim events aside.
const claimPoll = 5 * time.Second

// isVirtualPod says whether pod is a ProvisioningRequest's or a
// CapacityBuffer's, which exist only in this plugin.
func isVirtualPod(pod *corev1.Pod) bool {
	return strings.HasPrefix(string(pod.UID), requestPodPrefix) || nodeshape.IsBufferPod(pod)
}

// requests serves ProvisioningRequests.
type requests struct {
	p     *VirtualNodes
	c     client.Client
	sched *simulator.Scheduler
	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	nodes corelisters.NodeLister
	pods  corelisters.PodLister
	now   func() time.Time
}

// watchRequests follows ProvisioningRequests and the claims made for
// them, and returns the controller to run once the plugin has synced.
func (p *VirtualNodes) watchRequests(ctx context.Context, cache ctrlcache.Cache, c client.Client, nodes corelisters.NodeLister, pods corelisters.PodLister) (*requests, error) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Second, 2*time.Minute))
	go func() { <-ctx.Done(); q.ShutDown() }()
	inf, err := cache.GetInformer(ctx, &provreqv1.ProvisioningRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s: watching ProvisioningRequests (is the CRD installed?): %w", Name, err)
	}
	add := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pr, ok := obj.(*provreqv1.ProvisioningRequest); ok {
			q.Add(types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }, DeleteFunc: add}); err != nil {
		return nil, err
	}
	return &requests{p: p, c: c, sched: p.requestSched, queue: q, nodes: nodes, pods: pods, now: time.Now}, nil
}

// claimEvent sends the request a claim was made for back to be looked at.
func (r *requests) claimEvent(nc *v1alpha1.NodeClaim) {
	if r == nil {
		return
	}
	if ns, name, ok := strings.Cut(nc.Annotations[v1alpha1.AnnotationProvisioningRequest], "/"); ok {
		r.queue.Add(types.NamespacedName{Namespace: ns, Name: name})
	}
}

// run serves the queue until it is shut down.
func (r *requests) run(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		r.next(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("provisioningRequest", key)), key)
		r.queue.Done(key)
	}
}

func (r *requests) next(ctx context.Context, key types.NamespacedName) {
	after, retry, err := r.reconcile(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Serving ProvisioningRequest; will retry")
		r.queue.AddRateLimited(key)
	case retry:
		r.queue.AddRateLimited(key)
	default:
		r.queue.Forget(key)
		if after > 0 {
			r.queue.AddAfter(key, after)
		}
	}
}

// reconcile answers one request and writes its status if it changed. It
// returns when to look again (after), or that the request is to be
// retried with backoff (retry).
func (r *requests) reconcile(ctx context.Context, key types.NamespacedName) (time.Duration, bool, error) {
	var pr provreqv1.ProvisioningRequest
	if err := r.c.Get(ctx, key, &pr); err != nil {
		if apierrors.IsNotFound(err) {
			r.p.forgetRequest(key)
			return 0, false, nil
		}
		return 0, false, err
	}
	if c := pr.Spec.ProvisioningClassName; c != provreqv1.ClassCheckCapacity && c != provreqv1.ClassBestEffortAtomicScaleUp {
		return 0, false, nil // another autoscaler's class
	}
	conds := pr.Status.Conditions
	if meta.IsStatusConditionTrue(conds, provreqv1.ConditionFailed) || meta.IsStatusConditionTrue(conds, provreqv1.ConditionBookingExpired) {
		r.p.forgetRequest(key)
		return 0, false, nil
	}
	out := pr.DeepCopy()
	after, retry := r.answer(ctx, out)
	if !equality.Semantic.DeepEqual(out.Status, pr.Status) {
		// A merge patch of the status: no conflict with whoever wrote
		// since, so a decision made is never lost to a retry.
		if err := r.c.Status().Patch(ctx, out, client.MergeFrom(&pr)); err != nil {
			return 0, false, err
		}
		if c := meta.FindStatusCondition(out.Status.Conditions, provreqv1.ConditionProvisioned); c != nil {
			klog.FromContext(ctx).Info("Answered ProvisioningRequest", "class", pr.Spec.ProvisioningClassName, "provisioned", c.Status, "reason", c.Reason, "message", c.Message,
				"failed", meta.IsStatusConditionTrue(out.Status.Conditions, provreqv1.ConditionFailed), "nodeClaims", out.Status.ProvisioningClassDetails[provreqv1.DetailNodeClaims])
		}
	}
	return after, retry, nil
}

// setter sets a condition of pr.
func setter(pr *provreqv1.ProvisioningRequest) func(string, metav1.ConditionStatus, string, string) {
	return func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: pr.Generation})
	}
}

// answer sets pr's conditions: what the request gets now.
func (r *requests) answer(ctx context.Context, pr *provreqv1.ProvisioningRequest) (time.Duration, bool) {
	set := setter(pr)
	key := types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name}
	now := r.now()
	set(provreqv1.ConditionAccepted, metav1.ConditionTrue, provreqv1.ReasonAccepted, "ProvisioningRequest is accepted by Nodeforge")
	if why := unsupportedParameter(pr); why != "" {
		set(provreqv1.ConditionFailed, metav1.ConditionTrue, provreqv1.ReasonUnsupportedParameter, why)
		return 0, false
	}
	if c := meta.FindStatusCondition(pr.Status.Conditions, provreqv1.ConditionProvisioned); c != nil && c.Status == metav1.ConditionTrue {
		end := c.LastTransitionTime.Add(bookingTime)
		if now.Before(end) {
			return end.Sub(now), false
		}
		set(provreqv1.ConditionBookingExpired, metav1.ConditionTrue, provreqv1.ReasonCapacityReservationTimeExpired, fmt.Sprintf("Capacity reservation time is expired: booked for %s from %s", bookingTime, c.LastTransitionTime.UTC().Format(time.RFC3339)))
		r.p.forgetRequest(key)
		return 0, false
	}
	if end, ok := validUntil(pr); ok && !now.Before(end) {
		set(provreqv1.ConditionFailed, metav1.ConditionTrue, provreqv1.ReasonExpired, fmt.Sprintf("ProvisioningRequest is expired: its capacity was not provisioned by %s (%s)", end.UTC().Format(time.RFC3339), provreqv1.ParameterValidUntilSeconds))
		r.p.forgetRequest(key)
		return 0, false
	}
	pods, err := r.podsOf(ctx, pr)
	if err != nil {
		set(provreqv1.ConditionFailed, metav1.ConditionTrue, provreqv1.ReasonFailedToCreatePods, "Failed to create pods: "+err.Error())
		return 0, false
	}
	if names := pr.Status.ProvisioningClassDetails[provreqv1.DetailNodeClaims]; names != "" {
		return r.await(ctx, pr, strings.Split(string(names), ","))
	}
	if r.p.holdsRequest(key) {
		// Decided, its status write not in the cache yet.
		return claimPoll, false
	}
	fits, why := r.fitsNow(ctx, pr, pods)
	if fits {
		set(provreqv1.ConditionProvisioned, metav1.ConditionTrue, provreqv1.ReasonCapacityIsFound, fmt.Sprintf("Capacity is found in the cluster: the %d pods fit on the nodes there and in flight", len(pods)))
		return bookingTime, false
	}
	if pr.Spec.ProvisioningClassName == provreqv1.ClassCheckCapacity {
		msg := "Capacity is not found in the cluster: " + why
		if pr.Spec.Parameters[provreqv1.ParameterNoRetry] == "true" {
			set(provreqv1.ConditionFailed, metav1.ConditionTrue, provreqv1.ReasonCapacityIsNotFound, msg)
			return 0, false
		}
		set(provreqv1.ConditionProvisioned, metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound, msg)
		return 0, true
	}
	names, why := r.p.decideRequest(ctx, key, pods)
	if names == nil {
		set(provreqv1.ConditionProvisioned, metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound, "Capacity is not found for all of the request's pods, so none is launched: "+why)
		return 0, true
	}
	if pr.Status.ProvisioningClassDetails == nil {
		pr.Status.ProvisioningClassDetails = map[string]provreqv1.Detail{}
	}
	pr.Status.ProvisioningClassDetails[provreqv1.DetailNodeClaims] = provreqv1.Detail(strings.Join(names, ","))
	set(provreqv1.ConditionProvisioned, metav1.ConditionFalse, provreqv1.ReasonNodeClaimsLaunching, fmt.Sprintf("Launching %d nodeclaims for the request's %d pods: %s", len(names), len(pods), strings.Join(names, ", ")))
	return claimPoll, false
}

// await follows the claims launched for pr: Provisioned once each one's
// node is Initialized; decided afresh, with backoff, when one is gone
// (the provisioner released the others with it).
func (r *requests) await(ctx context.Context, pr *provreqv1.ProvisioningRequest, names []string) (time.Duration, bool) {
	set := setter(pr)
	ready := 0
	for _, name := range names {
		var nc v1alpha1.NodeClaim
		err := r.c.Get(ctx, types.NamespacedName{Name: name}, &nc)
		if apierrors.IsNotFound(err) && r.p.knows(name) {
			return claimPoll, false // not written yet, or not in the cache yet
		}
		_, released := nc.Annotations[v1alpha1.AnnotationReleasedWith]
		if err != nil || nc.DeletionTimestamp != nil || released {
			if err != nil && !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Error(err, "Reading a nodeclaim of the request", "nodeClaim", name)
				return claimPoll, false
			}
			delete(pr.Status.ProvisioningClassDetails, provreqv1.DetailNodeClaims)
			r.p.forgetRequest(types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name})
			set(provreqv1.ConditionProvisioned, metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound, fmt.Sprintf("Capacity is not found: nodeclaim %s of the request was given up, and the request's other claims with it; it is decided again", name))
			return 0, true
		}
		if nc.Status.Phase == v1alpha1.NodeClaimInitialized {
			ready++
		}
	}
	if ready < len(names) {
		return claimPoll, false
	}
	set(provreqv1.ConditionProvisioned, metav1.ConditionTrue, provreqv1.ReasonCapacityIsProvisioned, fmt.Sprintf("Capacity is provisioned: the nodes of nodeclaims %s are initialized and booked for the request's pods for %s", strings.Join(names, ", "), bookingTime))
	r.p.forgetRequest(types.NamespacedName{Namespace: pr.Namespace, Name: pr.Name})
	return bookingTime, false
}

// unsupportedParameter says which parameter of pr Nodeforge does not act
// on, or "".
func unsupportedParameter(pr *provreqv1.ProvisioningRequest) string {
	known := map[string][]string{
		provreqv1.ClassCheckCapacity:           {provreqv1.ParameterNoRetry},
		provreqv1.ClassBestEffortAtomicScaleUp: {provreqv1.ParameterValidUntilSeconds},
	}[pr.Spec.ProvisioningClassName]
	for name, v := range pr.Spec.Parameters {
		if !slices.Contains(known, name) {
			return fmt.Sprintf("parameter %q is not supported by Nodeforge for class %s (supported: %s)", name, pr.Spec.ProvisioningClassName, strings.Join(known, ", "))
		}
		if name == provreqv1.ParameterNoRetry && v != "true" && v != "false" {
			return fmt.Sprintf("parameter %s must be \"true\" or \"false\", not %q", name, v)
		}
	}
	if _, ok := pr.Spec.Parameters[provreqv1.ParameterValidUntilSeconds]; ok {
		if _, ok := validUntil(pr); !ok {
			return fmt.Sprintf("parameter %s must be a whole number of seconds above 0, not %q", provreqv1.ParameterValidUntilSeconds, pr.Spec.Parameters[provreqv1.ParameterValidUntilSeconds])
		}
	}
	return ""
}

// validUntil is when a best-effort-atomic-scale-up request that names
// ValidUntilSeconds fails if not provisioned: that long after its
// creation.
func validUntil(pr *provreqv1.ProvisioningRequest) (time.Time, bool) {
	v, ok := pr.Spec.Parameters[provreqv1.ParameterValidUntilSeconds]
	if !ok {
		return time.Time{}, false
	}
	var s int64
	if _, err := fmt.Sscanf(string(v), "%d", &s); err != nil || s <= 0 || fmt.Sprint(s) != string(v) {
		return time.Time{}, false
	}
	return pr.CreationTimestamp.Add(time.Duration(s) * time.Second), true
}

// podsOf makes the request's pods from its PodTemplates: count of each,
// named <request>-<podSet>-<i>, with the annotations Kueue's pods carry.
// They are never created.
func (r *requests) podsOf(ctx context.Context, pr *provreqv1.ProvisioningRequest) ([]*corev1.Pod, error) {
	total := 0
	for _, ps := range pr.Spec.PodSets {
		total += int(ps.Count)
	}
	if total > maxRequestPods {
		return nil, fmt.Errorf("the request asks for %d pods; Nodeforge decides at most %d in one request", total, maxRequestPods)
	}
	pods := make([]*corev1.Pod, 0, total)
	for i, ps := range pr.Spec.PodSets {
		var tpl corev1.PodTemplate
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: pr.Namespace, Name: ps.PodTemplateRef.Name}, &tpl); err != nil {
			return nil, fmt.Errorf("podSets[%d]: PodTemplate %s/%s: %w", i, pr.Namespace, ps.PodTemplateRef.Name, err)
		}
		for j := range int(ps.Count) {
			pod := &corev1.Pod{ObjectMeta: *tpl.Template.ObjectMeta.DeepCopy(), Spec: *tpl.Template.Spec.DeepCopy()}
			pod.Namespace, pod.Name = pr.Namespace, fmt.Sprintf("%s-%d-%d", pr.Name, i, j)
			pod.UID = types.UID(fmt.Sprintf("%s%s/%d/%d", requestPodPrefix, pr.UID, i, j))
			pod.CreationTimestamp = pr.CreationTimestamp
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Annotations[provreqv1.AnnotationConsumeRequest] = pr.Name
			pod.Annotations[provreqv1.AnnotationProvisioningClass] = pr.Spec.ProvisioningClassName
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// fitsNow places pods, one after another, on the cluster's nodes and the
// virtual nodes in flight, every pod there counted, with the profile's
// plugins: whether all fit, and why not. Capacity booked for another
// request is not room: the claims in flight for one, and the nodes
// launched for one whose booking lasts, until one of its pods runs there.
func (r *requests) fitsNow(ctx context.Context, pr *provreqv1.ProvisioningRequest, pods []*corev1.Pod) (bool, string) {
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return false, err.Error()
	}
	all, err := r.pods.List(labels.Everything())
	if err != nil {
		return false, err.Error()
	}
	booked, err := r.bookedNodes(ctx, pr, all)
	if err != nil {
		return false, err.Error()
	}
	view := simulator.NewCluster(nodes, all).Without(booked...)
	r.p.addInFlight(view)
	for i, pod := range pods {
		if _, st := r.sched.Place(ctx, view, pod); !st.IsSuccess() {
			return false, fmt.Sprintf("pod %d of %d (%s) fits no node: %s", i+1, len(pods), pod.Name, st.Message())
		}
	}
	return true, ""
}

// addInFlight adds the claims in flight (no node registered yet) to
// view, with the pods nominated to them and their daemonset pods.
func (p *VirtualNodes) addInFlight(view *simulator.View) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.book.inFlightClaims() {
		if c.request != "" || c.written != nil && c.written.Annotations[v1alpha1.AnnotationProvisioningRequest] != "" {
			continue // booked for a request
		}
		if len(c.options) == 0 {
			continue
		}
		// The cheapest option is what launches: room only a larger one
		// would have is not room.
		view.Add(c.node(c.options[0]))
		for _, pod := range c.info.Pods {
			_ = view.Bind(pod.GetPod(), c.name)
		}
	}
}

// decideRequest decides a request's pods as one gang: nominated to
// virtual nodes all, or none. It returns the claims they went to, or nil
// and why not.
func (p *VirtualNodes) decideRequest(ctx context.Context, key types.NamespacedName, pods []*corev1.Pod) ([]string, string) {
	unlock, st, _ := p.lockSynced(ctx, klog.KRef(key.Namespace, key.Name))
	if unlock == nil {
		return nil, st.Message()
	}
	defer unlock()
	p.forgetRequestLocked(key)
	p.book.hold()
	defer p.book.release()
	d := p.decideGroup(ctx, pods, "", "")
	if placed := len(d.out.NominatingInfos); placed < len(pods) {
		p.undo(d)
		for _, why := range d.refused {
			return nil, fmt.Sprintf("%d of its %d pods can have a node; %s", placed, len(pods), why)
		}
		return nil, fmt.Sprintf("%d of its %d pods can have a node", placed, len(pods))
	}
	var names []string
	for _, t := range d.made {
		// Only a claim the decision made is the request's: an open
		// claim it joined launches for its own pods too.
		if t.isNew {
			t.c.request = key.String()
		}
		t.c.dirty = true
		if !slices.Contains(names, t.c.name) {
			names = append(names, t.c.name)
		}
	}
	p.requestPods[key] = pods
	slices.Sort(names)
	klog.FromContext(ctx).Info("Nominated the pods of a ProvisioningRequest to nodeclaims", "pods", len(pods), "nodeClaims", names)
	return names, ""
}

// forgetRequest takes a request's pods off the claims they were
// nominated to.
func (p *VirtualNodes) forgetRequest(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgetRequestLocked(key)
}

func (p *VirtualNodes) forgetRequestLocked(key types.NamespacedName) {
	for _, pod := range p.requestPods[key] {
		p.book.podGone(pod, true)
	}
	delete(p.requestPods, key)
}

// requestScheduler is the simulator that places a request's pods on the
// nodes there and in flight: the profile's plugins, VirtualNodes left out.
func requestScheduler(ctx context.Context, cfg *config.KubeSchedulerConfiguration, profile *config.KubeSchedulerProfile, newRegistry func() (frameworkruntime.Registry, error), h fwk.Handle) (*simulator.Scheduler, error) {
	registry, err := newRegistry()
	if err != nil {
		return nil, err
	}
	shared := simulator.Shared{DRA: h.SharedDRAManager(), Options: []frameworkruntime.Option{
		frameworkruntime.WithClientSet(h.ClientSet()),
		frameworkruntime.WithKubeConfig(h.KubeConfig()),
		frameworkruntime.WithInformerFactory(h.SharedInformerFactory()),
		frameworkruntime.WithSharedCSIManager(h.SharedCSIManager()),
	}}
	return simulator.NewScheduler(ctx, registry, profile, cfg.PercentageOfNodesToScore, shared, Name)
}

// bookedNodes are the nodes launched for a ProvisioningRequest other than
// pr whose booking lasts and on which none of its pods runs yet.
func (r *requests) bookedNodes(ctx context.Context, pr *provreqv1.ProvisioningRequest, pods []*corev1.Pod) ([]string, error) {
	var claims v1alpha1.NodeClaimList
	if err := r.c.List(ctx, &claims); err != nil {
		return nil, err
	}
	self := pr.Namespace + "/" + pr.Name
	var out []string
	for i := range claims.Items {
		nc := &claims.Items[i]
		req := nc.Annotations[v1alpha1.AnnotationProvisioningRequest]
		ns, name, ok := strings.Cut(req, "/")
		if !ok || req == self || nc.Status.NodeName == "" {
			continue
		}
		consumed := slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == nc.Status.NodeName && p.Namespace == ns && p.Annotations[provreqv1.AnnotationConsumeRequest] == name
		})
		if consumed {
			continue
		}
		var other provreqv1.ProvisioningRequest
		switch err := r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &other); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		}
		c := other.Status.Conditions
		if !meta.IsStatusConditionTrue(c, provreqv1.ConditionFailed) && !meta.IsStatusConditionTrue(c, provreqv1.ConditionBookingExpired) {
			out = append(out, nc.Status.NodeName)
		}
	}
	return out, nil
}

// knows says whether the book holds a claim of that name: one written
// since, or about to be.
func (p *VirtualNodes) knows(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.book.claim(name) != nil
}

// holdsRequest says whether the request's pods are nominated to claims.
func (p *VirtualNodes) holdsRequest(key types.NamespacedName) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requestPods[key]) > 0
}

// lateVirtual handles a request's pod or a buffer's chunk that a claim
// closed before its nomination was written left: a request is decided
// again (its claims released with the pods it held), a buffer's chunk is
// placed again at the buffer's next look. Callers hold p.mu.
func (p *VirtualNodes) lateVirtual(pod *corev1.Pod) {
	if nodeshape.IsBufferPod(pod) {
		return
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Annotations[provreqv1.AnnotationConsumeRequest]}
	p.forgetRequestLocked(key)
	if p.requests != nil {
		p.requests.queue.Add(key)
	}
}
