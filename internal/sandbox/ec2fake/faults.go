package ec2fake

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net/http"
)

// This file is the test-facing side of the fake: fault injection and
// inspection of what the server was asked and what it holds.

// CapacityFault makes CreateFleet fail every pool it matches, as when EC2 is
// out of capacity. An empty field matches anything; InstanceType may use "*"
// and "?" wildcards; Zone may be a zone name or ID; CapacityType is
// "on-demand" or "spot".
type CapacityFault struct {
	InstanceType string
	Zone         string
	CapacityType string
	// Code is the fleet error code, InsufficientInstanceCapacity if empty.
	// Others EC2 uses: MaxSpotInstanceCountExceeded, VcpuLimitExceeded,
	// UnfulfillableCapacity, InsufficientFreeAddressesInSubnet.
	Code string
}

func (f CapacityFault) matches(instanceType string, zone Zone, capacityType string) bool {
	return (f.InstanceType == "" || globMatch(f.InstanceType, instanceType)) &&
		(f.Zone == "" || f.Zone == zone.Name || f.Zone == zone.ID) &&
		(f.CapacityType == "" || f.CapacityType == capacityType)
}

// capacityLimit caps how many more instances a set of pools can launch.
type capacityLimit struct {
	match     CapacityFault
	remaining int
}

// FailCapacity makes CreateFleet fail every pool matching f until
// ClearFaults. Faults are checked only for pools the fleet actually tries,
// as EC2 reports capacity errors only for those.
func (s *Server) FailCapacity(f CapacityFault) {
	if f.Code == "" {
		f.Code = "InsufficientInstanceCapacity"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

// LimitCapacity lets at most n more instances launch in the pools matching
// instanceType, zone and capacityType (empty: any). A fleet that wants more
// gets what is left and an InsufficientInstanceCapacity error for the pool,
// and then tries the next pool.
func (s *Server) LimitCapacity(instanceType, zone, capacityType string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = append(s.limits, &capacityLimit{
		match:     CapacityFault{InstanceType: instanceType, Zone: zone, CapacityType: capacityType},
		remaining: max(n, 0),
	})
}

// ClearFaults removes every capacity fault and limit. Throttling and denials
// are left alone: they have their own switches.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.limits = nil, nil
}

// Throttle makes the next n calls of action ("" for any action) fail with
// HTTP 503 RequestLimitExceeded, which the SDK's standard retryer retries.
func (s *Server) Throttle(action string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttles[action] += n
}

// Deny makes calls of action ("" for every action) fail with HTTP 403
// UnauthorizedOperation while deny is true, as a missing IAM permission does.
func (s *Server) Deny(action string, deny bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if deny {
		s.denied[action] = true
	} else {
		delete(s.denied, action)
	}
}

// MissingSpotRole models an account without the spot service-linked role
// (AWSServiceRoleForEC2Spot) whose caller may not create it
// (iam:CreateServiceLinkedRole): while missing is true, every spot pool of
// a CreateFleet request fails with AuthFailure.ServiceLinkedRoleCreationNotPermitted
// in the fleet's errors and launches nothing, and a DryRun of a spot fleet
// fails with that error. On-demand is unaffected.
func (s *Server) MissingSpotRole(missing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noSpotRole = missing
}

// SpotRoleCode and spotRoleMessage are what EC2 answers a spot request
// with when the account has no spot service-linked role and the caller
// may not create it.
const (
	SpotRoleCode    = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
	spotRoleMessage = "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances."
)

// wantsSpot: a CreateFleet request asks for spot capacity.
func wantsSpot(q query) bool {
	sp, _, _ := q.int("TargetCapacitySpecification.SpotTargetCapacity")
	return q.get("TargetCapacitySpecification.DefaultTargetCapacityType") == spot || sp > 0
}

// dryRunSpotRole is the answer to a DryRun of a spot fleet without the
// spot service-linked role.
func (s *Server) dryRunSpotRole(action string, q query) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if action == "CreateFleet" && s.noSpotRole && wantsSpot(q) {
		return &apiError{Status: http.StatusForbidden, Code: SpotRoleCode, Message: spotRoleMessage}
	}
	return nil
}

