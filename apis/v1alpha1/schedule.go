package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
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
