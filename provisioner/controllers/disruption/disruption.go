// Package disruption removes initialized nodes voluntarily, and safely.
// Methods only decide which claims to disrupt and why: emptiness,
// expiration and drift one claim at a time (Controller); consolidation
// over the whole cluster in rounds (consolidation.go); repair of unhealthy
// nodes (repair.go) and the cloud's interruptions (interruption.go). Each
// decision is a Command, and one Executor carries every command out
// (executor.go): the pool's budgets per reason, active within their
// schedule windows (v1alpha1.Budget.Window); the taint; a pause and the
// last look at live state, so that a pod bound or annotated do-not-disrupt
// (donotdisrupt.go) meanwhile calls the disruption off; replacement
// capacity launched and initialized before a node whose pods fit nowhere
// else is drained (replacement.go); then the claim marked Disrupting and
// deleted. Draining and terminating the node is the NodeClaim
// controller's termination step, once the claim is deleted. Controller
// is a controller of its own, "nodeclaim.disruption" (SetupWithManager);
// consolidation, repair and interruption run beside it in the manager.
package disruption

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// Method is one reason to disrupt a node voluntarily.
type Method interface {
	// Reason names the method as budgets, Events and metrics count it.
	Reason() v1alpha1.DisruptionReason
	// Candidate says whether the claim's node is to be disrupted now
	// and why; when not, after how long to ask again (zero: when the
	// claim or its pods change). It may set conditions on nc's status,
	// which the caller writes.
	Candidate(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (Verdict, error)
	// StillCandidate looks again, at live state rather than the cache,
	// once the node is tainted nodeforge.dev/disrupted: false calls the
	// disruption off.
	StillCandidate(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, error)
}

// Verdict is a method's answer for one claim.
type Verdict struct {
	Disrupt bool
	// Why, for the log line and the Event: "empty for 31s (consolidateAfter 30s)".
	Why string
	// RequeueAfter: when to ask again if not now.
	RequeueAfter time.Duration
	// Held, when not Disrupt: the method would choose the claim but
	// this keeps it ("removing it leaves CapacityBuffer default/web's
	// chunks without room"), noted on the claim as do-not-disrupt is.
	Held string
}

// Controller asks its methods about each initialized claim and hands the
// Executor a Command for the claims they choose.
type Controller struct {
	exec     *Executor
	kube     client.Client
	recorder events.EventRecorder
	now      func() time.Time
	methods  []Method
	blocked  blockedNotes
	// Pause is how long a chosen node stays tainted before the method's
	// last look at live state: a pod the scheduler was binding there as
	// it was chosen shows up by then, and calls the disruption off.
	Pause time.Duration
}

// New returns a Controller running the methods in order: the first that
// chooses a claim disrupts it, through exec.
func New(exec *Executor, methods ...Method) *Controller {
	return &Controller{exec: exec, kube: exec.kube, recorder: exec.recorder, now: exec.now, methods: methods}
}

// Executor is the executor the controller hands its commands to.
func (c *Controller) Executor() *Executor { return c.exec }

// SetupWithManager registers the controller, "nodeclaim.disruption", with
// workers reconciles at once. It takes the Initialized and Disrupting
// claims that are not being deleted (the NodeClaim controller's phases
// end there, and its termination step drains a deleted claim's node). A
// claim is looked at again when it, its node or a pod on the node
// changes, and for drift when its pool's template or its node class
// (one of classes) changes in what nodes are launched with.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager, classes []cloudprovider.NodeClass, workers int) error {
	if err := cluster.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	cache := mgr.GetClient()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodeclaim.disruption").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, workers)}).
		For(&v1alpha1.NodeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return cluster.Disrupted(o.(*v1alpha1.NodeClaim))
		}))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			// A pod bound to the node, or nominated to it (a hand-off
			// the node is kept for).
			pod := o.(*corev1.Pod)
			node := pod.Spec.NodeName
			if node == "" {
				node = pod.Status.NominatedNodeName
			}
			return cluster.ClaimsWhere(ctx, cache, cluster.IndexClaimNode, node, cluster.Disrupted)
		})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(cluster.ClaimOfNode(cache, cluster.Disrupted))).
		// Drift: only changes to what nodes are launched with, and
		// scale-down: a change of replicas; pools' and classes' status
		// writes are frequent.
		Watches(&v1alpha1.NodePool{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return cluster.ClaimsWhere(ctx, cache, cluster.IndexClaimPool, o.GetName(), cluster.Disrupted)
		}), builder.WithPredicates(cluster.HashChanged(func(o client.Object) (string, error) {
			np := o.(*v1alpha1.NodePool)
			hash, err := nodeshape.PoolHash(np)
			if np.Spec.Replicas != nil {
				hash += fmt.Sprintf("/%d", *np.Spec.Replicas)
			}
			return hash, err
		})))
	for _, class := range classes {
		changed := cluster.HashChanged(class.Hash)
		if class.DriftInputs != nil {
			// What the provider resolved for the class (its images),
			// which its Drifted check reads, changed too.
			spec, inputs := changed, cluster.HashChanged(class.DriftInputs)
			changed.UpdateFunc = func(e ctrlevent.UpdateEvent) bool { return spec.Update(e) || inputs.Update(e) }
		}
		kind := class.Kind
		b = b.Watches(class.New(), handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return cluster.ClaimsWhere(ctx, cache, cluster.IndexClaimClass, kind+"/"+o.GetName(), cluster.Disrupted)
		}), builder.WithPredicates(changed))
	}
	return b.Complete(c)
}

