package disruption

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Interrupted is the reason a node the cloud is taking back is disrupted
// under.
const Interrupted = v1alpha1.DisruptionReasonInterrupted

// Interruption acts on the cloud's interruption messages (on AWS, an SQS
// queue fed by EventBridge rules):
//
//   - a spot interruption warning marks the offering (instance type, zone,
//     spot) unavailable, so that nothing is launched there for a while,
//     launches a replacement for the node's pods at once and drains the
//     node when the replacement is Initialized or, at the latest, halfway
//     through the notice (a minute before EC2 reclaims it), leaving its
//     pods the other half to terminate;
//   - an instance stopping, stopped, shutting down or terminated: the
//     same, drained at once, nothing marked (the capacity is not short);
//   - scheduled maintenance: a replacement first, drained when it is
//     Initialized, or an hour before the maintenance at the latest;
//   - a rebalance recommendation: an Event only; the interruption warning,
//     if it comes, is acted on (acting on every recommendation would churn
//     spot nodes that are never interrupted).
//
// It is involuntary: neither disruption budgets nor do-not-disrupt hold
// it, as the instance goes whatever Nodeforge does; PodDisruptionBudgets
// are respected by the drain as always. A replacement that cannot be
// launched does not call the drain off.
type Interruption struct {
	exec        *Executor
	cache       client.Reader
	live        client.Reader
	queue       cloudprovider.InterruptionQueue
	unavailable *cloudprovider.UnavailableOfferings
	now         func() time.Time
}

// NewInterruption returns the handler of queue's messages for c's claims,
// found in cache and read from live (the API server) before they are
// changed.
func NewInterruption(exec *Executor, cache, live client.Reader, queue cloudprovider.InterruptionQueue, unavailable *cloudprovider.UnavailableOfferings, now func() time.Time) *Interruption {
	return &Interruption{exec: exec, cache: cache, live: live, queue: queue, unavailable: unavailable, now: now}
}

// scheduledDrainLead is how long before scheduled maintenance a node is
// drained at the latest.
const scheduledDrainLead = time.Hour

// NeedLeaderElection: only the leader takes messages off the queue.
func (in *Interruption) NeedLeaderElection() bool { return true }

// Start receives and handles messages until ctx ends. A message whose
// handling failed stays in the queue and comes back after its visibility
// timeout; a queue that cannot be read is retried with backoff.
func (in *Interruption) Start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("interruption"))
	logger := klog.FromContext(ctx)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 6, Cap: time.Minute}
	delay := backoff
	for ctx.Err() == nil {
		msgs, err := in.queue.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			d := delay.Step()
			logger.Error(err, "Reading the interruption queue; retrying", "retryIn", d)
			metrics.InterruptionMessages.WithLabelValues("", "queueError").Inc()
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			continue
		}
		delay = backoff
		for _, m := range msgs {
			action, err := in.Handle(ctx, m)
			if err != nil {
				logger.Error(err, "Handling interruption message; it will be delivered again", "kind", m.Kind, "instances", m.InstanceIDs)
				metrics.InterruptionMessages.WithLabelValues(string(m.Kind), "error").Inc()
				continue
			}
			metrics.InterruptionMessages.WithLabelValues(string(m.Kind), action).Inc()
			if err := in.queue.Done(ctx, m); err != nil && ctx.Err() == nil {
				logger.Error(err, "Removing handled interruption message from the queue; it will be delivered again and handled once more", "kind", m.Kind, "instances", m.InstanceIDs)
			}
		}
	}
	return nil
}

// Handle acts on one message and says what it did: "disrupted",
// "replacing", "recorded" (rebalance), "alreadyGoing", "unknownInstance"
// or "ignored".
func (in *Interruption) Handle(ctx context.Context, m cloudprovider.Interruption) (string, error) {
	logger := klog.FromContext(ctx)
	if m.Kind == cloudprovider.UnknownMessage {
		logger.Info("Ignoring interruption queue message", "detail", m.Detail)
		return "ignored", nil
	}
	action, err := in.handleFrom(ctx, in.cache, m)
	if err == nil && action == "unknownInstance" {
		// The cache may not have the claim yet (launched a moment ago):
		// the API server says for sure before the message is dropped.
		action, err = in.handleFrom(ctx, in.live, m)
	}
	if err != nil {
		return "", err
	}
	if action == "unknownInstance" {
		logger.V(1).Info("Interruption message for an instance no NodeClaim has", "kind", m.Kind, "instances", m.InstanceIDs, "detail", m.Detail)
	}
	return action, nil
}

// handleFrom acts on the message for the claims of its instances that r
// lists.
func (in *Interruption) handleFrom(ctx context.Context, r client.Reader, m cloudprovider.Interruption) (string, error) {
	var claims v1alpha1.NodeClaimList
	if err := r.List(ctx, &claims); err != nil {
		return "", err
	}
	action := "unknownInstance"
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.Status.ProviderID == "" || !m.MatchesProviderID(nc.Status.ProviderID) {
			continue
		}
		// The cache may be a write behind (the claim's status was just
		// updated): read the claim from the API server, and once more
		// on a conflict, rather than leave the message for its
		// redelivery, half a spot notice later.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var live v1alpha1.NodeClaim
			if err := in.live.Get(ctx, client.ObjectKeyFromObject(nc), &live); err != nil {
				return err
			}
			a, err := in.handleClaim(ctx, m, &live)
			action = a
			return err
		})
		if apierrors.IsNotFound(err) {
			action = "alreadyGoing"
			continue
		}
		if err != nil {
			return "", err
		}
	}
	return action, nil
}

