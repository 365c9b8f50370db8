// Package integration tests Nodeforge's API and controllers against a real
// kube-apiserver and etcd, started once for the package by the sandbox.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/sandbox"
)

// kube is an admin client of the package's control plane.
var kube client.Client

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	src, err := sandbox.FindSource()
	if err != nil {
		return 0, err
	}
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: src, KubernetesOnly: true, Progress: os.Stderr})
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "nodeforge-integration-")
	if err != nil {
		return 0, err
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: bins, ControlPlaneOnly: true})
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	defer sb.Stop()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 0, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return 0, err
	}
	if kube, err = client.New(sb.Config, client.Options{Scheme: scheme}); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
