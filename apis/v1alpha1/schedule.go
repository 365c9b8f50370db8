package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
)

// MaxScheduleLength is the longest budget schedule accepted, by the API
// server (the schema's maxLength) and by ParseSchedule alike. It bounds
// the cost of the CRD's schedule rules; a schedule listing every fifth
// minute, every other hour, four months and five days is 110 characters.
const MaxScheduleLength = 128

// ParseSchedule parses a budget's schedule as the disruption controller
// reads it: five fields (minute, hour, day of month, month, day of week)
// or a descriptor such as @daily, in UTC. A time zone prefix (CRON_TZ=)
// and @every are refused: the API documents schedules as UTC and as
// calendar times.
//
// The CRD's schedule rules (regular expressions made from cron's grammar
// by scheduleRules, in schedule_rules_test.go) accept exactly the strings
// this accepts, cron's leniencies included (a `?` for `*`, a `+` before a
// number, empty list items): TestScheduleRulesAreTheParser runs a corpus
// and random schedules through both, FuzzScheduleRulesAreTheParser looks
// for more.
func ParseSchedule(s string) (cron.Schedule, error) {
	if utf8.RuneCountInString(s) > MaxScheduleLength { // as the schema counts
		return nil, fmt.Errorf("longer than %d characters", MaxScheduleLength)
	}
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, errors.New("schedules are in UTC; a time zone prefix is not allowed")
	}
	if strings.HasPrefix(s, "@every") {
		return nil, errors.New("@every is not a calendar schedule; use five fields or @hourly, @daily, @weekly, @monthly, @yearly")
	}
	return cron.ParseStandard(s)
}

// ValidateSchedules returns an error naming every budget of the pool
// whose schedule cannot be parsed, or nil. The API server refuses such
// schedules; a pool stored before it did can still hold one.
func ValidateSchedules(pool *NodePool) error {
	var errs []error
	for i, b := range pool.Spec.Disruption.Budgets {
		if b.Schedule == nil {
			continue
		}
		if _, err := ParseSchedule(*b.Schedule); err != nil {
			errs = append(errs, fmt.Errorf("budgets[%d] schedule %q: %w", i, *b.Schedule, err))
		}
	}
	return errors.Join(errs...)
}

// Window reports whether b applies at now and when that next
// changes: when active, the end of the latest window now is in; when not,
// the next start. A zero change means never (no schedule, or one that
// never fires again). A schedule that cannot be parsed is returned as
// the error, with the budget active.
//
// A budget with a schedule applies only within its windows: from each
// time the schedule fires (UTC) for duration, [start, start+duration).
// Windows may overlap (an hourly schedule with a duration of 2h is always
// active); a budget is active while now is in any of them.
//
// The API server refuses a schedule that ParseSchedule does
// not parse (the CRD's rules are checked against it). A pool stored
// before it did may still hold one: its status says which budget is wrong
// and why (the NodePool status controller calls
// ValidateSchedules), and the budget counts as active at all
// times: of the two readings of a budget nobody can evaluate, the one that
// disrupts less is the one an operator can recover from.
func (b Budget) Window(now time.Time) (active bool, change time.Time, err error) {
	if b.Schedule == nil || b.Duration == nil {
		return true, time.Time{}, nil
	}
	sched, err := ParseSchedule(*b.Schedule)
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
