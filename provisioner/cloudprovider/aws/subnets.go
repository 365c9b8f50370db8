package aws

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// A launch goes, in each zone, to the class's subnet with the most free
// addresses: what DescribeSubnets last said (AvailableIpAddressCount) less
// one address for each instance this provider launched there since that
// reading began. A subnet out of addresses is a property of the subnet,
// not of the offering: it never closes a zone that has another subnet with
// room, and a zone closes (its offerings unavailable for now) only when
// none of its subnets has any.

// codeNoFreeAddresses is the fleet error of an override whose subnet has no
// address left for the instance.
const codeNoFreeAddresses = "InsufficientFreeAddressesInSubnet"

const (
	// subnetReadingTTL is how long a reading of free addresses is used
	// before the next launch reads again. The provider's own launches are
	// counted as they happen, so the TTL only bounds how long it misses
	// what others take or give back (the VPC CNI's warm addresses on
	// running nodes, other launchers, terminations): a minute keeps
	// DescribeSubnets to about one call a minute however many launches
	// there are. A refusal (codeNoFreeAddresses) reads again at once.
	subnetReadingTTL = time.Minute
	// subnetRefusalTTL: a refusal stands for the subnet's reading (no
	// free address) until DescribeSubnets answers again, and at most this
	// long if it does not.
	subnetRefusalTTL = 3 * time.Minute
	// subnetReadRetry spaces the reads after a failed one; launches go on
	// with the last reading meanwhile.
	subnetReadRetry = 10 * time.Second
	// subnetFilterValues caps the subnet IDs of one DescribeSubnets
	// filter (EC2 takes up to 200 values per filter).
	subnetFilterValues = 200
)

// subnetRooms is what the provider knows of the free addresses of the
// subnets it launches into. Its zero value is ready to use.
//
// Launches and refusals are numbered in the order they happen (seq). A
// reading remembers the number current when its DescribeSubnets call began:
// every launch up to that number had returned before EC2 counted, so the
// reading includes it, and only later launches are subtracted. A launch
// whose answer came while the reading was on its way is subtracted once
// too often until the next reading, which errs on the side of room.
type subnetRooms struct {
	// reading serialises DescribeSubnets calls, so that launches that
	// find the readings stale at once wait for one call, not make one
	// each.
	reading sync.Mutex

	mu       sync.Mutex
	seq      uint64
	subnets  map[string]*subnetRoom
	failedAt time.Time // when a read last failed
}

// subnetRoom is one subnet's last reading (its free addresses) and the
// launches since.
type subnetRoom struct {
	launchCount
	readAt time.Time
	// refusedAt is set when the count is EC2's refusal rather than a
	// reading.
	refusedAt time.Time
}

func (r *subnetRooms) room(id string) *subnetRoom { return entry(&r.subnets, id) }

// begin returns the number a reading about to start includes launches up to.
func (r *subnetRooms) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// observe records what a DescribeSubnets call begun at seq said. Subnets
// asked for by ID and missing from the answer (deleted) are known to have
// no room.
func (r *subnetRooms) observe(now time.Time, seq uint64, asked []string, subnets []ec2types.Subnet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	set := func(id string, free int) {
		if s := r.room(id); s.observe(free, seq) {
			s.readAt, s.refusedAt = now, time.Time{}
		}
	}
	for _, sn := range subnets {
		id := sdkaws.ToString(sn.SubnetId)
		seen[id] = true
		set(id, int(sdkaws.ToInt32(sn.AvailableIpAddressCount)))
	}
	for _, id := range asked {
		if !seen[id] {
			set(id, 0)
		}
	}
}

// launched counts n addresses taken in the subnet by instances just launched.
func (r *subnetRooms) launched(subnet string, n int) {
	if subnet == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.room(subnet)
	for range n {
		r.seq++
		s.launched(r.seq)
	}
}

// refused records EC2's answer that the subnet had no free address: it
// stands for a reading of zero until DescribeSubnets answers again.
func (r *subnetRooms) refused(now time.Time, subnet string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	s := r.room(subnet)
	s.refused(r.seq)
	s.refusedAt = now
}

// failed records a read that failed.
func (r *subnetRooms) failed(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failedAt = now
}

// stale reports whether any of the subnets needs reading again: never
// read, read more than subnetReadingTTL ago, or refused since; not within
// subnetReadRetry of a failed read.
func (r *subnetRooms) stale(now time.Time, ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.failedAt) < subnetReadRetry {
		return false
	}
	for _, id := range ids {
		s := r.subnets[id]
		if s == nil || !s.known || !s.refusedAt.IsZero() || now.Sub(s.readAt) >= subnetReadingTTL {
			return true
		}
	}
	return false
}

