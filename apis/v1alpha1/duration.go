package v1alpha1

import (
	"fmt"
	"time"
)

// MinExpireAfter and MinTerminationGracePeriod are the shortest a
// NodePool's expireAfter and terminationGracePeriod may be; the doc
// comments of those fields say why, and the CRD's rules hold them.
const (
	MinExpireAfter            = time.Hour
	MinTerminationGracePeriod = time.Minute
)

// Duration returns d as a time.Duration; ok is false for Never. The API
// server has already checked the pattern, so an error means the object did
// not come through it (a unit test, a hand-built object).
func (d NillableDuration) Duration() (dur time.Duration, ok bool, err error) {
	if d == Never {
		return 0, false, nil
	}
	dur, err = time.ParseDuration(string(d))
	if err != nil {
		return 0, false, fmt.Errorf("parsing duration %q: %w", string(d), err)
	}
	return dur, true, nil
}
