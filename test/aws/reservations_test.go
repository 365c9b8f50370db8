package aws

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

const (
	// crML is the reservation the class selects: two m5.large in
	// us-west-2a, targeted, tagged team=ml.
	crML = "cr-0a1b2c3d4e5f60101"
	// crWeb is an open m5.large reservation in us-west-2a the class does
	// not select (team=web).
	crWeb = "cr-0a1b2c3d4e5f60102"
	// crBlock is a Capacity Block the class's term matches, which it does
	// not launch into.
	crBlock = "cr-0a1b2c3d4e5f60103"
)

// reservedRegion is the default region with the three reservations, and
// a class selecting reservations tagged team=ml.
func reservedRegion(t *testing.T) *region {
	t.Helper()
	world := ec2fake.DefaultWorld()
	world.CapacityReservations = []ec2fake.CapacityReservation{
		{ID: crML, InstanceType: "m5.large", Zone: "us-west-2a", TotalInstances: 2, InstanceMatchCriteria: ec2fake.MatchTargeted, Tags: map[string]string{"team": "ml"}},
		{ID: crWeb, InstanceType: "m5.large", Zone: "us-west-2a", TotalInstances: 5, Tags: map[string]string{"team": "web"}},
		{ID: crBlock, InstanceType: "g4dn.xlarge", Zone: "us-west-2a", TotalInstances: 1, ReservationType: "capacity-block", Tags: map[string]string{"team": "ml"}},
	}
	spec := defaultSpec()
	spec.CapacityReservationSelectorTerms = []v1alpha1.CapacityReservationSelectorTerm{{Tags: map[string]string{"team": "ml"}}}
	return newRegion(t, &world, &spec)
}

// reservedPool is a pool of the region's class that may launch m5.large
// in us-west-2a, reserved or on-demand: what the scheduler plugin and the
// launch controller read its offers from (nodeshape.Offers).
func (r *region) reservedPool() *v1alpha1.NodePool {
	pool := r.pool()
	pool.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
		{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{v1alpha1.CapacityTypeReserved, v1alpha1.CapacityTypeOnDemand}},
		{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large"}},
		{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"us-west-2a"}},
	}
	return pool
}

// cheapest is the pool's cheapest available offer and every offer of its
// group (zone, capacity type, architecture), as a claim made from it
// launches with them.
func (r *region) cheapest(t *testing.T, pool *v1alpha1.NodePool) []cloudprovider.Offer {
	t.Helper()
	types, err := r.provider.InstanceTypes(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := nodeshape.Offers(nodeshape.ForPool(pool), types, pool.Spec.Template.Spec.Requirements)
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) == 0 {
		t.Fatal("the pool has no available offer")
	}
	g := offers[0].Group()
	return slices.DeleteFunc(offers, func(o cloudprovider.Offer) bool { return !g.Has(o) })
}

