package simulated

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// RegisteredNode is nothing to the simulated cloud: its catalog says
// exactly what its nodes report.
func (c *Cloud) RegisteredNode(context.Context, *cloudprovider.Instance, *corev1.Node) {}

// NodeClasses declares SimulatedNodeClass. It is ready as soon as it
// exists: nothing in it needs resolving against the cloud (no controller
// sets its status conditions). A change to how its machines are made
// (delays, tags) makes the nodes launched from it drifted; a change to its
// faults does not: they are the simulated cloud's weather, not a launch
// setting, and a NodeFailure fault that drifted the nodes it is set to
// fail would have them replaced before they fail.
func (c *Cloud) NodeClasses() []cloudprovider.NodeClass {
	return []cloudprovider.NodeClass{{
		Kind:  "SimulatedNodeClass",
		New:   func() client.Object { return &v1alpha1.SimulatedNodeClass{} },
		Ready: func(client.Object) (bool, string, string) { return true, "Exists", "" },
		Hash: func(o client.Object) (string, error) {
			spec := o.(*v1alpha1.SimulatedNodeClass).Spec
			spec.Faults = nil
			return cloudprovider.SpecHash(spec)
		},
	}}
}
