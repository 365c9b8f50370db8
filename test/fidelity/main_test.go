// Package fidelity is the differential test of VirtualNodes: for each
// scenario, pods are nominated to virtual nodes by nodeforge-scheduler; the
// NodeClaims are then made real as Nodes (labels, taints and allocatable of
// the instance type the provisioner would launch), and a scheduler without
// VirtualNodes must place every nominated pod on them. Pods that truly
// cannot run must get no claim. Everything runs against a real
// kube-apiserver, with the shipped scheduler binary.
package fidelity

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

var (
	env          *sandbox.Sandbox
	cs           kubernetes.Interface
	kube         client.Client
	schedulerBin string
	catalog      []v1alpha1.InstanceType
	// source is the checkout; binDir holds nodeforge-scheduler and
	// nodeforge-provisioner (the end-to-end runs start a whole sandbox).
	source, binDir string
)

func typesUID(s string) types.UID { return types.UID(s) }

func TestMain(m *testing.M) { sandboxtest.TestMain(m, run) }

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	var stop func()
	var err error
	if env, stop, err = sandboxtest.StartControlPlane(ctx, os.Stderr); err != nil {
		return 0, err
	}
	defer stop()
	if source, err = sandbox.FindSource(); err != nil {
		return 0, err
	}
	if binDir = os.Getenv("NODEFORGE_BIN_DIR"); binDir == "" {
		tmp, err := os.MkdirTemp("", "nodeforge-fidelity-bin-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(tmp)
		binDir = tmp
		for _, c := range []string{"scheduler", "provisioner"} {
			build := exec.Command("go", "build", "-o", filepath.Join(tmp, "nodeforge-"+c), "./cmd/"+c)
			build.Dir, build.Stderr = source, os.Stderr
			if err := build.Run(); err != nil {
				return 0, fmt.Errorf("building nodeforge-%s: %w", c, err)
			}
		}
	}
	schedulerBin = filepath.Join(binDir, "nodeforge-scheduler")
	if catalog, err = simulated.LoadCatalog(""); err != nil {
		return 0, err
	}
	if cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		return 0, err
	}
	if kube, err = env.Client(); err != nil {
		return 0, err
	}
	// kube-scheduler runs no PostFilter while the cluster has no node.
	cp, err := manifests.FS.ReadFile("examples/control-plane-node.yaml")
	if err != nil {
		return 0, err
	}
	if err := sandbox.Apply(ctx, env.Config, cp); err != nil {
		return 0, err
	}
	return m.Run(), nil
}
