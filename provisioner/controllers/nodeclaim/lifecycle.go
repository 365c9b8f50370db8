// Package nodeclaim runs a NodeClaim's life after the scheduler has
// nominated pods to it: it closes the claim when the batch window ends,
// launches its instance, adopts the node that registers, binds the
// nominated pods to it, and terminates the instance when the claim goes.
package nodeclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/controllers/catalog"
	"github.com/nodeforge/nodeforge/provisioner/crashpoint"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Field indexes the controller relies on.
const (
	indexNominated  = "status.nominatedNodeName"
	indexPodNode    = "spec.nodeName"
	indexProviderID = "spec.providerID"
	// On NodeClaims.
	indexClaimNode       = "status.nodeName"
	indexClaimProviderID = "status.providerID"
)

// Options are the batching and registration settings.
type Options struct {
	// BatchIdle: a claim launches once no pod was nominated to it for this long...
	BatchIdle time.Duration
	// BatchMax: ...or once it has been open this long.
	BatchMax time.Duration
	// RegistrationTTL: a launched claim whose node has not registered by
	// then is deleted and its instance terminated.
	RegistrationTTL time.Duration
	// LaunchTTL: a claim not launched this long after it was made (every
	// launch failed) is deleted, its offerings avoided for a while, and
	// its pods get another claim.
	LaunchTTL time.Duration
	// InitializationTTL: a registered node not ready for its pods this
	// long after registering (not Ready, a startup taint still on, an
	// extended resource its instance type promises not in allocatable) is
	// given up the same way, its instance terminated.
	InitializationTTL time.Duration
	// Gate says whether the scheduler would accept a pod on a node as the
	// cluster is now (simulator.Gate: the scheduler profile's PreFilter and
	// Filter plugins). Only pods it accepts are bound.
	Gate Gate
	// Workers is how many claims are reconciled at once, so one slow cloud
	// call does not hold up every other claim's launch, bind or drain.
	Workers int
}

// Gate is the scheduler's verdict on a pod and a node, and what only its
// binding cycle would do for the pod there; see simulator.Gate.
type Gate interface {
	Check(ctx context.Context, pod *corev1.Pod, node *corev1.Node, onNode []*corev1.Pod) (s *fwk.Status, handOff string)
}

// Controller reconciles NodeClaims.
type Controller struct {
	kube        client.Client
	unavailable *cloudprovider.UnavailableOfferings
	pods        kubernetes.Interface // for the Binding API
	cloud       cloudprovider.CloudProvider
	limits      *limits.Ledger
	budgets     budgets
	recorder    events.EventRecorder
	opts        Options
	now         func() time.Time
	refusals    refusals
}

// refusalConfirm is how long the bind gate must keep refusing a pod
// before its nomination is cleared: the gate's informers may lag the
// cluster by a moment (a pod its affinity needs, bound elsewhere just
// now), and a cleared nomination costs a new node.
const refusalConfirm = 2 * time.Second

// refusals remembers when the gate first refused each pod, across workers.
type refusals struct {
	mu    sync.Mutex
	first map[types.UID]time.Time
}

// confirmed records a refusal of pod at now and says whether the pod has
// been refused for refusalConfirm. Entries far older than that belong to
// pods that went away mid-confirmation; they are dropped.
func (r *refusals) confirmed(pod types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = map[types.UID]time.Time{}
	}
	maps.DeleteFunc(r.first, func(_ types.UID, t time.Time) bool { return now.Sub(t) > 10*refusalConfirm })
	first, ok := r.first[pod]
	if !ok {
		r.first[pod] = now
		return false
	}
	if now.Sub(first) < refusalConfirm {
		return false
	}
	delete(r.first, pod)
	return true
}

// forget drops the pod's refusal: the gate accepted it.
func (r *refusals) forget(pod types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.first, pod)
}

// NewController returns the NodeClaim lifecycle controller.
func NewController(kube client.Client, cs kubernetes.Interface, cloud cloudprovider.CloudProvider, unavailable *cloudprovider.UnavailableOfferings, recorder events.EventRecorder, opts Options) *Controller {
	return &Controller{kube: kube, pods: cs, cloud: cloud, limits: limits.NewLedger(kube, cloud), unavailable: unavailable, recorder: recorder, opts: opts, now: time.Now}
}

