package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

// StartControlPlane starts etcd and kube-apiserver, with the CRDs and RBAC
// installed, in a temporary directory: what integration tests need. stop
// stops it and removes the directory.
func StartControlPlane(ctx context.Context, progress io.Writer) (s *Sandbox, stop func(), err error) {
	src, err := FindSource()
	if err != nil {
		return nil, nil, err
	}
	bins, err := EnsureBinaries(ctx, BuildOptions{Source: src, KubernetesOnly: true, Progress: progress})
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "nodeforge-controlplane-")
	if err != nil {
		return nil, nil, err
	}
	if s, err = Start(ctx, Options{Dir: dir, Binaries: bins, ControlPlaneOnly: true, Progress: progress}); err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, func() { s.Stop(); os.RemoveAll(dir) }, nil
}

// Client returns an admin client that knows Nodeforge's types.
func (s *Sandbox) Client() (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return client.New(s.Config, client.Options{Scheme: scheme})
}

// Clients returns a clientset and a controller-runtime client (see
// Client) for the sandbox's API server.
func (s *Sandbox) Clients() (kubernetes.Interface, client.Client, error) {
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return nil, nil, err
	}
	kube, err := s.Client()
	return cs, kube, err
}

// KwokNode is a Node that kwok runs: it becomes Ready and runs the pods
// bound to it. Allocatable equals capacity.
func KwokNode(name string, labels map[string]string, cpu, memory string) *corev1.Node {
	l := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		l[k] = v
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory), corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
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
