// Package integration tests Nodeforge's API and controllers against a real
// kube-apiserver and etcd, started once for the package by the sandbox.
package integration

import (
	"context"
	"fmt"
	"k8s.io/klog/v2"
	"os"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/test/sandbox"
)

// kube is an admin client of the package's control plane.
var kube client.Client

func TestMain(m *testing.M) {
	ctrllog.SetLogger(klog.Background())
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	sb, stop, err := sandbox.StartControlPlane(context.Background(), os.Stderr)
	if err != nil {
		return 0, err
	}
	defer stop()
	if kube, err = sb.Client(); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
