package virtualnodes

import (
	"sync"
	"time"

	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// result is what PostFilter did with a pod, the result label of
// nodeforge_virtualnodes_nominations_total and of the decision's duration.
type result uint8

const (
	// resultExisting: nominated to an open claim that already had pods.
	resultExisting result = iota
	// resultNew: nominated to a claim made for it.
	resultNew
	// resultKept: tried again while nominated, and kept its claim (or
	// the claim's node, or the claim a repack moved it to): no new
	// decision, so not counted as a nomination twice.
	resultKept
	// resultRefused: no claim; the reason is counted too.
	resultRefused
	numResults
)

var resultNames = [numResults]string{"existingClaim", "newClaim", "kept", "refused"}

// refusal is why VirtualNodes refused a pod, the reason label of
// nodeforge_virtualnodes_pods_refused_total. When every pool refuses,
// the pod is counted under the first pool's reason (by weight): the pool
// it would have gone to.
type refusal uint8

const (
	refusalNone refusal = iota
	// refusalNotSynced: the plugin has not read pools, catalogs and
	// claims from the API server yet.
	refusalNotSynced
	// refusalNoNodePool: no NodePool has a published catalog.
	refusalNoNodePool
	// refusalPreFilter: the profile's PreFilter plugins refuse the pod
	// on any node.
	refusalPreFilter
	// refusalFilter: the profile's Filter plugins refuse every node the
	// pool can launch.
	refusalFilter
	// refusalTooLarge: no instance type has room for the pod.
	refusalTooLarge
	// refusalNoMatch: no instance type matches the pod's node selector
	// or affinity.
	refusalNoMatch
	// refusalMinValues: the pool's minValues cannot be met.
	refusalMinValues
	// refusalLimitReached: a node for the pod would pass the pool's limits.
	refusalLimitReached
	// refusalNoOffering: the pool has no offering available.
	refusalNoOffering
	// refusalGangIncomplete: the pod is of a gang fewer than minCount of
	// whose pods can have a node.
	refusalGangIncomplete
	// refusalFixedSize: the pool is fixed-size (spec.replicas); it
	// launches no node for a pending pod.
	refusalFixedSize
	numRefusals
)

var refusalNames = [numRefusals]string{"", "NotSynced", "NoNodePool", "PreFilterRefused", "FilterRefused", "TooLarge", "NoInstanceTypeMatches", "MinValues", "LimitReached", "NoOffering", "GangIncomplete", "FixedSize"}

var (
	nominationsTotal = basemetrics.NewCounterVec(&basemetrics.CounterOpts{
		Name:           "nodeforge_virtualnodes_nominations_total",
		Help:           "Pods VirtualNodes' PostFilter decided, by result: existingClaim (nominated to an open claim), newClaim (to a claim made for it), kept (tried again, kept its nomination), refused.",
		StabilityLevel: basemetrics.ALPHA,
	}, []string{"result"})
	decisionDuration = basemetrics.NewHistogramVec(&basemetrics.HistogramOpts{
		Name: "nodeforge_virtualnodes_decision_duration_seconds",
		Help: "Seconds VirtualNodes' PostFilter held the scheduling cycle for one pod, waiting for the lock and the first sync included, by result (as nodeforge_virtualnodes_nominations_total).",
		// 100µs to 3.3s: a nomination takes tens of µs to a few ms; a
		// pod refused before the first sync waits 2s.
		Buckets:        basemetrics.ExponentialBuckets(0.0001, 2, 16),
		StabilityLevel: basemetrics.ALPHA,
	}, []string{"result"})
	claimsOpen = basemetrics.NewGauge(&basemetrics.GaugeOpts{
		Name:           "nodeforge_virtualnodes_claims_open",
		Help:           "NodeClaims VirtualNodes holds open to nominations (not yet closed by the provisioner or by their batch window).",
		StabilityLevel: basemetrics.ALPHA,
	})
	podsRefused = basemetrics.NewCounterVec(&basemetrics.CounterOpts{
		Name:           "nodeforge_virtualnodes_pods_refused_total",
		Help:           "Pods VirtualNodes refused, by reason: NotSynced, NoNodePool, PreFilterRefused, FilterRefused, TooLarge, NoInstanceTypeMatches, MinValues, LimitReached, NoOffering, GangIncomplete (when every pool refuses, the first pool's by weight).",
		StabilityLevel: basemetrics.ALPHA,
	}, []string{"reason"})
)

// decisionMetrics are the series PostFilter and the book write, each
// looked up once: a decision then costs a counter add and a histogram
// observation, atomic, with no label lookup, lock or allocation.
type decisionMetrics struct {
	nominations [numResults]basemetrics.CounterMetric
	durations   [numResults]basemetrics.ObserverMetric
	refused     [numRefusals]basemetrics.CounterMetric
	open        basemetrics.GaugeMetric
}

var (
	registerOnce sync.Once
	registered   *decisionMetrics
)

// RegisterMetrics registers VirtualNodes' metrics with component-base's
// legacy registry, which nodeforge-scheduler's /metrics serves. The
// plugin does when it is built; it registers once a process.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(nominationsTotal, decisionDuration, claimsOpen, podsRefused)
		m := &decisionMetrics{open: claimsOpen}
		for r := range numResults {
			m.nominations[r] = nominationsTotal.WithLabelValues(resultNames[r])
			m.durations[r] = decisionDuration.WithLabelValues(resultNames[r])
		}
		for r := refusalNone + 1; r < numRefusals; r++ {
			m.refused[r] = podsRefused.WithLabelValues(refusalNames[r])
		}
		registered = m
	})
}

// pluginMetrics returns the registered series, registering them first.
func pluginMetrics() *decisionMetrics {
	RegisterMetrics()
	return registered
}

// observe counts one PostFilter decision that took d.
func (m *decisionMetrics) observe(r result, why refusal, d time.Duration) {
	m.nominations[r].Inc()
	m.durations[r].Observe(d.Seconds())
	if r == resultRefused && why != refusalNone {
		m.refused[why].Inc()
	}
}
