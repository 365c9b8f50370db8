// Package e2e runs the shipped binaries: nodeforge-sandbox starts the whole
// system as separate processes, and the tests drive it from outside the way
// a user does, through the API server and the kubeconfig it writes.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
	flag.Parse() // for runs, before m.Run would parse them
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
	// Build or reuse the Kubernetes components before any test times itself.
	if _, err := sandbox.EnsureBinaries(context.Background(), sandbox.BuildOptions{Source: source, BinDir: binDir, Progress: os.Stderr}); err != nil {
		return 0, err
	}
	oldest.ready = make(chan struct{})
	if runs("TestKubernetesMinors") {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			defer close(oldest.ready)
			oldest.bins, oldest.err = sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir, Progress: os.Stderr, Oldest: true})
		}()
		// A build still running when the tests end (the test failed
		// early) is stopped, not left to run on without its process.
		defer func() { cancel(); <-oldest.ready }()
	} else {
		close(oldest.ready)
	}
	return m.Run(), nil
}

// oldest are the components of the oldest Kubernetes minor the chart
// accepts (hack/tools/kube-oldest), built while the other tests run: from
// cold the build takes minutes, and the sandboxes leave part of the CPU
// idle. TestKubernetesMinors waits for ready.
var oldest struct {
	ready chan struct{}
	bins  *sandbox.Binaries
	err   error
}

// runs reports whether the test flags select the top-level test name:
// -test.run (its top-level part) matches it, -test.skip does not, and
// -test.list is not set. When a pattern does not compile, it says yes.
func runs(name string) bool {
	value := func(f string) string {
		if fl := flag.Lookup(f); fl != nil {
			return fl.Value.String()
		}
		return ""
	}
	matches := func(pattern string) bool {
		top, _, _ := strings.Cut(pattern, "/")
		re, err := regexp.Compile(top)
		return err != nil || re.MatchString(name)
	}
	if value("test.list") != "" || value("test.skip") != "" && matches(value("test.skip")) {
		return false
	}
	return value("test.run") == "" || matches(value("test.run"))
}
