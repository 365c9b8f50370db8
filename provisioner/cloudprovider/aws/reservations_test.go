package aws

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func TestReservationLedger(t *testing.T) {
	t.Run("a count is EC2's figure less the launches since the call began and the places held", func(t *testing.T) {
		var l reservationLedger
		seq := l.begin()
		l.observe("cr-a", 3, seq)
		l.launched("cr-a")
		if got := l.available("cr-a", 99); got != 2 {
			t.Errorf("after one launch: %d, want 2", got)
		}
		if id := l.take([]string{"cr-a"}, nil); id != "cr-a" {
			t.Fatalf("take = %q", id)
		}
		if got := l.available("cr-a", 99); got != 1 {
			t.Errorf("with a place held: %d, want 1", got)
		}
		l.release("cr-a")
		if got := l.available("cr-a", 99); got != 2 {
			t.Errorf("after the place is given back: %d, want 2", got)
		}
	})
	t.Run("a call begun before a launch does not count it; one begun after does", func(t *testing.T) {
		var l reservationLedger
		before := l.begin()
		l.launched("cr-a")
		l.observe("cr-a", 3, before) // EC2 answered 3 without the launch
		if got := l.available("cr-a", 0); got != 2 {
			t.Errorf("a reading begun before the launch: %d, want 3 − 1 = 2", got)
		}
		l.observe("cr-a", 2, l.begin()) // EC2 counts it now
		if got := l.available("cr-a", 0); got != 2 {
			t.Errorf("a reading begun after the launch: %d, want EC2's 2", got)
		}
	})
	t.Run("EC2's refusal empties a reservation until a call begun after it says otherwise", func(t *testing.T) {
		var l reservationLedger
		old := l.begin()
		l.observe("cr-a", 2, old)
		l.full("cr-a")
		l.observe("cr-a", 2, old) // a call that began before the refusal
		if got := l.available("cr-a", 5); got != 0 {
			t.Errorf("after the refusal: %d, want 0", got)
		}
		l.observe("cr-a", 1, l.begin())
		if got := l.available("cr-a", 5); got != 1 {
			t.Errorf("after a later reading: %d, want 1", got)
		}
	})
	t.Run("take chooses the reservation with the most room, reads the class's figure for one never read, and none when all are full", func(t *testing.T) {
		var l reservationLedger
		l.observe("cr-a", 1, l.begin())
		if id := l.take([]string{"cr-a", "cr-b"}, map[string]int{"cr-b": 4}); id != "cr-b" {
			t.Errorf("take = %q, want cr-b (4 by the class's status, against 1)", id)
		}
		l.observe("cr-b", 0, l.begin())
		l.launched("cr-a")
		if id := l.take([]string{"cr-a", "cr-b"}, nil); id != "" {
			t.Errorf("take = %q with no room anywhere, want none", id)
		}
	})
}

func TestUnusableReservations(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	base := ec2types.CapacityReservation{ReservationType: ec2types.CapacityReservationTypeDefault, InstancePlatform: ec2types.CapacityReservationInstancePlatformLinuxUnix, Tenancy: ec2types.CapacityReservationTenancyDefault}
	for name, tc := range map[string]struct {
		change func(*ec2types.CapacityReservation)
		want   string
	}{
		"an ODCR for Linux of default tenancy is usable": {func(*ec2types.CapacityReservation) {}, ""},
		"one that ends later is usable":                  {func(c *ec2types.CapacityReservation) { c.EndDate = sdkaws.Time(now.Add(time.Minute)) }, ""},
		"a Capacity Block is not supported yet": {func(c *ec2types.CapacityReservation) {
			c.ReservationType = ec2types.CapacityReservationTypeCapacityBlock
		}, "Capacity Blocks"},
		"an interruptible reservation is not supported yet": {func(c *ec2types.CapacityReservation) { c.Interruptible = sdkaws.Bool(true) }, "interruptible"},
		"a Windows reservation does not take Linux instances": {func(c *ec2types.CapacityReservation) {
			c.InstancePlatform = ec2types.CapacityReservationInstancePlatformWindows
		}, "not Linux/UNIX"},
		"dedicated tenancy is not what Nodeforge launches": {func(c *ec2types.CapacityReservation) { c.Tenancy = ec2types.CapacityReservationTenancyDedicated }, "dedicated tenancy"},
		"one that has ended is not launched into":          {func(c *ec2types.CapacityReservation) { c.EndDate = sdkaws.Time(now) }, "has ended"},
	} {
		t.Run(name, func(t *testing.T) {
			cr := base
			tc.change(&cr)
			got := unusable(cr, now)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("unusable = %q, want %q", got, tc.want)
			}
		})
	}
}

// reservedEnv is a fake region with two reservations in us-west-2a, one
// room each: m5.large (crLarge) and m5.xlarge (crXLarge), and a class
// selecting both by tag.
type reservedEnv struct {
	*batchEnv
	p *Provider
}