// impliedPermissions checks what a call needs beside its own action, with
// the Deny switches: a request that tags what it creates
// (TagSpecification) needs ec2:CreateTags, and one that names an instance
// profile (RunInstances) needs iam:PassRole of its role, Deny("iam:PassRole").
func (s *Server) impliedPermissions(action string, q query) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	creates := action == "CreateFleet" || action == "CreateLaunchTemplate" || action == "RunInstances"
	if creates && len(q.members("TagSpecification")) > 0 && (s.denied["CreateTags"] || s.denied[""]) {
		return s.unauthorized("ec2:CreateTags", "")
	}
	profile := cmp.Or(q.get("IamInstanceProfile.Arn"), q.get("IamInstanceProfile.Name"))
	if action == "RunInstances" && profile != "" && s.denied["iam:PassRole"] {
		return s.unauthorized("iam:PassRole", fmt.Sprintf("arn:aws:iam::%s:instance-profile/%s", s.world.AccountID, profile))
	}
	return nil
}

// unauthorized is EC2's UnauthorizedOperation for a caller without the
// IAM action (such as "ec2:CreateFleet") on resource ("" for none named).
func (s *Server) unauthorized(iamAction, resource string) error {
	// Real EC2 appends an encrypted blob that sts:DecodeAuthorizationMessage
	// turns back into JSON; this one is just base64 so a curious reader
	// can decode it by hand.
	detail := fmt.Sprintf(`{"allowed":false,"explicitDeny":false,"action":"%s","principal":"%s"}`, iamAction, s.callerARN())
	on := ""
	if resource != "" {
		on = " on resource: " + resource
	}
	return &apiError{Status: http.StatusForbidden, Code: "UnauthorizedOperation", Message: fmt.Sprintf(
		"You are not authorized to perform this operation. User: %s is not authorized to perform: %s%s because no identity-based policy allows the %s action. Encoded authorization failure message: %s",
		s.callerARN(), iamAction, on, iamAction, base64.StdEncoding.EncodeToString([]byte(detail)))}
}

// SetSpotPrice changes the Spot price of an instance type in a zone, as the
// market does; DescribeSpotPriceHistory then reports it from now on.
func (s *Server) SetSpotPrice(instanceType, zone string, price float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.world.SpotPrices[instanceType] == nil {
		s.world.SpotPrices[instanceType] = map[string]float64{}
	}
	s.world.SpotPrices[instanceType][zone] = price
	s.priceTime = s.now()
}

// SetFreeAddresses leaves n addresses of the subnet free (at most what its
// CIDR has), as when other network interfaces take or give back the rest:
// DescribeSubnets reports n, CreateFleet launches at most n instances
// there and fails the subnet's overrides with
// InsufficientFreeAddressesInSubnet beyond that, and addresses the fake's
// instances give back later are free again on top of n. It panics on a
// subnet the world does not have, which is a mistake in the test.
func (s *Server) SetFreeAddresses(subnetID string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.subnetByID(subnetID)
	if sn == nil {
		panic("ec2fake: SetFreeAddresses of unknown subnet " + subnetID)
	}
	s.settle(s.now())
	sn.capacity = min(len(sn.used)+max(n, 0), sn.usable())
}

