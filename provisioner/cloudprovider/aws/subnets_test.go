package aws

import (
	"slices"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

func subnetReading(id string, free int32) ec2types.Subnet {
	return ec2types.Subnet{SubnetId: sdkaws.String(id), AvailableIpAddressCount: sdkaws.Int32(free)}
}

// TestSubnetRooms follows one subnet's free addresses through launches,
// readings that began before or after them, and a refusal.
func TestSubnetRooms(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	var r subnetRooms
	free := func(now time.Time) int {
		t.Helper()
		n, ok := r.free(now, "subnet-a")
		if !ok {
			return -1
		}
		return n
	}
	if got := free(t0); got != -1 {
		t.Fatalf("a subnet never read: %d free, want unknown", got)
	}
	if !r.stale(t0, []string{"subnet-a"}) {
		t.Errorf("a subnet never read is not stale")
	}

	r.observe(t0, r.begin(), nil, []ec2types.Subnet{subnetReading("subnet-a", 10)})
	r.launched("subnet-a", 1)
	r.launched("subnet-a", 2)
	if got := free(t0); got != 7 {
		t.Errorf("10 free less 3 launched since the reading: %d, want 7", got)
	}

	// A reading that began before the last launch returned includes the
	// first two and not the third.
	r2 := subnetRooms{}
	r2.observe(t0, r2.begin(), nil, []ec2types.Subnet{subnetReading("subnet-a", 10)})
	r2.launched("subnet-a", 2)
	seq := r2.begin()
	r2.launched("subnet-a", 1)
	r2.observe(t0, seq, nil, []ec2types.Subnet{subnetReading("subnet-a", 8)})
	if got, _ := r2.free(t0, "subnet-a"); got != 7 {
		t.Errorf("a reading of 8 that began before the last launch: %d free, want 7", got)
	}

	if r.stale(t0.Add(subnetReadingTTL-time.Second), []string{"subnet-a"}) {
		t.Errorf("stale within the TTL")
	}
	if !r.stale(t0.Add(subnetReadingTTL), []string{"subnet-a"}) {
		t.Errorf("not stale after the TTL")
	}

	// A refusal stands for a reading of nothing free, and asks for a read.
	before := r.begin()
	r.refused(t0, "subnet-a")
	if got := free(t0); got != 0 {
		t.Errorf("after a refusal: %d free, want 0", got)
	}
	if !r.stale(t0, []string{"subnet-a"}) {
		t.Errorf("a refused subnet is not stale")
	}
	r.observe(t0, before, nil, []ec2types.Subnet{subnetReading("subnet-a", 5)})
	if got := free(t0); got != 0 {
		t.Errorf("a reading that began before the refusal replaced it: %d free, want 0", got)
	}
	if got := free(t0.Add(subnetRefusalTTL)); got != -1 {
		t.Errorf("a refusal no reading followed for %s: %d free, want unknown", subnetRefusalTTL, got)
	}
	r.observe(t0, r.begin(), nil, []ec2types.Subnet{subnetReading("subnet-a", 5)})
	if got := free(t0); got != 5 {
		t.Errorf("a reading after the refusal: %d free, want 5", got)
	}

	// A failed read is not retried at once.
	r.failed(t0)
	if r.stale(t0.Add(subnetReadRetry-time.Second), []string{"subnet-new"}) {
		t.Errorf("stale within %s of a failed read", subnetReadRetry)
	}
}

// TestZoneSubnets checks the order subnets of a zone are tried in.
func TestZoneSubnets(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	p := &Provider{now: func() time.Time { return t0 }}
	class := &v1alpha1.EC2NodeClass{Status: v1alpha1.EC2NodeClassStatus{Subnets: []v1alpha1.ResolvedSubnet{
		{ID: "subnet-a1", Zone: "a"}, {ID: "subnet-a2", Zone: "a"}, {ID: "subnet-a3", Zone: "a"}, {ID: "subnet-a4", Zone: "a"},
		{ID: "subnet-b1", Zone: "b"}, {ID: "subnet-b2", Zone: "b"},
	}}}
	p.subnetRooms.observe(t0, p.subnetRooms.begin(), nil, []ec2types.Subnet{
		subnetReading("subnet-a1", 5), subnetReading("subnet-a2", 50), subnetReading("subnet-a3", 50),
		subnetReading("subnet-b1", 0), subnetReading("subnet-b2", 0),
	})
	ranked, full := p.zoneSubnets(class)
	var order []string
	for _, s := range ranked["a"] {
		order = append(order, s.id)
	}
	// Most free first, ties by ID, the subnet never read last.
	if want := []string{"subnet-a2", "subnet-a3", "subnet-a1", "subnet-a4"}; !slices.Equal(order, want) {
		t.Errorf("zone a tried in order %v, want %v", order, want)
	}
	if _, ok := ranked["b"]; ok || len(full["b"]) != 2 {
		t.Errorf("zone b: ranked %v, full %v; want it full, with both subnets", ranked["b"], full["b"])
	}
	if _, ok := full["a"]; ok {
		t.Errorf("zone a is full: %v", full["a"])
	}
}