const (
	crLarge  = "cr-0a1b2c3d4e5f60011"
	crXLarge = "cr-0a1b2c3d4e5f60012"
)

func newReservedEnv(t *testing.T) *reservedEnv {
	t.Helper()
	w := ec2fake.DefaultWorld()
	w.CapacityReservations = []ec2fake.CapacityReservation{
		{ID: crLarge, InstanceType: "m5.large", Zone: "us-west-2a", TotalInstances: 1, InstanceMatchCriteria: ec2fake.MatchTargeted, Tags: map[string]string{"team": "ml"}},
		{ID: crXLarge, InstanceType: "m5.xlarge", Zone: "us-west-2a", TotalInstances: 1, Tags: map[string]string{"team": "ml"}},
	}
	e := &batchEnv{ec2: ec2fake.New(w)}
	var stop func()
	var err error
	if e.url, stop, err = e.ec2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	e.kube = testobj.Client()
	spec := classSpec("", "NodeforgeNodeInstanceProfile")
	spec.CapacityReservationSelectorTerms = []v1alpha1.CapacityReservationSelectorTerm{{Tags: map[string]string{"team": "ml"}}}
	if err := e.kube.Create(context.Background(), &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	r := &reservedEnv{batchEnv: e, p: e.provider(t)}
	r.p.fleets.window, r.p.gets.window, r.p.terminations.window = time.Millisecond, 0, 0
	if _, err := NewNodeClassController(e.kube, r.p).Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "batch"}}); err != nil {
		t.Fatal(err)
	}
	e.ref = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "batch"}
	return r
}