// SetupWithManager registers the controller and the indexes it uses.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexNominated, func(o client.Object) []string {
		if p := o.(*corev1.Pod); p.Status.NominatedNodeName != "" && p.Spec.NodeName == "" {
			return []string{p.Status.NominatedNodeName}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &corev1.Node{}, indexProviderID, func(o client.Object) []string {
		return []string{o.(*corev1.Node).Spec.ProviderID}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.NodeClaim{}, indexClaimNode, func(o client.Object) []string {
		return []string{o.(*v1alpha1.NodeClaim).Status.NodeName}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1alpha1.NodeClaim{}, indexClaimProviderID, func(o client.Object) []string {
		return []string{o.(*v1alpha1.NodeClaim).Status.ProviderID}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodeclaim.lifecycle").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, c.opts.Workers)}).
		For(&v1alpha1.NodeClaim{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.claimOfPod)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(c.claimOfNode)).
		Complete(c)
}

// claimOfPod: the claim a pod is nominated to, or the claim of its node.
// Pod events are the most frequent the controller sees, so the lookup is
// an index, not a scan of every claim.
func (c *Controller) claimOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	pod := o.(*corev1.Pod)
	if pod.Status.NominatedNodeName != "" && pod.Spec.NodeName == "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pod.Status.NominatedNodeName}}}
	}
	return c.claimsWhere(ctx, indexClaimNode, pod.Spec.NodeName)
}

func (c *Controller) claimOfNode(ctx context.Context, o client.Object) []reconcile.Request {
	return c.claimsWhere(ctx, indexClaimProviderID, o.(*corev1.Node).Spec.ProviderID)
}

// claimsWhere returns the claims whose indexed field equals value.
func (c *Controller) claimsWhere(ctx context.Context, index, value string) []reconcile.Request {
	if value == "" {
		return nil
	}
	var claims v1alpha1.NodeClaimList
	if err := c.kube.List(ctx, &claims, client.MatchingFields{index: value}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(claims.Items))
	for _, nc := range claims.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nc.Name}})
	}
	return out
}

// Reconcile moves one claim a step forward.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var nc v1alpha1.NodeClaim
	if err := c.kube.Get(ctx, req.NamespacedName, &nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("nodePool", nc.Spec.NodePool))
	res, err := c.step(ctx, &nc)
	// Each step writes; the cache may lag a write, and the next step then
	// meets a conflict. That is no error: read again.
	if apierrors.IsConflict(err) {
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

func (c *Controller) step(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !nc.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, nc)
	}
	switch nc.Status.Phase {
	case "", v1alpha1.NodeClaimNominating:
		return c.closeWhenBatched(ctx, nc)
	case v1alpha1.NodeClaimLaunching:
		return c.launch(ctx, nc)
	case v1alpha1.NodeClaimLaunched:
		return c.register(ctx, nc)
	case v1alpha1.NodeClaimRegistered:
		return c.initialize(ctx, nc)
	case v1alpha1.NodeClaimInitialized:
		return c.removeWhenEmpty(ctx, nc)
	}
	return reconcile.Result{}, nil
}

// nominatedPods are the pending pods nominated to the claim in the order
// the scheduler's queue takes them (higher priority first, then older),
// ties broken by namespace and name so that which of two pods that cannot
// share the node is bound does not depend on the cache's order.
func (c *Controller) nominatedPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{indexNominated: name}); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, bindOrder)
	return pods.Items, nil
}

func bindOrder(a, b corev1.Pod) int {
	return cmp.Or(
		cmp.Compare(corev1helpers.PodPriority(&b), corev1helpers.PodPriority(&a)),
		a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name),
	)
}

// closeWhenBatched closes the claim to nominations once the batch window
// has passed: no new nomination for BatchIdle, or open for BatchMax. The
// status update carries the resourceVersion read, so a nomination the
// scheduler writes meanwhile makes it fail and the window is judged again.
func (c *Controller) closeWhenBatched(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	now := c.now()
	last := nc.CreationTimestamp.Time
	if nc.Status.LastNominationTime != nil {
		last = nc.Status.LastNominationTime.Time
	}
	idle, open := now.Sub(last), now.Sub(nc.CreationTimestamp.Time)
	if idle < c.opts.BatchIdle && open < c.opts.BatchMax {
		return reconcile.Result{RequeueAfter: min(c.opts.BatchIdle-idle, c.opts.BatchMax-open)}, nil
	}
	pods, err := c.nominatedPods(ctx, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(pods) == 0 {
		klog.FromContext(ctx).Info("Deleting nodeclaim with no nominated pods left")
		metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NoPods").Inc()
		c.event(nc, corev1.EventTypeNormal, "Deleted", "NoPods", "no nominated pods left; not launched")
		return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
	}
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		controllerutil.AddFinalizer(nc, v1alpha1.FinalizerTermination)
		if err := c.kube.Update(ctx, nc); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunching
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).Info("Found provisionable pods", "pods", len(pods), "instanceTypeOptions", nc.Status.InstanceTypeOptions, "openFor", open.Round(time.Millisecond))
	return reconcile.Result{Requeue: true}, nil
}

