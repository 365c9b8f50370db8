package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// offers are the claim's offerings that meet its requirements (its open
// instance types, its zone and capacity type), from the pool's catalog,
// less those marked unavailable since, cheapest first.
func (l *launcher) offers(ctx context.Context, nc *v1alpha1.NodeClaim) ([]cloudprovider.Offer, error) {
	its, err := cluster.InstanceTypesOf(ctx, l.kube, nc.Spec.NodePool)
	if err != nil {
		return nil, err
	}
	offers, err := nodeshape.Offers(nodeshape.ForClaim(nc), its, nc.Spec.Requirements)
	if err != nil {
		return nil, fmt.Errorf("offers of nodepool %s: %w", nc.Spec.NodePool, err)
	}
	return slices.DeleteFunc(offers, func(o cloudprovider.Offer) bool {
		gone, _ := l.unavailable.Unavailable(o.InstanceType.Name, o.Zone, o.CapacityType)
		return gone
	}), nil
}

// minValuesUnmet says which of the claim's minValues requirements the
// offers it may launch as (one zone, one capacity type) do not keep.
func minValuesUnmet(nc *v1alpha1.NodeClaim, offers []cloudprovider.Offer) string {
	if len(offers) == 0 || !nodeshape.HasMinValues(nc.Spec.Requirements) {
		return ""
	}
	var its []*v1alpha1.InstanceType
	seen := map[string]bool{}
	for i := range offers {
		if it := &offers[i].InstanceType; !seen[it.Name] {
			seen[it.Name] = true
			its = append(its, it)
		}
	}
	return nodeshape.MinValuesUnmet(nodeshape.ForClaim(nc), nc.Spec.Requirements, its, offers[0].Zone, offers[0].CapacityType)
}

// launcher launches the instance of a closed claim, once its batch is
// repacked, within its pool's limits.
type launcher struct {
	base
	cloud    cloudprovider.CloudProvider
	limits   *limits.Ledger
	repacker *repacker
	// launchTTL is Options.LaunchTTL: a claim not launched by then is
	// given up. registrationTTL is Options.RegistrationTTL: a claim
	// whose launch the cloud denied is deleted after it.
	launchTTL, registrationTTL time.Duration
	// denied are the claims whose launch the cloud denied, until the
	// cache shows their Launched condition (see reconcile).
	denied deniedLaunches
	// recorded are the claims whose launch was recorded (phase Launched)
	// in the last minute: a reconcile of the claim from a cache that has
	// not seen the record yet would call the cloud again, and, the claim
	// deleted and its instance terminated meanwhile (a release), launch
	// a second instance no claim accounts for.
	recorded recentLaunches
}

// recentLaunches remembers, by claim UID, when a launch was recorded.
type recentLaunches struct {
	mu sync.Mutex
	at map[types.UID]time.Time
}

// add records uid's launch now.
func (r *recentLaunches) add(uid types.UID, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.UID]time.Time{}
	}
	for k, t := range r.at {
		if now.Sub(t) > time.Minute {
			delete(r.at, k)
		}
	}
	r.at[uid] = now
}

// has says whether uid's launch was recorded within the last minute.
func (r *recentLaunches) has(uid types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[uid]
	return ok && now.Sub(t) <= time.Minute
}

// deniedLaunches remembers, by claim UID, the launches the cloud denied.
type deniedLaunches struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

func (d *deniedLaunches) set(uid types.UID, denied bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !denied {
		delete(d.uids, uid)
		return
	}
	if d.uids == nil {
		d.uids = map[types.UID]bool{}
	}
	d.uids[uid] = true
}

func (d *deniedLaunches) has(uid types.UID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.uids[uid]
}

