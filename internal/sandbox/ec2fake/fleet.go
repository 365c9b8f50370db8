package ec2fake

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// CreateFleet, Type=instant only: EC2 tries the candidate pools (launch
// template override × capacity type) in the order the allocation strategy
// gives, launches what it can synchronously, and reports every pool that
// failed in errorSet. Partial and total failure are both HTTP 200.

// EC2's documented request limits: "a maximum of 300 items is allowed across
// all launch templates" (FleetLaunchTemplateConfigRequest.Overrides, stated
// for request and maintain fleets and applied here to instant ones too) and
// at most 50 launch template configurations (CreateFleet
// LaunchTemplateConfigs).
const (
	maxFleetOverrides = 300
	maxFleetConfigs   = 50
)

const (
	onDemand = "on-demand"
	spot     = "spot"
)

type createFleetResponse struct {
	meta
	FleetID   string             `xml:"fleetId"`
	Errors    []fleetErrorXML    `xml:"errorSet>item"`
	Instances []fleetInstanceXML `xml:"fleetInstanceSet>item"`
}

type fleetInstanceXML struct {
	LaunchTemplateAndOverrides launchAndOverridesXML `xml:"launchTemplateAndOverrides"`
	Lifecycle                  string                `xml:"lifecycle"`
	InstanceIDs                []string              `xml:"instanceIds>item"`
	InstanceType               string                `xml:"instanceType"`
	AvailabilityZone           string                `xml:"availabilityZone"`
	AvailabilityZoneID         string                `xml:"availabilityZoneId"`
	SubnetID                   string                `xml:"subnetId"`
}

type fleetErrorXML struct {
	LaunchTemplateAndOverrides launchAndOverridesXML `xml:"launchTemplateAndOverrides"`
	Lifecycle                  string                `xml:"lifecycle"`
	ErrorCode                  string                `xml:"errorCode"`
	ErrorMessage               string                `xml:"errorMessage"`
}

type launchAndOverridesXML struct {
	Specification struct {
		LaunchTemplateID   string `xml:"launchTemplateId,omitempty"`
		LaunchTemplateName string `xml:"launchTemplateName,omitempty"`
		Version            string `xml:"version"`
	} `xml:"launchTemplateSpecification"`
	Overrides struct {
		InstanceType     string `xml:"instanceType,omitempty"`
		SubnetID         string `xml:"subnetId,omitempty"`
		AvailabilityZone string `xml:"availabilityZone,omitempty"`
		ImageID          string `xml:"imageId,omitempty"`
		MaxPrice         string `xml:"maxPrice,omitempty"`
		Priority         string `xml:"priority,omitempty"`
	} `xml:"overrides"`
}

// fleetRecord is the first answer given for a ClientToken.
type fleetRecord struct {
	fingerprint string
	response    createFleetResponse
}

// fleetRequest is a parsed and validated CreateFleet request.
type fleetRequest struct {
	configs  []*fleetConfig
	want     map[string]int // capacity type -> instances
	strategy map[string]string
	// reservationsFirst: OnDemandOptions.CapacityReservationOptions.
	// UsageStrategy is use-capacity-reservations-first (reservations.go).
	reservationsFirst bool
	tags              map[string]map[string]string // resource type -> tags
	tokenPrint        string
}

type fleetConfig struct {
	template *LaunchTemplate
	byName   bool // the request named the template rather than giving its ID
	version  string
	// overrides has one empty override when the request gave none: the
	// template alone is then the only pool.
	overrides []fleetOverride
}

type fleetOverride struct {
	instanceType string
	subnetID     string       // as requested, for the echo in the response
	subnet       *subnetState // as resolved
	zone         Zone
	imageID      string
	maxPrice     string
	priority     string
}