// Reconcile judges one claim (reconcileClaim); a conflict, from a cache
// a write behind, is read again.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var nc v1alpha1.NodeClaim
	if err := c.kube.Get(ctx, req.NamespacedName, &nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.Disrupted(&nc) {
		return reconcile.Result{}, nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("nodePool", nc.Spec.NodePool))
	res, err := c.reconcileClaim(ctx, &nc)
	if apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	return res, err
}

// reconcileClaim carries on a command the claim is in on the API server
// (Executor.Continue), or asks each method about an initialized claim in
// no command and, when one chooses it and no do-not-disrupt annotation
// holds it, submits the command to disrupt it.
func (c *Controller) reconcileClaim(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	if res, ok, err := c.exec.Continue(ctx, nc); ok {
		return res, err
	}
	if c.exec.Busy(nc.UID) {
		return reconcile.Result{RequeueAfter: c.exec.timers.BudgetRetry}, nil
	}
	if c.exec.StaleDrainDeadline(nc) {
		// Left by a repair that did not reach its Disrupting write: gone
		// before any method decides, so no later drain inherits it.
		if err := c.exec.clearDrainDeadline(ctx, nc); err != nil {
			return reconcile.Result{}, err
		}
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: true}, nil
	}
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// do-not-disrupt on the claim holds every method but the forceful.
	claimHeld := v1alpha1.DoNotDisrupt(nc.Annotations) != ""
	if replacing, err := c.exec.replacing(ctx, nc); err != nil || replacing {
		return reconcile.Result{RequeueAfter: c.exec.timers.BudgetRetry}, err
	}
	var next time.Duration
	for _, m := range c.methods {
		if claimHeld && !forceful(m.Reason()) {
			continue
		}
		if left := c.exec.BackedOff(nc.UID, m.Reason()); left > 0 {
			// Called off lately for this reason (executor.go backOff):
			// not chosen again before the retry.
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		before := slices.Clone(nc.Status.Conditions)
		v, err := m.Candidate(ctx, nc, &pool)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("%s: %w", m.Reason(), err)
		}
		if !equality.Semantic.DeepEqual(before, nc.Status.Conditions) {
			//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
			return reconcile.Result{Requeue: true}, c.kube.Status().Update(ctx, nc)
		}
		if !v.Disrupt {
			if v.Held != "" {
				c.noteBlocked(ctx, nc, m.Reason(), v.Held)
			}
			if v.RequeueAfter > 0 && (next == 0 || v.RequeueAfter < next) {
				next = v.RequeueAfter
			}
			continue
		}
		// The annotation holds every method, so it is checked here, once
		// a method has chosen the claim, rather than in each. Nothing to
		// requeue for: the claim is reconciled when its node or a pod on
		// it changes, which is how the annotation goes away.
		if !forceful(m.Reason()) {
			held, err := heldBy(ctx, nc.Status.NodeName, cachedHolders{c.kube})
			if err != nil {
				return reconcile.Result{}, err
			}
			if held != "" {
				c.noteBlocked(ctx, nc, m.Reason(), held)
				return reconcile.Result{}, nil
			}
			c.blocked.forget(nc.UID)
		}
		if m.Reason() == v1alpha1.DisruptionReasonDrifted || m.Reason() == v1alpha1.DisruptionReasonExpired {
			if res, handled, err := c.submitUnit(ctx, nc, &pool, m, v); handled || err != nil {
				return res, err
			}
		}
		// Expiry is forceful, as Karpenter's v1 expiry is: the claim's
		// drain holds do-not-disrupt pods and PDBs only until its
		// terminationGracePeriod (nodeclaim/termination.go).
		return c.submit(ctx, c.command(nc, &pool, m, v))
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// submit hands the command to the executor. A command taken may be
// called off where nothing requeues the claim (the plan before the taint
// said no, so no node changed): the claim is looked at again when the
// call-off's backoff is over, or after ReplacementRetry when the command
// runs in the background.
func (c *Controller) submit(ctx context.Context, cmd *Command) (reconcile.Result, error) {
	res, err := c.exec.Submit(ctx, cmd)
	if err != nil || !res.IsZero() {
		return res, err
	}
	nc := cmd.Targets[0].Claim
	if left := c.exec.BackedOff(nc.UID, cmd.Reason); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	return reconcile.Result{RequeueAfter: c.exec.timers.ReplacementRetry}, nil
}

// command is the Command for one claim a per-claim method chose. An empty
// node needs no replacement, nor does one a scale-down removes (no budget
// holds that either: its owner asked for it). Without one, an expired node is drained all
// the same (its pods are provisioned for as they go pending); a drifted
// node keeps running, and is chosen again after Timers.ReplacementRetry.
func (c *Controller) command(nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool, m Method, v Verdict) *Command {
	reason := m.Reason()
	cmd := &Command{
		Reason: reason, Why: v.Why, Budgeted: reason != v1alpha1.DisruptionReasonScaledDown, Pause: c.Pause,
		Targets: []Target{{Claim: nc, Pool: pool}},
		Check: func(ctx context.Context) (string, error) {
			still, err := m.StillCandidate(ctx, nc)
			if err != nil || still {
				return "", err
			}
			return fmt.Sprintf("it is no longer %s", strings.ToLower(string(reason))), nil
		},
		Voluntary:               !forceful(reason),
		DrainWithoutReplacement: reason == v1alpha1.DisruptionReasonExpired,
		OnCalledOff: func(ctx context.Context, why string) {
			c.noteBlocked(ctx, nc, reason, why)
		},
	}
	if reason != v1alpha1.DisruptionReasonEmpty && reason != v1alpha1.DisruptionReasonScaledDown && c.exec.replacer != nil {
		cmd.Replacement = func(ctx context.Context) (*replacement, string, error) {
			return c.exec.replacer.forClaim(ctx, nc, pool)
		}
		cmd.PlanFirst = true
	}
	return cmd
}

// forceful: the reason's disruption is not held by do-not-disrupt, on
// the node or its pods: expiry. Its budgets still pace it; the drain
// holds do-not-disrupt pods and PDBs until the claim's
// terminationGracePeriod, when it has one.
func forceful(reason v1alpha1.DisruptionReason) bool {
	return reason == v1alpha1.DisruptionReasonExpired
}
