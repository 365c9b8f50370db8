package simulated

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

func testCloud(t *testing.T, state string, faults ...v1alpha1.SimulatedFault) (*Cloud, cloudprovider.Launch) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	class := &v1alpha1.SimulatedNodeClass{}
	class.Name = "default"
	class.Spec.Faults = faults
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(class).Build()
	cat, err := NewCatalog("")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCloud(cat, kube, state)
	if err != nil {
		t.Fatal(err)
	}
	var offers []cloudprovider.Offer
	for _, it := range cat.types[:3] {
		offers = append(offers, cloudprovider.Offer{InstanceType: it, Zone: "zone-a", CapacityType: "spot", Price: 1})
	}
	return c, cloudprovider.Launch{NodeClaim: "c", ClaimUID: "uid-1", NodePool: "default", Labels: map[string]string{},
		NodeClass: v1alpha1.NodeClassReference{Name: "default"}, Offers: offers}
}

// TestCreateIsIdempotentAcrossRestarts launches for a claim, "restarts" the
// provider from its state file, and launches again: one instance.
func TestCreateIsIdempotentAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	state := filepath.Join(t.TempDir(), "state.json")
	c, l := testCloud(t, state)
	first, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	restarted, _ := testCloud(t, state)
	second, err := restarted.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := restarted.List(ctx)
	if second.ProviderID != first.ProviderID || len(all) != 1 {
		t.Fatalf("second Create launched %s (first %s), %d instances", second.ProviderID, first.ProviderID, len(all))
	}
	if err := restarted.Delete(ctx, first.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Delete(ctx, first.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
}

// TestCapacityFaultsFallThrough refuses the cheapest offer and checks the
// next launches and the refused one is reported; all refused is a typed error.
func TestCapacityFaultsFallThrough(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, filepath.Join(t.TempDir(), "s.json"),
		v1alpha1.SimulatedFault{Kind: v1alpha1.FaultInsufficientCapacity, InstanceTypes: []string{"c7.12xlarge"}})
	if l.Offers[0].InstanceType.Name != "c7.12xlarge" {
		t.Fatalf("catalog order changed: first offer %s", l.Offers[0].InstanceType.Name)
	}
	in, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if in.InstanceType != l.Offers[1].InstanceType.Name || len(in.Refused) != 1 || in.Refused[0].InstanceType.Name != "c7.12xlarge" {
		t.Fatalf("launched %s, refused %v", in.InstanceType, in.Refused)
	}
	c2, l2 := testCloud(t, filepath.Join(t.TempDir(), "s.json"), v1alpha1.SimulatedFault{Kind: v1alpha1.FaultInsufficientCapacity, Zones: []string{"zone-a"}})
	if _, err := c2.Create(ctx, l2); !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("every offer refused: got %v, want an InsufficientCapacityError", err)
	}
}
