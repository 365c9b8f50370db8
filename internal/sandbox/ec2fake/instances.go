package ec2fake

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Instance is an EC2 instance, launched by CreateFleet or planted with
// AddInstance.
type Instance struct {
	ID             string
	ReservationID  string
	Type           string
	Zone           string
	ZoneID         string
	SubnetID       string
	VpcID          string
	PrivateIP      string
	PrivateDNSName string // e.g. ip-10-0-1-23.us-west-2.compute.internal
	ImageID        string
	Architecture   string
	Lifecycle      string // "on-demand" or "spot"
	// State is "pending", "running", "shutting-down" or "terminated".
	State         string
	LaunchTime    time.Time
	TerminateTime time.Time // when termination was asked for; zero before

	LaunchTemplateID      string
	LaunchTemplateName    string
	LaunchTemplateVersion string
	FleetID               string
	SecurityGroupIDs      []string
	IAMInstanceProfileARN string
	UserData              string // decoded, from the launch template
	Tags                  map[string]string
	// CapacityReservationID is the capacity reservation the instance runs
	// in, if any; CapacityReservationPreference its launch template's
	// preference (open unless it set one), and CapacityReservationTarget
	// the reservation the template named, if it named one.
	CapacityReservationID         string
	CapacityReservationPreference string
	CapacityReservationTarget     string
}

func (inst *Instance) clone() Instance {
	c := *inst
	c.SecurityGroupIDs = slices.Clone(inst.SecurityGroupIDs)
	c.Tags = maps.Clone(inst.Tags)
	return c
}

// stateCodes are EC2's numeric instance state codes.
var stateCodes = map[string]int{
	"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80,
}

// advance moves an instance along its lifecycle as time passes. States are
// computed lazily on every read, so the fake needs no background goroutine.
func (s *Server) advance(inst *Instance, now time.Time) {
	if inst.State == "pending" && !now.Before(inst.LaunchTime.Add(s.world.PendingFor)) {
		inst.State = "running"
	}
	if inst.State == "shutting-down" && !now.Before(inst.TerminateTime.Add(s.world.ShuttingDownFor)) {
		inst.State = "terminated"
		// The address goes with the instance's network interface, which EC2
		// deletes once the instance is terminated, not when it starts
		// shutting down.
		if sn := s.subnetByID(inst.SubnetID); sn != nil {
			sn.release(inst.PrivateIP)
		}
	}
}

// settle advances every instance, so that the subnets' free addresses count
// those that have finished terminating.
func (s *Server) settle(now time.Time) {
	for _, inst := range s.instances {
		s.advance(inst, now)
	}
}

// visible reports whether DescribeInstances still shows the instance: real
// EC2 keeps terminated instances listed for about an hour.
func (s *Server) visible(inst *Instance, now time.Time) bool {
	if inst.State != "terminated" || s.world.TerminatedVisibleFor == 0 {
		return true
	}
	gone := inst.TerminateTime.Add(s.world.ShuttingDownFor + s.world.TerminatedVisibleFor)
	return now.Before(gone)
}

func (s *Server) instanceByID(id string) *Instance {
	for _, inst := range s.instances {
		if inst.ID == id {
			return inst
		}
	}
	return nil
}

// checkInstanceIDs returns EC2's error for the first malformed ID, or for
// every ID that does not name a visible instance.
func (s *Server) checkInstanceIDs(ids []string, now time.Time) error {
	var missing []string
	for _, id := range ids {
		if !validID("i", id) {
			return badRequest("InvalidInstanceID.Malformed", "Invalid id: \"%s\"", id)
		}
		inst := s.instanceByID(id)
		if inst != nil {
			s.advance(inst, now)
		}
		if inst == nil || !s.visible(inst, now) {
			missing = append(missing, id)
		}
	}
	switch {
	case len(missing) == 1:
		return badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", missing[0])
	case len(missing) > 1:
		return badRequest("InvalidInstanceID.NotFound", "The instance IDs '%s' do not exist", notFoundList(missing))
	}
	return nil
}

// privateDNSName is the name EC2 gives an instance's private address.
func (s *Server) privateDNSName(ip string) string {
	if ip == "" {
		return ""
	}
	domain := s.world.Region + ".compute.internal"
	if s.world.Region == "us-east-1" {
		domain = "ec2.internal" // us-east-1 kept its original domain
	}
	return "ip-" + strings.ReplaceAll(ip, ".", "-") + "." + domain
}

// --- subnet address accounting ---

// subnetState is a subnet and the addresses its instances use.
type subnetState struct {
	Subnet
	prefix   netip.Prefix
	capacity int
	used     map[uint32]bool // host offsets in use
}

