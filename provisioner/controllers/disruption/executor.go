package disruption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Command is one disruption decision: the claims to disrupt together,
// for one reason, and how the deciding method checks and replaces them.
// Methods decide; the Executor carries commands out.
type Command struct {
	Reason  v1alpha1.DisruptionReason
	Why     string
	Targets []Target
	// Budgeted: the pools' budgets for Reason hold the command. Only an
	// interruption is not: the instance goes whatever Nodeforge does.
	Budgeted bool
	// Voluntary: do-not-disrupt on the node or on a pod bound to it,
	// read live after the taint, calls the command off.
	Voluntary bool
	// Pause between the taint and the last look: a pod the scheduler was
	// binding to a node as it was chosen shows up by then.
	Pause time.Duration
	// Check is the deciding method's last look at live state, after the
	// taint and the pause: a reason calls the command off.
	Check func(ctx context.Context) (string, error)
	// Replacement plans new capacity for the pods before the nodes are
	// drained: nil and "" when none is needed; nil and why when one is
	// needed and none can be had.
	Replacement func(ctx context.Context) (*replacement, string, error)
	// PlanFirst: Replacement is asked once before the taint as well, and
	// a command for which none can be had (the pool's limits, no offer
	// that holds the pods) is called off untainted. For a method that
	// decides without simulating (drift): a node at its pool's limit is
	// then never tainted. The plan after the pause still decides.
	PlanFirst bool
	// DrainWithoutReplacement: when a replacement is needed and none can
	// be had, the nodes are drained anyway (expiry, repair, interruption:
	// the node is going regardless), rather than the command called off.
	DrainWithoutReplacement bool
	// DrainStart, for claims left waiting for a replacement: their drain
	// starts at this time at the latest.
	DrainStart time.Time
	// OnCalledOff is told why a command was called off before it reached
	// any claim (a reason, not an error): the method's own Event.
	OnCalledOff func(ctx context.Context, why string)
	// OnDone is told when the command reached its claims: marked
	// Disrupting (rep nil), or waiting for rep; for what a method counts
	// only then (consolidation's savings).
	OnDone func(rep *replacement)
}

// Target is one claim of a command, with its pool.
type Target struct {
	Claim *v1alpha1.NodeClaim
	Pool  *v1alpha1.NodePool
	// Why overrides the command's Why in this claim's Event.
	Why string
}

func (t Target) why(cmd *Command) string {
	if t.Why != "" {
		return t.Why
	}
	return cmd.Why
}

// Executor carries out disruption commands, one step after another:
// budget, taint, pause, the last look at live state, replacement, mark
// Disrupting, delete. Each step that fails is undone: the budget released,
// the taint lifted. A claim is in at most one command at a time, and a
// claim in a command is no candidate for any method (Busy).
//
// What outlives a command is on the API server, so that a provisioner
// restarted at any step finishes or undoes it: a claim that names its
// replacement waits for it (Continue); a claim marked Disrupting is
// deleted (Continue); a node tainted nodeforge.dev/disrupted whose claim
// is in neither state and in no command has the taint lifted (Sweep, at
// start, on taking the lease, and every SweepInterval).
type Executor struct {
	kube     client.Client        // reads from the cache; writes
	live     client.Reader        // the API server, for objects a step changes
	pods     kubernetes.Interface // the API server, for pods by node
	recorder events.EventRecorder
	now      func() time.Time
	budgets  budgets
	replacer *Replacer
	timers   Timers

	// SweepInterval is how often nodes are swept of disruption taints no
	// command holds.
	SweepInterval time.Duration

	// calledOff remembers the commands called off, per claim and
	// reason, so that no method chooses the claim again before a retry
	// (Timers.ReplacementRetry, doubling with each call-off in a row).
	calledOff callOffs

	mu       sync.Mutex
	active   map[types.UID]bool // claims in a command
	base     context.Context    // Start's: commands end with the lease
	started  bool               // Start has run: Submit runs commands in the background
	stopping bool               // Start's context is over: Submit takes no more
	wg       sync.WaitGroup
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
	// ReplacementRetry is how long a node whose disruption was called
	// off (its replacement failed, its pool's limits left no room, a
	// write failed, its last look changed its method's mind) keeps
	// running before the method may choose it again. It doubles with
	// each call-off of the same claim and reason in a row, up to
	// MaxCallOffRetry.
	ReplacementRetry time.Duration
}

