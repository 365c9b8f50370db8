package simulated

import (
	"testing"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestSimulatedNodeClassDeclaration: the simulated cloud serves
// SimulatedNodeClass, ready once it exists, drifted by any spec change.
func TestSimulatedNodeClassDeclaration(t *testing.T) {
	c, _ := testCloud(t, nil)
	classes := c.NodeClasses()
	if len(classes) != 1 || classes[0].Kind != "SimulatedNodeClass" {
		t.Fatalf("NodeClasses = %+v, want SimulatedNodeClass alone", classes)
	}
	decl := classes[0]
	class, ok := decl.New().(*v1alpha1.SimulatedNodeClass)
	if !ok {
		t.Fatalf("New() = %T, want *SimulatedNodeClass", decl.New())
	}
	if ready, reason, _ := decl.Ready(class); !ready {
		t.Errorf("an existing SimulatedNodeClass is not ready: %s", reason)
	}
	before, err := decl.Hash(class)
	if err != nil {
		t.Fatal(err)
	}
	class.Spec.Faults = []v1alpha1.SimulatedFault{{Kind: v1alpha1.FaultNodeFailure, Zones: []string{"zone-a"}}}
	if after, _ := decl.Hash(class); after != before {
		t.Errorf("adding a fault changed the hash from %s to %s: the nodes it is to fail would be replaced as drifted", before, after)
	}
	class.Spec.Tags = map[string]string{"team": "a"}
	if after, _ := decl.Hash(class); after == before {
		t.Errorf("adding a tag left the hash at %s", before)
	}
}
