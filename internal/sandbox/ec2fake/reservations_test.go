package ec2fake_test

import (
	"slices"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

const (
	crTargeted = "cr-0a1b2c3d4e5f60001" // m5.large in us-west-2a, targeted, 2 instances
	crOpen     = "cr-0a1b2c3d4e5f60002" // c5.large in us-west-2b, open, 1 instance
	crShared   = "cr-0a1b2c3d4e5f60003" // m5.xlarge in us-west-2a, another account's, ends in an hour
	crBlock    = "cr-0a1b2c3d4e5f60004" // a capacity block, cancelled
	otherOwner = "444455556666"
)

var reservedAt = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// reservedWorld is the default world with four reservations.
func reservedWorld() ec2fake.World {
	w := ec2fake.DefaultWorld()
	w.Now = func() time.Time { return reservedAt }
	w.CapacityReservations = []ec2fake.CapacityReservation{
		{ID: crTargeted, InstanceType: "m5.large", Zone: "us-west-2a", TotalInstances: 2, InstanceMatchCriteria: ec2fake.MatchTargeted, Tags: map[string]string{"team": "ml"}},
		{ID: crOpen, InstanceType: "c5.large", Zone: "us-west-2b", TotalInstances: 1, Tags: map[string]string{"team": "web"}},
		{ID: crShared, InstanceType: "m5.xlarge", Zone: "us-west-2a", TotalInstances: 4, OwnerID: otherOwner, EndDate: reservedAt.Add(time.Hour), Tags: map[string]string{"team": "ml"}},
		{ID: crBlock, InstanceType: "p5.48xlarge", Zone: "us-west-2a", TotalInstances: 1, ReservationType: "capacity-block", State: ec2fake.ReservationCancelled},
	}
	return w
}

// reservedTemplate creates a launch template whose instances go into the
// reservation id (capacity-reservations-only, as Karpenter's targeted
// launches set it), or with the preference alone when id is empty.
func reservedTemplate(t *testing.T, c *ec2.Client, name, preference, id string) {
	t.Helper()
	spec := &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{CapacityReservationPreference: ec2types.CapacityReservationPreference(preference)}
	if id != "" {
		spec.CapacityReservationTarget = &ec2types.CapacityReservationTarget{CapacityReservationId: sdkaws.String(id)}
	}
	if _, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: sdkaws.String(name),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: sdkaws.String(amiX86), SecurityGroupIds: []string{nodesGroup}, CapacityReservationSpecification: spec},
	}); err != nil {
		t.Fatalf("creating launch template %s: %v", name, err)
	}
}

func available(t *testing.T, s *ec2fake.Server, id string) int {
	t.Helper()
	_, n, ok := s.CapacityReservation(id)
	if !ok {
		t.Fatalf("no reservation %s", id)
	}
	return n
}