func (in *Interruption) handleClaim(ctx context.Context, m cloudprovider.Interruption, nc *v1alpha1.NodeClaim) (string, error) {
	logger := klog.FromContext(ctx).WithValues("nodeClaim", klog.KObj(nc), "node", nc.Status.NodeName, "kind", m.Kind)
	now := in.now()
	why := m.Detail
	if !m.Deadline.IsZero() {
		why = fmt.Sprintf("%s; the instance goes at %s", m.Detail, m.Deadline.UTC().Format(time.RFC3339))
	}
	if m.Kind == cloudprovider.RebalanceRecommendation {
		logger.Info("Spot rebalance recommendation: not acting on it; an interruption warning would be", "detail", m.Detail)
		in.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonRebalanceRecommended, "node %s: %s; no action until an interruption warning", nc.Status.NodeName, m.Detail)
		return "recorded", nil
	}
	if m.Kind == cloudprovider.SpotInterruption && nc.Status.InstanceType != "" && in.unavailable != nil {
		o := cloudprovider.Offer{Zone: nc.Status.Zone, CapacityType: string(v1alpha1.CapacityTypeSpot)}
		o.InstanceType.Name = nc.Status.InstanceType
		in.unavailable.Mark(o)
		logger.Info("Spot offering marked unavailable: its capacity is being reclaimed", "instanceType", o.InstanceType.Name, "zone", o.Zone)
	}
	if !nc.DeletionTimestamp.IsZero() {
		return "alreadyGoing", nil
	}
	// When the node must be drained at the latest.
	var by time.Time
	switch m.Kind {
	case cloudprovider.SpotInterruption:
		by = now
		if !m.Deadline.IsZero() && !m.Sent.IsZero() {
			by = m.Sent.Add(m.Deadline.Sub(m.Sent) / 2)
		}
	case cloudprovider.InstanceStopping:
		by = now
	case cloudprovider.ScheduledChange:
		if !m.Deadline.IsZero() {
			by = m.Deadline.Add(-scheduledDrainLead)
		}
	}
	if rep := nc.Annotations[v1alpha1.AnnotationReplacement]; rep != "" {
		// Already being replaced (drift, expiry...): make it an
		// interruption, with its deadline.
		return "replacing", in.annotate(ctx, nc, by, why)
	}
	var pool v1alpha1.NodePool
	if err := in.cache.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); client.IgnoreNotFound(err) != nil {
		return "", err
	}
	cmd := &Command{Reason: Interrupted, Why: why, DrainWithoutReplacement: true, DrainStart: by,
		Targets: []Target{{Claim: nc, Pool: &pool}}}
	replaced := false
	if nc.Status.Phase != v1alpha1.NodeClaimInitialized || nc.Status.NodeName == "" {
		logger.Info("Interrupted instance has no node yet: deleting its claim; its pods get other capacity", "why", why)
	} else if in.exec.replacer != nil && pool.Name != "" && (by.IsZero() || by.After(now)) {
		cmd.Replacement = func(ctx context.Context) (*replacement, string, error) {
			rep, why, err := in.exec.replacer.forClaim(ctx, nc, &pool)
			replaced = rep != nil
			return rep, why, err
		}
	}
	logger.Info("Instance interrupted", "why", why, "drainStart", by)
	err := in.run(ctx, cmd)
	if errors.Is(err, ErrAlreadyGoing) {
		// Another command got there first. One waiting for its
		// replacement must still drain by this message's deadline.
		var live v1alpha1.NodeClaim
		if err := in.live.Get(ctx, client.ObjectKeyFromObject(nc), &live); err != nil {
			return "alreadyGoing", client.IgnoreNotFound(err)
		}
		if live.DeletionTimestamp.IsZero() && live.Annotations[v1alpha1.AnnotationReplacement] != "" {
			return "replacing", in.annotate(ctx, &live, by, why)
		}
		return "alreadyGoing", nil
	}
	if err != nil {
		// %v: a conflict deep in the command (undone) is not the
		// caller's to retry the whole message for.
		return "", fmt.Errorf("interrupting nodeclaim %s: %v", nc.Name, err)
	}
	in.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonInterrupted, "node %s: %s", nc.Status.NodeName, why)
	if replaced {
		return "replacing", nil
	}
	return "disrupted", nil
}

// run runs the command once its claim is in no other (a voluntary
// disruption pausing before its last look), waiting a little for it.
func (in *Interruption) run(ctx context.Context, cmd *Command) error {
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	for {
		ok, err := in.exec.Run(ctx, cmd)
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return fmt.Errorf("nodeclaim %s is still in another disruption", cmd.Targets[0].Claim.Name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// annotate makes a claim already waiting for a replacement an
// interruption, drained by by at the latest.
func (in *Interruption) annotate(ctx context.Context, nc *v1alpha1.NodeClaim, by time.Time, why string) error {
	nc = nc.DeepCopy()
	nc.Annotations[v1alpha1.AnnotationDisruption] = string(Interrupted) + ": " + why
	if old, ok := drainStart(nc); !by.IsZero() && (!ok || by.Before(old)) {
		nc.Annotations[v1alpha1.AnnotationDrainStart] = by.UTC().Format(time.RFC3339)
	}
	in.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonInterrupted, "node %s: %s; its replacement %s is already launching", nc.Status.NodeName, why, nc.Annotations[v1alpha1.AnnotationReplacement])
	return in.exec.kube.Update(ctx, nc)
}

func (in *Interruption) event(nc *v1alpha1.NodeClaim, typ, reason, format string, args ...any) {
	if in.exec.recorder != nil {
		in.exec.recorder.Eventf(nc, nil, typ, reason, string(Interrupted), format, args...)
	}
}