// free is the subnet's free addresses less the launches not in its
// reading, and false when nothing is known of it (never read, or a
// refusal that no reading has followed for subnetRefusalTTL).
func (r *subnetRooms) free(now time.Time, id string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.subnets[id]
	if s == nil || !s.known || (!s.refusedAt.IsZero() && now.Sub(s.refusedAt) >= subnetRefusalTTL) {
		return 0, false
	}
	n := s.value - s.since()
	return n, true
}

// readSubnets reads the free addresses of the subnets when the readings
// are stale. A failed read is logged and the launch goes on with what is
// known: choosing a subnet by an old count is better than not launching.
func (p *Provider) readSubnets(ctx context.Context, ids []string) {
	rooms := &p.subnetRooms
	if !rooms.stale(p.now(), ids) {
		return
	}
	rooms.reading.Lock()
	defer rooms.reading.Unlock()
	if !rooms.stale(p.now(), ids) {
		return // read by a launch that held the lock before this one
	}
	for chunk := range slices.Chunk(ids, subnetFilterValues) {
		seq := rooms.begin()
		var found []ec2types.Subnet
		pages := ec2.NewDescribeSubnetsPaginator(p.ec2, &ec2.DescribeSubnetsInput{
			Filters: []ec2types.Filter{{Name: sdkaws.String("subnet-id"), Values: chunk}},
		})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				rooms.failed(p.now())
				klog.FromContext(ctx).Error(classify("DescribeSubnets", err), "Reading the subnets' free addresses failed; choosing subnets by the last reading", "subnets", chunk)
				return
			}
			found = append(found, page.Subnets...)
		}
		rooms.observe(p.now(), seq, chunk, found)
	}
}

// subnetFree is a subnet and its free addresses, as far as known.
type subnetFree struct {
	id    string
	free  int
	known bool
}

func (s subnetFree) String() string {
	if !s.known {
		return s.id + " (free addresses unknown)"
	}
	return fmt.Sprintf("%s (%d free)", s.id, s.free)
}

// zoneSubnets ranks each zone's subnets of the class, the one to launch
// into first: most free addresses, then those not known, then by ID so
// that equal state gives the same request. Subnets known to have no free
// address are left out; a zone whose subnets all are has none, and its
// subnets come back in full.
func (p *Provider) zoneSubnets(class *v1alpha1.EC2NodeClass) (ranked, full map[string][]subnetFree) {
	now := p.now()
	ranked, full = map[string][]subnetFree{}, map[string][]subnetFree{}
	for _, s := range class.Status.Subnets {
		free, known := p.subnetRooms.free(now, s.ID)
		sf := subnetFree{id: s.ID, free: free, known: known}
		if known && free <= 0 {
			full[s.Zone] = append(full[s.Zone], sf)
			continue
		}
		ranked[s.Zone] = append(ranked[s.Zone], sf)
	}
	for _, subnets := range ranked {
		slices.SortFunc(subnets, func(a, b subnetFree) int {
			if a.known != b.known {
				if a.known {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.id, b.id))
		})
	}
	for zone := range ranked {
		delete(full, zone)
	}
	return ranked, full
}

// subnetsByRoom reads the class's subnets' free addresses if the readings
// are stale, and returns the subnet to launch into in each zone that has
// one with room, and the zones where none has.
func (p *Provider) subnetsByRoom(ctx context.Context, class *v1alpha1.EC2NodeClass) (map[string]subnetFree, map[string][]subnetFree) {
	ids := make([]string, 0, len(class.Status.Subnets))
	for _, s := range class.Status.Subnets {
		ids = append(ids, s.ID)
	}
	p.readSubnets(ctx, ids)
	ranked, full := p.zoneSubnets(class)
	chosen := make(map[string]subnetFree, len(ranked))
	logger := klog.FromContext(ctx)
	for zone, subnets := range ranked {
		chosen[zone] = subnets[0]
		logger.V(4).Info("Chose the subnet with the most free addresses", "zone", zone, "subnet", subnets[0].id, "freeAddresses", subnets[0].free, "known", subnets[0].known)
	}
	return chosen, full
}

func subnetIDs(subnets []subnetFree) []string {
	out := make([]string, len(subnets))
	for i, s := range subnets {
		out[i] = s.id
	}
	return out
}

// addressShortage is what one launch learned of subnets out of addresses
// (and of capacity reservations out of room): offers of zones none of
// whose subnets has a free address (or of types whose reservations are
// full), which are unavailable for now like offers refused for capacity,
// and a sentence for each zone where subnets ran out (and each type whose
// reservations did).
type addressShortage struct {
	class  string
	offers []cloudprovider.Offer
	notes  map[string]string // by zone
}

