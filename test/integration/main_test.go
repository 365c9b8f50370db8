// Package integration tests Nodeforge's API and controllers against a real
// kube-apiserver and etcd, started once for the package by the sandbox.
package integration

import (
	"context"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
)

// kube is an admin client of the package's control plane, restConfig its
// connection for controllers the tests run in-process.
var (
	kube       client.Client
	restConfig *rest.Config
)

func TestMain(m *testing.M) { sandboxtest.TestMain(m, run) }

func run(m *testing.M) (int, error) {
	sb, stop, err := sandboxtest.StartControlPlane(context.Background(), os.Stderr)
	if err != nil {
		return 0, err
	}
	defer stop()
	restConfig = sb.Config
	if kube, err = sb.Client(); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