// offers are the claim's instance types in its zone and capacity type, from
// the pool's catalog, cheapest first.
func (c *Controller) offers(ctx context.Context, nc *v1alpha1.NodeClaim) ([]cloudprovider.Offer, error) {
	var cat v1alpha1.InstanceTypeCatalog // the pool's, merged from its family objects
	var err error
	if cat.Spec.InstanceTypes, err = catalog.InstanceTypesOf(ctx, c.kube, nc.Spec.NodePool); err != nil {
		return nil, err
	}
	in := map[string][]string{}
	for _, r := range nc.Spec.Requirements {
		if r.Operator == corev1.NodeSelectorOpIn {
			in[r.Key] = r.Values
		}
	}
	var out []cloudprovider.Offer
	for _, it := range cat.Spec.InstanceTypes {
		if !slices.Contains(in[corev1.LabelInstanceTypeStable], it.Name) {
			continue
		}
		for _, o := range it.Offerings {
			if !o.Available || !slices.Contains(in[corev1.LabelTopologyZone], o.Zone) || !slices.Contains(in[v1alpha1.LabelCapacityType], string(o.CapacityType)) {
				continue
			}
			if gone, _ := c.unavailable.Unavailable(it.Name, o.Zone, string(o.CapacityType)); gone {
				continue
			}
			price, err := strconv.ParseFloat(o.Price, 64)
			if err != nil {
				continue
			}
			out = append(out, cloudprovider.Offer{InstanceType: it, Zone: o.Zone, CapacityType: string(o.CapacityType), Price: price})
		}
	}
	slices.SortStableFunc(out, func(a, b cloudprovider.Offer) int { return cmp.Compare(a.Price, b.Price) })
	return out, nil
}

