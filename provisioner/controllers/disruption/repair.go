package disruption

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// Unhealthy is the reason repair disrupts a node under.
const Unhealthy = v1alpha1.DisruptionReasonUnhealthy

// MaxUnhealthyFraction: no node of a pool is repaired while more than
// this share of its nodes, rounded up, is unhealthy (Karpenter's node
// repair rule and number): so many at once is an outage, not bad nodes.
const MaxUnhealthyFraction = 0.2

// Repair replaces the nodes of Nodeforge's pools that are unhealthy: a
// condition matching one of the pool's repair policies for longer than
// its toleration (v1alpha1.NodePool.RepairPolicies). It is involuntary,
// so do-not-disrupt does not hold it; the pool's budgets for Unhealthy
// do, and so do two rules of their own: the zone's state and token
// bucket (zones.go), and MaxUnhealthyFraction. A node whose pods fit
// nowhere else gets its replacement first, as for every disruption
// (replacement.go); then its claim is deleted, which drains the node
// (pods that cannot finish terminating on it are deleted once their grace
// is over) and terminates its instance.
type Repair struct {
	exec  *Executor
	cache client.Reader
	now   func() time.Time

	// Interval between rounds.
	Interval time.Duration
	// Rules limit repair per zone.
	Rules ZoneRules

	limiters zoneLimiters
	held     map[types.UID]string // claim → why last held, said once
}

// NewRepair returns the repair of c's pools.
func NewRepair(exec *Executor, cache client.Reader, now func() time.Time) *Repair {
	return &Repair{exec: exec, cache: cache, now: now, Interval: 5 * time.Second, Rules: DefaultZoneRules, held: map[types.UID]string{}}
}

// Start runs rounds until ctx ends; only the leader runs it.
func (r *Repair) Start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("repair"))
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := r.Round(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Repair round failed")
		}
	}, r.Interval)
	return nil
}

// sick is a claim whose node is unhealthy, and why.
type sick struct {
	claim *v1alpha1.NodeClaim
	node  *corev1.Node
	pool  *v1alpha1.NodePool
	since time.Time // when the matching condition began
	why   string
}

// unhealthy says which of the pool's policies the node's conditions
// match past their toleration at now, and since when; "" if none.
func unhealthy(node *corev1.Node, policies []v1alpha1.RepairPolicy, now time.Time) (string, time.Time) {
	for _, p := range policies {
		for _, c := range node.Status.Conditions {
			if string(c.Type) != p.ConditionType || string(c.Status) != p.ConditionStatus {
				continue
			}
			if held := now.Sub(c.LastTransitionTime.Time); held >= p.TolerationDuration.Duration {
				return fmt.Sprintf("condition %s has been %s for %s (toleration %s)", c.Type, c.Status, held.Round(time.Second), p.TolerationDuration.Duration), c.LastTransitionTime.Time
			}
		}
	}
	return "", time.Time{}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Round computes the zones' states from every node of the cluster, then
// repairs the unhealthy nodes the rules allow, longest unhealthy first.
func (r *Repair) Round(ctx context.Context) error {
	var (
		claims v1alpha1.NodeClaimList
		nodes  corev1.NodeList
		pools  v1alpha1.NodePoolList
	)
	for _, l := range []client.ObjectList{&claims, &nodes, &pools} {
		if err := r.cache.List(ctx, l); err != nil {
			return fmt.Errorf("listing %T: %w", l, err)
		}
	}
	now := r.now()
	// The zones, from all nodes, as the node lifecycle controller counts.
	counts := map[string]zoneCount{}
	byName := map[string]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		z := counts[n.Labels[corev1.LabelTopologyZone]]
		if nodeReady(n) {
			z.ready++
		} else {
			z.notReady++
		}
		counts[n.Labels[corev1.LabelTopologyZone]] = z
	}
	zones := r.Rules.decide(counts)
	exportZoneStates(zones)
	poolOf := map[string]*v1alpha1.NodePool{}
	for i := range pools.Items {
		poolOf[pools.Items[i].Name] = &pools.Items[i]
	}
	total, bad := map[string]int{}, map[string]int{}
	var sicks []sick
	seen := map[types.UID]bool{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		node, pool := byName[nc.Status.NodeName], poolOf[nc.Spec.NodePool]
		if node == nil || pool == nil {
			continue
		}
		total[pool.Name]++
		why, since := unhealthy(node, pool.RepairPolicies(), now)
		if why == "" {
			continue
		}
		bad[pool.Name]++
		seen[nc.UID] = true
		if nc.Status.Phase != v1alpha1.NodeClaimInitialized || isDisrupting(nc) || r.exec.Busy(nc.UID) {
			continue // being removed already, or in another command
		}
		sicks = append(sicks, sick{claim: nc, node: node, pool: pool, since: since, why: why})
	}
	for uid := range r.held {
		if !seen[uid] {
			delete(r.held, uid)
		}
	}
	slices.SortFunc(sicks, func(a, b sick) int {
		return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.node.Name, b.node.Name))
	})
	var errs []error
	for _, s := range sicks {
		zone := s.node.Labels[corev1.LabelTopologyZone]
		d := zones[zone]
		if d.rate <= 0 {
			r.hold(ctx, s, "zone", d.why)
			continue
		}
		// 20% rounded up, as Karpenter scales it: a pool of up to five
		// nodes may have one repaired.
		if allowed := int(math.Ceil(MaxUnhealthyFraction * float64(total[s.pool.Name]))); bad[s.pool.Name] > allowed {
			r.hold(ctx, s, "pool", fmt.Sprintf("nodepool %s has %d of %d nodes unhealthy, more than %d%% (%d): more likely an outage than bad nodes; not repairing", s.pool.Name, bad[s.pool.Name], total[s.pool.Name], int(MaxUnhealthyFraction*100), allowed))
			continue
		}
		// The zone's token last, and only spent when the budget allows:
		// a budget's refusal spends none.
		if !r.limiters.peek(zone, d.rate, now) {
			r.hold(ctx, s, "zone", fmt.Sprintf("%s; the zone's last repair was too recent, next within %s", d.why, time.Duration(float64(time.Second)/d.rate).Round(time.Second)))
			continue
		}
		ok, err := r.repair(ctx, s, d.why, func() { r.limiters.allow(zone, d.rate, now) })
		if err != nil {
			// This node's repair was undone; the others of the round
			// still get theirs, and this one is tried next round.
			errs = append(errs, fmt.Errorf("repairing node %s: %w", s.node.Name, err))
			continue
		}
		if !ok {
			r.hold(ctx, s, "budget", fmt.Sprintf("nodepool %s's disruption budget for Unhealthy is spent, or the node is in another disruption", s.pool.Name))
		}
	}
	return errors.Join(errs...)
}