func TestDescribeCapacityReservations(t *testing.T) {
	_, c, _ := start(t, reservedWorld())
	ids := func(t *testing.T, in *ec2.DescribeCapacityReservationsInput) []string {
		t.Helper()
		out, err := c.DescribeCapacityReservations(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, cr := range out.CapacityReservations {
			got = append(got, sdkaws.ToString(cr.CapacityReservationId))
		}
		return got
	}
	t.Run("every field the SDK decodes, by id", func(t *testing.T) {
		out, err := c.DescribeCapacityReservations(ctx, &ec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{crShared}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.CapacityReservations) != 1 {
			t.Fatalf("%d reservations, want 1", len(out.CapacityReservations))
		}
		cr := out.CapacityReservations[0]
		got := []any{sdkaws.ToString(cr.InstanceType), sdkaws.ToString(cr.AvailabilityZone), sdkaws.ToString(cr.AvailabilityZoneId), sdkaws.ToString(cr.OwnerId),
			sdkaws.ToInt32(cr.TotalInstanceCount), sdkaws.ToInt32(cr.AvailableInstanceCount), cr.State, cr.InstanceMatchCriteria, cr.InstancePlatform,
			cr.Tenancy, cr.EndDateType, sdkaws.ToTime(cr.EndDate), cr.ReservationType, tagMap(cr.Tags)["team"]}
		want := []any{"m5.xlarge", "us-west-2a", "usw2-az1", otherOwner, int32(4), int32(4), ec2types.CapacityReservationStateActive,
			ec2types.InstanceMatchCriteriaOpen, ec2types.CapacityReservationInstancePlatformLinuxUnix, ec2types.CapacityReservationTenancyDefault,
			ec2types.EndDateTypeLimited, reservedAt.Add(time.Hour), ec2types.CapacityReservationTypeDefault, "ml"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("field %d = %v, want %v", i, got[i], want[i])
			}
		}
	})
	t.Run("filters: state active, a tag, the owner, the match criteria", func(t *testing.T) {
		active := filter("state", "active")
		if got := ids(t, &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{active}}); !slices.Equal(got, []string{crTargeted, crOpen, crShared}) {
			t.Errorf("active = %v", got)
		}
		if got := ids(t, &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{active, filter("tag:team", "ml")}}); !slices.Equal(got, []string{crTargeted, crShared}) {
			t.Errorf("active, team=ml = %v", got)
		}
		if got := ids(t, &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{filter("tag:team", "ml"), filter("owner-id", otherOwner)}}); !slices.Equal(got, []string{crShared}) {
			t.Errorf("team=ml of %s = %v", otherOwner, got)
		}
		if got := ids(t, &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{filter("instance-match-criteria", "targeted")}}); !slices.Equal(got, []string{crTargeted}) {
			t.Errorf("targeted = %v", got)
		}
	})
	t.Run("an id EC2 does not know fails the call; a malformed one too; ids with MaxResults are refused", func(t *testing.T) {
		_, err := c.DescribeCapacityReservations(ctx, &ec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{"cr-0fffffffffffffff0"}})
		wantCode(t, err, "InvalidCapacityReservationId.NotFound")
		_, err = c.DescribeCapacityReservations(ctx, &ec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{"cr-nope"}})
		wantCode(t, err, "InvalidCapacityReservationId.Malformed")
		_, err = c.DescribeCapacityReservations(ctx, &ec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{crOpen}, MaxResults: sdkaws.Int32(10)})
		wantCode(t, err, "InvalidParameterCombination")
		_, err = c.DescribeCapacityReservations(ctx, &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{filter("colour", "red")}})
		wantCode(t, err, "InvalidParameterValue")
	})
	t.Run("pages of MaxResults", func(t *testing.T) {
		var got []string
		pages := ec2.NewDescribeCapacityReservationsPaginator(c, &ec2.DescribeCapacityReservationsInput{MaxResults: sdkaws.Int32(1)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.CapacityReservations) > 1 {
				t.Errorf("a page of %d", len(page.CapacityReservations))
			}
			for _, cr := range page.CapacityReservations {
				got = append(got, sdkaws.ToString(cr.CapacityReservationId))
			}
		}
		if !slices.Equal(got, []string{crTargeted, crOpen, crShared, crBlock}) {
			t.Errorf("paged = %v", got)
		}
	})
}