// MaxCallOffRetry bounds the backoff of a claim whose disruptions keep
// being called off: it is chosen again at least this often.
const MaxCallOffRetry = 10 * time.Minute

// DefaultTimers are the production waits.
var DefaultTimers = Timers{BudgetRetry: 10 * time.Second, ReplacementGrace: 30 * time.Second, ReplacementRetry: 30 * time.Second}

// NewExecutor returns an executor that reads the cache through kube, and
// live state through live and pods.
func NewExecutor(kube client.Client, live client.Reader, pods kubernetes.Interface, recorder events.EventRecorder, now func() time.Time) *Executor {
	return &Executor{kube: kube, live: live, pods: pods, recorder: recorder, now: now, timers: DefaultTimers,
		SweepInterval: 15 * time.Second, active: map[types.UID]bool{}, base: context.Background()}
}

// SetTimers replaces DefaultTimers.
func (e *Executor) SetTimers(t Timers) { e.timers = t }

// SetReplacer makes the executor launch replacement capacity before it
// drains a node whose pods need it.
func (e *Executor) SetReplacer(r *Replacer) { e.replacer = r }

// Start sweeps stale taints at once and then every SweepInterval, until
// ctx ends; commands submitted from then on run under ctx. Only the
// leader runs it, so it runs on taking the lease.
func (e *Executor) Start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("disruption"))
	e.mu.Lock()
	e.base, e.started = ctx, true
	e.mu.Unlock()
	t := time.NewTicker(e.SweepInterval)
	defer t.Stop()
	for {
		if err := e.Sweep(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Sweeping disruption taints failed; trying again", "retryIn", e.SweepInterval)
		}
		select {
		case <-ctx.Done():
			e.mu.Lock()
			e.stopping = true
			e.mu.Unlock()
			e.wg.Wait()
			return nil
		case <-t.C:
		}
	}
}

// Busy reports whether the claim is in a command now.
func (e *Executor) Busy(uid types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[uid]
}

// take puts the command's claims in it, or reports that one of them is in
// another command.
func (e *Executor) take(cmd *Command) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range cmd.Targets {
		if e.active[t.Claim.UID] {
			return false
		}
	}
	for _, t := range cmd.Targets {
		e.active[t.Claim.UID] = true
	}
	return true
}

func (e *Executor) drop(cmd *Command) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range cmd.Targets {
		delete(e.active, t.Claim.UID)
	}
}

// Submit reserves the command's budgets now and runs the rest of it in
// the background, so that the caller (a NodeClaim worker) does not wait
// out the pause. It returns after how long to ask about the claims again
// when the command was not taken: a claim in another command, a budget
// spent, or the executor stopping. Before Start (not yet leading) it
// runs the command at once, in the caller.
func (e *Executor) Submit(ctx context.Context, cmd *Command) (reconcile.Result, error) {
	if !e.take(cmd) {
		return reconcile.Result{RequeueAfter: e.timers.BudgetRetry}, nil
	}
	res, ok, err := e.reserve(ctx, cmd)
	if err != nil || !ok {
		e.drop(cmd)
		return res, err
	}
	e.mu.Lock()
	base, started, stopping := e.base, e.started, e.stopping
	if started && !stopping {
		e.wg.Add(1) // under mu: Start's Wait comes after stopping is set
	}
	e.mu.Unlock()
	if stopping {
		e.release(cmd)
		e.drop(cmd)
		return reconcile.Result{RequeueAfter: e.timers.BudgetRetry}, nil
	}
	if !started {
		defer e.drop(cmd)
		return reconcile.Result{}, ignoreGoing(e.run(ctx, cmd))
	}
	logger := klog.FromContext(ctx)
	go func() {
		defer e.wg.Done()
		defer e.drop(cmd)
		ctx := klog.NewContext(base, logger)
		if err := ignoreGoing(e.run(ctx, cmd)); err != nil && ctx.Err() == nil {
			logger.Error(err, "Disruption failed; what it changed is undone, and the claim is judged again", "reason", cmd.Reason, "nodeClaims", cmd.claimNames())
		}
	}()
	return reconcile.Result{}, nil
}