// candidate is one pool EC2 may launch into.
type candidate struct {
	config    *fleetConfig
	override  fleetOverride
	lifecycle string
	it        *InstanceType
	imageID   string
	arch      string
	groups    []string
	price     float64
	priority  float64
	err       *fleetErrorXML // why the pool can never work, if it cannot
	// reservation is the capacity reservation the template targets, and
	// targeted says there is one; reservationPreference is the template's
	// CapacityReservationPreference, "open" when it sets none
	// (reservations.go).
	reservation           *CapacityReservation
	targeted              bool
	reservationPreference string
}

func (s *Server) createFleet(q query) (response, error) {
	s.mu.Lock()
	out, launched, err := s.createFleetLocked(q)
	hooks := slices.Clone(s.onLaunch)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, inst := range launched {
		for _, h := range hooks {
			h(inst)
		}
	}
	return out, nil
}

func (s *Server) createFleetLocked(q query) (*createFleetResponse, []Instance, error) {
	token := q.get("ClientToken")
	if rec, ok := s.fleetTokens[token]; ok && token != "" {
		if rec.fingerprint != fingerprint(q) {
			return nil, nil, badRequest("IdempotentParameterMismatch",
				"The client token %s has already been used with a request with different parameters.", token)
		}
		// The same answer, fleet and instance IDs included; nothing is
		// launched again.
		replay := rec.response
		return &replay, nil, nil
	}
	req, err := s.parseFleet(q)
	if err != nil {
		return nil, nil, err
	}

	now := s.now()
	fleetID := "fleet-" + awsfake.RequestID()
	out := &createFleetResponse{FleetID: fleetID}
	if s.noSpotRole && req.want[spot] > 0 {
		// No spot service-linked role (MissingSpotRole): every spot pool
		// fails, as EC2 reports it for an instant fleet.
		for _, c := range s.candidates(req, spot) {
			out.Errors = append(out.Errors, *c.fail(SpotRoleCode, spotRoleMessage))
		}
		req.want[spot] = 0
	}
	var launched []Instance
	for _, lifecycle := range []string{onDemand, spot} {
		need := req.want[lifecycle]
		if need == 0 {
			continue
		}
		var pools []*candidate
		for _, c := range s.candidates(req, lifecycle) {
			if c.err != nil {
				out.Errors = append(out.Errors, *c.err)
			} else {
				pools = append(pools, c)
			}
		}
		order(pools, req.strategy[lifecycle])
		if lifecycle == onDemand && req.reservationsFirst {
			s.reservationsFirst(pools)
		}
		// diversified spreads instances over the pools one at a time; every
		// other strategy fills the best pool first.
		step := need
		if req.strategy[lifecycle] == "diversified" {
			step = 1
		}
		failed := map[*candidate]bool{}
		for need > 0 && len(failed) < len(pools) {
			for _, c := range pools {
				if need == 0 || failed[c] {
					continue
				}
				n, ferr := s.tryPool(c, min(step, need))
				if n > 0 {
					insts := s.launch(c, n, fleetID, req, now)
					ids := make([]string, len(insts))
					for i, inst := range insts {
						ids[i] = inst.ID
						launched = append(launched, inst.clone())
					}
					out.Instances = appendFleetInstances(out.Instances, c, ids)
					need -= n
				}
				if ferr != nil {
					out.Errors = append(out.Errors, *ferr)
					failed[c] = true
				}
			}
		}
	}
	if token != "" {
		s.fleetTokens[token] = &fleetRecord{fingerprint: req.tokenPrint, response: *out}
	}
	return out, launched, nil
}

// appendFleetInstances adds instance IDs to the pool's fleetInstanceSet item,
// creating it on the pool's first launch.
func appendFleetInstances(items []fleetInstanceXML, c *candidate, ids []string) []fleetInstanceXML {
	lo := c.launchAndOverrides()
	for i := range items {
		if items[i].Lifecycle == c.lifecycle && items[i].LaunchTemplateAndOverrides == lo {
			items[i].InstanceIDs = append(items[i].InstanceIDs, ids...)
			return items
		}
	}
	return append(items, fleetInstanceXML{
		LaunchTemplateAndOverrides: lo, Lifecycle: c.lifecycle, InstanceIDs: ids, InstanceType: c.it.Name,
		AvailabilityZone: c.override.zone.Name, AvailabilityZoneID: c.override.zone.ID, SubnetID: c.override.subnet.ID,
	})
}