func TestCreateFleetIntoACapacityReservation(t *testing.T) {
	t.Run("a targeted template launches into its reservation, whose count goes down, until it is full: ReservationCapacityExceeded; a termination gives the place back", func(t *testing.T) {
		s, c, _ := start(t, reservedWorld())
		reservedTemplate(t, c, "reserved", "capacity-reservations-only", crTargeted)
		// On-demand m5.large has no capacity in the zone: the reservation
		// does not care.
		s.FailCapacity(ec2fake.CapacityFault{InstanceType: "m5.large", Zone: "us-west-2a", CapacityType: "on-demand"})
		out, err := c.CreateFleet(ctx, fleet("reserved", 3, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out)[pool{"m5.large", subnetA}]; got != 2 {
			t.Errorf("launched %d into the reservation of 2, want 2", got)
		}
		if got := failedPools(out)[pool{"m5.large", subnetA}]; got != ec2fake.ReservationCapacityExceededCode {
			t.Errorf("the third instance failed with %q, want %s", got, ec2fake.ReservationCapacityExceededCode)
		}
		if n := available(t, s, crTargeted); n != 0 {
			t.Errorf("available = %d after two launches into 2, want 0", n)
		}
		ids := out.Instances[0].InstanceIds
		desc, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids[:1]})
		if err != nil {
			t.Fatal(err)
		}
		inst := desc.Reservations[0].Instances[0]
		if sdkaws.ToString(inst.CapacityReservationId) != crTargeted || inst.CapacityReservationSpecification == nil ||
			inst.CapacityReservationSpecification.CapacityReservationPreference != ec2types.CapacityReservationPreferenceCapacityReservationsOnly ||
			sdkaws.ToString(inst.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId) != crTargeted {
			t.Errorf("instance reports reservation %q, spec %+v; want %s, capacity-reservations-only targeting it", sdkaws.ToString(inst.CapacityReservationId), inst.CapacityReservationSpecification, crTargeted)
		}
		again, err := c.CreateFleet(ctx, fleet("reserved", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Instances) != 0 || failedPools(again)[pool{"m5.large", subnetA}] != ec2fake.ReservationCapacityExceededCode {
			t.Errorf("a launch into the full reservation: instances %v, errors %v; want none and ReservationCapacityExceeded", launchedPools(again), failedPools(again))
		}
		if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[:1]}); err != nil {
			t.Fatal(err)
		}
		if n := available(t, s, crTargeted); n != 1 {
			t.Errorf("available = %d after a termination, want 1", n)
		}
	})
	t.Run("a pool of another type than the reservation's fails; spot never goes into one", func(t *testing.T) {
		s, c, _ := start(t, reservedWorld())
		reservedTemplate(t, c, "reserved", "capacity-reservations-only", crTargeted)
		out, err := c.CreateFleet(ctx, fleet("reserved", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.xlarge", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedPools(out)[pool{"m5.xlarge", subnetA}]; got != "InvalidParameterCombination" {
			t.Errorf("m5.xlarge into an m5.large reservation: %q, want InvalidParameterCombination", got)
		}
		out, err = c.CreateFleet(ctx, fleet("reserved", 1, ec2types.DefaultTargetCapacityTypeSpot, override("m5.large", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedPools(out)[pool{"m5.large", subnetA}]; got != "InvalidParameterCombination" || len(out.Instances) != 0 {
			t.Errorf("spot into a reservation: launched %v, error %q; want InvalidParameterCombination", launchedPools(out), got)
		}
		if n := available(t, s, crTargeted); n != 2 {
			t.Errorf("available = %d, want 2", n)
		}
	})
	t.Run("an on-demand launch with preference open uses an open reservation of its type and zone, not a targeted one; preference none uses none", func(t *testing.T) {
		s, c, _ := start(t, reservedWorld())
		reservedTemplate(t, c, "open", "open", "")
		reservedTemplate(t, c, "none", "none", "")
		out, err := c.CreateFleet(ctx, fleet("open", 2, ec2types.DefaultTargetCapacityTypeOnDemand, override("c5.large", subnetB), override("m5.large", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if n := available(t, s, crOpen); n != 0 {
			t.Errorf("open reservation available = %d, want 0: the c5.large went into it", n)
		}
		if n := available(t, s, crTargeted); n != 2 {
			t.Errorf("targeted reservation available = %d, want 2: launches that do not name it stay out", n)
		}
		var in int
		for _, inst := range s.Instances() {
			if inst.CapacityReservationID != "" {
				in++
			}
		}
		if in != 1 || len(launchedPools(out)) == 0 {
			t.Errorf("%d instances in a reservation, want 1 (launched %v)", in, launchedPools(out))
		}
		s2, c2, _ := start(t, reservedWorld())
		reservedTemplate(t, c2, "none", "none", "")
		if _, err := c2.CreateFleet(ctx, fleet("none", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("c5.large", subnetB))); err != nil {
			t.Fatal(err)
		}
		if n := available(t, s2, crOpen); n != 1 {
			t.Errorf("preference none: open reservation available = %d, want 1", n)
		}
	})
	t.Run("UsageStrategy use-capacity-reservations-first tries the pool with a reservation before a cheaper one", func(t *testing.T) {
		s, c, _ := start(t, reservedWorld())
		reservedTemplate(t, c, "open", "open", "")
		in := fleet("open", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("t3.medium", subnetB), override("c5.large", subnetB))
		in.OnDemandOptions.CapacityReservationOptions = &ec2types.CapacityReservationOptionsRequest{UsageStrategy: ec2types.FleetCapacityReservationUsageStrategyUseCapacityReservationsFirst}
		out, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); got[pool{"c5.large", subnetB}] != 1 {
			t.Errorf("launched %v, want the c5.large of the open reservation rather than the cheaper t3.medium", got)
		}
		if n := available(t, s, crOpen); n != 0 {
			t.Errorf("open reservation available = %d, want 0", n)
		}
		without := fleet("open", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("t3.medium", subnetB), override("c5.large", subnetB))
		out, err = c.CreateFleet(ctx, without)
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); got[pool{"t3.medium", subnetB}] != 1 {
			t.Errorf("without the strategy launched %v, want the cheapest, t3.medium", got)
		}
	})
	t.Run("a reservation that expired or was cancelled is not launched into", func(t *testing.T) {
		s, c, _ := start(t, reservedWorld())
		reservedTemplate(t, c, "reserved", "capacity-reservations-only", crTargeted)
		s.SetCapacityReservationState(crTargeted, ec2fake.ReservationCancelled)
		out, err := c.CreateFleet(ctx, fleet("reserved", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", subnetA)))
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Instances) != 0 || len(out.Errors) != 1 {
			t.Errorf("launched %v into a cancelled reservation, errors %v", launchedPools(out), failedPools(out))
		}
	})
	t.Run("a template with an unknown preference or a malformed reservation id is refused", func(t *testing.T) {
		_, c, _ := start(t, reservedWorld())
		_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: sdkaws.String("bad"), LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: sdkaws.String(amiX86), CapacityReservationSpecification: &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{CapacityReservationPreference: "sometimes"}}})
		wantCode(t, err, "InvalidParameterValue")
		_, err = c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: sdkaws.String("bad"), LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId: sdkaws.String(amiX86), CapacityReservationSpecification: &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
				CapacityReservationTarget: &ec2types.CapacityReservationTarget{CapacityReservationId: sdkaws.String("cr-x")}}}})
		wantCode(t, err, "InvalidCapacityReservationId.Malformed")
	})
}