// reconcile creates the instance; Create is idempotent per claim UID, so
// a crash between Create and the status update launches nothing twice.
func (l *launcher) reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if l.recorded.has(nc.UID, l.now()) {
		// Launched already; the cache is a write behind (see recorded).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if _, ok := nc.Annotations[v1alpha1.AnnotationReleasedWith]; ok {
		return l.releaseBeforeLaunch(ctx, nc)
	}
	if refused := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionLaunched); refused != nil && refused.Reason == v1alpha1.ReasonAccessDenied {
		l.denied.set(nc.UID, false)
		return l.expireRefused(ctx, nc)
	}
	if l.denied.has(nc.UID) {
		// Denied, and the cache is still a write behind the refusal: an
		// event from before it (the node class stamp's) queued the claim
		// again at once. Launching from that copy would call the cloud
		// again, which the refusal promises not to. Seen under load:
		// TestAWSProvider's CreateFleet-denied case.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	var pool v1alpha1.NodePool
	if err := l.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, fmt.Errorf("getting nodepool %s: %w", nc.Spec.NodePool, err)
	}
	if err := nodeshape.WithinPool(nc, &pool); err != nil {
		return l.refuseOutsidePool(ctx, nc, v1alpha1.ConditionLaunched, v1alpha1.ActionLaunch, err)
	}
	offers, err := l.offers(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if age := l.now().Sub(nc.CreationTimestamp.Time); age > l.launchTTL && len(offers) > 0 {
		// An instance whose launch answer was lost is collected as an
		// orphan once the claim is gone.
		return l.giveUp(ctx, nc, v1alpha1.ReasonLaunchTimeout, v1alpha1.ActionLaunch, fmt.Sprintf("not launched within %s of being made", l.launchTTL), offers...)
	}
	if len(offers) == 0 {
		return l.noOptions(ctx, nc)
	}
	// Not before its batch is repacked (pack.go).
	if ok, res, err := l.repacker.mayLaunch(ctx, nc); !ok {
		return res, err
	}
	// The hard ceiling: only offers that keep the pool within its limits,
	// counting every launched and in-flight claim, even at the largest
	// offer the cloud may fall back to.
	if offers, err = l.limits.Reserve(ctx, &pool, nc, offers); err != nil {
		var exceeded *limits.ExceededError
		if !errors.As(err, &exceeded) {
			return reconcile.Result{}, err
		}
		return l.refuseForLimits(ctx, nc, exceeded)
	}
	if why := minValuesUnmet(nc, offers); why != "" {
		return l.refuseForMinValues(ctx, nc, why)
	}
	if err := l.stampNodeClass(ctx, nc); err != nil {
		l.limits.Release(nc.UID)
		return reconcile.Result{}, err
	}
	in, err := l.cloud.Create(ctx, cloudprovider.Launch{
		NodeClaim: nc.Name, ClaimUID: string(nc.UID), NodePool: pool.Name, Template: nodeshape.ForClaim(nc),
		NodeClass: nc.Spec.NodeClassRef, Offers: offers, Requests: nc.Spec.Resources.Requests,
	})
	if err != nil {
		return l.createFailed(ctx, nc, len(offers), err)
	}
	return l.launched(ctx, nc, in)
}

// releaseBeforeLaunch deletes a Launching claim released with another of
// its pods' PodGroup. An earlier attempt may have launched an instance
// whose answer was lost (the claim's status update conflicting with the
// release): the cloud is asked, and such an instance is recorded first,
// so that the claim's deletion terminates it.
func (l *launcher) releaseBeforeLaunch(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	instances, err := l.cloud.List(ctx)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("listing instances before releasing nodeclaim %s: %w", nc.Name, err)
	}
	for _, in := range instances {
		if in.NodeClaim == nc.Name {
			return l.launched(ctx, nc, in)
		}
	}
	l.limits.Release(nc.UID)
	return reconcile.Result{}, l.deleteReleased(ctx, nc)
}

// noOptions deletes a claim none of whose instance type options is
// available. Its pods get a new claim elsewhere: the scheduler plugin
// retries them when the claim goes, with these offerings now unavailable.
func (l *launcher) noOptions(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	klog.FromContext(ctx).Info("Deleting nodeclaim: none of its instance type options is available", "instanceTypeOptions", nc.Status.InstanceTypeOptions)
	l.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, v1alpha1.ActionLaunch, "none of the instance type options is available; the pods will get another claim")
	l.podEvents(ctx, nc, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, v1alpha1.ActionLaunch, fmt.Sprintf("nodeclaim %s: none of its instance type options is available; the pod will get another claim", nc.Name))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "NoOptions").Inc()
	l.releaseGroups(ctx, nc, "had no instance type option available")
	return reconcile.Result{}, client.IgnoreNotFound(l.kube.Delete(ctx, nc))
}