func (c *candidate) launchAndOverrides() launchAndOverridesXML {
	var lo launchAndOverridesXML
	lo.Specification.LaunchTemplateID = c.config.template.ID
	if c.config.byName {
		lo.Specification.LaunchTemplateName = c.config.template.Name
	}
	lo.Specification.Version = "1" // the version "$Latest" and "$Default" resolve to
	o := c.override
	lo.Overrides.InstanceType = o.instanceType
	lo.Overrides.SubnetID = o.subnetID
	lo.Overrides.AvailabilityZone = o.zone.Name
	lo.Overrides.ImageID = o.imageID
	lo.Overrides.MaxPrice = o.maxPrice
	lo.Overrides.Priority = o.priority
	return lo
}

func (c *candidate) fail(code, format string, args ...any) *fleetErrorXML {
	return &fleetErrorXML{
		LaunchTemplateAndOverrides: c.launchAndOverrides(), Lifecycle: c.lifecycle,
		ErrorCode: code, ErrorMessage: fmt.Sprintf(format, args...),
	}
}

// parseFleet reads and validates a CreateFleet request. Its errors are the
// ones EC2 returns for the whole request (HTTP 400) rather than per pool.
func (s *Server) parseFleet(q query) (*fleetRequest, error) {
	if t := q.get("Type"); t != "instant" {
		if t == "" {
			t = "maintain (the default)"
		}
		return nil, badRequest("UnsupportedOperation",
			"ec2fake models only instant fleets: Type must be instant, not %s.", t)
	}
	req := &fleetRequest{want: map[string]int{}, strategy: map[string]string{}, tokenPrint: fingerprint(q)}

	if err := parseFleetCapacity(q, req); err != nil {
		return nil, err
	}
	if err := parseFleetOptions(q, req); err != nil {
		return nil, err
	}
	var err error
	if req.tags, err = q.tagSpecifications("TagSpecification", "instance", "volume", "fleet", "network-interface", "spot-instances-request"); err != nil {
		return nil, err
	}

	configs := q.members("LaunchTemplateConfigs")
	if len(configs) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter LaunchTemplateConfigs")
	}
	if len(configs) > maxFleetConfigs {
		return nil, invalidParameter("The fleet request has %d launch template configurations; the maximum is %d.", len(configs), maxFleetConfigs)
	}
	overrides := 0
	for _, m := range configs {
		overrides += len(q.members(m + ".Overrides"))
	}
	if overrides > maxFleetOverrides {
		return nil, invalidParameter("The fleet request has %d launch template overrides; the maximum is %d across all launch templates.", overrides, maxFleetOverrides)
	}
	pools := map[string]bool{}
	for _, m := range configs {
		cfg, err := s.parseFleetConfig(q, m)
		if err != nil {
			return nil, err
		}
		for _, o := range cfg.overrides {
			it := cmp.Or(o.instanceType, cfg.template.InstanceType)
			where := o.zone.Name
			if o.subnet != nil {
				where = o.subnet.ID
			}
			if key := it + "/" + where; it != "" && where != "" {
				if pools[key] {
					return nil, badRequest("InvalidFleetConfig", "The fleet configuration contains duplicate instance pools.")
				}
				pools[key] = true
			}
		}
		req.configs = append(req.configs, cfg)
	}
	return req, nil
}

