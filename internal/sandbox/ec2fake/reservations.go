package ec2fake

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// On-demand capacity reservations (ODCRs). A reservation holds capacity
// for TotalInstances instances of one type in one zone; each instance
// running in it takes one of them until it terminates (EC2 User Guide,
// "Launch instances into an existing Capacity Reservation": launching
// reduces the available capacity by the instances launched). Available
// counts are not kept but counted from the instances on every read, so a
// termination gives its place back with nothing to forget.
//
// How a launch lands in one is the launch template's
// CapacityReservationSpecification (LaunchTemplateData, as the SDK's
// LaunchTemplateCapacityReservationSpecificationRequest sends it), which
// CreateFleet's overrides cannot change:
//   - CapacityReservationTarget.CapacityReservationId: into that
//     reservation only (open or targeted). A pool of another type or zone
//     fails with InvalidParameterCombination; a full reservation fails the
//     pool with ReservationCapacityExceeded (the code Karpenter's AWS
//     provider reads from a fleet's errors, pkg/errors/errors.go) after
//     launching what it had room for. Injected capacity faults and limits
//     do not apply: the capacity is reserved.
//   - preference open (the default): an on-demand instance uses an active
//     open reservation of its type, zone, platform and tenancy that has
//     room, and runs as plain on-demand otherwise.
//   - preference none: never in a reservation.
//   - capacity-reservations-only without a target names a reservation
//     group, which the fake does not model: refused.
//
// CreateFleet's OnDemandOptions.CapacityReservationOptions.UsageStrategy
// use-capacity-reservations-first makes the fleet try the pools that would
// launch into a reservation before the others, whatever their price, and
// among them the allocation strategy's order holds (the SDK's
// CapacityReservationOptionsRequest documents it so). Spot never uses a
// reservation.

// Capacity reservation states and instance match criteria, as EC2 spells
// them.
const (
	ReservationActive    = "active"
	ReservationExpired   = "expired"
	ReservationCancelled = "cancelled"
	MatchOpen            = "open"
	MatchTargeted        = "targeted"
	// ReservationCapacityExceededCode is what a fleet reports for a pool
	// whose targeted reservation has no room left.
	ReservationCapacityExceededCode = "ReservationCapacityExceeded"
)

// CapacityReservation is an on-demand capacity reservation of the world.
type CapacityReservation struct {
	ID           string // cr-…
	InstanceType string
	Zone         string // zone name
	// TotalInstances the reservation holds; each instance running in it
	// takes one.
	TotalInstances int32
	// InstanceMatchCriteria is "open" (the default) or "targeted".
	InstanceMatchCriteria string
	// State is "active" (the default), "cancelled", "pending" or
	// "expired"; an active reservation whose EndDate has passed is
	// expired.
	State string
	// EndDate ends the reservation; zero: it runs until cancelled.
	EndDate time.Time
	// OwnerID is the owning account; the world's when empty (another
	// account's is one shared with this one).
	OwnerID string
	// ReservationType is "default" (an ODCR, when empty) or
	// "capacity-block" (a Capacity Block for ML).
	ReservationType string
	// Platform is "Linux/UNIX" when empty; Tenancy "default".
	Platform string
	Tenancy  string
	Tags     map[string]string
}

func (cr *CapacityReservation) matchCriteria() string {
	return cmp.Or(cr.InstanceMatchCriteria, MatchOpen)
}

func (cr *CapacityReservation) platform() string { return cmp.Or(cr.Platform, "Linux/UNIX") }
func (cr *CapacityReservation) tenancy() string  { return cmp.Or(cr.Tenancy, "default") }

// state is the reservation's state at now.
func (cr *CapacityReservation) state(now time.Time) string {
	s := cmp.Or(cr.State, ReservationActive)
	if s == ReservationActive && !cr.EndDate.IsZero() && !now.Before(cr.EndDate) {
		return ReservationExpired
	}
	return s
}

func (s *Server) reservationByID(id string) *CapacityReservation {
	for _, cr := range s.reservations {
		if cr.ID == id {
			return cr
		}
	}
	return nil
}

// reservationAvailable is how many more instances cr takes: its total less
// the instances in it that have not finished terminating.
func (s *Server) reservationAvailable(cr *CapacityReservation, now time.Time) int {
	used := 0
	for _, inst := range s.instances {
		s.advance(inst, now)
		if inst.CapacityReservationID == cr.ID && inst.State != "terminated" {
			used++
		}
	}
	return max(int(cr.TotalInstances)-used, 0)
}

