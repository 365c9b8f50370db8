package nodeclaim

import (
	"testing"
	"time"
)

// TestRefusalIsConfirmedBeforeItCounts: the gate's refusal of a pod sends
// it back only once it has lasted refusalConfirm; an acceptance between
// starts the count again.
func TestRefusalIsConfirmedBeforeItCounts(t *testing.T) {
	var r refusals
	t0 := time.Now()
	steps := []struct {
		refused bool
		at      time.Duration
		want    bool
	}{
		{true, 0, false},
		{true, refusalConfirm / 2, false},
		{false, refusalConfirm, false}, // accepted: forgotten
		{true, refusalConfirm + time.Second, false},
		{true, 2*refusalConfirm + time.Second, true},
		{true, 2*refusalConfirm + 2*time.Second, false}, // confirmed once, then counted afresh
	}
	for i, s := range steps {
		if got := r.confirmed("pod", s.refused, t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (refused=%v at %s): confirmed=%v, want %v", i, s.refused, s.at, got, s.want)
		}
	}
}