// parseFleetCapacity reads the fleet's TargetCapacitySpecification into
// how many instances of each capacity type it wants.
func parseFleetCapacity(q query, req *fleetRequest) error {
	const tcs = "TargetCapacitySpecification."
	total, ok, err := q.int(tcs + "TotalTargetCapacity")
	if err != nil {
		return err
	}
	if !ok {
		return badRequest("MissingParameter", "The request must contain the parameter TargetCapacitySpecification.TotalTargetCapacity")
	}
	od, _, err := q.int(tcs + "OnDemandTargetCapacity")
	if err != nil {
		return err
	}
	sp, _, err := q.int(tcs + "SpotTargetCapacity")
	if err != nil {
		return err
	}
	if total < 0 || od < 0 || sp < 0 || od+sp > total {
		return invalidParameter("The target capacity (%d) must be at least the sum of the on-demand (%d) and Spot (%d) target capacities.", total, od, sp)
	}
	if unit := q.get(tcs + "TargetCapacityUnitType"); unit != "" && unit != "units" {
		return badRequest("UnsupportedOperation", "ec2fake counts capacity in instances (units), not %s.", unit)
	}
	def := q.get(tcs + "DefaultTargetCapacityType")
	switch def {
	case "":
		def = onDemand
	case onDemand, spot:
	default:
		return invalidParameter("Value (%s) for parameter DefaultTargetCapacityType is invalid. Valid values are spot, on-demand.", def)
	}
	req.want[onDemand], req.want[spot] = od, sp
	req.want[def] += total - od - sp
	return nil
}

// parseFleetOptions reads the on-demand and spot allocation strategies
// and the capacity reservation usage strategy.
func parseFleetOptions(q query, req *fleetRequest) error {
	var err error
	if req.strategy[onDemand], err = strategy(q.get("OnDemandOptions.AllocationStrategy"), "lowest-price",
		map[string]string{"lowest-price": "lowest-price", "lowestPrice": "lowest-price", "prioritized": "prioritized"}); err != nil {
		return err
	}
	switch usage := q.get("OnDemandOptions.CapacityReservationOptions.UsageStrategy"); usage {
	case "":
	case "use-capacity-reservations-first":
		req.reservationsFirst = true
	default:
		return invalidParameter("Value (%s) for parameter UsageStrategy is invalid. Valid values are use-capacity-reservations-first.", usage)
	}
	if req.strategy[spot], err = strategy(q.get("SpotOptions.AllocationStrategy"), "lowest-price",
		map[string]string{
			"lowest-price": "lowest-price", "lowestPrice": "lowest-price", "diversified": "diversified",
			"capacity-optimized": "capacity-optimized", "capacityOptimized": "capacity-optimized",
			"capacity-optimized-prioritized": "capacity-optimized-prioritized", "capacityOptimizedPrioritized": "capacity-optimized-prioritized",
			"price-capacity-optimized": "price-capacity-optimized",
		}); err != nil {
		return err
	}
	return nil
}

func strategy(v, def string, valid map[string]string) (string, error) {
	if v == "" {
		return def, nil
	}
	if canonical, ok := valid[v]; ok {
		return canonical, nil
	}
	return "", invalidParameter("Value (%s) for parameter AllocationStrategy is invalid. Valid values are %s.", v, strings.Join(sortedKeys(valid), ", "))
}