// reservedOffering is the pool's reserved m5.large offering in us-west-2a.
func (r *region) reservedOffering(t *testing.T, pool *v1alpha1.NodePool) v1alpha1.Offering {
	t.Helper()
	types, err := r.provider.InstanceTypes(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	_, o := offering(types, "m5.large", "us-west-2a", v1alpha1.CapacityTypeReserved)
	if o == nil {
		t.Fatal("no reserved m5.large offering in us-west-2a")
	}
	return *o
}

func left(t *testing.T, r *region, id string) int {
	t.Helper()
	_, n, ok := r.ec2.CapacityReservation(id)
	if !ok {
		t.Fatalf("no reservation %s", id)
	}
	return n
}

// TestCapacityReservations follows one class's reservation from its
// resolution to its last instance, through the real SDK on the wire: the
// subtests run in order on one region.
func TestCapacityReservations(t *testing.T) {
	ctx := context.Background()
	r := reservedRegion(t)
	pool := r.reservedPool()
	var launched []*cloudprovider.Instance

	t.Run("the class resolves its reservation term into the reservation, leaving out the Capacity Block and the one it does not select, and stays Ready", func(t *testing.T) {
		want := []v1alpha1.ResolvedCapacityReservation{{
			ID: crML, InstanceType: "m5.large", Zone: "us-west-2a", AvailableInstanceCount: 2, OwnerID: ec2fake.DefaultAccountID, InstanceMatchCriteria: "targeted",
		}}
		if got := r.class.Status.CapacityReservations; !slices.Equal(got, want) {
			t.Errorf("status.capacityReservations = %+v, want %+v", got, want)
		}
		c := meta.FindStatusCondition(r.class.Status.Conditions, aws.ConditionCapacityReservationsReady)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, crBlock+" is a capacity-block") {
			t.Errorf("%s = %+v, want True, naming %s as a Capacity Block not launched into", aws.ConditionCapacityReservationsReady, c, crBlock)
		}
		if c := ready(r.class); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Ready = %+v", c)
		}
		req := r.lastRequest(t, "DescribeCapacityReservations")
		if req.Form.Get("Filter.1.Name") != "state" || req.Form.Get("Filter.1.Value.1") != "active" {
			t.Errorf("DescribeCapacityReservations filters: %v, want state=active first", req.Form)
		}
	})

	t.Run("the pool offers reserved m5.large in us-west-2a, counted as the reservation's two, cheaper than any spot or on-demand offering, and nowhere else", func(t *testing.T) {
		types, err := r.provider.InstanceTypes(ctx, r.pool())
		if err != nil {
			t.Fatal(err)
		}
		var reserved []string
		cheapestOther := 1e9
		var reservedPrice float64
		for _, it := range types {
			for _, o := range it.Offerings {
				p, _ := strconv.ParseFloat(o.Price, 64)
				if o.CapacityType != v1alpha1.CapacityTypeReserved {
					cheapestOther = min(cheapestOther, p)
					continue
				}
				reserved = append(reserved, it.Name+"@"+o.Zone)
				reservedPrice = p
				if !o.Available || o.ReservationCapacity == nil || *o.ReservationCapacity != 2 {
					t.Errorf("reserved offering %+v: want available with a count of 2", o)
				}
			}
		}
		if !slices.Equal(reserved, []string{"m5.large@us-west-2a"}) {
			t.Errorf("reserved offerings = %v, want m5.large@us-west-2a only", reserved)
		}
		if reservedPrice <= 0 || reservedPrice >= cheapestOther {
			t.Errorf("reserved price %v, want above 0 and below every other offering's (the cheapest is %v)", reservedPrice, cheapestOther)
		}
		if o := r.cheapest(t, pool); o[0].CapacityType != v1alpha1.CapacityTypeReserved {
			t.Errorf("the pool's cheapest offer is %s, want reserved", o[0].CapacityType)
		}
	})

	t.Run("a reserved claim lands in the reservation: its count goes down at EC2 and in the catalog, and the node registers labelled reserved with the reservation's id", func(t *testing.T) {
		in, err := r.provider.Create(ctx, r.launch(r.cheapest(t, pool)))
		if err != nil {
			t.Fatal(err)
		}
		launched = append(launched, in)
		if in.CapacityType != v1alpha1.CapacityTypeReserved || in.Labels[v1alpha1.LabelCapacityReservationID] != crML {
			t.Errorf("launched %s labelled %q, want reserved in %s", in.CapacityType, in.Labels[v1alpha1.LabelCapacityReservationID], crML)
		}
		if n := left(t, r, crML); n != 1 {
			t.Errorf("%s has %d left at EC2, want 1", crML, n)
		}
		if n := left(t, r, crWeb); n != 5 {
			t.Errorf("%s (not selected) has %d left, want 5", crWeb, n)
		}
		if o := r.reservedOffering(t, pool); o.ReservationCapacity == nil || *o.ReservationCapacity != 1 || !o.Available {
			t.Errorf("reserved offering after one launch: %+v, want a count of 1", o)
		}
		node := r.boot(t, in)
		for key, want := range map[string]string{
			v1alpha1.LabelCapacityType: v1alpha1.CapacityTypeReserved, v1alpha1.LabelKarpenterCapacityType: v1alpha1.CapacityTypeReserved,
			v1alpha1.LabelCapacityReservationID: crML, v1alpha1.LabelKarpenterCapacityReservationID: crML,
		} {
			if node.Labels[key] != want {
				t.Errorf("the registered node's %s = %q, want %q", key, node.Labels[key], want)
			}
		}
		got, err := r.provider.Get(ctx, in.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if got.CapacityType != v1alpha1.CapacityTypeReserved || got.Labels[v1alpha1.LabelCapacityReservationID] != crML {
			t.Errorf("Get: %s, reservation %q; want reserved in %s", got.CapacityType, got.Labels[v1alpha1.LabelCapacityReservationID], crML)
		}
	})

	t.Run("the second claim takes the last place; the third is refused for capacity without a call to EC2, and the catalog offers the reservation no more", func(t *testing.T) {
		in, err := r.provider.Create(ctx, r.launch(r.cheapest(t, pool)))
		if err != nil {
			t.Fatal(err)
		}
		launched = append(launched, in)
		if in.Labels[v1alpha1.LabelCapacityReservationID] != crML || left(t, r, crML) != 0 {
			t.Fatalf("second claim: reservation %q, %d left; want %s, 0", in.Labels[v1alpha1.LabelCapacityReservationID], left(t, r, crML), crML)
		}
		// A claim made from the catalog before it said the reservation
		// was full.
		types, err := r.provider.InstanceTypes(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		it, _ := offering(types, "m5.large", "us-west-2a", v1alpha1.CapacityTypeReserved)
		stale := []cloudprovider.Offer{{InstanceType: *it, Zone: "us-west-2a", CapacityType: v1alpha1.CapacityTypeReserved}}
		before := r.ec2.Launches()
		_, err = r.provider.Create(ctx, r.launch(stale))
		if !cloudprovider.IsInsufficientCapacity(err) || !strings.Contains(err.Error(), "no room left") {
			t.Errorf("a third reserved claim: %v, want an insufficient capacity error saying the reservations have no room left", err)
		}
		if r.ec2.Launches() != before {
			t.Errorf("CreateFleet was sent for a full reservation")
		}
		if o := r.reservedOffering(t, pool); o.Available || o.ReservationCapacity == nil || *o.ReservationCapacity != 0 {
			t.Errorf("reserved offering of a full reservation: %+v, want unavailable with a count of 0", o)
		}
	})

	t.Run("with the reservation full, the pool's next claim is on-demand m5.large, outside every reservation", func(t *testing.T) {
		offers := r.cheapest(t, pool)
		if offers[0].CapacityType != v1alpha1.CapacityTypeOnDemand {
			t.Fatalf("the pool's cheapest offer is %s, want on-demand", offers[0].CapacityType)
		}
		in, err := r.provider.Create(ctx, r.launch(offers))
		if err != nil {
			t.Fatal(err)
		}
		if in.CapacityType != v1alpha1.CapacityTypeOnDemand || in.Labels[v1alpha1.LabelCapacityReservationID] != "" {
			t.Errorf("launched %s in reservation %q, want on-demand in none", in.CapacityType, in.Labels[v1alpha1.LabelCapacityReservationID])
		}
		// crWeb is open and has room: a launch with EC2's default
		// preference would have gone into it, and counted on-demand.
		if n := left(t, r, crWeb); n != 5 {
			t.Errorf("%s has %d left, want 5: the class's on-demand launches keep out of reservations", crWeb, n)
		}
	})

	t.Run("when EC2 refuses a launch the provider counted room for (another launcher filled the reservation), the offer is refused for capacity and counted full", func(t *testing.T) {
		// One instance ends: EC2 counts the place free at once, and the
		// class's next resolution reads it.
		if err := r.provider.Delete(ctx, launched[0].ProviderID); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Fatal(err)
		}
		if _, err := aws.NewNodeClassController(kube, r.provider).Reconcile(ctx, reconcileRequest(r.class.Name)); err != nil {
			t.Fatal(err)
		}
		if o := r.reservedOffering(t, pool); o.ReservationCapacity == nil || *o.ReservationCapacity != 1 {
			t.Fatalf("after a termination: %+v, want a count of 1", o)
		}
		// Someone else takes it.
		r.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", CapacityReservationID: crML})
		before := r.ec2.Launches()
		_, err := r.provider.Create(ctx, r.launch(r.cheapest(t, pool)))
		var ice *cloudprovider.InsufficientCapacityError
		if !errors.As(err, &ice) || len(ice.Offers) != 1 || ice.Offers[0].CapacityType != v1alpha1.CapacityTypeReserved {
			t.Fatalf("Create = %v, want an insufficient capacity error naming the reserved offer", err)
		}
		if r.ec2.Launches() != before+1 {
			t.Errorf("%d fleets sent, want the one EC2 refused", r.ec2.Launches()-before)
		}
		if o := r.reservedOffering(t, pool); o.Available || *o.ReservationCapacity != 0 {
			t.Errorf("after EC2's refusal: %+v, want unavailable with a count of 0", o)
		}
	})
}
