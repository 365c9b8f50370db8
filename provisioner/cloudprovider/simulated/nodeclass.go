package simulated

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// NodeClasses declares SimulatedNodeClass. It is ready as soon as it
// exists: nothing in it needs resolving against the cloud (no controller
// sets its status conditions). A change to its spec (delays, faults, tags)
// makes the nodes launched from it drifted.
func (c *Cloud) NodeClasses() []cloudprovider.NodeClass {
	return []cloudprovider.NodeClass{{
		Kind:  "SimulatedNodeClass",
		New:   func() client.Object { return &v1alpha1.SimulatedNodeClass{} },
		Ready: func(client.Object) (bool, string, string) { return true, "Exists", "" },
		Hash: func(o client.Object) (string, error) {
			return cloudprovider.SpecHash(o.(*v1alpha1.SimulatedNodeClass).Spec)
		},
	}}
}
