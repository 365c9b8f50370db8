// Package crashpoint lets tests kill a component at a named step of its
// work, the way a crash or an OOM kill would, to prove that a crash at that
// step loses nothing and launches nothing twice.
//
// It is off unless both environment variables are set, which only the
// sandbox does: NODEFORGE_CRASH_POINT names the step, and
// NODEFORGE_CRASH_MARKER a file that records the crash, so the process that
// is started again after it runs on. A process that reaches the named step
// creates the marker and sends itself SIGKILL: no deferred function, no
// flush, no graceful shutdown runs.
package crashpoint

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// The steps a component can be killed at.
const (
	// AfterCreate: the cloud launched the instance; the claim's status does
	// not name it yet.
	AfterCreate = "launch/after-create"
	// AfterLaunchStatus: the claim's status names the instance.
	AfterLaunchStatus = "launch/after-status"
	// MidBind: the first nominated pod is bound, the others not yet.
	MidBind = "bind/after-first"
	// MidDrain: the first pod of a node being drained is evicted.
	MidDrain = "drain/after-first-eviction"
	// AfterTerminate: the instance is terminated; its Node and the claim's
	// finalizer are still there.
	AfterTerminate = "terminate/after-delete"
	// AfterCollectTerminate: garbage collection terminated an instance no
	// claim accounts for; its Node is still there.
	AfterCollectTerminate = "gc/after-terminate"
	// SchedulerAfterClaimCreate: the scheduler created a claim and has not
	// yet recorded it as written, nor written its later nominations.
	SchedulerAfterClaimCreate = "claims/after-create"
	// MidRepack: a repack plan is written and the first pod has moved to
	// its new claim; the others have not, and no claim is marked Packed.
	MidRepack = "repack/after-first-move"
	// AfterReplacementNamed: a claim being disrupted names its
	// replacement; the replacement is not created yet.
	AfterReplacementNamed = "replacement/after-name"
	// AfterTaint: a disruption command tainted its nodes; it has not
	// looked at live state again.
	AfterTaint = "disruption/after-taint"
	// AfterDisrupting: a claim is marked Disrupting; it is not deleted.
	AfterDisrupting = "disruption/after-disrupting"
	// AfterDelete: a claim marked Disrupting is deleted; its node is not
	// drained yet.
	AfterDelete = "disruption/after-delete"
)

var point, marker = os.Getenv("NODEFORGE_CRASH_POINT"), os.Getenv("NODEFORGE_CRASH_MARKER")

// Hit kills the process if it is the named crash point and the process
// has not crashed there before.
func Hit(name string) {
	if point != name || marker == "" {
		return
	}
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // crashed here once already, or cannot record it: run on
	}
	_, _ = f.WriteString(name + "\n")
	_ = f.Close()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously everywhere
}

// The steps a component can be held at.
const (
	// ConsolidationTainted: consolidation tainted the nodes it chose and
	// has not yet looked at live state again.
	ConsolidationTainted = "consolidation/after-taint"
)

var paused atomic.Bool

var pausePoint, pauseFile = os.Getenv("NODEFORGE_PAUSE_POINT"), os.Getenv("NODEFORGE_PAUSE_FILE")

// Pause holds the caller at the named step, so that a test can act at
// that exact moment (bind a pod to a node being disrupted, say): if
// NODEFORGE_PAUSE_POINT names the step, it writes detail to the file
// NODEFORGE_PAUSE_FILE and waits, at most two minutes, until the test
// removes the file. It holds the process once; like Hit, it is off
// unless the sandbox sets both.
func Pause(name, detail string) {
	if pausePoint != name || pauseFile == "" || !paused.CompareAndSwap(false, true) {
		return
	}
	if err := os.WriteFile(pauseFile, []byte(detail+"\n"), 0o600); err != nil {
		return
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(pauseFile); os.IsNotExist(err) {
			return
		}
	}
}
