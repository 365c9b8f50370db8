package disruption

import (
	"strings"
	"testing"
	"time"
)

// TestZoneStatesAndRates checks the node lifecycle controller's rules
// against a table: zone sizes around the large-cluster threshold, zones
// at the unhealthy threshold, all zones down.
func TestZoneStatesAndRates(t *testing.T) {
	r := DefaultZoneRules
	type want struct {
		state ZoneState
		rate  float64
		why   string
	}
	for _, tc := range []struct {
		name  string
		zones map[string]zoneCount
		want  map[string]want
	}{{
		name:  "a healthy zone repairs at the normal rate",
		zones: map[string]zoneCount{"a": {ready: 9, notReady: 1}},
		want:  map[string]want{"a": {ZoneNormal, 0.1, "zone a is Normal (1 of 10 nodes not Ready)"}},
	}, {
		name:  "2 of 3 not Ready is not enough for PartialDisruption: more than 2 are needed",
		zones: map[string]zoneCount{"a": {ready: 1, notReady: 2}},
		want:  map[string]want{"a": {ZoneNormal, 0.1, "Normal"}},
	}, {
		name:  "3 of 4 not Ready in a small zone: PartialDisruption, no repair",
		zones: map[string]zoneCount{"a": {ready: 1, notReady: 3}, "b": {ready: 4}},
		want: map[string]want{
			"a": {ZonePartialDisruption, 0, "zone a is in PartialDisruption (3 of 4 nodes not Ready) and has no more than 50 nodes: not repairing"},
			"b": {ZoneNormal, 0.1, "Normal"},
		},
	}, {
		name:  "exactly at the threshold (0.55 of 60) in a large zone: the secondary rate",
		zones: map[string]zoneCount{"a": {ready: 27, notReady: 33}},
		want:  map[string]want{"a": {ZonePartialDisruption, 0.01, "zone a is in PartialDisruption (33 of 60 nodes not Ready): repairing at 0.01/s"}},
	}, {
		name:  "just under the threshold in a large zone: Normal",
		zones: map[string]zoneCount{"a": {ready: 28, notReady: 32}},
		want:  map[string]want{"a": {ZoneNormal, 0.1, "Normal"}},
	}, {
		name:  "a zone of exactly 50 nodes is not large",
		zones: map[string]zoneCount{"a": {ready: 10, notReady: 40}},
		want:  map[string]want{"a": {ZonePartialDisruption, 0, "no more than 50 nodes"}},
	}, {
		name:  "a zone of 51 nodes is large",
		zones: map[string]zoneCount{"a": {ready: 10, notReady: 41}},
		want:  map[string]want{"a": {ZonePartialDisruption, 0.01, "repairing at 0.01/s"}},
	}, {
		name:  "one zone fully down while another is up: repaired at the normal rate",
		zones: map[string]zoneCount{"a": {notReady: 5}, "b": {ready: 5}},
		want: map[string]want{
			"a": {ZoneFullDisruption, 0.1, "zone a is in FullDisruption (none of 5 nodes Ready) while other zones are not"},
			"b": {ZoneNormal, 0.1, "Normal"},
		},
	}, {
		name:  "every zone fully down: nothing is repaired",
		zones: map[string]zoneCount{"a": {notReady: 5}, "b": {notReady: 60}},
		want: map[string]want{
			"a": {ZoneFullDisruption, 0, "every zone is in FullDisruption"},
			"b": {ZoneFullDisruption, 0, "every zone is in FullDisruption"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.decide(tc.zones)
			for zone, w := range tc.want {
				d := got[zone]
				if d.state != w.state || d.rate != w.rate || !strings.Contains(d.why, w.why) {
					t.Errorf("zone %s: %s at %g/s (%q); want %s at %g/s saying %q", zone, d.state, d.rate, d.why, w.state, w.rate, w.why)
				}
			}
		})
	}
}

// TestZoneLimitersSpaceRepairs: at 0.1/s a zone gets one repair, then the
// next only 10s later; at rate 0, none; a rate raised takes effect.
func TestZoneLimitersSpaceRepairs(t *testing.T) {
	var l zoneLimiters
	now := time.Unix(1_000_000, 0)
	if !l.allow("a", 0.1, now) {
		t.Fatal("first repair in a Normal zone refused")
	}
	if l.allow("a", 0.1, now.Add(5*time.Second)) {
		t.Error("a second repair 5s later allowed at 0.1/s")
	}
	if !l.allow("a", 0.1, now.Add(10*time.Second)) {
		t.Error("a second repair 10s later refused at 0.1/s")
	}
	if l.allow("b", 0, now) || l.allow("b", 0, now.Add(time.Hour)) {
		t.Error("a repair allowed at rate 0")
	}
	if !l.allow("b", 0.1, now.Add(time.Hour+10*time.Second)) {
		t.Error("a zone back to the normal rate still refused")
	}
}