// reservedOffers are the reserved offers of the types, cheapest first.
func (e *reservedEnv) reservedOffers(t *testing.T, names ...string) []cloudprovider.Offer {
	t.Helper()
	its, err := e.p.InstanceTypes(context.Background(), &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: e.ref}}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []cloudprovider.Offer
	for _, name := range names {
		for _, it := range its {
			for _, o := range it.Offerings {
				if it.Name == name && string(o.CapacityType) == v1alpha1.CapacityTypeReserved {
					price, _ := strconv.ParseFloat(o.Price, 64)
					out = append(out, cloudprovider.Offer{InstanceType: it, Zone: o.Zone, CapacityType: v1alpha1.CapacityTypeReserved, Price: price})
				}
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("%d reserved offers of %v, want one each", len(out), names)
	}
	return out
}

func (e *reservedEnv) template(t *testing.T, name string) ec2fake.LaunchTemplate {
	t.Helper()
	for _, lt := range e.ec2.LaunchTemplates() {
		if lt.Name == name {
			return lt
		}
	}
	t.Fatalf("no launch template %s", name)
	return ec2fake.LaunchTemplate{}
}

func TestReservedLaunches(t *testing.T) {
	ctx := context.Background()
	e := newReservedEnv(t)
	offers := e.reservedOffers(t, "m5.large", "m5.xlarge")

	t.Run("a reserved launch sends one launch template per reservation, each naming its own, in one on-demand fleet, and lands in the cheapest", func(t *testing.T) {
		in, err := e.p.Create(ctx, e.launch(1, offers))
		if err != nil {
			t.Fatal(err)
		}
		f := e.ec2.Requests()[len(e.ec2.Requests())-1].Form
		if f.Get("TargetCapacitySpecification.DefaultTargetCapacityType") != "on-demand" || f.Get("OnDemandOptions.AllocationStrategy") != "lowest-price" {
			t.Errorf("fleet: default capacity type %q, on-demand strategy %q; want on-demand, lowest-price",
				f.Get("TargetCapacitySpecification.DefaultTargetCapacityType"), f.Get("OnDemandOptions.AllocationStrategy"))
		}
		targets := map[string]string{} // type -> reservation its template names
		for i := 1; f.Get(fmt.Sprintf("LaunchTemplateConfigs.%d.LaunchTemplateSpecification.LaunchTemplateName", i)) != ""; i++ {
			lt := e.template(t, f.Get(fmt.Sprintf("LaunchTemplateConfigs.%d.LaunchTemplateSpecification.LaunchTemplateName", i)))
			if got := lt.Data.Get("CapacityReservationSpecification.CapacityReservationPreference"); got != "capacity-reservations-only" {
				t.Errorf("template %s: preference %q, want capacity-reservations-only", lt.Name, got)
			}
			id := lt.Data.Get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId")
			if !strings.Contains(lt.UserData, v1alpha1.LabelCapacityReservationID+"="+id) {
				t.Errorf("template %s for %s: the user data does not label the node with it", lt.Name, id)
			}
			targets[f.Get(fmt.Sprintf("LaunchTemplateConfigs.%d.Overrides.1.InstanceType", i))] = id
		}
		if targets["m5.large"] != crLarge || targets["m5.xlarge"] != crXLarge || len(targets) != 2 {
			t.Errorf("templates by type = %v, want m5.large → %s and m5.xlarge → %s", targets, crLarge, crXLarge)
		}
		if in.CapacityType != v1alpha1.CapacityTypeReserved || in.InstanceType != "m5.large" || in.Labels[v1alpha1.LabelCapacityReservationID] != crLarge ||
			in.Labels[v1alpha1.LabelKarpenterCapacityReservationID] != crLarge {
			t.Errorf("launched %s (%s) labelled %q, want m5.large reserved in %s", in.InstanceType, in.CapacityType, in.Labels[v1alpha1.LabelCapacityReservationID], crLarge)
		}
		if _, n, _ := e.ec2.CapacityReservation(crLarge); n != 0 {
			t.Errorf("%s has %d left, want 0", crLarge, n)
		}
		got, err := e.p.Get(ctx, in.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if got.CapacityType != v1alpha1.CapacityTypeReserved || got.Labels[v1alpha1.LabelCapacityReservationID] != crLarge || got.Labels["kubernetes.io/arch"] != "amd64" {
			t.Errorf("Get: %s, labels %v; want reserved in %s with the type's labels", got.CapacityType, got.Labels, crLarge)
		}
	})
	t.Run("a type whose reservation the provider counts full is not sent: the next claim goes to the other reservation", func(t *testing.T) {
		before := e.ec2.Launches()
		in, err := e.p.Create(ctx, e.launch(2, offers))
		if err != nil {
			t.Fatal(err)
		}
		if in.InstanceType != "m5.xlarge" || in.Labels[v1alpha1.LabelCapacityReservationID] != crXLarge {
			t.Errorf("launched %s in %q, want m5.xlarge in %s", in.InstanceType, in.Labels[v1alpha1.LabelCapacityReservationID], crXLarge)
		}
		f := e.ec2.Requests()[len(e.ec2.Requests())-1].Form
		if f.Get("LaunchTemplateConfigs.2.LaunchTemplateSpecification.LaunchTemplateName") != "" || f.Get("LaunchTemplateConfigs.1.Overrides.1.InstanceType") != "m5.xlarge" {
			t.Errorf("the fleet sent more than the m5.xlarge reservation's template: %v", f)
		}
		if e.ec2.Launches() != before+1 {
			t.Errorf("%d fleets, want 1", e.ec2.Launches()-before)
		}
	})
	t.Run("with every reservation full, a reserved launch fails for capacity without a call to EC2, naming the reservations", func(t *testing.T) {
		before := e.ec2.Launches()
		_, err := e.p.Create(ctx, e.launch(3, offers))
		var ice *cloudprovider.InsufficientCapacityError
		if !errors.As(err, &ice) || len(ice.Offers) != 2 || !strings.Contains(err.Error(), "capacity reservations") {
			t.Fatalf("Create = %v, want an InsufficientCapacityError for both offers saying the reservations have no room", err)
		}
		if e.ec2.Launches() != before {
			t.Errorf("CreateFleet was called")
		}
		for _, o := range e.reservedOffersOf(t) {
			if o.Available || o.ReservationCapacity == nil || *o.ReservationCapacity != 0 {
				t.Errorf("offering %+v: want unavailable with a count of 0", o)
			}
		}
	})
	t.Run("the class's other launches keep out of its reservations (preference none); the class's hash ignores its reservation terms", func(t *testing.T) {
		in, err := e.p.Create(ctx, e.launch(4, e.offers(t, e.p)))
		if err != nil {
			t.Fatal(err)
		}
		f := e.ec2.Requests()[len(e.ec2.Requests())-1].Form
		lt := e.template(t, f.Get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName"))
		if got := lt.Data.Get("CapacityReservationSpecification.CapacityReservationPreference"); got != "none" || in.CapacityType != v1alpha1.CapacityTypeOnDemand {
			t.Errorf("an on-demand launch: %s, preference %q; want on-demand, none", in.CapacityType, got)
		}
		var class v1alpha1.EC2NodeClass
		if err := e.kube.Get(ctx, client.ObjectKey{Name: "batch"}, &class); err != nil {
			t.Fatal(err)
		}
		hash := e.p.NodeClasses()[0].Hash
		with, _ := hash(&class)
		class.Spec.CapacityReservationSelectorTerms = nil
		without, _ := hash(&class)
		class.Spec.Tags = map[string]string{"team": "ml"}
		other, _ := hash(&class)
		if with != without || with == other {
			t.Errorf("hash with terms %s, without %s, with a tag %s: want the first two equal, the third not", with, without, other)
		}
	})
}

// reservedOffersOf are the reserved offerings of the class's catalog.
func (e *reservedEnv) reservedOffersOf(t *testing.T) []v1alpha1.Offering {
	t.Helper()
	its, err := e.p.InstanceTypes(context.Background(), &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: e.ref}}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []v1alpha1.Offering
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.CapacityType == v1alpha1.CapacityTypeReserved {
				out = append(out, o)
			}
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d reserved offerings, want 2", len(out))
	}
	return out
}
