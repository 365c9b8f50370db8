package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Ports for the components come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), and each is held
// by a lock file for the life of the sandbox that chose it. Sandboxes run in
// parallel, in one test binary and in several at once: a port picked by
// listening on :0 and closed again before the component binds it could
// meanwhile be handed by the kernel to another process's outgoing
// connection or :0 listener, or be picked again by the next sandbox. The
// kernel never hands out a port below its ephemeral range on its own, and
// the lock keeps every other sandbox of this machine off it.
const (
	portsLow  = 20000
	portsHigh = 32767 // below the default ephemeral range
)

// portLocks is the directory of the lock files, one per port in use: one
// for the machine, whatever $TMPDIR a sandbox's process has.
const portLocks = "/tmp/nodeforge-ports"

// heldPort is a port a sandbox holds until Stop.
type heldPort struct {
	port int
	lock *os.File
}

// freePorts returns n distinct ports on the loopback address that nothing
// listens on and no other sandbox holds, and holds them for s until Stop.
func (s *Sandbox) freePorts(n int) ([]int, error) {
	if err := os.MkdirAll(portLocks, 0o777); err != nil {
		return nil, err
	}
	_ = os.Chmod(portLocks, 0o777|os.ModeSticky) // every user's sandboxes share it
	low, high := portRange()
	span := high - low + 1
	start := rand.IntN(span)
	ports := make([]int, 0, n)
	for i := 0; i < span && len(ports) < n; i++ {
		port := low + (start+i)%span
		held, err := holdPort(port)
		if err != nil {
			return nil, err
		}
		if held == nil {
			continue
		}
		s.ports = append(s.ports, *held)
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("finding %d free ports in %d-%d: only %d", n, low, high, len(ports))
	}
	return ports, nil
}

// holdPort locks port's file and checks that the port is free; nil when
// another sandbox holds it (flock excludes every other open file of it,
// in this process too) or something listens on it.
func holdPort(port int) (*heldPort, error) {
	f, err := os.OpenFile(filepath.Join(portLocks, strconv.Itoa(port)), os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("locking port %d: %w", port, err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		f.Close() // in use by something that is not a sandbox
		return nil, nil
	}
	l.Close()
	return &heldPort{port: port, lock: f}, nil
}

// releasePorts lets other sandboxes have s's ports again.
func (s *Sandbox) releasePorts() {
	for _, p := range s.ports {
		p.lock.Close()
	}
	s.ports = nil
}

// portRange is [portsLow, portsHigh], lowered to end below the kernel's
// ephemeral range where that starts lower than usual.
func portRange() (int, int) {
	low, high := portsLow, portsHigh
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return low, high
	}
	if eph, err := strconv.Atoi(fields[0]); err == nil && eph <= high {
		high = eph - 1
		low = min(low, high/2)
	}
	return low, high
}