func newSubnetState(sn Subnet) *subnetState {
	p, err := netip.ParsePrefix(sn.CIDR)
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
		// A subnet without a usable IPv4 CIDR still works, with addresses
		// from a /24 that is never shown.
		p = netip.MustParsePrefix("10.255.0.0/24")
	}
	p = p.Masked()
	// AWS reserves the first four addresses and the last one of a subnet.
	usable := 1<<(32-p.Bits()) - 5
	capacity := usable
	if sn.AvailableIPs > 0 && int(sn.AvailableIPs) < usable {
		capacity = int(sn.AvailableIPs)
	}
	return &subnetState{Subnet: sn, prefix: p, capacity: capacity, used: map[uint32]bool{}}
}

func (sn *subnetState) free() int { return max(sn.capacity-len(sn.used), 0) }

// usable is how many addresses the subnet's CIDR has for instances.
func (sn *subnetState) usable() int { return 1<<(32-sn.prefix.Bits()) - 5 }

// allocate takes the lowest free address.
func (sn *subnetState) allocate() (string, bool) {
	if sn.free() <= 0 {
		return "", false
	}
	base := binary.BigEndian.Uint32(sn.prefix.Addr().AsSlice())
	size := uint32(1) << (32 - sn.prefix.Bits())
	for off := uint32(4); off < size-1; off++ {
		if !sn.used[off] {
			sn.used[off] = true
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base+off)
			return netip.AddrFrom4(b).String(), true
		}
	}
	return "", false
}

func (sn *subnetState) release(ip string) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !sn.prefix.Contains(a) {
		return
	}
	base := binary.BigEndian.Uint32(sn.prefix.Addr().AsSlice())
	delete(sn.used, binary.BigEndian.Uint32(a.AsSlice())-base)
}

// --- DescribeInstances ---