// ErrAlreadyGoing: a claim of the command is already being removed (in a
// command the API server shows: Disrupting, deleted, or waiting for its
// replacement), or is another claim by the same name now. Nothing was
// done.
var ErrAlreadyGoing = errors.New("the nodeclaim is already being removed")

func ignoreGoing(err error) error {
	if errors.Is(err, ErrAlreadyGoing) {
		return nil
	}
	return err
}

// Wait waits for the commands submitted so far to end.
func (e *Executor) Wait() { e.wg.Wait() }

// Run carries the command out and returns when it is done, called off,
// or waiting for a replacement. ok is false when it was not taken: a
// claim in another command, or a budget spent. ErrAlreadyGoing says a
// claim was found already going, and nothing was done.
func (e *Executor) Run(ctx context.Context, cmd *Command) (ok bool, err error) {
	if !e.take(cmd) {
		return false, nil
	}
	defer e.drop(cmd)
	_, ok, err = e.reserve(ctx, cmd)
	if err != nil || !ok {
		return false, err
	}
	return true, e.run(ctx, cmd)
}

func (c *Command) claimNames() []string {
	out := make([]string, len(c.Targets))
	for i, t := range c.Targets {
		out[i] = t.Claim.Name
	}
	return out
}

func (c *Command) nodeNames() []string {
	var out []string
	for _, t := range c.Targets {
		if t.Claim.Status.NodeName != "" {
			out = append(out, t.Claim.Status.NodeName)
		}
	}
	return out
}

// reserve counts the command's claims against their pools' budgets; when
// one is spent, nothing is reserved and res says when to ask again.
func (e *Executor) reserve(ctx context.Context, cmd *Command) (res reconcile.Result, ok bool, err error) {
	if !cmd.Budgeted {
		return reconcile.Result{}, true, nil
	}
	now := e.now()
	for i, t := range cmd.Targets {
		allowed, change, err := e.budgets.reserve(ctx, e.kube, t.Pool, t.Claim, cmd.Reason, now)
		if err != nil || !allowed {
			for _, r := range cmd.Targets[:i] {
				e.budgets.release(r.Claim.UID)
			}
			if err == nil {
				klog.FromContext(ctx).V(2).Info("Disruption budget spent; waiting", "nodeClaim", klog.KObj(t.Claim), "nodePool", t.Pool.Name, "reason", cmd.Reason)
				metrics.DisruptionDecisions.WithLabelValues(string(cmd.Reason), "budget").Inc()
			}
			wait := e.timers.BudgetRetry
			if !change.IsZero() {
				// A window opening or closing may change the answer:
				// look then, if that is sooner (and not in a busy loop).
				wait = min(wait, max(change.Sub(now), time.Second))
			}
			return reconcile.Result{RequeueAfter: wait}, false, err
		}
	}
	return reconcile.Result{}, true, nil
}

func (e *Executor) release(cmd *Command) {
	if !cmd.Budgeted {
		return // reserved nothing; a reservation under the claim's UID is another's
	}
	for _, t := range cmd.Targets {
		e.budgets.release(t.Claim.UID)
	}
}

