package sandbox

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// Restarting a program that exits on its own, as a kubelet restarts a
// container (CrashLoopBackOff), with a shorter backoff: the first restart
// after restartBackoff, each next one after twice the last, at most
// maxRestartBackoff; a run that lasted restartReset starts the count
// again. (A kubelet starts at 10s and stops at 5 minutes.) Nodeforge's
// programs exit when they lose their lease, as kube-scheduler and
// Karpenter do, for instance when the API server is away longer than the
// renew deadline; on a cluster the kubelet starts them again, and in the
// sandbox this does.
const (
	restartBackoff    = time.Second
	maxRestartBackoff = 30 * time.Second
	restartReset      = time.Minute
)

// supervise starts p again whenever it exits on its own, until the
// sandbox stops or p is killed on purpose.
func (s *Sandbox) supervise(p *process) {
	go func() {
		first := cmp.Or(s.restartBackoff, restartBackoff)
		delay := first
		for {
			<-p.done
			if p.stopping.Load() {
				return
			}
			if time.Since(p.started) >= restartReset {
				delay = first
			}
			fmt.Fprintf(s.progress, "%s exited (%v); starting it again in %s, as a kubelet would; log=%s\n", p.name, p.err, delay, p.logPath)
			select {
			case <-time.After(delay):
			case <-s.quit:
				return
			}
			delay = min(2*delay, maxRestartBackoff)
			s.mu.Lock()
			i := slices.Index(s.procs, p)
			if i < 0 || s.stopped || p.stopping.Load() {
				s.mu.Unlock()
				return // replaced, or stopped or killed meanwhile
			}
			next, err := startSpec(filepath.Join(s.Dir, "logs"), p.spec)
			if err != nil {
				s.mu.Unlock()
				fmt.Fprintf(s.progress, "starting %s again: %v\n", p.name, err)
				return
			}
			next.check = p.check
			s.procs[i] = next
			s.restarts[p.name]++
			s.mu.Unlock()
			p = next
		}
	}()
}

// Restarts is how many times the sandbox has started component again
// after it exited on its own.
func (s *Sandbox) Restarts(component string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts[component]
}
