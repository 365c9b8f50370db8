// Package disruption removes initialized nodes voluntarily, and safely.
// Each Method says which claims it would disrupt and why: emptiness,
// expiration and drift, one claim at a time; consolidation decides over
// the whole cluster in rounds (consolidation.go). What every method
// shares is here: the pool's budgets per reason, active within their
// schedule windows (schedule.go); do-not-disrupt on the claim, its node or
// a pod on it (donotdisrupt.go); the last check on live state after the
// node is tainted, so that a pod bound or annotated meanwhile calls the
// disruption off; and replacement capacity launched and initialized
// before a node whose pods fit nowhere else is drained (replacement.go).
// Draining and terminating the node is the NodeClaim controller's
// termination step, once the claim is deleted.
package disruption

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Field indexes on Pods that methods read through the cache; the manager
// must have them (the NodeClaim controller registers them).
const (
	// IndexPodNominated: pending pods by status.nominatedNodeName.
	IndexPodNominated = "status.nominatedNodeName"
	// IndexPodNode: pods by spec.nodeName.
	IndexPodNode = "spec.nodeName"
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
}

// Controller disrupts the claims its methods choose, within budgets.
type Controller struct {
	kube     client.Client
	live     kubernetes.Interface // live reads, not the cache
	recorder events.EventRecorder
	now      func() time.Time
	methods  []Method
	budgets  budgets
	blocked  blockedNotes
	replacer *Replacer // nil: nodes are drained with no replacement first
	timers   Timers
}

// Timers are how long a disruption waits at each step that waits on time
// rather than on an event. DefaultTimers are the provisioner's defaults;
// tests shorten them (the provisioner's flags) to wait less.
type Timers struct {
	// BudgetRetry is how long a claim a budget holds back waits before it
	// is asked about again, unless a budget's schedule window opens or
	// closes sooner: a budget frees up when another claim of the pool is
	// gone, and that claim's going does not requeue this one.
	BudgetRetry time.Duration
	// ReplacementGrace is how long after naming its replacement a claim
	// waits for it to appear before giving it up.
	ReplacementGrace time.Duration
	// ReplacementRetry is how long a node whose replacement failed keeps
	// running before its method may choose it again.
	ReplacementRetry time.Duration
}

// DefaultTimers are the production waits.
var DefaultTimers = Timers{BudgetRetry: 10 * time.Second, ReplacementGrace: 30 * time.Second, ReplacementRetry: 30 * time.Second}

// SetTimers replaces DefaultTimers.
func (c *Controller) SetTimers(t Timers) { c.timers = t }

// SetReplacer makes the controller launch replacement capacity before it
// drains a node whose pods need it.
func (c *Controller) SetReplacer(r *Replacer) { c.replacer = r }

// New returns a Controller running the methods in order: the first that
// chooses a claim disrupts it. now is the clock budget schedules are
// read against.
func New(kube client.Client, live kubernetes.Interface, recorder events.EventRecorder, now func() time.Time, methods ...Method) *Controller {
	return &Controller{kube: kube, live: live, recorder: recorder, now: now, methods: methods, timers: DefaultTimers}
}

// Reconcile disrupts an initialized claim when a method chooses it, no
// do-not-disrupt annotation holds it, and the pool's budget for that
// reason allows: it taints the node, asks the method again on live state,
// marks the claim Disrupting and deletes it.
func (c *Controller) Reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if name := nc.Annotations[v1alpha1.AnnotationReplacement]; name != "" {
		return c.awaitReplacement(ctx, nc, name)
	}
	if nc.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
		return reconcile.Result{}, nil
	}
	if replacing, err := c.replacing(ctx, nc); err != nil || replacing {
		return reconcile.Result{RequeueAfter: c.timers.BudgetRetry}, err
	}
	var next time.Duration
	for _, m := range c.methods {
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
			if v.RequeueAfter > 0 && (next == 0 || v.RequeueAfter < next) {
				next = v.RequeueAfter
			}
			continue
		}
		// The annotation holds every method, so it is checked here, once
		// a method has chosen the claim, rather than in each. Nothing to
		// requeue for: the claim is reconciled when its node or a pod on
		// it changes, which is how the annotation goes away.
		held, err := c.heldBy(ctx, nc.Status.NodeName, cachedHolders{c.kube})
		if err != nil {
			return reconcile.Result{}, err
		}
		if held != "" {
			c.noteBlocked(ctx, nc, m, held)
			return reconcile.Result{}, nil
		}
		c.blocked.forget(nc.UID)
		return c.disrupt(ctx, nc, &pool, m, v)
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