// refuseForMinValues deletes a claim whose available options are fewer
// than its pool's minValues: fewer options than the pool holds launches
// to. Its pods get a claim that keeps them, with the offerings available
// now.
func (l *launcher) refuseForMinValues(ctx context.Context, nc *v1alpha1.NodeClaim, why string) (reconcile.Result, error) {
	l.limits.Release(nc.UID)
	klog.FromContext(ctx).Info("Deleting nodeclaim: its available options no longer keep the pool's minValues", "why", why)
	l.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, v1alpha1.ActionLaunch, why+"; not launched, the pods will get another claim")
	l.podEvents(ctx, nc, corev1.EventTypeWarning, v1alpha1.ReasonLaunchFailed, v1alpha1.ActionLaunch, fmt.Sprintf("nodeclaim %s: %s; the pod will get another claim", nc.Name, why))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "MinValues").Inc()
	l.releaseGroups(ctx, nc, "could not keep its pool's minValues")
	return reconcile.Result{}, client.IgnoreNotFound(l.kube.Delete(ctx, nc))
}

// createFailed handles a Create of offers offerings that failed. A
// capacity error, a denial or a class not ready launched nothing: the
// reservation goes. Any other error (a timeout, a 5xx) may have launched
// an instance whose answer was lost, so it keeps counting until the
// retry's idempotent Create settles it.
func (l *launcher) createFailed(ctx context.Context, nc *v1alpha1.NodeClaim, offers int, err error) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	reason := v1alpha1.ReasonLaunchFailed
	var ice *cloudprovider.InsufficientCapacityError
	var notReady *cloudprovider.NodeClassNotReadyError
	if errors.As(err, &ice) || errors.As(err, &notReady) || cloudprovider.IsAccessDenied(err) {
		l.limits.Release(nc.UID)
	}
	if errors.As(err, &ice) {
		reason = v1alpha1.ReasonInsufficientCapacity
		l.unavailable.Mark(ice.Offers...)
		logger.Info("No capacity for any option; marked them unavailable", "offers", len(ice.Offers))
		metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
		l.event(nc, corev1.EventTypeWarning, reason, v1alpha1.ActionLaunch, err.Error())
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	if cloudprovider.IsAccessDenied(err) {
		return l.refuse(ctx, nc, err)
	}
	if errors.As(err, &notReady) {
		logger.Info("Node class not ready; will retry", "nodeClass", notReady.NodeClass, "reason", notReady.Reason)
		l.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonNodeClassNotReady, v1alpha1.ActionLaunch, err.Error())
		return reconcile.Result{RequeueAfter: 15 * time.Second}, nil
	}
	logger.Error(err, "Launching instance failed; will retry", "offers", offers)
	metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
	l.event(nc, corev1.EventTypeWarning, reason, v1alpha1.ActionLaunch, err.Error())
	return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
}

// launched records the instance launched for the claim: the claim is
// Launched, with what the cloud launched.
func (l *launcher) launched(ctx context.Context, nc *v1alpha1.NodeClaim, in *cloudprovider.Instance) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	crashpoint.Hit(crashpoint.AfterCreate)
	l.limits.Launched(nc.UID, in)
	if len(in.Refused) > 0 {
		l.unavailable.Mark(in.Refused...)
		logger.Info("Cheaper options had no capacity; marked them unavailable", "refused", len(in.Refused))
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunched
	nc.Status.ProviderID, nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType = in.ProviderID, in.InstanceType, in.Zone, in.CapacityType
	nc.Status.Capacity, nc.Status.Allocatable = in.Capacity, in.Allocatable
	nc.Status.InstanceTypeOptions = 1
	nc.Status.Price = strconv.FormatFloat(in.Price, 'f', -1, 64)
	nc.Status.ImageID = in.ImageID
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: "Launched", Message: in.ProviderID})
	if err := l.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	l.recorded.add(nc.UID, l.now())
	crashpoint.Hit(crashpoint.AfterLaunchStatus)
	metrics.ClaimsLaunched.WithLabelValues(nc.Spec.NodePool).Inc()
	logger.Info("Launched instance", "providerID", in.ProviderID, "instanceType", in.InstanceType, "zone", in.Zone, "capacityType", in.CapacityType, "price", nc.Status.Price)
	// On the claim only: each pod's FailedScheduling Event and PodScheduled
	// condition name the claim it waits for (VirtualNodes' message), and
	// an Event on each of a claim's pods, up to 110 of them, would say
	// what this one says, at a request a pod, when the API server is
	// busiest. Failures still go on every pod (podEvents), as they change
	// what happens to it.
	l.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonLaunched, v1alpha1.ActionLaunch, fmt.Sprintf("launched %s (%s, %s, %s, $%s/h)", in.ProviderID, in.InstanceType, in.Zone, in.CapacityType, nc.Status.Price))
	return reconcile.Result{RequeueAfter: time.Second}, nil
}

