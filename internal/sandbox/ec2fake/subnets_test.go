package ec2fake_test

import (
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// freeIn is the subnet's AvailableIpAddressCount as DescribeSubnets says.
func freeIn(t *testing.T, c *ec2.Client, subnet string) int32 {
	t.Helper()
	out, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnet}})
	if err != nil {
		t.Fatal(err)
	}
	return sdkaws.ToInt32(out.Subnets[0].AvailableIpAddressCount)
}

// TestAddressesAreHeldUntilTheInstanceIsTerminated follows one subnet's
// AvailableIpAddressCount through a launch and a termination that takes a
// minute: EC2 frees the address with the network interface, once the
// instance is terminated.
func TestAddressesAreHeldUntilTheInstanceIsTerminated(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	w := ec2fake.DefaultWorld()
	w.Now = clk.Now
	w.ShuttingDownFor = time.Minute
	_, c, _ := start(t, w)
	createTemplate(t, c, "nodes", amiX86, "")
	before := freeIn(t, c, subnetB)
	ids := launch(t, c, 3, subnetB, nil)
	if got := freeIn(t, c, subnetB); got != before-3 {
		t.Errorf("free after launching 3: %d; want %d", got, before-3)
	}
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[:2]}); err != nil {
		t.Fatal(err)
	}
	if got := freeIn(t, c, subnetB); got != before-3 {
		t.Errorf("free while 2 are shutting down: %d; want %d, their addresses still held", got, before-3)
	}
	clk.Advance(time.Minute)
	if got := freeIn(t, c, subnetB); got != before-1 {
		t.Errorf("free once 2 are terminated: %d; want %d", got, before-1)
	}
}

// TestAFullSubnetFailsItsOverrideAndTheFleetGoesOn checks CreateFleet
// against a subnet SetFreeAddresses has filled: the override naming it
// fails with InsufficientFreeAddressesInSubnet, and the next override, the
// same type in another subnet of the zone, launches.
func TestAFullSubnetFailsItsOverrideAndTheFleetGoesOn(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "")
	s.SetFreeAddresses(subnetA, 0)
	if got := freeIn(t, c, subnetA); got != 0 {
		t.Fatalf("DescribeSubnets says %d free in the full subnet; want 0", got)
	}
	full, other := pool{"m5.large", subnetA}, pool{"m5.large", untagged}
	out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeOnDemand,
		override(full.instanceType, full.subnet), override(other.instanceType, other.subnet)))
	if err != nil {
		t.Fatal(err)
	}
	if got := failedPools(out); len(got) != 1 || got[full] != "InsufficientFreeAddressesInSubnet" {
		t.Errorf("errors %v; want InsufficientFreeAddressesInSubnet for %s only", got, full.subnet)
	}
	if got := launchedPools(out); len(got) != 1 || got[other] != 1 {
		t.Errorf("launched %v; want one instance in %s", got, other.subnet)
	}

	s.SetFreeAddresses(subnetA, 2)
	if got := freeIn(t, c, subnetA); got != 2 {
		t.Errorf("DescribeSubnets says %d free after SetFreeAddresses(2); want 2", got)
	}
	launch(t, c, 2, subnetA, nil)
	if got := freeIn(t, c, subnetA); got != 0 {
		t.Errorf("free after launching 2 into 2 free addresses: %d; want 0", got)
	}
}
