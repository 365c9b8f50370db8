// Package sandboxtest runs test packages against a sandbox: a TestMain
// that shares a control plane or built binaries between a package's tests.
// It imports testing, so the shipped programs never import it; the
// sandbox itself is package sandbox.
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// StartControlPlane starts etcd and kube-apiserver, with the CRDs and RBAC
// installed, in a temporary directory: what integration tests need. stop
// stops it and removes the directory.
func StartControlPlane(ctx context.Context, progress io.Writer) (s *sandbox.Sandbox, stop func(), err error) {
	src, err := sandbox.FindSource()
	if err != nil {
		return nil, nil, err
	}
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: src, KubernetesOnly: true, Progress: progress})
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "nodeforge-controlplane-")
	if err != nil {
		return nil, nil, err
	}
	if s, err = sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: bins, ControlPlaneOnly: true, Progress: progress}); err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, func() { s.Stop(); os.RemoveAll(dir) }, nil
}

// TestMain runs a test package whose tests share what setup makes (a
// control plane, built binaries): setup runs m.Run between making and
// removing them and returns its code. Setup errors fail the package.
func TestMain(m *testing.M, setup func(*testing.M) (int, error)) {
	ctrllog.SetLogger(klog.Background())
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

// ControlPlaneMain is TestMain for a package whose tests share one control
// plane (etcd and kube-apiserver with Nodeforge's CRDs and RBAC): it runs
// before (if any), starts the control plane, sets *kube to an admin client
// of it, runs the tests and stops it.
func ControlPlaneMain(m *testing.M, kube *client.Client, before func(context.Context) error) {
	TestMain(m, func(m *testing.M) (int, error) {
		ctx := context.Background()
		if before != nil {
			if err := before(ctx); err != nil {
				return 0, err
			}
		}
		sb, stop, err := StartControlPlane(ctx, os.Stderr)
		if err != nil {
			return 0, err
		}
		defer stop()
		if *kube, err = sb.Client(); err != nil {
			return 0, err
		}
		return m.Run(), nil
	})
}
