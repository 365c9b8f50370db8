// Package metrics holds the provisioner's Prometheus metrics, registered
// with controller-runtime's registry and served on --metrics-bind-address,
// with nodeforge_build_info (package version).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nodeforge/nodeforge/version"
)

var (
	// CloudCalls counts cloud provider calls by provider, method and result
	// (ok, not_found, insufficient_capacity, access_denied, error).
	CloudCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_cloudprovider_calls_total",
		Help: "Cloud provider calls by provider, method (Create, Delete, Get, List, InstanceTypes) and result (ok, not_found, insufficient_capacity, access_denied, error).",
	}, []string{"provider", "method", "result"})
	// CloudCallDuration is how long cloud provider calls take.
	CloudCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nodeforge_cloudprovider_call_duration_seconds",
		Help:    "Duration of cloud provider calls by provider and method (Create, Delete, Get, List, InstanceTypes).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"provider", "method"})
	// ClaimsLaunched counts NodeClaims launched by pool.
	ClaimsLaunched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_nodeclaims_launched_total",
		Help: "NodeClaims whose instance was launched, by pool.",
	}, []string{"nodepool"})
	// ClaimsFailed counts failed launch attempts, and claims that missed a
	// deadline, by pool and reason.
	ClaimsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_nodeclaims_launch_failures_total",
		Help: "Failed launch attempts and claims that missed a deadline, by pool and reason (InsufficientCapacity, LaunchFailed, AccessDenied, LaunchTimeout, RegistrationTimeout, InitializationTimeout).",
	}, []string{"nodepool", "reason"})
	// ClaimsDeleted counts NodeClaims the provisioner deleted by pool and
	// reason; OrphanInstance counts instances terminated that no claim
	// accounted for (no claim is deleted then).
	ClaimsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_nodeclaims_deleted_total",
		Help: "NodeClaims deleted by the provisioner, by pool and reason (NoPods, NoOptions, MinValues, LimitReached, Repacked, AccessDenied, OutsideNodePool, LaunchTimeout, RegistrationTimeout, InitializationTimeout, Empty, Expired, Underutilized, Drifted, InstanceGone), and instances no claim accounted for that it terminated (OrphanInstance).",
	}, []string{"nodepool", "reason"})
	// PodTimeToBound is the time from a pod's creation to the provisioner
	// binding it to the node launched for it.
	PodTimeToBound = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nodeforge_pod_time_to_bound_seconds",
		Help:    "Seconds from a pod's creation to its binding to a node Nodeforge launched for it.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
	})
	// DisruptionDecisions counts disruption decisions by reason and
	// outcome: disrupted, replacing (a replacement launched first),
	// aborted (the last look at live state, or a failed replacement,
	// called it off), budget (a budget refused it when it was carried out).
	DisruptionDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_disruption_decisions_total",
		Help: "Disruption decisions by reason (Empty, Underutilized, Drifted, Expired, Unhealthy) and outcome (disrupted, replacing, aborted, budget).",
	}, []string{"reason", "outcome"})
	// ZoneStates is 1 for each zone's current state (Normal,
	// PartialDisruption, FullDisruption), 0 for the others.
	ZoneStates = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeforge_repair_zone_state",
		Help: "1 for each zone's state as repair's rate limits read it (Normal, PartialDisruption, FullDisruption), 0 otherwise.",
	}, []string{"zone", "state"})
	// Repairs counts unhealthy nodes repaired, per pool.
	Repairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_repairs_total",
		Help: "Unhealthy nodes repaired (replaced), per nodepool.",
	}, []string{"nodepool"})
	// RepairsHeld counts repairs held back, per pool and the rule that
	// held them: zone (its state or rate), pool (too much of it
	// unhealthy), budget.
	RepairsHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_repairs_held_total",
		Help: "Repairs of unhealthy nodes held back, per nodepool and rule (zone, pool, budget).",
	}, []string{"nodepool", "rule"})
	// InterruptionMessages counts the cloud's interruption messages, per
	// kind and what was done.
	InterruptionMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_interruption_messages_total",
		Help: "Interruption queue messages, by kind (SpotInterruption, RebalanceRecommendation, ScheduledChange, InstanceStopping, Unknown) and action (replacing, disrupted, recorded, alreadyGoing, unknownInstance, ignored, error; queueError when the queue could not be read).",
	}, []string{"kind", "action"})
	// DisruptionSavings adds up, per pool and reason, the hourly price of
	// the nodes disrupted.
	DisruptionSavings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_disruption_savings_dollars_per_hour_total",
		Help: "Sum of the hourly prices ($/h) of nodes removed by voluntary disruption, by pool and reason (a replacement's price is subtracted).",
	}, []string{"nodepool", "reason"})
	// Repacks counts the repacks of batches before launch, by pool and
	// outcome; RepackSavings adds up what the changed ones saved.
	Repacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_repacks_total",
		Help: "Batches of closed NodeClaims repacked before launch, by pool and outcome (Repacked: a cheaper set launched instead; Kept: launched as they were).",
	}, []string{"nodepool", "outcome"})
	RepackSavings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeforge_repack_savings_dollars_per_hour_total",
		Help: "Sum over repacked batches of the hourly price ($/h) of the claims as nominated less that of the set launched instead, by pool.",
	}, []string{"nodepool"})
	// DisruptionDecisionDuration is how long deciding takes, by reason.
	DisruptionDecisionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nodeforge_disruption_decision_duration_seconds",
		Help:    "Seconds a disruption decision takes (consolidation: one round's search), by reason.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"reason"})
	// Nodes is the number of registered nodes per pool.
	Nodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeforge_nodes",
		Help: "Registered nodes per pool.",
	}, []string{"nodepool"})
	// PoolUsage is each pool's status.resources, per resource.
	PoolUsage = newResourceGauges("nodeforge_nodepool_usage",
		"Capacity per pool and resource (cpu in cores, memory in bytes) of its nodes and of its launched claims whose node has not registered: NodePool status.resources, what spec.limits is checked against (launches under way are reserved on top).")
	// PoolLimit is each pool's spec.limits, per resource.
	PoolLimit = newResourceGauges("nodeforge_nodepool_limit",
		"Limits per pool and resource (cpu in cores, memory in bytes): NodePool spec.limits; no series for a resource without a limit.")
)

func init() {
	crmetrics.Registry.MustRegister(version.BuildInfo(), CloudCalls, CloudCallDuration, ClaimsLaunched, ClaimsFailed, ClaimsDeleted, PodTimeToBound, Nodes, PoolUsage, PoolLimit, DisruptionDecisions, DisruptionSavings, DisruptionDecisionDuration, ZoneStates, Repairs, RepairsHeld, InterruptionMessages, Repacks, RepackSavings)
}