// exportZoneStates sets each zone's state gauge: 1 for its state, 0 for
// the others.
func exportZoneStates(zones map[string]zoneDecision) {
	for _, zone := range zonesOf(zones) {
		for _, st := range []ZoneState{ZoneNormal, ZonePartialDisruption, ZoneFullDisruption} {
			v := 0.0
			if zones[zone].state == st {
				v = 1
			}
			metrics.ZoneStates.WithLabelValues(zone, string(st)).Set(v)
		}
	}
}

// hold says, once per reason, why an unhealthy node is not repaired now.
func (r *Repair) hold(ctx context.Context, s sick, rule, why string) {
	metrics.RepairsHeld.WithLabelValues(s.pool.Name, rule).Inc()
	if r.held[s.claim.UID] == why {
		return
	}
	r.held[s.claim.UID] = why
	klog.FromContext(ctx).Info("Not repairing unhealthy node", "node", s.node.Name, "nodeClaim", klog.KObj(s.claim), "unhealthy", s.why, "rule", rule, "why", why)
	if r.exec.recorder != nil {
		r.exec.recorder.Eventf(s.claim, nil, corev1.EventTypeWarning, v1alpha1.ReasonRepairHeld, string(Unhealthy), "node %s: %s; %s", s.node.Name, s.why, why)
	}
}

// repair replaces the node through the executor: its budget, the taint,
// a replacement launched first when its pods need one (and drained
// without one when none can be had: the node is unhealthy), then its
// claim deleted. spend is called once the budget allowed it.
func (r *Repair) repair(ctx context.Context, s sick, rule string, spend func()) (bool, error) {
	why := fmt.Sprintf("unhealthy: %s; %s", s.why, rule)
	cmd := &Command{Reason: Unhealthy, Why: why, Budgeted: true, DrainWithoutReplacement: true,
		Targets: []Target{{Claim: s.claim, Pool: s.pool}}}
	cmd.Check = func(context.Context) (string, error) {
		// Past the budget: this repair counts against the zone's rate.
		spend()
		delete(r.held, s.claim.UID)
		klog.FromContext(ctx).Info("Repairing unhealthy node", "node", s.node.Name, "nodeClaim", klog.KObj(s.claim), "why", why)
		metrics.Repairs.WithLabelValues(s.pool.Name).Inc()
		return "", nil
	}
	if r.exec.replacer != nil {
		cmd.Replacement = func(ctx context.Context) (*replacement, string, error) {
			return r.exec.replacer.forClaim(ctx, s.claim, s.pool)
		}
	}
	ok, err := r.exec.Run(ctx, cmd)
	return ok, ignoreGoing(err)
}