func (s *Server) parseFleetConfig(q query, m string) (*fleetConfig, error) {
	spec := m + ".LaunchTemplateSpecification."
	lt, err := s.findTemplate(q.get(spec+"LaunchTemplateId"), q.get(spec+"LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	cfg := &fleetConfig{template: lt, byName: q.get(spec+"LaunchTemplateId") == "", version: q.get(spec + "Version")}
	if err := checkVersion(lt, cfg.version); err != nil {
		return nil, err
	}
	members := q.members(m + ".Overrides")
	if len(members) == 0 {
		cfg.overrides = []fleetOverride{{}}
	}
	for _, om := range members {
		o := fleetOverride{
			instanceType: q.get(om + ".InstanceType"),
			imageID:      q.get(om + ".ImageId"),
			maxPrice:     q.get(om + ".MaxPrice"),
			priority:     q.get(om + ".Priority"),
		}
		if _, _, err := q.float(om + ".Priority"); err != nil {
			return nil, err
		}
		if _, _, err := q.float(om + ".MaxPrice"); err != nil {
			return nil, err
		}
		if id := q.get(om + ".SubnetId"); id != "" {
			o.subnetID = id
			if !validID("subnet", id) {
				return nil, badRequest("InvalidSubnetID.Malformed", "The subnet ID '%s' is malformed", id)
			}
			if o.subnet = s.subnetByID(id); o.subnet == nil {
				return nil, badRequest("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
			}
			o.zone = s.zones[o.subnet.Zone]
		}
		for _, key := range []string{".AvailabilityZone", ".AvailabilityZoneId"} {
			name := q.get(om + key)
			if name == "" {
				continue
			}
			z, ok := s.zones[name]
			if !ok {
				return nil, invalidParameter("Invalid availability zone: [%s]", name)
			}
			if o.subnet != nil && z.Name != o.subnet.Zone {
				return nil, invalidParameter("The subnet '%s' is in availability zone %s, not %s.", o.subnet.ID, o.subnet.Zone, name)
			}
			o.zone = z
		}
		cfg.overrides = append(cfg.overrides, o)
	}
	return cfg, nil
}

// candidates builds the pools of one capacity type, each with the reason it
// can never launch, if there is one: the checks EC2 makes before it looks
// for capacity.
func (s *Server) candidates(req *fleetRequest, lifecycle string) []*candidate {
	var out []*candidate
	for _, cfg := range req.configs {
		for _, o := range cfg.overrides {
			c := &candidate{config: cfg, override: o, lifecycle: lifecycle, priority: math.Inf(1)}
			if p, err := strconv.ParseFloat(o.priority, 64); err == nil {
				c.priority = p
			}
			c.err = s.check(c)
			out = append(out, c)
		}
	}
	return out
}

func (s *Server) check(c *candidate) *fleetErrorXML {
	lt := c.config.template
	o := &c.override
	if o.subnet == nil {
		// Without a subnet EC2 uses a default one: here, the first subnet
		// of the zone asked for, or the first subnet of all.
		for _, sn := range s.subnets {
			if o.zone.Name == "" || sn.Zone == o.zone.Name {
				o.subnet = sn
				break
			}
		}
		if o.subnet == nil {
			return c.fail("InvalidParameterValue", "No subnet is available in availability zone %s.", o.zone.Name)
		}
		o.zone = s.zones[o.subnet.Zone]
	}
	zone := o.zone.Name
	name := cmp.Or(o.instanceType, lt.InstanceType)
	if name == "" {
		return c.fail("InvalidFleetConfiguration", "Your requested instance type (null) is not supported in your requested Availability Zone (%s).", zone)
	}
	if c.it = s.types[name]; c.it == nil {
		return c.fail("InvalidParameterValue", "The instance type '%s' does not exist.", name)
	}
	if !s.offeredIn(name, zone) {
		var offered []string
		for _, z := range s.world.Zones {
			if s.offeredIn(name, z.Name) {
				offered = append(offered, z.Name)
			}
		}
		return c.fail("Unsupported", "Your requested instance type (%s) is not supported in your requested Availability Zone (%s). Please retry your request by not specifying an Availability Zone or choosing %s.",
			name, zone, strings.Join(offered, ", "))
	}
	if !slices.Contains(c.it.usageClasses(), c.lifecycle) {
		return c.fail("Unsupported", "The requested instance type (%s) does not support %s capacity.", name, c.lifecycle)
	}
	if ferr := s.priceOf(c, name, zone); ferr != nil {
		return ferr
	}
	c.imageID = cmp.Or(o.imageID, lt.ImageID)
	switch im := s.imageByID(c.imageID); {
	case c.imageID == "":
		return c.fail("MissingParameter", "The request must contain the parameter ImageId")
	case !validID("ami", c.imageID):
		return c.fail("InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", c.imageID)
	case im == nil:
		return c.fail("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", c.imageID)
	case im.state() != "available":
		return c.fail("InvalidAMIID.Unavailable", "AMI '%s' is pending, and cannot be run", c.imageID)
	case !slices.Contains(c.it.architectures(), im.Architecture):
		return c.fail("InvalidParameterValue", "The architecture '%s' of the specified instance type does not match the architecture '%s' of the specified AMI. Specify an instance type and an AMI that have matching architectures, and try again.",
			c.it.architectures()[0], im.Architecture)
	default:
		c.arch = im.Architecture
	}
	if cr, ferr := s.reservationFor(c); ferr != nil {
		return ferr
	} else {
		c.reservation = cr
	}
	return s.securityGroups(c, name)
}

// priceOf sets the candidate's price: the zone's spot price, which must
// be within the override's MaxPrice, or the type's on-demand price
// (unpriced types go last for lowest-price).
func (s *Server) priceOf(c *candidate, name, zone string) *fleetErrorXML {
	o := &c.override
	if c.lifecycle == spot {
		price, ok := s.spotPrice(name, zone)
		if !ok {
			return c.fail("Unsupported", "There is no Spot capacity for instance type %s in %s.", name, zone)
		}
		c.price = price
		if o.maxPrice != "" {
			if max, _ := strconv.ParseFloat(o.maxPrice, 64); max < price {
				return c.fail("SpotMaxPriceTooLow", "Your Spot request price of %s is lower than the minimum required Spot request fulfillment price of %s.",
					o.maxPrice, strconv.FormatFloat(price, 'f', -1, 64))
			}
		}
	} else {
		price, ok := s.world.OnDemandPrices[name]
		c.price = price
		if !ok {
			c.price = math.Inf(1) // unpriced types go last for lowest-price
		}
	}
	return nil
}

// securityGroups sets the candidate's security groups: the template's,
// its EFA interfaces' when it has them, or the VPC's default group; each
// must exist in the subnet's VPC.
func (s *Server) securityGroups(c *candidate, name string) *fleetErrorXML {
	lt, o := c.config.template, &c.override
	c.groups = lt.SecurityGroupIDs
	if efa := lt.EFAInterfaces(); efa > 0 {
		// EC2 refuses EFA interfaces the type cannot take.
		if efa > int(c.it.EFAs) {
			return c.fail("InvalidParameterCombination", "The specified instance type %s supports at most %d EFA interfaces; %d were requested.", name, c.it.EFAs, efa)
		}
		c.groups = lt.Data["NetworkInterface.1.SecurityGroupId.1"]
	}
	if len(c.groups) == 0 {
		// Without security groups an instance gets its VPC's default group.
		for _, g := range s.groups {
			if g.Name == "default" && g.VpcID == o.subnet.VpcID {
				c.groups = []string{g.ID}
			}
		}
	}
	for _, id := range c.groups {
		g := s.groupByID(id)
		if g == nil {
			return c.fail("InvalidGroup.NotFound", "The security group '%s' does not exist in VPC '%s'", id, o.subnet.VpcID)
		}
		if g.VpcID != o.subnet.VpcID {
			return c.fail("InvalidParameter", "Security group %s and subnet %s belong to different networks.", id, o.subnet.ID)
		}
	}
	return nil
}

// order sorts pools into the order the allocation strategy tries them. The
// fake knows no capacity depth, so the capacity-aware strategies reduce to
// price, which is what they mostly do when capacity is plentiful.
func order(pools []*candidate, strategy string) {
	byPrice := func(a, b *candidate) int { return cmp.Compare(a.price, b.price) }
	byPriority := func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), byPrice(a, b))
	}
	switch strategy {
	case "prioritized", "capacity-optimized-prioritized":
		slices.SortStableFunc(pools, byPriority)
	default:
		slices.SortStableFunc(pools, byPrice)
	}
}

