package disruption

import (
	"strings"
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

// TestBadScheduleIsActiveAndNamed: a schedule the parser refuses counts
// as always active (the conservative reading), and v1alpha1.ValidateSchedules
// names the budget and says why.
func TestBadScheduleIsActiveAndNamed(t *testing.T) {
	for _, bad := range []string{"61 * * * *", "@fortnightly", "CRON_TZ=Asia/Tokyo 0 9 * * *", "@every 1h"} {
		t.Run(bad, func(t *testing.T) {
			b := scheduled(bad, time.Hour)
			active, _, err := b.Window(at("2026-03-10T10:00:00Z"))
			if err == nil || !active {
				t.Errorf("Window(%q) = active %v, err %v; want active with an error", bad, active, err)
			}
			pool := &v1alpha1.NodePool{}
			pool.Spec.Disruption.Budgets = []v1alpha1.Budget{scheduled("@daily", time.Hour), b}
			err = v1alpha1.ValidateSchedules(pool)
			if err == nil || !strings.Contains(err.Error(), "budgets[1]") || !strings.Contains(err.Error(), bad) {
				t.Errorf("ValidateSchedules = %v; want an error naming budgets[1] and %q", err, bad)
			}
			if got, _ := budgetAllowed(pool, "Expired", 10, at("2026-03-10T10:00:00Z")); got != 0 {
				t.Errorf("a budget of 0 with a bad schedule allows %d nodes; want 0 (always active)", got)
			}
		})
	}
	pool := &v1alpha1.NodePool{}
	pool.Spec.Disruption.Budgets = []v1alpha1.Budget{scheduled("@daily", time.Hour), scheduled("30 2 * * 1-5", time.Hour), {Nodes: "10%"}}
	if err := v1alpha1.ValidateSchedules(pool); err != nil {
		t.Errorf("ValidateSchedules of good schedules: %v", err)
	}
}

// TestScheduledBudgetAppliesOnlyInItsWindowAndForItsReasons: a budget of
// zero nodes for Expired stops expiration within its window only, and
// never stops emptiness; the soonest window change among the budgets for
// the reason is reported.
func TestScheduledBudgetAppliesOnlyInItsWindowAndForItsReasons(t *testing.T) {
	pool := &v1alpha1.NodePool{}
	zero := scheduled("0 9 * * *", 2*time.Hour)
	zero.Reasons = []v1alpha1.DisruptionReason{"Expired"}
	pool.Spec.Disruption.Budgets = []v1alpha1.Budget{zero, {Nodes: "50%"}}
	for _, tc := range []struct {
		now        time.Time
		reason     v1alpha1.DisruptionReason
		want       int
		wantChange time.Time
	}{
		{at("2026-03-10T10:00:00Z"), "Expired", 0, at("2026-03-10T11:00:00Z")},
		{at("2026-03-10T12:00:00Z"), "Expired", 5, at("2026-03-11T09:00:00Z")},
		{at("2026-03-10T10:00:00Z"), "Empty", 5, time.Time{}},
	} {
		got, change := budgetAllowed(pool, tc.reason, 10, tc.now)
		if got != tc.want || !change.Equal(tc.wantChange) {
			t.Errorf("%s at %s: %d nodes, window changes at %s; want %d, %s", tc.reason, tc.now, got, change, tc.want, tc.wantChange)
		}
	}
}