// run is every step after the budget.
func (e *Executor) run(ctx context.Context, cmd *Command) error {
	logger := klog.FromContext(ctx)
	if err := e.readLive(ctx, cmd); err != nil {
		return err
	}
	if cmd.PlanFirst && cmd.Replacement != nil && !cmd.DrainWithoutReplacement {
		if _, why, err := cmd.Replacement(ctx); err != nil || why != "" {
			if why != "" {
				why = "no replacement can be launched: " + why
			}
			return e.callOff(ctx, cmd, nil, why, err)
		}
	}
	var tainted []string
	for _, name := range cmd.nodeNames() {
		if err := e.taint(ctx, name); err != nil {
			return e.callOff(ctx, cmd, tainted, "", err)
		}
		tainted = append(tainted, name)
	}
	crashpoint.Hit(crashpoint.AfterTaint)
	if cmd.Reason == Underutilized {
		crashpoint.Pause(crashpoint.ConsolidationTainted, strings.Join(tainted, "\n"))
	}
	if cmd.Pause > 0 {
		select {
		case <-ctx.Done():
			return e.callOff(ctx, cmd, tainted, "", ctx.Err())
		case <-time.After(cmd.Pause):
		}
	}
	if cmd.Check != nil {
		if why, err := cmd.Check(ctx); err != nil || why != "" {
			return e.callOff(ctx, cmd, tainted, why, err)
		}
	}
	if cmd.Voluntary {
		for _, name := range tainted {
			held, err := heldBy(ctx, name, liveHolders{e.pods})
			if err != nil || held != "" {
				return e.callOff(ctx, cmd, tainted, held, err)
			}
		}
	}
	if cmd.Replacement != nil {
		rep, why, err := cmd.Replacement(ctx)
		if err != nil {
			return e.callOff(ctx, cmd, tainted, "", err)
		}
		if rep != nil {
			return e.startReplacement(ctx, cmd, rep)
		}
		if why != "" {
			if !cmd.DrainWithoutReplacement {
				return e.callOff(ctx, cmd, tainted, "no replacement can be launched: "+why, nil)
			}
			// The node is going regardless: its pods are provisioned
			// for as they go pending.
			logger.Info("No replacement can be launched for the node's pods; draining it without one", "nodes", tainted, "reason", cmd.Reason, "why", why)
			for _, t := range cmd.Targets {
				e.event(t.Claim, corev1.EventTypeWarning, v1alpha1.ReasonDrainingWithoutReplacement, cmd.Reason, "node %s: no replacement can be launched (%s); draining it anyway: %s", t.Claim.Status.NodeName, why, t.why(cmd))
			}
		}
	}
	metrics.DisruptionDecisions.WithLabelValues(string(cmd.Reason), "disrupted").Inc()
	logger.Info("Disrupting nodes", "reason", cmd.Reason, "nodes", tainted, "nodeClaims", cmd.claimNames(), "why", cmd.Why)
	return e.removeAll(ctx, cmd)
}

// readLive replaces the command's claims with the API server's: a claim
// already going, or another claim by the same name now, is not this
// command's (ErrAlreadyGoing), and the budgets are released.
func (e *Executor) readLive(ctx context.Context, cmd *Command) error {
	for i, t := range cmd.Targets {
		var fresh v1alpha1.NodeClaim
		if err := e.live.Get(ctx, client.ObjectKeyFromObject(t.Claim), &fresh); err != nil {
			e.release(cmd)
			if apierrors.IsNotFound(err) {
				return ErrAlreadyGoing
			}
			return err
		}
		if fresh.UID != t.Claim.UID || isDisrupting(&fresh) {
			e.release(cmd)
			klog.FromContext(ctx).V(2).Info("Not disrupting: the claim is already going", "nodeClaim", klog.KObj(t.Claim), "reason", cmd.Reason)
			return ErrAlreadyGoing
		}
		cmd.Targets[i].Claim = &fresh
	}
	return nil
}