type describeInstancesResponse struct {
	meta
	Reservations []reservationXML `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type reservationXML struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Groups        []groupXML    `xml:"groupSet>item"`
	Instances     []instanceXML `xml:"instancesSet>item"`
}

type groupXML struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

func stateOf(name string) stateXML { return stateXML{Code: stateCodes[name], Name: name} }

type instanceXML struct {
	InstanceID     string   `xml:"instanceId"`
	ImageID        string   `xml:"imageId"`
	State          stateXML `xml:"instanceState"`
	PrivateDNSName string   `xml:"privateDnsName"`
	DNSName        string   `xml:"dnsName"`
	Reason         string   `xml:"reason"`
	AmiLaunchIndex int      `xml:"amiLaunchIndex"`
	InstanceType   string   `xml:"instanceType"`
	LaunchTime     ec2Time  `xml:"launchTime"`
	Placement      struct {
		AvailabilityZone   string `xml:"availabilityZone"`
		AvailabilityZoneID string `xml:"availabilityZoneId,omitempty"`
		Tenancy            string `xml:"tenancy"`
	} `xml:"placement"`
	SubnetID           string          `xml:"subnetId,omitempty"`
	VpcID              string          `xml:"vpcId,omitempty"`
	PrivateIPAddress   string          `xml:"privateIpAddress,omitempty"`
	Groups             []groupXML      `xml:"groupSet>item"`
	StateReason        *stateReasonXML `xml:"stateReason,omitempty"`
	Architecture       string          `xml:"architecture,omitempty"`
	RootDeviceType     string          `xml:"rootDeviceType"`
	RootDeviceName     string          `xml:"rootDeviceName"`
	InstanceLifecycle  string          `xml:"instanceLifecycle,omitempty"`
	VirtualizationType string          `xml:"virtualizationType"`
	Hypervisor         string          `xml:"hypervisor"`
	IAMInstanceProfile *struct {
		Arn string `xml:"arn"`
	} `xml:"iamInstanceProfile,omitempty"`
	Tags []xmlTag `xml:"tagSet>item"`
	// The element names of the SDK's Instance deserializer
	// (capacityReservationId, capacityReservationSpecification with
	// capacityReservationPreference and capacityReservationTarget).
	CapacityReservationID            string              `xml:"capacityReservationId,omitempty"`
	CapacityReservationSpecification *reservationSpecXML `xml:"capacityReservationSpecification,omitempty"`
}

type reservationSpecXML struct {
	Preference string `xml:"capacityReservationPreference,omitempty"`
	Target     *struct {
		ID string `xml:"capacityReservationId"`
	} `xml:"capacityReservationTarget,omitempty"`
}

type stateReasonXML struct {
	Code    string `xml:"code"`
	Message string `xml:"message"`
}

func (s *Server) instanceXML(inst *Instance) instanceXML {
	x := instanceXML{
		InstanceID: inst.ID, ImageID: inst.ImageID, State: stateOf(inst.State),
		PrivateDNSName: inst.PrivateDNSName, InstanceType: inst.Type, LaunchTime: ec2Time(inst.LaunchTime),
		SubnetID: inst.SubnetID, VpcID: inst.VpcID, PrivateIPAddress: inst.PrivateIP,
		Architecture: inst.Architecture, RootDeviceType: "ebs", RootDeviceName: "/dev/xvda",
		VirtualizationType: "hvm", Hypervisor: "xen", Tags: tagSet(inst.Tags),
	}
	x.Placement.AvailabilityZone, x.Placement.AvailabilityZoneID, x.Placement.Tenancy = inst.Zone, inst.ZoneID, "default"
	if inst.Lifecycle == "spot" {
		x.InstanceLifecycle = "spot"
	}
	x.CapacityReservationID = inst.CapacityReservationID
	if inst.CapacityReservationPreference != "" || inst.CapacityReservationTarget != "" {
		x.CapacityReservationSpecification = &reservationSpecXML{Preference: inst.CapacityReservationPreference}
		if inst.CapacityReservationTarget != "" {
			x.CapacityReservationSpecification.Target = &struct {
				ID string `xml:"capacityReservationId"`
			}{ID: inst.CapacityReservationTarget}
		}
	}
	for _, id := range inst.SecurityGroupIDs {
		g := groupXML{GroupID: id}
		if sg := s.groupByID(id); sg != nil {
			g.GroupName = sg.Name
		}
		x.Groups = append(x.Groups, g)
	}
	if inst.IAMInstanceProfileARN != "" {
		x.IAMInstanceProfile = &struct {
			Arn string `xml:"arn"`
		}{Arn: inst.IAMInstanceProfileARN}
	}
	if inst.State == "terminated" {
		// A terminated instance has given its address back (a new instance
		// may have it now), and EC2 stops reporting it.
		x.PrivateIPAddress, x.PrivateDNSName = "", ""
	}
	if inst.State == "shutting-down" || inst.State == "terminated" {
		x.Reason = fmt.Sprintf("User initiated (%s GMT)", inst.TerminateTime.UTC().Format("2006-01-02 15:04:05"))
		x.StateReason = &stateReasonXML{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"}
	}
	return x
}

func (inst *Instance) attrs() attrs {
	a := attrs{
		"instance-id": {inst.ID}, "instance-state-name": {inst.State},
		"instance-state-code": {strconv.Itoa(stateCodes[inst.State])}, "instance-type": {inst.Type},
		"availability-zone": {inst.Zone}, "subnet-id": {inst.SubnetID}, "vpc-id": {inst.VpcID},
		"image-id": {inst.ImageID}, "private-ip-address": {inst.PrivateIP},
		"private-dns-name": {inst.PrivateDNSName}, "reservation-id": {inst.ReservationID},
		"architecture": {inst.Architecture},
	}
	if inst.Lifecycle == "spot" {
		a["instance-lifecycle"] = []string{"spot"}
	}
	return a.withTags(inst.Tags)
}

func (s *Server) describeInstances(q query) (response, error) {
	filters, err := q.filters(append([]string{"instance-id", "instance-state-name", "instance-state-code",
		"instance-type", "availability-zone", "subnet-id", "vpc-id", "image-id", "private-ip-address",
		"private-dns-name", "reservation-id", "architecture", "instance-lifecycle"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	ids := q.list("InstanceId")
	if len(ids) > 0 && q.has("MaxResults") {
		return nil, badRequest("InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if err := s.checkInstanceIDs(ids, now); err != nil {
		return nil, err
	}
	var matched []*Instance
	for _, inst := range s.instances {
		s.advance(inst, now)
		if !s.visible(inst, now) || len(ids) > 0 && !slices.Contains(ids, inst.ID) {
			continue
		}
		if inst.attrs().matches(filters) {
			matched = append(matched, inst)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 5, max: 1000})
	if err != nil {
		return nil, err
	}
	out := &describeInstancesResponse{NextToken: next}
	for _, inst := range page {
		// Instances of one reservation were launched together and are kept
		// together, so grouping neighbours rebuilds the reservations.
		if n := len(out.Reservations); n == 0 || out.Reservations[n-1].ReservationID != inst.ReservationID {
			out.Reservations = append(out.Reservations, reservationXML{ReservationID: inst.ReservationID, OwnerID: s.world.AccountID})
		}
		r := &out.Reservations[len(out.Reservations)-1]
		r.Instances = append(r.Instances, s.instanceXML(inst))
	}
	return out, nil
}

// --- TerminateInstances ---

type terminateInstancesResponse struct {
	meta
	Changes []stateChangeXML `xml:"instancesSet>item"`
}

type stateChangeXML struct {
	InstanceID string   `xml:"instanceId"`
	Current    stateXML `xml:"currentState"`
	Previous   stateXML `xml:"previousState"`
}

func (s *Server) terminateInstances(q query) (response, error) {
	ids := q.list("InstanceId")
	if len(ids) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter InstanceId")
	}
	s.mu.Lock()
	now := s.now()
	if err := s.checkInstanceIDs(ids, now); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	out := &terminateInstancesResponse{}
	var terminated []Instance
	for _, id := range ids {
		inst := s.instanceByID(id)
		previous := inst.State
		if previous != "shutting-down" && previous != "terminated" {
			inst.State = "shutting-down"
			inst.TerminateTime = now
			terminated = append(terminated, inst.clone())
		}
		// Terminating again is not an error: EC2 reports the state the
		// instance is already in, which makes retries safe.
		out.Changes = append(out.Changes, stateChangeXML{InstanceID: id, Current: stateOf(inst.State), Previous: stateOf(previous)})
	}
	hooks := slices.Clone(s.onTerminate)
	s.mu.Unlock()
	for _, inst := range terminated {
		for _, h := range hooks {
			h(inst)
		}
	}
	return out, nil
}

// --- CreateTags and DeleteTags ---

type tagsResponse struct {
	meta
	Return bool `xml:"return"`
}

// tagsOf returns the tag map of any taggable resource the fake knows.
func (s *Server) tagsOf(id string) (*map[string]string, error) {
	kind, _, _ := strings.Cut(id, "-")
	switch kind {
	case "i":
		if inst := s.instanceByID(id); inst != nil {
			return &inst.Tags, nil
		}
		return nil, badRequest("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
	case "lt":
		if lt := s.templateByID(id); lt != nil {
			return &lt.Tags, nil
		}
		return nil, badRequest("InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID %s, does not exist.", id)
	case "subnet":
		if sn := s.subnetByID(id); sn != nil {
			return &sn.Tags, nil
		}
		return nil, badRequest("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
	case "sg":
		if g := s.groupByID(id); g != nil {
			return &g.Tags, nil
		}
		return nil, badRequest("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
	case "ami":
		if im := s.imageByID(id); im != nil {
			return &im.Tags, nil
		}
		return nil, badRequest("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
	}
	return nil, badRequest("InvalidID", "The ID '%s' is not valid", id)
}

func (s *Server) createTags(q query) (response, error) {
	ids := q.list("ResourceId")
	if len(ids) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter ResourceId")
	}
	tags, err := q.tags("Tag")
	if err != nil {
		return nil, err
	}
	if len(tags) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter Tag")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var targets []*map[string]string
	for _, id := range ids {
		t, err := s.tagsOf(id)
		if err != nil {
			return nil, err
		}
		merged := maps.Clone(*t)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, tags)
		if len(merged) > 50 {
			return nil, badRequest("TagLimitExceeded", "The maximum number of tags per resource (50) would be exceeded for %s.", id)
		}
		targets = append(targets, t)
	}
	for _, t := range targets {
		if *t == nil {
			*t = map[string]string{}
		}
		maps.Copy(*t, tags)
	}
	return &tagsResponse{Return: true}, nil
}

func (s *Server) deleteTags(q query) (response, error) {
	ids := q.list("ResourceId")
	if len(ids) == 0 {
		return nil, badRequest("MissingParameter", "The request must contain the parameter ResourceId")
	}
	members := q.members("Tag")
	for _, m := range members {
		if strings.HasPrefix(strings.ToLower(q.get(m+".Key")), "aws:") {
			return nil, invalidParameter("Tag keys starting with 'aws:' are reserved for internal use")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var targets []*map[string]string
	for _, id := range ids {
		t, err := s.tagsOf(id)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	for _, t := range targets {
		if len(members) == 0 {
			// Without Tag, EC2 deletes every user tag of the resource; the
			// aws: tags it set itself stay.
			maps.DeleteFunc(*t, func(k, _ string) bool { return !strings.HasPrefix(k, "aws:") })
			continue
		}
		for _, m := range members {
			key := q.get(m + ".Key")
			// With a value, the tag goes only if its value is that one.
			if q.has(m+".Value") && (*t)[key] != q.get(m+".Value") {
				continue
			}
			delete(*t, key)
		}
	}
	return &tagsResponse{Return: true}, nil
}
