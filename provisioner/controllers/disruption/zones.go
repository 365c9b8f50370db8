package disruption

import (
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"
)

// Repair is rate-limited per zone the way kube-controller-manager's node
// lifecycle controller limits its evictions, with the same rules and the
// same defaults (its flags --node-eviction-rate,
// --secondary-node-eviction-rate, --unhealthy-zone-threshold and
// --large-cluster-size-threshold): many nodes failing at once is more
// likely an outage of the zone, the network or the control plane than
// many bad nodes, and replacing them all would make it worse.

// ZoneState is a zone's health, from its nodes' Ready conditions.
type ZoneState string

const (
	// ZoneNormal: few of the zone's nodes are not Ready.
	ZoneNormal ZoneState = "Normal"
	// ZonePartialDisruption: more than 2 of the zone's nodes, and at
	// least the unhealthy threshold of them, are not Ready.
	ZonePartialDisruption ZoneState = "PartialDisruption"
	// ZoneFullDisruption: none of the zone's nodes is Ready.
	ZoneFullDisruption ZoneState = "FullDisruption"
)

// ZoneRules are the node lifecycle controller's limits.
type ZoneRules struct {
	// Rate is how many nodes a second are repaired in a zone that is
	// Normal (or FullDisruption while another zone is not): 0.1.
	Rate float64
	// SecondaryRate is the rate in a PartialDisruption zone of more than
	// LargeClusterThreshold nodes: 0.01. A smaller such zone gets none.
	SecondaryRate float64
	// UnhealthyThreshold is the fraction of a zone's nodes not Ready at
	// which it is PartialDisruption (with more than 2 not Ready): 0.55.
	UnhealthyThreshold float64
	// LargeClusterThreshold: 50 nodes.
	LargeClusterThreshold int
}

// DefaultZoneRules are kube-controller-manager's defaults.
var DefaultZoneRules = ZoneRules{Rate: 0.1, SecondaryRate: 0.01, UnhealthyThreshold: 0.55, LargeClusterThreshold: 50}

// zoneCount is how many of a zone's nodes are Ready and not.
type zoneCount struct{ ready, notReady int }

// state is the zone's state under rules.
func (r ZoneRules) state(z zoneCount) ZoneState {
	switch {
	case z.ready == 0 && z.notReady > 0:
		return ZoneFullDisruption
	case z.notReady > 2 && float64(z.notReady)/float64(z.notReady+z.ready) >= r.UnhealthyThreshold:
		return ZonePartialDisruption
	}
	return ZoneNormal
}

// zoneDecision is how fast a zone may be repaired, and the rule that says so.
type zoneDecision struct {
	state ZoneState
	rate  float64
	why   string
}

// decide gives each zone its state and repair rate: none anywhere when
// every zone is in FullDisruption; the secondary rate in a
// PartialDisruption zone of more than LargeClusterThreshold nodes, none
// in a smaller one; the normal rate otherwise.
func (r ZoneRules) decide(zones map[string]zoneCount) map[string]zoneDecision {
	out := make(map[string]zoneDecision, len(zones))
	allDown := len(zones) > 0
	for _, z := range zones {
		if r.state(z) != ZoneFullDisruption {
			allDown = false
		}
	}
	for name, z := range zones {
		st := r.state(z)
		size := z.ready + z.notReady
		d := zoneDecision{state: st, rate: r.Rate}
		switch {
		case allDown:
			d.rate, d.why = 0, fmt.Sprintf("every zone is in FullDisruption (zone %s: none of %d nodes Ready): more likely the control plane or the network than the nodes; not repairing", name, size)
		case st == ZonePartialDisruption && size > r.LargeClusterThreshold:
			d.rate, d.why = r.SecondaryRate, fmt.Sprintf("zone %s is in PartialDisruption (%d of %d nodes not Ready): repairing at %g/s", name, z.notReady, size, r.SecondaryRate)
		case st == ZonePartialDisruption:
			d.rate, d.why = 0, fmt.Sprintf("zone %s is in PartialDisruption (%d of %d nodes not Ready) and has no more than %d nodes: not repairing", name, z.notReady, size, r.LargeClusterThreshold)
		case st == ZoneFullDisruption:
			d.why = fmt.Sprintf("zone %s is in FullDisruption (none of %d nodes Ready) while other zones are not: repairing at %g/s", name, size, r.Rate)
		default:
			d.why = fmt.Sprintf("zone %s is Normal (%d of %d nodes not Ready): repairing at %g/s", name, z.notReady, size, r.Rate)
		}
		out[name] = d
	}
	return out
}

// zoneLimiters are the token buckets, one a zone, burst 1, their rate
// set from each round's decision.
type zoneLimiters struct {
	buckets map[string]*rate.Limiter
}

// allow takes a token from the zone's bucket at rate perSecond, if one is
// there at now.
func (l *zoneLimiters) allow(zone string, perSecond float64, now time.Time) bool {
	b := l.bucket(zone, perSecond, now)
	if perSecond <= 0 {
		return false
	}
	return b.AllowN(now, 1)
}

// peek says whether allow would take a token, without taking it.
func (l *zoneLimiters) peek(zone string, perSecond float64, now time.Time) bool {
	return perSecond > 0 && l.bucket(zone, perSecond, now).TokensAt(now) >= 1
}

func (l *zoneLimiters) bucket(zone string, perSecond float64, now time.Time) *rate.Limiter {
	if l.buckets == nil {
		l.buckets = map[string]*rate.Limiter{}
	}
	b := l.buckets[zone]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(perSecond), 1)
		l.buckets[zone] = b
	}
	if b.Limit() != rate.Limit(perSecond) {
		b.SetLimitAt(now, rate.Limit(perSecond))
	}
	return b
}

// zonesOf lists the zones in a stable order, for logs and tests.
func zonesOf(m map[string]zoneDecision) []string {
	out := make([]string, 0, len(m))
	for z := range m {
		out = append(out, z)
	}
	slices.Sort(out)
	return out
}