// CapacityReservation returns a copy of the reservation and how many more
// instances it takes now.
func (s *Server) CapacityReservation(id string) (CapacityReservation, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cr := s.reservationByID(id)
	if cr == nil {
		return CapacityReservation{}, 0, false
	}
	c := *cr
	c.Tags = maps.Clone(cr.Tags)
	return c, s.reservationAvailable(cr, s.now()), true
}

// SetCapacityReservationState changes a reservation's state ("cancelled",
// say); it reports whether the reservation exists.
func (s *Server) SetCapacityReservationState(id, state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cr := s.reservationByID(id)
	if cr == nil {
		return false
	}
	cr.State = state
	return true
}

// --- what a launch does with reservations ---

// reservationFor decides the reservation an instance of pool c goes to,
// from its launch template, or says why the pool can never launch.
func (s *Server) reservationFor(c *candidate) (*CapacityReservation, *fleetErrorXML) {
	lt := c.config.template
	pref := lt.Data.Get("CapacityReservationSpecification.CapacityReservationPreference")
	target := lt.Data.Get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId")
	c.reservationPreference = cmp.Or(pref, "open")
	switch {
	case target != "":
		cr := s.reservationByID(target)
		switch {
		case c.lifecycle == spot:
			return nil, c.fail("InvalidParameterCombination", "Spot Instances cannot be launched into a Capacity Reservation (%s).", target)
		case cr == nil:
			return nil, c.fail("InvalidCapacityReservationId.NotFound", "The capacityReservation ID '%s' does not exist", target)
		case cr.state(s.now()) != ReservationActive:
			return nil, c.fail("InvalidParameterValue", "The Capacity Reservation %s is %s and cannot be launched into.", target, cr.state(s.now()))
		case cr.InstanceType != c.it.Name || cr.Zone != c.override.zone.Name:
			return nil, c.fail("InvalidParameterCombination", "The instance type %s in %s does not match the Capacity Reservation %s (%s in %s).",
				c.it.Name, c.override.zone.Name, target, cr.InstanceType, cr.Zone)
		}
		c.targeted = true
		return cr, nil
	case pref == "capacity-reservations-only":
		return nil, c.fail("InvalidParameterCombination", "ec2fake models capacity-reservations-only with a CapacityReservationTarget.CapacityReservationId only, not with reservation groups.")
	}
	return nil, nil
}

// openReservation is an active open reservation the on-demand pool c
// would launch into without naming one (preference open), with room for
// at least one instance.
func (s *Server) openReservation(c *candidate) *CapacityReservation {
	if c.lifecycle != onDemand || c.reservationPreference != "open" {
		return nil
	}
	now := s.now()
	for _, cr := range s.reservations {
		if cr.InstanceType == c.it.Name && cr.Zone == c.override.zone.Name && cr.matchCriteria() == MatchOpen &&
			cr.state(now) == ReservationActive && cr.platform() == "Linux/UNIX" && cr.tenancy() == "default" &&
			cmp.Or(cr.ReservationType, "default") == "default" && s.reservationAvailable(cr, now) > 0 {
			return cr
		}
	}
	return nil
}

// reservationsFirst moves the on-demand pools that would launch into a
// reservation ahead of the others, each group keeping its order
// (UsageStrategy use-capacity-reservations-first).
func (s *Server) reservationsFirst(pools []*candidate) {
	slices.SortStableFunc(pools, func(a, b *candidate) int {
		in := func(c *candidate) int {
			if c.targeted || s.openReservation(c) != nil {
				return 0
			}
			return 1
		}
		return cmp.Compare(in(a), in(b))
	})
}

// --- DescribeCapacityReservations ---

type describeCapacityReservationsResponse struct {
	meta
	Reservations []capacityReservationXML `xml:"capacityReservationSet>item"`
	NextToken    string                   `xml:"nextToken,omitempty"`
}