// removeAll marks each claim of a command that reached its last step
// Disrupting and deletes it; a claim that cannot be marked keeps its
// node, untainted, and is backed off.
func (e *Executor) removeAll(ctx context.Context, cmd *Command) error {
	var errs []error
	done := 0
	for _, t := range cmd.Targets {
		marked, err := e.remove(ctx, t.Claim, cmd.Reason, t.why(cmd))
		if !marked {
			// Not marked: this claim's node keeps running and takes pods
			// again. (A claim marked but not deleted is deleted on its
			// next reconcile, Continue.)
			// The taint first, then the budget: a tainted node is
			// always counted against its pool's budget.
			undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err = errors.Join(err, e.untaint(undo, t.Claim.Status.NodeName))
			cancel()
			if cmd.Budgeted {
				e.budgets.release(t.Claim.UID)
			}
			e.backOff(ctx, t.Claim, cmd.Reason)
		} else {
			done++
			e.calledOff.forget(t.Claim.UID)
		}
		errs = append(errs, err)
	}
	if done > 0 && cmd.OnDone != nil {
		cmd.OnDone(nil)
	}
	return errors.Join(errs...)
}

// callOff undoes a command that did not reach its claims: the budgets
// released and the taints lifted, even when ctx is over (a shutdown or a
// lost lease must not leave a node tainted; what this misses, Sweep
// finds). why, when set, is why the command changed its mind. Each claim
// is backed off for the command's reason (backOff).
func (e *Executor) callOff(ctx context.Context, cmd *Command, tainted []string, why string, err error) error {
	metrics.DisruptionDecisions.WithLabelValues(string(cmd.Reason), "aborted").Inc()
	for _, t := range cmd.Targets {
		e.backOff(ctx, t.Claim, cmd.Reason)
	}
	if why != "" {
		klog.FromContext(ctx).Info("Not disrupting: the nodes changed while being disrupted", "reason", cmd.Reason, "nodes", tainted, "why", why)
		if cmd.OnCalledOff != nil {
			cmd.OnCalledOff(ctx, why)
		}
	}
	// The taints first, then the budgets: a tainted node is always
	// counted against its pool's budget.
	undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, name := range tainted {
		err = errors.Join(err, e.untaint(undo, name))
	}
	e.release(cmd)
	return err
}

// remove marks a claim whose node is tainted and checked Disrupting, says
// so in an Event, and deletes it: the NodeClaim controller's termination
// step drains the node and terminates the instance. marked says whether
// the claim is Disrupting (or gone); a claim not marked is not deleted,
// and the caller decides whether its node takes pods again. A claim
// marked but not deleted (the delete failed, or the process died) is
// deleted by Continue.
func (e *Executor) remove(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, why string) (marked bool, _ error) {
	if reason == Unhealthy {
		// From now on the unhealthy node's pods are deleted, each with
		// its own grace period, not evicted: a PodDisruptionBudget that
		// counts them healthy would refuse their evictions for as long
		// as the node is sick (nodeclaim/termination.go).
		err := retry.OnError(writeBackoff, transient, func() error {
			var fresh v1alpha1.NodeClaim
			if err := e.live.Get(ctx, client.ObjectKeyFromObject(nc), &fresh); err != nil {
				return err
			}
			if fresh.UID != nc.UID || fresh.Annotations[v1alpha1.AnnotationDrainDeadline] != "" {
				return nil
			}
			metav1.SetMetaDataAnnotation(&fresh.ObjectMeta, v1alpha1.AnnotationDrainDeadline, e.now().UTC().Format(time.RFC3339))
			return e.kube.Update(ctx, &fresh)
		})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("setting the drain deadline of nodeclaim %s: %w", nc.Name, err)
		}
	}
	var fresh v1alpha1.NodeClaim
	err := retry.OnError(writeBackoff, transient, func() error {
		if err := e.live.Get(ctx, client.ObjectKeyFromObject(nc), &fresh); err != nil {
			return err
		}
		if fresh.UID != nc.UID {
			return apierrors.NewNotFound(v1alpha1.SchemeGroupVersion.WithResource("nodeclaims").GroupResource(), nc.Name)
		}
		if fresh.Status.Phase == v1alpha1.NodeClaimDisrupting {
			return nil // a write that timed out was applied
		}
		fresh.Status.Phase = v1alpha1.NodeClaimDisrupting
		return e.kube.Status().Update(ctx, &fresh)
	})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		err = fmt.Errorf("marking nodeclaim %s Disrupting: %w", nc.Name, err)
		if reason == Unhealthy {
			// The deadline must not outlive this command: a later
			// ordinary drain (drift, a user's delete) would take it for
			// its own and delete every pod past its PDBs.
			undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err = errors.Join(err, e.clearDrainDeadline(undo, &fresh))
			cancel()
		}
		return false, err
	}
	crashpoint.Hit(crashpoint.AfterDisrupting)
	e.event(&fresh, corev1.EventTypeNormal, v1alpha1.ReasonDisrupting, reason, "node %s: %s", nc.Status.NodeName, why)
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, string(reason)).Inc()
	return true, e.delete(ctx, &fresh)
}

