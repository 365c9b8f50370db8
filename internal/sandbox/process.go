package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// process is one component of the sandbox, running as a child process in a
// process group of its own, with its output in logs/<name>.log.
type process struct {
	name    string
	spec    spec
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // exit status, valid after done is closed
	// check tells when the component is ready; Kill starts it again with
	// the same command line and waits for it.
	check func(context.Context) error
	// stopping is set before the sandbox stops or kills the process on
	// purpose: its exit is then no crash to restart it after.
	stopping atomic.Bool
	// started is when it was started, for the restart backoff.
	started time.Time
}

// spec is how to start a process, kept to start it again.
type spec struct {
	name, bin string
	args      []string
	// env is added to the sandbox's environment, or, with ownEnv, is the
	// whole environment (a pod's process sees only its container's).
	env    []string
	ownEnv bool
	// restart says the sandbox starts the process again when it exits
	// on its own, as a kubelet does a container (restartPolicy Always):
	// Nodeforge's programs, which exit when they lose their lease.
	restart bool
	// criLog, when set, gets the output too, in the CRI log format a
	// kubelet writes (<RFC 3339 time> <stream> F <line>), which kwok reads
	// to answer `kubectl logs`.
	criLog string
}

// startSpec starts a process as sp says. The child gets SIGKILL if the
// sandbox itself dies, so even a killed sandbox leaves nothing running.
func startSpec(logDir string, sp spec) (*process, error) {
	logPath := filepath.Join(logDir, sp.name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	closers := []io.Closer{logFile}
	cmd := exec.Command(sp.bin, sp.args...)
	switch {
	case sp.ownEnv:
		cmd.Env = sp.env
	case len(sp.env) > 0:
		cmd.Env = append(os.Environ(), sp.env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if sp.criLog != "" {
		if err := os.MkdirAll(filepath.Dir(sp.criLog), 0o755); err != nil {
			logFile.Close()
			return nil, err
		}
		cri, err := os.OpenFile(sp.criLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			logFile.Close()
			return nil, err
		}
		var mu sync.Mutex
		stdout := &criWriter{mu: &mu, w: cri, stream: "stdout"}
		stderr := &criWriter{mu: &mu, w: cri, stream: "stderr"}
		cmd.Stdout = io.MultiWriter(logFile, stdout)
		cmd.Stderr = io.MultiWriter(logFile, stderr)
		closers = append(closers, stdout, stderr, cri)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		for _, c := range closers {
			c.Close()
		}
		return nil, fmt.Errorf("starting %s: %w", sp.name, err)
	}
	p := &process{name: sp.name, spec: sp, cmd: cmd, logPath: logPath, done: make(chan struct{}), started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		for _, c := range closers {
			c.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// criWriter writes each complete line of one stream as a CRI log line.
// Both streams of a process share one file and one mutex.
type criWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	stream string
	buf    []byte
}

func (c *criWriter) Write(b []byte) (int, error) {
	c.buf = append(c.buf, b...)
	for {
		i := bytes.IndexByte(c.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if err := c.line(c.buf[:i], "F"); err != nil {
			return 0, err
		}
		c.buf = c.buf[i+1:]
	}
}

func (c *criWriter) line(text []byte, tag string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := fmt.Fprintf(c.w, "%s %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), c.stream, tag, text)
	return err
}

// Close writes a last line the process left unfinished.
func (c *criWriter) Close() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.line(c.buf, "F")
	c.buf = nil
	return err
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	p.stopping.Store(true)
	if p.exited() {
		return
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children the component may have started itself share its group.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// waitReady polls check until it succeeds. It fails early, with the tail of
// the component's log, if the process exits or the timeout passes.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before it was ready; last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 30))
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready after %s (%v); last lines of %s:\n%s", p.name, timeout, last, p.logPath, tail(p.logPath, 30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.ReplaceAll(string(bytes.Join(lines, []byte("\n"))), "\n", "\n    ")
}