// tryPool asks a pool for up to n instances. It returns how many it can
// launch and, when it cannot give all n, the error EC2 reports for the pool.
func (s *Server) tryPool(c *candidate, n int) (int, *fleetErrorXML) {
	zone := c.override.zone
	avail, code := n, ""
	if c.targeted {
		// Reserved capacity: no capacity fault or limit applies, only
		// the reservation's room.
		if room := s.reservationAvailable(c.reservation, s.now()); room < avail {
			avail, code = room, ReservationCapacityExceededCode
		}
	} else {
		if f, ok := s.matchFault(c.it.Name, zone, c.lifecycle); ok {
			return 0, c.fail(f.Code, "%s", faultMessage(f.Code, c.it.Name, zone.Name, c.override.subnet.ID))
		}
		if limit, ok := s.limitFor(c.it.Name, zone, c.lifecycle); ok && limit < avail {
			avail, code = limit, "InsufficientInstanceCapacity"
		}
	}
	s.settle(s.now()) // addresses of instances that finished terminating are free again
	if free := c.override.subnet.free(); free < avail {
		avail, code = free, "InsufficientFreeAddressesInSubnet"
	}
	if avail == n {
		return n, nil
	}
	if code == ReservationCapacityExceededCode {
		return avail, c.fail(code, "Insufficient capacity in the Capacity Reservation %s (%s in %s) for %d more instances.", c.reservation.ID, c.it.Name, zone.Name, n-avail)
	}
	return avail, c.fail(code, "%s", faultMessage(code, c.it.Name, zone.Name, c.override.subnet.ID))
}