// launch creates the instance; Create is idempotent per claim UID, so a
// crash between Create and the status update launches nothing twice.
func (c *Controller) launch(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	if refused := meta.FindStatusCondition(nc.Status.Conditions, "Launched"); refused != nil && refused.Reason == reasonAccessDenied {
		return c.expireRefused(ctx, nc)
	}
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, fmt.Errorf("getting nodepool %s: %w", nc.Spec.NodePool, err)
	}
	offers, err := c.offers(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if age := c.now().Sub(nc.CreationTimestamp.Time); age > c.opts.LaunchTTL && len(offers) > 0 {
		// An instance whose launch answer was lost is collected as an
		// orphan once the claim is gone.
		return c.giveUp(ctx, nc, "LaunchTimeout", "Launch", fmt.Sprintf("not launched within %s of being made", c.opts.LaunchTTL), offers...)
	}
	if len(offers) == 0 {
		// Its pods get a new claim elsewhere: the scheduler plugin retries
		// them when the claim goes, with these offerings now unavailable.
		logger.Info("Deleting nodeclaim: none of its instance type options is available", "instanceTypeOptions", nc.Status.InstanceTypeOptions)
		c.event(nc, corev1.EventTypeWarning, "LaunchFailed", "Launch", "none of the instance type options is available; the pods will get another claim")
		c.podEvents(ctx, nc, corev1.EventTypeWarning, "LaunchFailed", "Launch", fmt.Sprintf("nodeclaim %s: none of its instance type options is available; the pod will get another claim", nc.Name))
		metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NoOptions").Inc()
		return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
	}
	// The hard ceiling: only offers that keep the pool within its limits,
	// counting every launched and in-flight claim, even at the largest
	// offer the cloud may fall back to.
	if offers, err = c.limits.Reserve(ctx, &pool, nc, offers); err != nil {
		var exceeded *limits.ExceededError
		if !errors.As(err, &exceeded) {
			return reconcile.Result{}, err
		}
		return c.refuseForLimits(ctx, nc, exceeded)
	}
	labels := pool.Spec.Template.ObjectMeta.NodeLabels()
	labels[v1alpha1.LabelNodePool], labels[corev1.LabelOSStable] = pool.Name, "linux"
	taints := append(slices.Clone(nc.Spec.Taints), nc.Spec.StartupTaints...)
	taints = append(taints, corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule})
	in, err := c.cloud.Create(ctx, cloudprovider.Launch{
		NodeClaim: nc.Name, ClaimUID: string(nc.UID), NodePool: pool.Name, Labels: labels, Taints: taints,
		NodeClass: nc.Spec.NodeClassRef, Offers: offers,
	})
	if err != nil {
		// A capacity error, a denial or a class not ready launched nothing:
		// the reservation goes. Any other error (a timeout, a 5xx) may
		// have launched an instance whose answer was lost, so it keeps
		// counting until the retry's idempotent Create settles it.
		reason := "LaunchFailed"
		var ice *cloudprovider.InsufficientCapacityError
		var notReady *cloudprovider.NodeClassNotReadyError
		if errors.As(err, &ice) || errors.As(err, &notReady) || cloudprovider.IsAccessDenied(err) {
			c.limits.Release(nc.UID)
		}
		if errors.As(err, &ice) {
			reason = "InsufficientCapacity"
			c.unavailable.Mark(ice.Offers...)
			logger.Info("No capacity for any option; marked them unavailable", "offers", len(ice.Offers))
			metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
			c.event(nc, corev1.EventTypeWarning, reason, "Launch", err.Error())
			return reconcile.Result{Requeue: true}, nil
		}
		if cloudprovider.IsAccessDenied(err) {
			return c.refuse(ctx, nc, err)
		}
		if errors.As(err, &notReady) {
			logger.Info("Node class not ready; will retry", "nodeClass", notReady.NodeClass, "reason", notReady.Reason)
			c.event(nc, corev1.EventTypeWarning, "NodeClassNotReady", "Launch", err.Error())
			return reconcile.Result{RequeueAfter: 15 * time.Second}, nil
		}
		logger.Error(err, "Launching instance failed; will retry", "offers", len(offers))
		metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
		c.event(nc, corev1.EventTypeWarning, reason, "Launch", err.Error())
		return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
	}
	crashpoint.Hit(crashpoint.AfterCreate)
	c.limits.Launched(nc.UID, in)
	if len(in.Refused) > 0 {
		c.unavailable.Mark(in.Refused...)
		logger.Info("Cheaper options had no capacity; marked them unavailable", "refused", len(in.Refused))
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunched
	nc.Status.ProviderID, nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType = in.ProviderID, in.InstanceType, in.Zone, in.CapacityType
	nc.Status.Capacity, nc.Status.Allocatable = in.Capacity, in.Allocatable
	nc.Status.InstanceTypeOptions = 1
	nc.Status.Price = strconv.FormatFloat(in.Price, 'f', -1, 64)
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: "Launched", Status: metav1.ConditionTrue, Reason: "Launched", Message: in.ProviderID})
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	crashpoint.Hit(crashpoint.AfterLaunchStatus)
	metrics.ClaimsLaunched.WithLabelValues(nc.Spec.NodePool).Inc()
	logger.Info("Launched instance", "providerID", in.ProviderID, "instanceType", in.InstanceType, "zone", in.Zone, "capacityType", in.CapacityType, "price", nc.Status.Price)
	c.event(nc, corev1.EventTypeNormal, "Launched", "Launch", fmt.Sprintf("launched %s (%s, %s, %s, $%s/h)", in.ProviderID, in.InstanceType, in.Zone, in.CapacityType, nc.Status.Price))
	c.podEvents(ctx, nc, corev1.EventTypeNormal, "Launched", "Launch", fmt.Sprintf("nodeclaim %s launched %s (%s, %s, %s) for this pod", nc.Name, in.ProviderID, in.InstanceType, in.Zone, in.CapacityType))
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

// refuseForLimits handles a claim none of whose offers fits under its
// pool's limits. While other launches of the pool are in flight it waits
// for them (they may end smaller than they reserved); otherwise the claim
// is deleted unlaunched, with Events saying which limit, and its pods go
// back to the scheduler, whose forecast then refuses them with the same
// reason until capacity is freed.
func (c *Controller) refuseForLimits(ctx context.Context, nc *v1alpha1.NodeClaim, exceeded *limits.ExceededError) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	if exceeded.InFlight {
		logger.V(2).Info("Waiting for the pool's in-flight launches before checking its limits again", "reason", exceeded.Reason)
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	logger.Info("Deleting nodeclaim: launching it would pass the pool's limits", "reason", exceeded.Reason)
	c.event(nc, corev1.EventTypeWarning, "LimitReached", "Launch", exceeded.Error()+"; not launched")
	c.podEvents(ctx, nc, corev1.EventTypeWarning, "LimitReached", "Launch", fmt.Sprintf("nodeclaim %s not launched: %s; the pod will be scheduled again", nc.Name, exceeded.Error()))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "LimitReached").Inc()
	return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