// clearDrainDeadline removes the claim's AnnotationDrainDeadline if it is
// still the one read (a JSON patch that tests the value first), and
// nothing else: a deadline written since is another command's.
func (e *Executor) clearDrainDeadline(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	by := nc.Annotations[v1alpha1.AnnotationDrainDeadline]
	if by == "" {
		return nil
	}
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(v1alpha1.AnnotationDrainDeadline)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": nc.UID},
		{"op": "test", "path": path, "value": by},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	err = retry.OnError(writeBackoff, transient, func() error {
		return e.kube.Patch(ctx, nc.DeepCopy(), client.RawPatch(types.JSONPatchType, patch))
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		// A failed test (the API server answers 422 Invalid) means
		// another claim, or another deadline, now: nothing to remove.
		var now v1alpha1.NodeClaim
		if gerr := e.live.Get(ctx, client.ObjectKeyFromObject(nc), &now); apierrors.IsNotFound(gerr) ||
			(gerr == nil && (now.UID != nc.UID || now.Annotations[v1alpha1.AnnotationDrainDeadline] != by)) {
			return nil
		}
		return fmt.Errorf("removing the stale drain deadline of nodeclaim %s: %w", nc.Name, err)
	}
	klog.FromContext(ctx).Info("Removed a drain deadline no disruption holds", "nodeClaim", klog.KObj(nc), "drainDeadline", by)
	return nil
}

// StaleDrainDeadline says whether nc carries a drain deadline that no
// disruption holds: it is neither being removed nor Disrupting, nor in a
// command. A repair that failed between its two writes, or a process
// that stopped between them, leaves one.
func (e *Executor) StaleDrainDeadline(nc *v1alpha1.NodeClaim) bool {
	return nc.Annotations[v1alpha1.AnnotationDrainDeadline] != "" && nc.DeletionTimestamp.IsZero() &&
		nc.Status.Phase != v1alpha1.NodeClaimDisrupting && !e.Busy(nc.UID)
}

// delete deletes the claim, as long as it is the one decided on.
func (e *Executor) delete(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	err := retry.OnError(writeBackoff, transient, func() error {
		return e.kube.Delete(ctx, nc, client.Preconditions{UID: &nc.UID})
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting nodeclaim %s marked Disrupting (it is deleted on its next reconcile): %w", nc.Name, err)
	}
	crashpoint.Hit(crashpoint.AfterDelete)
	return nil
}

// Continue carries on a command that outlived the process that began it,
// or a step that failed: a claim marked Disrupting is deleted; a claim
// that names its replacement waits for it. It reports false for a claim
// in neither state.
func (e *Executor) Continue(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, bool, error) {
	if !nc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, false, nil
	}
	if nc.Status.Phase == v1alpha1.NodeClaimDisrupting {
		klog.FromContext(ctx).Info("Deleting nodeclaim marked Disrupting", "nodeClaim", klog.KObj(nc), "node", nc.Status.NodeName)
		return reconcile.Result{}, true, e.delete(ctx, nc)
	}
	if name := nc.Annotations[v1alpha1.AnnotationReplacement]; name != "" {
		if e.Busy(nc.UID) {
			return reconcile.Result{RequeueAfter: replacementWait}, true, nil
		}
		res, err := e.awaitReplacement(ctx, nc, name)
		return res, true, err
	}
	return reconcile.Result{}, false, nil
}

// Sweep lifts nodeforge.dev/disrupted from every node whose claim is in
// no command, live or on the API server (waiting for its replacement,
// Disrupting, or being deleted). Nodes with no claim are the garbage
// collector's. It finds the candidates in the cache, without holding the
// executor (a taint the cache has not seen yet waits for the next
// sweep), then takes each candidate's claim as a command of its own (so
// none starts on it meanwhile), reads that claim live (a command that
// ended meanwhile left its state there), and only then lifts the taint,
// read live.
func (e *Executor) Sweep(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var nodes corev1.NodeList
	// Read only: the cache's own objects, every 15s over every node.
	if err := e.kube.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	stale := map[string]bool{}
	for i := range nodes.Items {
		if slices.ContainsFunc(nodes.Items[i].Spec.Taints, isDisruptedTaint) {
			stale[nodes.Items[i].Name] = true
		}
	}
	if len(stale) == 0 {
		return nil
	}
	var claims v1alpha1.NodeClaimList
	if err := e.kube.List(ctx, &claims); err != nil {
		return fmt.Errorf("listing nodeclaims: %w", err)
	}
	var errs []error
	for i := range claims.Items {
		nc := &claims.Items[i]
		if !stale[nc.Status.NodeName] || isDisrupting(nc) {
			continue
		}
		sweep := &Command{Reason: "sweep", Targets: []Target{{Claim: nc}}}
		if !e.take(sweep) {
			continue // in a command: its taint
		}
		errs = append(errs, e.sweepOne(ctx, nc))
		e.drop(sweep)
	}
	return errors.Join(errs...)
}

// sweepOne lifts the taint of nc's node if nc, read live, is still in no
// command. The caller holds nc.
func (e *Executor) sweepOne(ctx context.Context, nc *v1alpha1.NodeClaim) error {
	var fresh v1alpha1.NodeClaim
	if err := e.live.Get(ctx, client.ObjectKeyFromObject(nc), &fresh); err != nil {
		return client.IgnoreNotFound(err)
	}
	if fresh.UID != nc.UID || isDisrupting(&fresh) {
		return nil
	}
	klog.FromContext(ctx).Info("Lifting a disruption taint no command holds", "node", fresh.Status.NodeName, "nodeClaim", klog.KObj(&fresh))
	metrics.DisruptionDecisions.WithLabelValues("", "taintSwept").Inc()
	return e.untaint(ctx, fresh.Status.NodeName)
}

// taint puts nodeforge.dev/disrupted:NoSchedule on the node, read live.
func (e *Executor) taint(ctx context.Context, name string) error {
	return retry.OnError(writeBackoff, transient, func() error {
		var node corev1.Node
		if err := e.live.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return err
		}
		if slices.ContainsFunc(node.Spec.Taints, isDisruptedTaint) {
			return nil
		}
		node.Spec.Taints = append(node.Spec.Taints, disruptedTaint)
		return e.kube.Update(ctx, &node)
	})
}