// closeZone leaves an offer out: no subnet of its zone has room. The
// first offer of each zone logs it.
func (a *addressShortage) closeZone(ctx context.Context, o cloudprovider.Offer, subnets []subnetFree) {
	a.offers = append(a.offers, o)
	if _, noted := a.notes[o.Zone]; !noted {
		klog.FromContext(ctx).Info("No subnet of the zone has a free IP address; its offerings are unavailable for now",
			"ec2NodeClass", a.class, "zone", o.Zone, "subnets", subnetIDs(subnets), "freeAddresses", 0)
	}
	a.note(o.Zone, fmt.Sprintf("no subnet of EC2NodeClass %s in zone %s has a free IP address (%s): nothing launches in %s until addresses are freed there or a subnet of %s with room matches subnetSelectorTerms",
		a.class, o.Zone, strings.Join(subnetIDs(subnets), ", "), o.Zone, o.Zone))
}

// reservationsFull leaves a reserved offer out: the class's reservations
// of its type and zone have no room left, as far as the provider counts.
func (a *addressShortage) reservationsFull(ctx context.Context, o cloudprovider.Offer) {
	a.offers = append(a.offers, o)
	klog.FromContext(ctx).V(2).Info("Capacity reservations of the type have no room left; not asking EC2", "ec2NodeClass", a.class,
		"instanceType", o.InstanceType.Name, "zone", o.Zone, "capacityType", o.CapacityType)
	a.note(o.InstanceType.Name+"/"+o.Zone, fmt.Sprintf("the capacity reservations of EC2NodeClass %s for %s in %s have no room left", a.class, o.InstanceType.Name, o.Zone))
}

func (a *addressShortage) note(zone, sentence string) {
	if a.notes == nil {
		a.notes = map[string]string{}
	}
	a.notes[zone] = sentence
}

// wrap returns the error of a launch that launched nothing: ice, with the
// shortage's sentences before its own message.
func (a *addressShortage) wrap(ice *cloudprovider.InsufficientCapacityError) error {
	if len(a.notes) == 0 {
		return ice
	}
	notes := make([]string, 0, len(a.notes))
	for _, zone := range slices.Sorted(maps.Keys(a.notes)) {
		notes = append(notes, a.notes[zone])
	}
	return &noAddressesError{msg: strings.Join(notes, "; "), ice: ice}
}

// noAddressesError is an InsufficientCapacityError (errors.As finds it)
// whose message says which subnets ran out of addresses.
type noAddressesError struct {
	msg string
	ice *cloudprovider.InsufficientCapacityError
}

func (e *noAddressesError) Error() string {
	if len(e.ice.Offers) == 0 {
		return e.msg // no offer refused: "for all 0 offers tried" would only confuse
	}
	return e.msg + "; " + e.ice.Error()
}
func (e *noAddressesError) Unwrap() error { return e.ice }

// noFreeAddresses handles EC2 refusing offer o for lack of addresses in
// subnet: the subnet has no room until it is read again, and the zone goes
// on with its next subnet; only when it has none is the offer refused.
func (p *Provider) noFreeAddresses(ctx context.Context, class *v1alpha1.EC2NodeClass, subnet string, o cloudprovider.Offer, short *addressShortage) {
	p.subnetRooms.refused(p.now(), subnet)
	ranked, full := p.zoneSubnets(class)
	logger := klog.FromContext(ctx)
	if next := ranked[o.Zone]; len(next) > 0 {
		logger.Info("Subnet has no free address; the next launch in its zone uses another subnet", "subnet", subnet, "zone", o.Zone,
			"instanceType", o.InstanceType.Name, "nextSubnet", next[0].id, "freeAddresses", next[0].free)
		short.note(o.Zone, fmt.Sprintf("subnet %s in zone %s has no free IP address; the next launch in %s uses subnet %s", subnet, o.Zone, o.Zone, next[0]))
		return
	}
	logger.Info("Subnet has no free address, nor has any other subnet of its zone", "subnet", subnet, "zone", o.Zone,
		"instanceType", o.InstanceType.Name, "freeAddresses", 0)
	short.closeZone(ctx, o, full[o.Zone])
}

// overrideSubnet is the subnet a fleet's answer names.
func overrideSubnet(lto *ec2types.LaunchTemplateAndOverridesResponse) string {
	if lto == nil || lto.Overrides == nil {
		return ""
	}
	return sdkaws.ToString(lto.Overrides.SubnetId)
}