// refuseForLimits handles a claim none of whose offers fits under its
// pool's limits. While other launches of the pool are in flight it waits
// for them (they may end smaller than they reserved); otherwise the claim
// is deleted unlaunched, with Events saying which limit, and its pods go
// back to the scheduler, whose forecast then refuses them with the same
// reason until capacity is freed.
func (l *launcher) refuseForLimits(ctx context.Context, nc *v1alpha1.NodeClaim, exceeded *limits.ExceededError) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	if exceeded.InFlight {
		logger.V(2).Info("Waiting for the pool's in-flight launches before checking its limits again", "reason", exceeded.Reason)
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	logger.Info("Deleting nodeclaim: launching it would pass the pool's limits", "reason", exceeded.Reason)
	l.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonLimitReached, v1alpha1.ActionLaunch, exceeded.Error()+"; not launched")
	l.podEvents(ctx, nc, corev1.EventTypeWarning, v1alpha1.ReasonLimitReached, v1alpha1.ActionLaunch, fmt.Sprintf("nodeclaim %s not launched: %s; the pod will be scheduled again", nc.Name, exceeded.Error()))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, "LimitReached").Inc()
	l.releaseGroups(ctx, nc, "would have passed its pool's limits")
	return reconcile.Result{}, client.IgnoreNotFound(l.kube.Delete(ctx, nc))
}

// refuse records that the cloud denied the launch. Retrying cannot help
// until an operator fixes the credentials or policy, so the claim is not
// retried: it says why in its Launched condition and in Events on itself
// and its pods, and is deleted after the registration TTL so that its pods
// get a fresh claim, which tries once more.
func (l *launcher) refuse(ctx context.Context, nc *v1alpha1.NodeClaim, err error) (reconcile.Result, error) {
	klog.FromContext(ctx).Error(err, "Cloud denied the launch; not retrying this nodeclaim", "deleteAfter", l.registrationTTL)
	metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, v1alpha1.ReasonAccessDenied).Inc()
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAccessDenied, Message: err.Error()})
	if err := l.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	l.denied.set(nc.UID, true)
	note := fmt.Sprintf("%v; fix the provisioner's permissions. Not retried; the claim is deleted after %s and its pods get a new one", err, l.registrationTTL)
	l.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, v1alpha1.ActionLaunch, note)
	l.podEvents(ctx, nc, corev1.EventTypeWarning, v1alpha1.ReasonAccessDenied, v1alpha1.ActionLaunch, "nodeclaim "+nc.Name+": "+note)
	return l.expireRefused(ctx, nc)
}

// expireRefused deletes a refused claim once the registration TTL has
// passed since the refusal.
func (l *launcher) expireRefused(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	cond := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionLaunched)
	left := l.registrationTTL - l.now().Sub(cond.LastTransitionTime.Time)
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	klog.FromContext(ctx).Info("Deleting nodeclaim whose launch the cloud denied", "refusedFor", l.registrationTTL)
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, v1alpha1.ReasonAccessDenied).Inc()
	l.releaseGroups(ctx, nc, "was refused by the cloud")
	return reconcile.Result{}, client.IgnoreNotFound(l.kube.Delete(ctx, nc))
}

// launchedOffer is the offering the claim's instance was launched from.
func launchedOffer(nc *v1alpha1.NodeClaim) cloudprovider.Offer {
	return cloudprovider.Offer{InstanceType: v1alpha1.InstanceType{Name: nc.Status.InstanceType}, Zone: nc.Status.Zone, CapacityType: nc.Status.CapacityType}
}

// stampNodeClass records on the claim the hash of the node class it is
// about to be launched from (v1alpha1.AnnotationNodeClassHash), for drift.
// It is read before Create, and again on every attempt, so the stamp is
// never newer than what the instance was launched with: a class edited
// meanwhile makes the node look drifted, the safe mistake, never the
// other way round. A class missing or of a kind not served is not
// stamped; Create says what is wrong with it.
func (l *launcher) stampNodeClass(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	hash, served, err := cloudprovider.NodeClassHash(ctx, l.kube, l.cloud.NodeClasses(), nc.Spec.NodeClassRef)
	if apierrors.IsNotFound(err) || !served {
		return nil
	}
	if err != nil {
		return err
	}
	if hash == nc.Annotations[v1alpha1.AnnotationNodeClassHash] {
		return nil
	}
	before := nc.DeepCopy()
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	nc.Annotations[v1alpha1.AnnotationNodeClassHash] = hash
	if err := l.kube.Patch(ctx, nc, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("stamping nodeclaim %s with its node class's hash: %w", nc.Name, err)
	}
	return nil
}
