package sandbox

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSupervisedProgramIsStartedAgainUntilKilled: a program that exits on
// its own is started again, with its log kept; once killed on purpose it
// stays dead, and one that is not supervised is never started again.
func TestSupervisedProgramIsStartedAgainUntilKilled(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{Dir: dir, progress: io.Discard, restarts: map[string]int{}, quit: make(chan struct{}), restartBackoff: 10 * time.Millisecond}
	defer s.Stop()
	if _, err := s.startWithEnv(logs, "crashing", "/bin/sh", nil, true, "-c", "echo started; exit 3"); err != nil {
		t.Fatal(err)
	}
	once, err := s.startWithEnv(logs, "once", "/bin/sh", nil, false, "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	// Restarts counts a run when it is started, before its shell has
	// written a line: wait for the log to show the first run and three
	// restarts, each written (a log truncated on restart never would).
	runs := func() int {
		b, _ := os.ReadFile(filepath.Join(logs, "crashing.log"))
		return strings.Count(string(b), "started\n")
	}
	deadline := time.Now().Add(time.Minute)
	for s.Restarts("crashing") < 3 || runs() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("restarted %d times in a minute, log with %d runs; want 3 restarts and 4 runs logged", s.Restarts("crashing"), runs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-once.done
	if n := s.Restarts("once"); n != 0 {
		t.Errorf("a program not supervised was started again %d times", n)
	}
	if err := s.Kill("crashing"); err != nil {
		t.Fatal(err)
	}
	killedAt := s.Restarts("crashing")
	// Three more backoffs' worth of time: a restart would have happened.
	time.Sleep(500 * time.Millisecond)
	if n := s.Restarts("crashing"); n != killedAt {
		t.Errorf("started again %d times after it was killed on purpose", n-killedAt)
	}
}