// capacityReservationXML is a CapacityReservation with the element names
// of the SDK's awsEc2query_deserializeDocumentCapacityReservation.
type capacityReservationXML struct {
	ID                     string   `xml:"capacityReservationId"`
	OwnerID                string   `xml:"ownerId"`
	ARN                    string   `xml:"capacityReservationArn"`
	AvailabilityZoneID     string   `xml:"availabilityZoneId"`
	InstanceType           string   `xml:"instanceType"`
	InstancePlatform       string   `xml:"instancePlatform"`
	AvailabilityZone       string   `xml:"availabilityZone"`
	Tenancy                string   `xml:"tenancy"`
	TotalInstanceCount     int32    `xml:"totalInstanceCount"`
	AvailableInstanceCount int      `xml:"availableInstanceCount"`
	EBSOptimized           bool     `xml:"ebsOptimized"`
	EphemeralStorage       bool     `xml:"ephemeralStorage"`
	State                  string   `xml:"state"`
	StartDate              ec2Time  `xml:"startDate"`
	EndDate                *ec2Time `xml:"endDate,omitempty"`
	EndDateType            string   `xml:"endDateType"`
	InstanceMatchCriteria  string   `xml:"instanceMatchCriteria"`
	CreateDate             ec2Time  `xml:"createDate"`
	Tags                   []xmlTag `xml:"tagSet>item"`
	ReservationType        string   `xml:"reservationType"`
}

func (s *Server) describeCapacityReservations(q query) (response, error) {
	filters, err := q.filters(append([]string{"instance-type", "owner-id", "availability-zone", "availability-zone-id", "instance-platform",
		"tenancy", "state", "instance-match-criteria", "end-date-type", "reservation-type"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	ids := q.list("CapacityReservationId")
	if len(ids) > 0 && q.has("MaxResults") {
		return nil, badRequest("InvalidParameterCombination", "The parameter CapacityReservationIds cannot be used with the parameter MaxResults")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !validID("cr", id) {
			return nil, badRequest("InvalidCapacityReservationId.Malformed", "Invalid id: \"%s\" (expecting \"cr-...\")", id)
		}
		if s.reservationByID(id) == nil {
			return nil, badRequest("InvalidCapacityReservationId.NotFound", "The capacityReservation ID '%s' does not exist", id)
		}
	}
	now := s.now()
	var matched []*CapacityReservation
	for _, cr := range s.reservations {
		if len(ids) > 0 && !slices.Contains(ids, cr.ID) {
			continue
		}
		if s.reservationAttrs(cr, now).matches(filters) {
			matched = append(matched, cr)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 1, max: 1000})
	if err != nil {
		return nil, err
	}
	out := &describeCapacityReservationsResponse{NextToken: next}
	for _, cr := range page {
		out.Reservations = append(out.Reservations, s.reservationXML(cr, now))
	}
	return out, nil
}

func (s *Server) reservationOwner(cr *CapacityReservation) string {
	return cmp.Or(cr.OwnerID, s.world.AccountID)
}

func (s *Server) reservationAttrs(cr *CapacityReservation, now time.Time) attrs {
	endType := "unlimited"
	if !cr.EndDate.IsZero() {
		endType = "limited"
	}
	return attrs{
		"instance-type": {cr.InstanceType}, "owner-id": {s.reservationOwner(cr)}, "availability-zone": {cr.Zone},
		"availability-zone-id": {s.zones[cr.Zone].ID}, "instance-platform": {cr.platform()}, "tenancy": {cr.tenancy()},
		"state": {cr.state(now)}, "instance-match-criteria": {cr.matchCriteria()}, "end-date-type": {endType},
		"reservation-type": {cmp.Or(cr.ReservationType, "default")},
	}.withTags(cr.Tags)
}

func (s *Server) reservationXML(cr *CapacityReservation, now time.Time) capacityReservationXML {
	owner := s.reservationOwner(cr)
	x := capacityReservationXML{
		ID: cr.ID, OwnerID: owner, ARN: "arn:aws:ec2:" + s.world.Region + ":" + owner + ":capacity-reservation/" + cr.ID,
		AvailabilityZoneID: s.zones[cr.Zone].ID, InstanceType: cr.InstanceType, InstancePlatform: cr.platform(),
		AvailabilityZone: cr.Zone, Tenancy: cr.tenancy(), TotalInstanceCount: cr.TotalInstances,
		AvailableInstanceCount: s.reservationAvailable(cr, now), State: cr.state(now),
		StartDate: ec2Time(s.priceTime), EndDateType: "unlimited", InstanceMatchCriteria: cr.matchCriteria(),
		CreateDate: ec2Time(s.priceTime), Tags: tagSet(cr.Tags), ReservationType: cmp.Or(cr.ReservationType, "default"),
	}
	if !cr.EndDate.IsZero() {
		end := ec2Time(cr.EndDate)
		x.EndDate, x.EndDateType = &end, "limited"
	}
	if x.State != ReservationActive {
		x.AvailableInstanceCount = 0
	}
	return x
}