func (c *Controller) disrupt(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool, m Method, v Verdict) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	now := c.now()
	allowed, change, err := c.budgets.reserve(ctx, c.kube, pool, nc, m.Reason(), now)
	if err != nil || !allowed {
		if err == nil {
			logger.V(2).Info("Disruption budget spent; waiting", "nodeClaim", klog.KObj(nc), "reason", m.Reason())
		}
		wait := c.timers.BudgetRetry
		if !change.IsZero() {
			// A window opening or closing may change the answer: look
			// then, if that is sooner (and not in a busy loop).
			wait = min(wait, max(change.Sub(now), time.Second))
		}
		return reconcile.Result{RequeueAfter: wait}, err
	}
	// Taint first, then look again at live state: a pod bound (or
	// annotated do-not-disrupt) meanwhile calls the disruption off, and
	// none is bound after.
	if err := c.taint(ctx, nc.Status.NodeName); err != nil {
		c.budgets.release(nc.UID)
		return reconcile.Result{}, err
	}
	still, err := m.StillCandidate(ctx, nc)
	held := ""
	if err == nil && still {
		held, err = c.heldBy(ctx, nc.Status.NodeName, liveHolders{c.live})
	}
	if err != nil || !still || held != "" {
		c.budgets.release(nc.UID)
		switch {
		case held != "":
			c.noteBlocked(ctx, nc, m, held)
		case err == nil:
			logger.Info("Not disrupting node: it changed while being disrupted", "node", nc.Status.NodeName, "reason", m.Reason())
		}
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return reconcile.Result{Requeue: held == ""}, errors.Join(err, c.untaint(ctx, nc.Status.NodeName))
	}
	if c.replacer != nil && m.Reason() != v1alpha1.DisruptionReasonEmpty {
		rep, why, err := c.replacer.forClaim(ctx, nc, pool)
		if err != nil {
			c.budgets.release(nc.UID)
			return reconcile.Result{}, errors.Join(err, c.untaint(ctx, nc.Status.NodeName))
		}
		if rep != nil {
			return reconcile.Result{RequeueAfter: replacementWait}, c.startReplacement(ctx, []*v1alpha1.NodeClaim{nc}, rep, m.Reason(), v.Why)
		}
		if why != "" {
			// Not held back for want of a replacement: an expired node
			// goes all the same, and its pods are provisioned for as
			// they go pending.
			logger.Info("No replacement holds the node's pods; draining it without one", "node", nc.Status.NodeName, "reason", m.Reason(), "why", why)
		}
	}
	metrics.DisruptionDecisions.WithLabelValues(string(m.Reason()), "disrupted").Inc()
	logger.Info("Disrupting node", "node", nc.Status.NodeName, "reason", m.Reason(), "why", v.Why)
	return reconcile.Result{}, c.remove(ctx, nc, m.Reason(), v.Why)
}

// remove marks a claim whose node is tainted and checked Disrupting, says
// so in an Event, and deletes it: the NodeClaim controller's termination
// step drains the node and terminates the instance. A claim that cannot
// be marked is not deleted, and its node takes pods again.
func (c *Controller) remove(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why string) error {
	if c.recorder != nil {
		c.recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Disrupting", string(reason), "node %s: %s", nc.Status.NodeName, why)
	}
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, string(reason)).Inc()
	nc = nc.DeepCopy()
	nc.Status.Phase = v1alpha1.NodeClaimDisrupting
	if err := c.kube.Status().Update(ctx, nc); err != nil {
		c.budgets.release(nc.UID)
		return errors.Join(err, c.untaint(ctx, nc.Status.NodeName))
	}
	return client.IgnoreNotFound(c.kube.Delete(ctx, nc))
}

// taint puts nodeforge.dev/disrupted:NoSchedule on the node.
func (c *Controller) taint(ctx context.Context, name string) error {
	var node corev1.Node
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return err
	}
	if slices.ContainsFunc(node.Spec.Taints, isDisruptedTaint) {
		return nil
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule})
	return c.kube.Update(ctx, &node)
}

// untaint lifts nodeforge.dev/disrupted from a node whose disruption was
// called off.
func (c *Controller) untaint(ctx context.Context, name string) error {
	var node corev1.Node
	if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		return client.IgnoreNotFound(err)
	}
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isDisruptedTaint)
	if len(taints) == len(node.Spec.Taints) {
		return nil
	}
	node.Spec.Taints = taints
	return c.kube.Update(ctx, &node)
}

func isDisruptedTaint(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }

// OwnedByDaemonSet: a daemonset pod neither keeps a node nor is drained
// from it; its daemonset runs it wherever there is a node.
func OwnedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