// untaint lifts nodeforge.dev/disrupted from a node, read live: the
// cache may not show the taint that was just put on.
func (e *Executor) untaint(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	return retry.OnError(writeBackoff, transient, func() error {
		var node corev1.Node
		if err := e.live.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return client.IgnoreNotFound(err)
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isDisruptedTaint)
		if len(taints) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		return client.IgnoreNotFound(e.kube.Update(ctx, &node))
	})
}

func (e *Executor) event(nc *v1alpha1.NodeClaim, typ, reason string, action v1alpha1.DisruptionReason, format string, args ...any) {
	if e.recorder != nil {
		e.recorder.Eventf(nc, nil, typ, reason, string(action), format, args...)
	}
}

// writeBackoff paces the retries of a write that failed for a reason
// that passes: about 6s in all, within a command's life.
var writeBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6, Cap: 2 * time.Second}

// transient: an error worth trying the same write again for, at once or
// a little later: a conflict (the write is a read-modify-write of the
// live object, so the retry reads again), the API server busy, failing or
// timing out, or no answer at all (a connection or stream cut; the write
// may have been applied, and the retry reads what it finds). An answer
// the API server gave for the object itself (not found, forbidden,
// invalid) is not.
func transient(err error) bool {
	if apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) {
		return true
	}
	var status apierrors.APIStatus
	return err != nil && !errors.As(err, &status) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// disruptedTaint is the taint a node being disrupted gets before it is