// reasonAccessDenied marks a claim whose launch the cloud refused for lack
// of permission.
const reasonAccessDenied = "AccessDenied"

// refuse records that the cloud denied the launch. Retrying cannot help
// until an operator fixes the credentials or policy, so the claim is not
// retried: it says why in its Launched condition and in Events on itself
// and its pods, and is deleted after the registration TTL so that its pods
// get a fresh claim, which tries once more.
func (c *Controller) refuse(ctx context.Context, nc *v1alpha1.NodeClaim, err error) (reconcile.Result, error) {
	klog.FromContext(ctx).Error(err, "Cloud denied the launch; not retrying this nodeclaim", "deleteAfter", c.opts.RegistrationTTL)
	metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reasonAccessDenied).Inc()
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: "Launched", Status: metav1.ConditionFalse, Reason: reasonAccessDenied, Message: err.Error()})
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	note := fmt.Sprintf("%v; fix the provisioner's permissions. Not retried; the claim is deleted after %s and its pods get a new one", err, c.opts.RegistrationTTL)
	c.event(nc, corev1.EventTypeWarning, reasonAccessDenied, "Launch", note)
	c.podEvents(ctx, nc, corev1.EventTypeWarning, reasonAccessDenied, "Launch", "nodeclaim "+nc.Name+": "+note)
	return c.expireRefused(ctx, nc)
}

// expireRefused deletes a refused claim once the registration TTL has
// passed since the refusal.
func (c *Controller) expireRefused(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	cond := meta.FindStatusCondition(nc.Status.Conditions, "Launched")
	left := c.opts.RegistrationTTL - c.now().Sub(cond.LastTransitionTime.Time)
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	klog.FromContext(ctx).Info("Deleting nodeclaim whose launch the cloud denied", "refusedFor", c.opts.RegistrationTTL)
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, reasonAccessDenied).Inc()
	return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

// register adopts the node once it registers, or gives up after the TTL.
func (c *Controller) register(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		launched := meta.FindStatusCondition(nc.Status.Conditions, "Launched")
		if launched != nil && c.now().Sub(launched.LastTransitionTime.Time) > c.opts.RegistrationTTL {
			return c.giveUp(ctx, nc, "RegistrationTimeout", "Register", fmt.Sprintf("no node registered within %s", c.opts.RegistrationTTL), launchedOffer(nc))
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The providerID in the claim's status is only trusted once the cloud
	// says the instance was launched for this claim: whoever can write
	// nodeclaims/status must not be able to make the provisioner adopt,
	// bind pods to and later drain a node that is not ours.
	if ok, err := c.launchedFor(ctx, nc); err != nil || !ok {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	// Adopt the node: the finalizer keeps it until its instance is gone,
	// and the labels the claim stands for are there even when the node's
	// boot configuration did not set them all.
	adopted := adopt(node, nc)
	if !controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerTermination) {
		controllerutil.AddFinalizer(node, v1alpha1.FinalizerTermination)
		adopted = true
	}
	if adopted {
		if err := c.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimRegistered
	nc.Status.NodeName = node.Name
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: "Registered", Status: metav1.ConditionTrue, Reason: "Registered", Message: node.Name})
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).Info("Registered node", "node", klog.KObj(node), "providerID", nc.Status.ProviderID)
	c.event(nc, corev1.EventTypeNormal, "Registered", "Register", "node "+node.Name+" registered")
	return reconcile.Result{Requeue: true}, nil
}

// launchedFor reports whether the cloud's instance for the claim's
// providerID was launched for this claim, by the claim name the instance
// carries (a tag on EC2). A mismatch is logged and recorded as an Event.
func (c *Controller) launchedFor(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, error) {
	in, err := c.cloud.Get(ctx, nc.Status.ProviderID)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return false, nil // the garbage collector deletes claims whose instance is gone
	}
	if err != nil {
		return false, fmt.Errorf("looking up instance %s: %w", nc.Status.ProviderID, err)
	}
	if in.NodeClaim != nc.Name {
		klog.FromContext(ctx).Error(nil, "Not adopting node: its instance was not launched for this nodeclaim", "providerID", nc.Status.ProviderID, "instanceNodeClaim", in.NodeClaim)
		c.event(nc, corev1.EventTypeWarning, "ProviderIDMismatch", "Register", fmt.Sprintf("instance %s was launched for nodeclaim %q, not this one; its node is not adopted", nc.Status.ProviderID, in.NodeClaim))
		return false, nil
	}
	return true, nil
}

