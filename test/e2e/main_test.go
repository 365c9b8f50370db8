// Package e2e runs the shipped binaries: nodeforge-sandbox starts the whole
// system as separate processes, and the tests drive it from outside the way
// a user does, through the API server and the kubeconfig it writes.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
)

var (
	// binDir holds nodeforge-sandbox, nodeforge-scheduler and nodeforge-provisioner.
	binDir string
	// source is the root of the checkout.
	source string
)

func TestMain(m *testing.M) { sandboxtest.TestMain(m, run) }

func run(m *testing.M) (int, error) {
	var err error
	if source, err = sandbox.FindSource(); err != nil {
		return 0, err
	}
	binDir = os.Getenv("NODEFORGE_BIN_DIR")
	if binDir == "" {
		// Run without make: build the binaries once for this package.
		tmp, err := os.MkdirTemp("", "nodeforge-e2e-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(tmp)
		for name, pkg := range map[string]string{"nodeforge-sandbox": "./cmd/sandbox", "nodeforge-scheduler": "./cmd/scheduler", "nodeforge-provisioner": "./cmd/provisioner"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(tmp, name), pkg)
			cmd.Dir, cmd.Stderr = source, os.Stderr
			if err := cmd.Run(); err != nil {
				return 0, fmt.Errorf("building %s: %w", name, err)
			}
		}
		binDir = tmp
	}
	// Build or reuse the Kubernetes components of both minors before any
	// test times itself (make components builds them first). Built in the
	// background while the tests ran, the oldest minor's slowed the package
	// by more than its own build time on two cores (docs/benchmarks.md, CI).
	for _, oldest := range []bool{false, true} {
		if _, err := sandbox.EnsureBinaries(context.Background(), sandbox.BuildOptions{Source: source, BinDir: binDir, Progress: os.Stderr, Oldest: oldest}); err != nil {
			return 0, err
		}
	}
	return m.Run(), nil
}
