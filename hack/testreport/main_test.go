package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func feed(t *testing.T, r *report, events ...event) {
	t.Helper()
	for _, e := range events {
		// Through JSON, as go test writes them.
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.add(back)
	}
}

// reportOf is the report of events, and what it printed, before any
// summary.
func reportOf(t *testing.T, events ...event) (*report, string) {
	t.Helper()
	var out strings.Builder
	r := newReport(&out)
	feed(t, r, events...)
	return r, out.String()
}

// TestReportNamesFailuresBudgetsAndCounts: a failed test's output is
// printed and a passing one's is not; a leaf over its budget and a package
// over its budget are named, a parent whose subtests ran side by side is
// not; the closing line counts every test; a failure makes it not ok.
func TestReportNamesFailuresBudgetsAndCounts(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	const pkg = "example.com/m/test/e2e"
	feed(t, r,
		event{Action: "run", Package: pkg, Test: "TestQuiet"},
		event{Action: "output", Package: pkg, Test: "TestQuiet", Output: "=== RUN   TestQuiet\n"},
		event{Action: "output", Package: pkg, Test: "TestQuiet", Output: "    quiet.go:1: nothing to see\n"},
		event{Action: "pass", Package: pkg, Test: "TestQuiet", Elapsed: 1},
		event{Action: "output", Package: pkg, Test: "TestParent/slow", Output: "    slow.go:9: went wrong\n"},
		event{Action: "fail", Package: pkg, Test: "TestParent/slow", Elapsed: 200},
		event{Action: "pass", Package: pkg, Test: "TestParent/quick", Elapsed: 10},
		event{Action: "fail", Package: pkg, Test: "TestParent", Elapsed: 201},
		event{Action: "output", Package: pkg, Test: "TestSkipped", Output: "    skip.go:3: moto_server not installed\n"},
		event{Action: "output", Package: pkg, Test: "TestSkipped", Output: "--- SKIP: TestSkipped (0.00s)\n"},
		event{Action: "skip", Package: pkg, Test: "TestSkipped"},
		event{Action: "output", Package: pkg, Output: "FAIL\t" + pkg + "\t800.0s\n"},
		event{Action: "fail", Package: pkg, Elapsed: 800},
	)
	r.summary(3*time.Minute, budgets{"/test/e2e": 12 * time.Minute})
	got := out.String()
	for _, want := range []string{
		"slow.go:9: went wrong",
		"FAIL\t" + pkg,
		"800.0s  " + pkg + "  OVER BUDGET 12m0s",
		"Tests over their budget of 3m0s:\n     200.0s  " + pkg + " TestParent/slow\n",
		"Skipped, not counted as passed:\n  " + pkg + " TestSkipped: skip.go:3: moto_server not installed\n",
		"tests: 2 passed, 2 failed, 1 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"nothing to see", "=== RUN", "201.0s"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("report has %q:\n%s", unwanted, got)
		}
	}
	if r.ok() {
		t.Error("a run with a failed test is reported ok")
	}
}

// TestReportPrintsTheTestsABrokenBinaryLeftRunning: a test binary that
// panics or times out ends its package without ending the running test;
// that test's output is printed.
func TestReportPrintsTheTestsABrokenBinaryLeftRunning(t *testing.T) {
	r, got := reportOf(t,
		event{Action: "output", Package: "p", Test: "TestHangs", Output: "    hang.go:3: waiting for the node\n"},
		event{Action: "output", Package: "p", Output: "panic: test timed out after 30m0s\n"},
		event{Action: "fail", Package: "p", Elapsed: 1800},
	)
	if !strings.Contains(got, "--- UNFINISHED: TestHangs") || !strings.Contains(got, "waiting for the node") {
		t.Errorf("the hung test's output is missing:\n%s", got)
	}
	if r.ok() {
		t.Error("a failed package is reported ok")
	}
}

// TestReportShowsAPackagesOwnOutputOnlyWhenItFails: TestMain's lines (a
// control plane coming up) are noise when the package passes, and the
// first clue when it fails, as go test shows them.
func TestReportShowsAPackagesOwnOutputOnlyWhenItFails(t *testing.T) {
	_, got := reportOf(t,
		event{Action: "output", Package: "good", Output: "kube-apiserver ready in 2.9s\n"},
		event{Action: "output", Package: "good", Output: "ok  \tgood\t3.0s\n"},
		event{Action: "pass", Package: "good", Elapsed: 3},
		event{Action: "output", Package: "bad", Output: "etcd exited: bind: address already in use\n"},
		event{Action: "output", Package: "bad", Output: "FAIL\tbad\t1.0s\n"},
		event{Action: "fail", Package: "bad", Elapsed: 1},
	)
	for _, want := range []string{"ok  \tgood\t3.0s\n", "FAIL\tbad\t1.0s\n", "etcd exited: bind: address already in use\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "kube-apiserver ready") {
		t.Errorf("a passing package's own output is shown:\n%s", got)
	}
}