// launch creates n instances in the pool.
func (s *Server) launch(c *candidate, n int, fleetID string, req *fleetRequest, now time.Time) []*Instance {
	lt := c.config.template
	sn := c.override.subnet
	profile := lt.IAMInstanceProfileARN
	if profile == "" && lt.IAMInstanceProfileName != "" {
		profile = "arn:aws:iam::" + s.world.AccountID + ":instance-profile/" + lt.IAMInstanceProfileName
	}
	tags := maps.Clone(lt.TagSpecifications["instance"])
	if tags == nil {
		tags = map[string]string{}
	}
	maps.Copy(tags, req.tags["instance"])
	// EC2 adds these to every instance a fleet launches from a template.
	tags["aws:ec2:fleet-id"] = fleetID
	tags["aws:ec2launchtemplate:id"] = lt.ID
	tags["aws:ec2launchtemplate:version"] = "1"

	reservation := newID("r")
	var out []*Instance
	for range n {
		ip, _ := sn.allocate()
		inst := &Instance{
			ID: newID("i"), ReservationID: reservation, Type: c.it.Name,
			Zone: sn.Zone, ZoneID: s.zones[sn.Zone].ID, SubnetID: sn.ID, VpcID: sn.VpcID,
			PrivateIP: ip, PrivateDNSName: s.privateDNSName(ip), ImageID: c.imageID, Architecture: c.arch,
			Lifecycle: c.lifecycle, State: "pending", LaunchTime: now,
			LaunchTemplateID: lt.ID, LaunchTemplateName: lt.Name, LaunchTemplateVersion: "1", FleetID: fleetID,
			SecurityGroupIDs: slices.Clone(c.groups), IAMInstanceProfileARN: profile, UserData: lt.UserData,
			Tags: maps.Clone(tags),
		}
		inst.CapacityReservationPreference = c.reservationPreference
		if c.targeted {
			inst.CapacityReservationID, inst.CapacityReservationTarget = c.reservation.ID, c.reservation.ID
		} else if cr := s.openReservation(c); cr != nil {
			inst.CapacityReservationID = cr.ID
		}
		if !c.targeted {
			s.consumeLimit(c.it.Name, c.override.zone, c.lifecycle)
		}
		s.advance(inst, now) // running at once when World.PendingFor is zero
		s.instances = append(s.instances, inst)
		out = append(out, inst)
	}
	return out
}