// drained: simulations show the nodes they remove with it.
var disruptedTaint = corev1.Taint{Key: v1alpha1.TaintDisrupted, Effect: corev1.TaintEffectNoSchedule}

func isDisruptedTaint(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }

// backOff records that a command of reason was called off for nc: no
// method of that reason chooses it again for Timers.ReplacementRetry,
// doubled for each call-off in a row, up to MaxCallOffRetry. Without it,
// a call-off lifts the taint, the node's update requeues the claim, and
// the method chooses it again at once: a node at its pool's limit would
// be tainted and untainted every few seconds. Only budgeted reasons are
// backed off; repair and interruptions are retried by their own rounds.
func (e *Executor) backOff(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason) {
	if reason == "sweep" || reason == Interrupted {
		return
	}
	wait := e.calledOff.record(nc.UID, reason, e.now(), e.timers.ReplacementRetry)
	klog.FromContext(ctx).V(1).Info("Disruption called off; the claim is not chosen again for this reason until the retry", "nodeClaim", klog.KObj(nc), "reason", reason, "retryIn", wait)
}

// BackedOff says how long, from now, the claim's disruptions for reason
// stay called off; zero when it may be chosen.
func (e *Executor) BackedOff(uid types.UID, reason v1alpha1.DisruptionReason) time.Duration {
	return e.calledOff.left(uid, reason, e.now())
}

// callOffs holds the backoffs of claims whose disruptions were called
// off. It is safe for concurrent use; the zero value is empty.
type callOffs struct {
	mu sync.Mutex
	m  map[callOffKey]callOff
}

type callOffKey struct {
	claim  types.UID
	reason v1alpha1.DisruptionReason
}

type callOff struct {
	until time.Time
	// n is how many call-offs in a row: one more each time the claim is
	// called off within MaxCallOffRetry of the last backoff's end.
	n int
}

// record backs the claim off for reason from now, and returns for how
// long: base, doubled for each earlier call-off in a row, at most
// MaxCallOffRetry. A backoff that ended more than MaxCallOffRetry ago
// starts over; such entries are dropped on the way.
func (c *callOffs) record(uid types.UID, reason v1alpha1.DisruptionReason, now time.Time, base time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[callOffKey]callOff{}
	}
	for k, o := range c.m {
		if now.Sub(o.until) > MaxCallOffRetry {
			delete(c.m, k)
		}
	}
	k := callOffKey{uid, reason}
	o := c.m[k]
	wait := max(base, time.Second)
	for range o.n {
		if wait >= MaxCallOffRetry {
			break
		}
		wait *= 2
	}
	wait = min(wait, MaxCallOffRetry)
	c.m[k] = callOff{until: now.Add(wait), n: o.n + 1}
	return wait
}

// left is how long the claim's backoff for reason lasts from now.
func (c *callOffs) left(uid types.UID, reason v1alpha1.DisruptionReason, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.m[callOffKey{uid, reason}]; ok && now.Before(o.until) {
		return o.until.Sub(now)
	}
	return 0
}

// forget drops the claim's backoffs: it was disrupted.
func (c *callOffs) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.claim == uid {
			delete(c.m, k)
		}
	}
}