// initialize binds the nominated pods once the node is Ready, clears the
// nomination of those that no longer fit, and lifts the binding taint.
func (c *Controller) initialize(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	node, err := c.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{RequeueAfter: time.Second}, err
	}
	if waiting := notReadyForPods(node, nc); waiting != "" {
		registered := meta.FindStatusCondition(nc.Status.Conditions, "Registered")
		if registered != nil && c.now().Sub(registered.LastTransitionTime.Time) > c.opts.InitializationTTL {
			return c.giveUp(ctx, nc, "InitializationTimeout", "Initialize", fmt.Sprintf("node %s not ready for pods within %s of registering: %s", node.Name, c.opts.InitializationTTL, waiting), launchedOffer(nc))
		}
		logger.V(2).Info("Waiting for the node before binding", "node", node.Name, "waitingFor", waiting)
		return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
	}
	pods, err := c.nominatedPods(ctx, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The pods on the node as the API server has them now, not as a
	// cache does: a pod this controller bound on an earlier pass may not
	// have reached the cache yet, and the gate must count it (two pods
	// wanting one host port were both bound when it did not). Those bound
	// below are added as they are bound.
	live, err := c.pods.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	}
	onNode := make([]*corev1.Pod, 0, len(live.Items)+len(pods))
	already := make(map[types.UID]bool, len(live.Items))
	for i := range live.Items {
		p := &live.Items[i]
		already[p.UID] = true
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			onNode = append(onNode, p)
		}
	}
	// Pods handed to the scheduler on an earlier pass are nominated to
	// the node itself: they count there as they will once bound.
	var handed corev1.PodList
	if err := c.kube.List(ctx, &handed, client.MatchingFields{indexNominated: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	for i := range handed.Items {
		if p := &handed.Items[i]; !already[p.UID] {
			already[p.UID] = true
			onNode = append(onNode, p)
		}
	}
	bound, handedOff := 0, 0
	for i := range pods {
		p := &pods[i]
		if already[p.UID] {
			continue // bound or handed off on an earlier pass; the cache has not seen it yet
		}
		// The scheduler's own verdict, with the pods already there and
		// the ones just bound: what it would refuse is not bound.
		s, handOff := c.opts.Gate.Check(ctx, p, node, onNode)
		if s.Code() == fwk.Error {
			logger.V(2).Info("Bind gate cannot judge yet; retrying", "pod", klog.KObj(p), "node", node.Name, "err", s.AsError())
			return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
		}
		if !s.IsSuccess() {
			if !c.refusals.confirmed(p.UID, c.now()) {
				logger.V(2).Info("Bind gate refuses the pod; looking again before sending it back", "pod", klog.KObj(p), "node", node.Name, "plugin", s.Plugin(), "reason", s.Message())
				return reconcile.Result{RequeueAfter: refusalConfirm / 4}, nil
			}
			logger.Info("The scheduler would not accept the pod on the node; clearing its nomination", "pod", klog.KObj(p), "node", node.Name, "plugin", s.Plugin(), "reason", s.Message())
			c.recordPod(p, corev1.EventTypeWarning, "NominationCleared", "Bind", fmt.Sprintf("node %s refused by scheduler plugin %s: %s; the pod will be scheduled again", node.Name, s.Plugin(), s.Message()))
			p.Status.NominatedNodeName = ""
			if err := c.kube.Status().Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
			continue
		}
		c.refusals.forget(p.UID)
		if handOff != "" {
			// What only the scheduler's binding cycle does (provisioning
			// its volumes, allocating its devices, a Permit plugin) must
			// not be skipped: the pod is nominated to the node itself,
			// which holds room for it there, and the scheduler binds it
			// once the binding taint is lifted below.
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"nominatedNodeName":%q}}`, node.Name))
			if err := c.kube.Status().Patch(ctx, p, patch); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return reconcile.Result{}, fmt.Errorf("handing pod %s/%s to the scheduler: %w", p.Namespace, p.Name, err)
			}
			logger.Info("Handing the pod to the scheduler to bind: only its binding cycle does what the pod needs", "pod", klog.KObj(p), "node", node.Name, "why", handOff)
			c.recordPod(p, corev1.EventTypeNormal, "HandedOff", "Bind", fmt.Sprintf("node %s is ready; nominated to it for the scheduler to bind, as only its binding cycle does what the pod needs: %s", node.Name, handOff))
			onNode = append(onNode, p)
			handedOff++
			continue
		}
		err := c.pods.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("binding pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if err == nil {
			crashpoint.Hit(crashpoint.MidBind)
			onNode = append(onNode, p)
			bound++
			// Bound directly, not by the scheduler: say so where kubectl
			// describe pod shows the scheduler's own "Scheduled" event.
			c.recordPod(p, corev1.EventTypeNormal, "Scheduled", "Binding", fmt.Sprintf("Successfully assigned %s/%s to %s (nodeclaim %s)", p.Namespace, p.Name, node.Name, nc.Name))
			metrics.PodTimeToBound.Observe(c.now().Sub(p.CreationTimestamp.Time).Seconds())
		}
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding })
	if len(taints) != len(node.Spec.Taints) {
		node.Spec.Taints = taints
		if err := c.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimInitialized
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: "Initialized", Status: metav1.ConditionTrue, Reason: "Initialized", Message: fmt.Sprintf("%d pods bound, %d handed to the scheduler", bound, handedOff)})
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	logger.Info("Bound pods to node", "pods", bound, "handedOff", handedOff, "node", node.Name)
	c.event(nc, corev1.EventTypeNormal, "Initialized", "Bind", fmt.Sprintf("bound %d pods to node %s, handed %d to the scheduler", bound, node.Name, handedOff))
	return reconcile.Result{}, nil
}

// finalize terminates the instance and deletes the node, then lets the
// claim go.
func (c *Controller) finalize(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(nc, v1alpha1.FinalizerTermination) {
		return reconcile.Result{}, nil
	}
	if nc.Status.ProviderID != "" {
		if res, err := c.drain(ctx, nc); err != nil || !res.IsZero() {
			return res, err
		}
		switch err := c.cloud.Delete(ctx, nc.Status.ProviderID); {
		case err == nil:
			klog.FromContext(ctx).Info("Terminated instance", "providerID", nc.Status.ProviderID, "instanceType", nc.Status.InstanceType)
			crashpoint.Hit(crashpoint.AfterTerminate)
		case !errors.Is(err, cloudprovider.ErrNotFound):
			return reconcile.Result{}, fmt.Errorf("terminating %s: %w", nc.Status.ProviderID, err)
		}
		node, err := c.nodeOf(ctx, nc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if node != nil {
			if controllerutil.RemoveFinalizer(node, v1alpha1.FinalizerTermination) {
				if err := c.kube.Update(ctx, node); err != nil {
					return reconcile.Result{}, err
				}
			}
			if err := c.kube.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
	}
	controllerutil.RemoveFinalizer(nc, v1alpha1.FinalizerTermination)
	if err := c.kube.Update(ctx, nc); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	c.limits.Release(nc.UID)
	return reconcile.Result{}, nil
}

// drain taints the claim's node nodeforge.dev/disrupted:NoSchedule and
// evicts its pods (daemonset pods stay) through the Eviction API, so that
// PodDisruptionBudgets hold. It returns a requeue while pods remain.
func (c *Controller) drain(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := c.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule})
		if err := c.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{indexPodNode: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	remaining := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if ownedByDaemonSet(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		remaining++
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		err := c.pods.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case apierrors.IsTooManyRequests(err):
			klog.FromContext(ctx).V(2).Info("Eviction refused for now (disruption budget); will retry", "pod", klog.KObj(p), "node", node.Name)
		case err != nil && !apierrors.IsNotFound(err):
			return reconcile.Result{}, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		default:
			klog.FromContext(ctx).Info("Evicted pod", "pod", klog.KObj(p), "node", node.Name)
			crashpoint.Hit(crashpoint.MidDrain)
		}
	}
	if remaining > 0 {
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	return reconcile.Result{}, nil
}

func (c *Controller) nodeOf(ctx context.Context, nc *v1alpha1.NodeClaim) (*corev1.Node, error) {
	if nc.Status.ProviderID == "" {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := c.kube.List(ctx, &nodes, client.MatchingFields{indexProviderID: nc.Status.ProviderID}); err != nil {
		return nil, err
	}
	if len(nodes.Items) == 0 {
		return nil, nil
	}
	return &nodes.Items[0], nil
}

func (c *Controller) event(nc *v1alpha1.NodeClaim, typ, reason, action, note string) {
	if c.recorder != nil {
		c.recorder.Eventf(nc, nil, typ, reason, action, "%s", note)
	}
}

// adopt sets the labels of the claim's pool, instance type, zone and
// capacity type on its node where they are missing, and says whether it
// changed anything.
func adopt(node *corev1.Node, nc *v1alpha1.NodeClaim) bool {
	want := map[string]string{
		v1alpha1.LabelNodePool:         nc.Spec.NodePool,
		v1alpha1.LabelCapacityType:     nc.Status.CapacityType,
		corev1.LabelInstanceTypeStable: nc.Status.InstanceType,
		corev1.LabelTopologyZone:       nc.Status.Zone,
	}
	changed := false
	for k, v := range want {
		if _, ok := node.Labels[k]; ok || v == "" {
			continue
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[k] = v
		changed = true
	}
	return changed
}

// podEvents records an event on every pod nominated to the claim.
func (c *Controller) podEvents(ctx context.Context, nc *v1alpha1.NodeClaim, typ, reason, action, note string) {
	if c.recorder == nil {
		return
	}
	pods, err := c.nominatedPods(ctx, nc.Name)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Listing nominated pods for events failed", "err", err)
		return
	}
	for i := range pods {
		c.recordPod(&pods[i], typ, reason, action, note)
	}
}

func (c *Controller) recordPod(p *corev1.Pod, typ, reason, action, note string) {
	if c.recorder != nil {
		c.recorder.Eventf(p, nil, typ, reason, action, "%s", note)
	}
}

// notReadyForPods says what the node still lacks before pods may be bound
// to it, or "" when nothing: Ready; none of the claim's startup taints
// (a CNI or device agent lifts them when it is up; a pod bound before
// would be evicted by a NoExecute one or refused by the kubelet); and
// every extended resource its instance type promises in allocatable (a
// device plugin registers them after the node is Ready; binding before
// would find a GPU pod no room and launch a second node).
func notReadyForPods(node *corev1.Node, nc *v1alpha1.NodeClaim) string {
	if !ready(node) {
		return "condition Ready"
	}
	// The API server taints every new node not-ready; the node lifecycle
	// controller lifts it once the node is Ready. Until then the scheduler
	// would refuse every pod there.
	for _, t := range node.Spec.Taints {
		if (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.Effect != corev1.TaintEffectPreferNoSchedule {
			return fmt.Sprintf("taint %s:%s to be lifted by the node lifecycle controller", t.Key, t.Effect)
		}
	}
	for _, st := range nc.Spec.StartupTaints {
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == st.Key && t.Effect == st.Effect }) {
			return fmt.Sprintf("startup taint %s:%s to be removed", st.Key, st.Effect)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nc.Status.Allocatable)) {
		promised := nc.Status.Allocatable[name]
		if !v1helper.IsExtendedResourceName(name) || promised.IsZero() {
			continue
		}
		if has, ok := node.Status.Allocatable[name]; !ok || has.Cmp(promised) < 0 {
			return fmt.Sprintf("%s %s in allocatable", promised.String(), name)
		}
	}
	return ""
}

// launchedOffer is the offering the claim's instance was launched from.
func launchedOffer(nc *v1alpha1.NodeClaim) cloudprovider.Offer {
	return cloudprovider.Offer{InstanceType: v1alpha1.InstanceType{Name: nc.Status.InstanceType}, Zone: nc.Status.Zone, CapacityType: nc.Status.CapacityType}
}

// giveUp deletes a claim that missed a deadline, which terminates its
// instance if it has one. Its offerings are avoided for a while (a node
// that does not come up there would not the next time either), and Events
// on the claim and its pods say why; the pods get another claim.
func (c *Controller) giveUp(ctx context.Context, nc *v1alpha1.NodeClaim, reason, action, why string, avoid ...cloudprovider.Offer) (reconcile.Result, error) {
	klog.FromContext(ctx).Info("Deleting nodeclaim that missed its deadline", "reason", reason, "why", why, "providerID", nc.Status.ProviderID)
	c.unavailable.Mark(avoid...)
	metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, reason).Inc()
	what := "nothing was launched"
	if nc.Status.ProviderID != "" {
		what = "terminating instance " + nc.Status.ProviderID
	}
	c.event(nc, corev1.EventTypeWarning, reason, action, why+"; "+what)
	c.podEvents(ctx, nc, corev1.EventTypeWarning, reason, action, fmt.Sprintf("nodeclaim %s: %s; the pod will get another claim", nc.Name, why))
	return reconcile.Result{}, client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
