package aws

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// The two subnets DefaultWorld has in us-west-2a.
const (
	subnetA1 = "subnet-0c1a4f3e2d5b60a01" // tagged, a /20
	subnetA2 = "subnet-0c1a4f3e2d5b60d04" // untagged, a /24
)

// twoSubnetsInOneZone is a region whose test class has both subnets of
// us-west-2a, with free1 and free2 addresses free in them.
func twoSubnetsInOneZone(t *testing.T, free1, free2 int32) *region {
	t.Helper()
	w := ec2fake.DefaultWorld()
	for i := range w.Subnets {
		switch w.Subnets[i].ID {
		case subnetA1:
			w.Subnets[i].AvailableIPs = free1
		case subnetA2:
			w.Subnets[i].AvailableIPs = free2
		}
	}
	return newRegion(t, &w, &v1alpha1.EC2NodeClassSpec{
		InstanceProfile:            "NodeforgeNodeInstanceProfile",
		SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{ID: subnetA1}, {ID: subnetA2}},
		SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
	})
}

// subnetOf is the subnet EC2 launched the instance into.
func (r *region) subnetOf(t *testing.T, in *cloudprovider.Instance) string {
	t.Helper()
	for _, inst := range r.ec2.Instances() {
		if strings.HasSuffix(in.ProviderID, "/"+inst.ID) {
			return inst.SubnetID
		}
	}
	t.Fatalf("no instance %s in the fake", in.ProviderID)
	return ""
}

// TestSubnetsAreChosenByFreeAddresses launches into a zone with two
// subnets through the real SDK and checks which subnet each CreateFleet
// names and what a full subnet or zone makes of the launch.
func TestSubnetsAreChosenByFreeAddresses(t *testing.T) {
	ctx := context.Background()

	t.Run("the launch goes to the subnet with the most free addresses, not the first by ID", func(t *testing.T) {
		r := twoSubnetsInOneZone(t, 2, 200)
		in, err := r.provider.Create(ctx, r.launch(r.offers(t, "on-demand", "m5.large")))
		if err != nil {
			t.Fatal(err)
		}
		if got := overrides(r.lastRequest(t, "CreateFleet")); len(got) != 1 || got[0][1] != subnetA2 {
			t.Errorf("overrides %v, want m5.large in %s alone", got, subnetA2)
		}
		if got := r.subnetOf(t, in); got != subnetA2 {
			t.Errorf("launched into %s, want %s (200 free, against 2)", got, subnetA2)
		}
	})

	t.Run("launches in flight count against their subnet until it is read again, and a zone whose subnets are all full is closed, saying so", func(t *testing.T) {
		r := twoSubnetsInOneZone(t, 1, 1)
		reads := r.ec2.Calls("DescribeSubnets")
		offers := r.offers(t, "on-demand", "m5.large")
		var got []string
		for range 2 {
			in, err := r.provider.Create(ctx, r.launch(offers))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.subnetOf(t, in))
		}
		// One free each, and a tie goes to the first by ID; the first
		// launch then counts against it, so the second goes to the other.
		if want := []string{subnetA1, subnetA2}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("launched into %v, want %v", got, want)
		}
		if n := r.ec2.Calls("DescribeSubnets") - reads; n != 0 {
			t.Errorf("%d DescribeSubnets calls while the class's reading was fresh, want none", n)
		}
		fleets := r.ec2.Calls("CreateFleet")
		_, err := r.provider.Create(ctx, r.launch(offers))
		var ice *cloudprovider.InsufficientCapacityError
		if !errors.As(err, &ice) || len(ice.Offers) != len(offers) {
			t.Fatalf("Create in a zone with both subnets full = %v, want an InsufficientCapacityError for its %d offers", err, len(offers))
		}
		for _, want := range []string{"zone us-west-2a", "free IP address", subnetA1, subnetA2} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if n := r.ec2.Calls("CreateFleet") - fleets; n != 0 {
			t.Errorf("%d CreateFleet calls into a zone known to be full, want none", n)
		}
	})

	t.Run("a subnet EC2 finds full sends the next launch to the zone's other subnet, and the offering stays available", func(t *testing.T) {
		r := twoSubnetsInOneZone(t, 200, 100)
		// Others took subnetA1's addresses since the class read them.
		r.ec2.SetFreeAddresses(subnetA1, 0)
		offers := r.offers(t, "on-demand", "m5.large")
		_, err := r.provider.Create(ctx, r.launch(offers))
		if got := overrides(r.lastRequest(t, "CreateFleet")); len(got) != 1 || got[0][1] != subnetA1 {
			t.Fatalf("overrides %v, want m5.large in %s, the subnet with most room as last read", got, subnetA1)
		}
		var ice *cloudprovider.InsufficientCapacityError
		if !errors.As(err, &ice) || len(ice.Offers) != 0 {
			t.Fatalf("Create = %v, want an InsufficientCapacityError that refuses no offering", err)
		}
		for _, want := range []string{subnetA1, "us-west-2a", "no free IP address", subnetA2} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		in, err := r.provider.Create(ctx, r.launch(offers))
		if err != nil {
			t.Fatalf("the next launch in us-west-2a: %v", err)
		}
		if got := r.subnetOf(t, in); got != subnetA2 {
			t.Errorf("the next launch went to %s, want %s", got, subnetA2)
		}
		if len(in.Refused) != 0 {
			t.Errorf("refused %v, want no offering marked unavailable", in.Refused)
		}
	})
}
