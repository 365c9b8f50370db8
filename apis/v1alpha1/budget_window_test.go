package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func scheduled(schedule string, d time.Duration) v1alpha1.Budget {
	return v1alpha1.Budget{Nodes: "0", Schedule: ptr.To(schedule), Duration: &metav1.Duration{Duration: d}}
}

// TestBudgetWindow: a scheduled budget applies from each start for its
// duration, start included and start+duration not, in UTC; when it will
// next open or close is reported so a held claim is looked at then.
func TestBudgetWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		budget     v1alpha1.Budget
		now        time.Time
		wantActive bool
		wantChange time.Time
	}{
		{"inside the window", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T10:00:00Z"), true, at("2026-03-10T11:00:00Z")},
		{"before the window", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T08:59:59Z"), false, at("2026-03-10T09:00:00Z")},
		{"exactly at the start", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T09:00:00Z"), true, at("2026-03-10T11:00:00Z")},
		{"a moment before start+duration", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T10:59:59.999Z"), true, at("2026-03-10T11:00:00Z")},
		{"exactly at start+duration", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T11:00:00Z"), false, at("2026-03-11T09:00:00Z")},
		{"after the window, the next day's start", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T20:00:00Z"), false, at("2026-03-11T09:00:00Z")},
		{"@daily, just after midnight", scheduled("@daily", time.Hour), at("2026-03-10T00:30:00Z"), true, at("2026-03-10T01:00:00Z")},
		{"@daily, after its hour", scheduled("@daily", time.Hour), at("2026-03-10T01:00:00Z"), false, at("2026-03-11T00:00:00Z")},
		{"@hourly with 2h windows overlapping: ends 2h after the latest start", scheduled("@hourly", 2*time.Hour), at("2026-03-10T10:30:00Z"), true, at("2026-03-10T12:00:00Z")},
		{"a window spanning midnight", scheduled("0 23 * * *", 3*time.Hour), at("2026-03-11T01:00:00Z"), true, at("2026-03-11T02:00:00Z")},
		{"read in UTC whatever the clock's zone", scheduled("0 9 * * *", 2*time.Hour), at("2026-03-10T10:00:00Z").In(time.FixedZone("UTC+5", 5*3600)), true, at("2026-03-10T11:00:00Z")},
		{"a zero duration is never active", scheduled("0 9 * * *", 0), at("2026-03-10T09:00:00Z"), false, at("2026-03-11T09:00:00Z")},
		{"no schedule: always active", v1alpha1.Budget{Nodes: "0"}, at("2026-03-10T09:00:00Z"), true, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			active, change, err := tc.budget.Window(tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if active != tc.wantActive || !change.Equal(tc.wantChange) {
				t.Errorf("at %s: active %v, changes at %s; want active %v, changes at %s", tc.now, active, change, tc.wantActive, tc.wantChange)
			}
		})
	}
}
