package sandbox

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

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