// injectedFailure returns the throttling or denial error for a call, if any.
func (s *Server) injectedFailure(action string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range []string{action, ""} {
		if s.throttles[key] > 0 {
			s.throttles[key]--
			return &apiError{Status: http.StatusServiceUnavailable, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
		}
	}
	if s.denied[action] || s.denied[""] {
		return s.unauthorized("ec2:"+action, "")
	}
	return nil
}

// matchFault returns the first capacity fault matching a pool.
func (s *Server) matchFault(instanceType string, zone Zone, capacityType string) (CapacityFault, bool) {
	for _, f := range s.faults {
		if f.matches(instanceType, zone, capacityType) {
			return f, true
		}
	}
	return CapacityFault{}, false
}

// limitFor returns the tightest capacity limit on a pool, if it has one.
func (s *Server) limitFor(instanceType string, zone Zone, capacityType string) (int, bool) {
	n, limited := 0, false
	for _, l := range s.limits {
		if l.match.matches(instanceType, zone, capacityType) && (!limited || l.remaining < n) {
			n, limited = l.remaining, true
		}
	}
	return n, limited
}

func (s *Server) consumeLimit(instanceType string, zone Zone, capacityType string) {
	for _, l := range s.limits {
		if l.match.matches(instanceType, zone, capacityType) && l.remaining > 0 {
			l.remaining--
		}
	}
}

// faultMessage is the message EC2 gives with each capacity error code.
func faultMessage(code, instanceType, zone, subnet string) string {
	switch code {
	case "InsufficientInstanceCapacity":
		return fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity.", instanceType, zone)
	case "MaxSpotInstanceCountExceeded":
		return "Max spot instance count exceeded"
	case "VcpuLimitExceeded":
		return "You have requested more vCPU capacity than your current vCPU limit allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."
	case "UnfulfillableCapacity":
		return "Unable to fulfill capacity due to your request configuration. Please adjust your request and try again."
	case "InsufficientFreeAddressesInSubnet":
		return fmt.Sprintf("There are not enough free addresses in subnet '%s' to satisfy the requested number of instances.", subnet)
	}
	return fmt.Sprintf("Injected capacity fault for %s in %s.", instanceType, zone)
}

// Requests returns every request received, in order, failed ones included.
func (s *Server) Requests() []Request { return s.log.All() }

// Calls returns how many requests of action were received, retries and
// failures included.
func (s *Server) Calls(action string) int { return s.log.Count(action) }

// Launches returns how many CreateFleet requests were received that were
// not dry runs: the launches clients tried, refused ones included. A
// client's permission checks (DryRun) are not launches.
func (s *Server) Launches() int {
	n := 0
	for _, r := range s.log.All() {
		if r.Action == "CreateFleet" && r.Form.Get("DryRun") != "true" {
			n++
		}
	}
	return n
}

// Instances returns a copy of every instance, terminated ones included, in
// launch order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]Instance, 0, len(s.instances))
	for _, inst := range s.instances {
		s.advance(inst, now)
		out = append(out, inst.clone())
	}
	return out
}

// LaunchTemplates returns a copy of every launch template, in creation order.
func (s *Server) LaunchTemplates() []LaunchTemplate {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LaunchTemplate, 0, len(s.templates))
	for _, lt := range s.templates {
		out = append(out, lt.clone())
	}
	return out
}

// OnLaunch registers f to be called with each instance CreateFleet launches.
// It runs on the request's goroutine, without the server's lock held and
// before the response is written, so whatever f does (say, registering a
// simulated node) is done by the time the client sees the instance ID.
func (s *Server) OnLaunch(f func(Instance)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onLaunch = append(s.onLaunch, f)
}

// OnTerminate registers f to be called, like OnLaunch's functions, with each
// instance TerminateInstances moves to shutting-down. It is called once per
// instance: terminating it again does not call f.
func (s *Server) OnTerminate(f func(Instance)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onTerminate = append(s.onTerminate, f)
}

// AddInstance plants an instance that no fleet launched, such as an orphan
// for a garbage-collection test, and returns it as stored. OnLaunch functions
// are not called. Missing fields are filled in: ID, reservation, state
// (running), launch time (now), and, from the subnet when SubnetID names one,
// zone, VPC, private IP and DNS name.
func (s *Server) AddInstance(inst Instance) Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := inst.clone()
	if c.ID == "" {
		c.ID = newID("i")
	}
	if c.ReservationID == "" {
		c.ReservationID = newID("r")
	}
	if c.State == "" {
		c.State = "running"
	}
	if c.LaunchTime.IsZero() {
		c.LaunchTime = s.now()
	}
	if c.Lifecycle == "" {
		c.Lifecycle = onDemand
	}
	if c.Tags == nil {
		c.Tags = map[string]string{}
	}
	if (c.State == "shutting-down" || c.State == "terminated") && c.TerminateTime.IsZero() {
		c.TerminateTime = s.now()
	}
	if sn := s.subnetByID(c.SubnetID); sn != nil {
		c.Zone, c.ZoneID, c.VpcID = sn.Zone, sn.ZoneID, sn.VpcID
		if c.PrivateIP == "" && c.State != "terminated" {
			c.PrivateIP, _ = sn.allocate()
		}
	}
	if c.ZoneID == "" {
		c.ZoneID = s.zones[c.Zone].ID
	}
	if c.PrivateDNSName == "" {
		c.PrivateDNSName = s.privateDNSName(c.PrivateIP)
	}
	if c.Architecture == "" && s.types[c.Type] != nil {
		c.Architecture = s.types[c.Type].architectures()[0]
	}
	s.instances = append(s.instances, &c)
	return c.clone()
}

// AddImage registers an image, as a publisher releasing a new one would;
// a creation date of zero is now.
func (s *Server) AddImage(img Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if img.CreationDate.IsZero() {
		img.CreationDate = s.now()
	}
	s.images = append(s.images, &img)
}
