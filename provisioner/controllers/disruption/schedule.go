package disruption

import (
	"time"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// A budget with a schedule applies only within its windows: from each
// time the schedule fires (UTC) for duration, [start, start+duration).
// Windows may overlap (an hourly schedule with a duration of 2h is always
// active); a budget is active while now is in any of them.
//
// The API server refuses a schedule that v1alpha1.ParseSchedule does
// not parse (the CRD's rules are checked against it). A pool stored
// before it did may still hold one: its status says which budget is wrong
// and why (the NodePool status controller calls
// v1alpha1.ValidateSchedules), and the budget counts as active at all
// times: of the two readings of a budget nobody can evaluate, the one that
// disrupts less is the one an operator can recover from.

// budgetWindow reports whether b applies at now and when that next
// changes: when active, the end of the latest window now is in; when not,
// the next start. A zero change means never (no schedule, or one that
// never fires again). A schedule that cannot be parsed is returned as
// the error, with the budget active (see above).
func budgetWindow(b v1alpha1.Budget, now time.Time) (active bool, change time.Time, err error) {
	if b.Schedule == nil || b.Duration == nil {
		return true, time.Time{}, nil
	}
	sched, err := v1alpha1.ParseSchedule(*b.Schedule)
	if err != nil {
		return true, time.Time{}, err
	}
	now = now.UTC() // the schedule is read in the time's location
	d := b.Duration.Duration
	// cron only looks forward: Next(t) is the first start strictly after
	// t. The first start after now-d is within the window's reach iff it
	// is not after now; the latest such start is found by walking on.
	// The walk is bounded: a schedule firing every minute with a long
	// duration would take many steps, and stopping early only makes the
	// end come sooner, which means asking again sooner.
	start := sched.Next(now.Add(-d))
	if start.IsZero() || start.After(now) {
		return false, start, nil
	}
	for range 1000 {
		next := sched.Next(start)
		if next.IsZero() || next.After(now) {
			break
		}
		start = next
	}
	return true, start.Add(d), nil
}
