package aws

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// On-demand capacity reservations (ODCRs). A class's
// capacityReservationSelectorTerms resolve, with DescribeCapacityReservations
// (active ones only), into status.capacityReservations. Each (instance
// type, zone) with a reservation the class can launch is offered as
// capacity type "reserved", its count the reservations' available
// instances less the launches the provider has made into them since EC2
// counted (reservationLedger). A reserved launch names one reservation per
// instance type in its launch template (CapacityReservationSpecification:
// preference capacity-reservations-only and the reservation as target), as
// Karpenter's AWS provider does for its reserved launches
// (pkg/providers/launchtemplate/types.go); CreateFleet's overrides cannot
// name a reservation, and OnDemandOptions.CapacityReservationOptions'
// UsageStrategy use-capacity-reservations-first only fills on-demand
// capacity from whichever unused reservations match first (the SDK's
// CapacityReservationOptionsRequest; targeted ones only through a
// reservation group in the template), so the template is how a fleet
// targets one reservation. The fleet
// is on-demand (DefaultTargetCapacityType on-demand, lowest-price), as
// Karpenter sends its default ODCR launches. EC2 answers an override whose
// reservation is full with ReservationCapacityExceeded (the fleet error
// Karpenter's pkg/errors reads as a capacity error): the offering is
// refused like any capacity error, and the claim falls back to the next
// offering or, with none left, is made again by the scheduler on spot or
// on-demand.
//
// The other launches of a class with reservation terms say preference
// none, so that an on-demand instance never lands in one of the class's
// open reservations unasked: it would be labelled on-demand, and the
// reservation's count would be wrong until EC2 was asked again.

// ConditionCapacityReservationsReady says, for a class with
// capacityReservationSelectorTerms, whether they matched reservations it
// can launch into; the class stays Ready either way (spot and on-demand
// still launch). Absent for a class without terms.
const ConditionCapacityReservationsReady = "CapacityReservationsReady"

// codeReservationFull is the fleet error of an override whose reservation
// has no room left.
const codeReservationFull = "ReservationCapacityExceeded"

// reservedPriceFactor prices a reserved offering: its type's on-demand
// price times 10⁻⁹. A reservation is paid for whether or not it runs an
// instance, so launching into it costs nothing more; the factor makes it
// cheaper than any spot or on-demand offering (the cheapest spot prices
// are about 10⁻³ $/h, and even pricing.UnknownPrice times the factor is
// 10⁻⁴), so reserved offerings are always chosen first, while two reserved
// types keep the order of their on-demand prices for repacking and
// consolidation. Karpenter divides by 10⁷ for the same reason
// (pkg/providers/instancetype/offering/reserved_capacity_resolver.go);
// the smaller factor keeps pricing.UnknownPrice below spot too.
const reservedPriceFactor = 1e-9

// reservationsTTL is how long a class's reservation counts are used before
// InstanceTypes asks EC2 again: launches are counted as they happen, so
// this only bounds how long instances that terminated (or launches by
// others) go unseen.
const reservationsTTL = time.Minute

// resolvedReservations is what a class's terms resolved to.
type resolvedReservations struct {
	found []v1alpha1.ResolvedCapacityReservation
	// skipped says, per reservation matched but not usable, why.
	skipped []string
}

// describeReservations resolves the terms: every active reservation a term
// matches that Nodeforge can launch into, sorted by zone, type and id. A
// term naming an id EC2 does not know matches nothing. The counts read go
// to the ledger.
func (p *Provider) describeReservations(ctx context.Context, terms []v1alpha1.CapacityReservationSelectorTerm) (resolvedReservations, error) {
	var out resolvedReservations
	seen := map[string]bool{}
	now := p.now()
	for _, t := range terms {
		active := ec2types.Filter{Name: sdkaws.String("state"), Values: []string{string(ec2types.CapacityReservationStateActive)}}
		in := &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{active}}
		if t.ID != "" {
			// Asked by id, EC2 takes no MaxResults.
			in.CapacityReservationIds = []string{t.ID}
		} else {
			in.Filters = append(in.Filters, tagFilters(t.Tags)...)
			if t.OwnerID != "" {
				in.Filters = append(in.Filters, ec2types.Filter{Name: sdkaws.String("owner-id"), Values: []string{t.OwnerID}})
			}
			if t.InstanceMatchCriteria != "" {
				in.Filters = append(in.Filters, ec2types.Filter{Name: sdkaws.String("instance-match-criteria"), Values: []string{t.InstanceMatchCriteria}})
			}
			in.MaxResults = sdkaws.Int32(1000)
		}
		seq := p.reservations.begin()
		pages := ec2.NewDescribeCapacityReservationsPaginator(p.ec2, in)
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				err = classify("DescribeCapacityReservations", err)
				if t.ID != "" && errors.Is(err, cloudprovider.ErrNotFound) {
					// EC2 fails a call naming an id it does not know.
					out.skipped = append(out.skipped, t.ID+" does not exist")
					break
				}
				return out, err
			}
			for _, cr := range page.CapacityReservations {
				id := sdkaws.ToString(cr.CapacityReservationId)
				if seen[id] {
					continue
				}
				seen[id] = true
				if why := unusable(cr, now); why != "" {
					out.skipped = append(out.skipped, id+" "+why)
					continue
				}
				p.reservations.observe(id, int(sdkaws.ToInt32(cr.AvailableInstanceCount)), seq)
				r := v1alpha1.ResolvedCapacityReservation{
					ID: id, InstanceType: sdkaws.ToString(cr.InstanceType), Zone: sdkaws.ToString(cr.AvailabilityZone),
					AvailableInstanceCount: sdkaws.ToInt32(cr.AvailableInstanceCount), OwnerID: sdkaws.ToString(cr.OwnerId),
					InstanceMatchCriteria: string(cr.InstanceMatchCriteria),
				}
				if cr.EndDate != nil {
					r.EndTime = &metav1.Time{Time: cr.EndDate.UTC()}
				}
				out.found = append(out.found, r)
			}
		}
	}
	slices.SortFunc(out.found, func(a, b v1alpha1.ResolvedCapacityReservation) int {
		return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.InstanceType, b.InstanceType), cmp.Compare(a.ID, b.ID))
	})
	slices.Sort(out.skipped)
	return out, nil
}

// unusable says why Nodeforge does not launch into the reservation, or "".
func unusable(cr ec2types.CapacityReservation, now time.Time) string {
	switch {
	case cr.ReservationType != "" && cr.ReservationType != ec2types.CapacityReservationTypeDefault:
		return fmt.Sprintf("is a %s (Capacity Blocks for ML are not supported yet)", cr.ReservationType)
	case sdkaws.ToBool(cr.Interruptible):
		return "is interruptible (not supported yet)"
	case cr.InstancePlatform != ec2types.CapacityReservationInstancePlatformLinuxUnix:
		return fmt.Sprintf("is for %s instances, not Linux/UNIX", cr.InstancePlatform)
	case cr.Tenancy != "" && cr.Tenancy != ec2types.CapacityReservationTenancyDefault:
		return fmt.Sprintf("has %s tenancy (Nodeforge launches default tenancy)", cr.Tenancy)
	case cr.EndDate != nil && !now.Before(*cr.EndDate):
		return "has ended"
	}
	return ""
}

// resolveReservations sets the class's reservations and their condition in
// status. A class without terms has neither. A denied call keeps what the
// class resolved to before and says so; any other failure is returned.
func (p *Provider) resolveReservations(ctx context.Context, class *v1alpha1.EC2NodeClass, status *v1alpha1.EC2NodeClassStatus, set func(typ string, ok bool, reason, msg string)) error {
	terms := class.Spec.CapacityReservationSelectorTerms
	if len(terms) == 0 {
		p.reservations.forget(class.Name)
		meta.RemoveStatusCondition(&status.Conditions, ConditionCapacityReservationsReady)
		return nil
	}
	began := p.now()
	res, err := p.describeReservations(ctx, terms)
	if cloudprovider.IsAccessDenied(err) {
		status.CapacityReservations = class.Status.CapacityReservations
		set(ConditionCapacityReservationsReady, false, "DescribeDenied",
			fmt.Sprintf("%v; the class launches spot and on-demand capacity, and into the reservations it resolved to before (%d)", err, len(status.CapacityReservations)))
		return nil
	}
	if err != nil {
		return err
	}
	p.reservations.described(class.Name, began)
	status.CapacityReservations = res.found
	skipped := ""
	if len(res.skipped) > 0 {
		skipped = "; not launched into: " + strings.Join(res.skipped, ", ")
	}
	if len(res.found) == 0 {
		set(ConditionCapacityReservationsReady, false, "NoneMatched", "no active capacity reservation matches capacityReservationSelectorTerms"+skipped)
		return nil
	}
	ids := make([]string, len(res.found))
	for i, r := range res.found {
		ids[i] = r.ID
	}
	set(ConditionCapacityReservationsReady, true, "Resolved", strings.Join(ids, ", ")+skipped)
	return nil
}

// refreshReservations asks EC2 for the class's reservation counts again
// when they are older than reservationsTTL. A failure is logged, and asked
// again after reservationsTTL: the counts the provider has stand.
func (p *Provider) refreshReservations(ctx context.Context, class *v1alpha1.EC2NodeClass) {
	if len(class.Spec.CapacityReservationSelectorTerms) == 0 || !p.reservations.stale(class.Name, p.now()) {
		return
	}
	p.reservations.described(class.Name, p.now())
	if _, err := p.describeReservations(ctx, class.Spec.CapacityReservationSelectorTerms); err != nil {
		klog.FromContext(ctx).Error(err, "Refreshing capacity reservation counts failed; keeping the last ones", "ec2NodeClass", klog.KObj(class), "retryAfter", reservationsTTL)
	}
}

// reservedOffering is the reservations of a class for one instance type in
// one zone, and how many more instances they take.
type reservedOffering struct {
	ids   []string
	count int
}

// reservedOfferings are the class's reservations by instance type and
// zone, those that have ended left out.
func (p *Provider) reservedOfferings(class *v1alpha1.EC2NodeClass) map[string]map[string]*reservedOffering {
	if class == nil || len(class.Spec.CapacityReservationSelectorTerms) == 0 {
		return nil
	}
	now := p.now()
	out := map[string]map[string]*reservedOffering{}
	for _, r := range class.Status.CapacityReservations {
		if r.EndTime != nil && !now.Before(r.EndTime.Time) {
			continue
		}
		if out[r.InstanceType] == nil {
			out[r.InstanceType] = map[string]*reservedOffering{}
		}
		o := out[r.InstanceType][r.Zone]
		if o == nil {
			o = &reservedOffering{}
			out[r.InstanceType][r.Zone] = o
		}
		o.ids = append(o.ids, r.ID)
		o.count += p.reservations.available(r.ID, int(r.AvailableInstanceCount))
	}
	return out
}

// reservationFor takes a place, for one launch, in the class's reservation
// of the instance type in the zone with the most room: the reservation's
// id, or "" when none has room. The caller gives it back with release once
// the launch has its answer.
func (p *Provider) reservationFor(class *v1alpha1.EC2NodeClass, instanceType, zone string) string {
	var ids []string
	fallback := map[string]int{}
	now := p.now()
	for _, r := range class.Status.CapacityReservations {
		if r.InstanceType == instanceType && r.Zone == zone && (r.EndTime == nil || now.Before(r.EndTime.Time)) {
			ids = append(ids, r.ID)
			fallback[r.ID] = int(r.AvailableInstanceCount)
		}
	}
	return p.reservations.take(ids, fallback)
}

// reservationLabels are the labels of a node in reservation id.
func reservationLabels(id string) map[string]string {
	return map[string]string{v1alpha1.LabelCapacityReservationID: id, v1alpha1.LabelKarpenterCapacityReservationID: id}
}

// reservationLedger counts how many more instances each reservation takes:
// what DescribeCapacityReservations last said, less the instances the
// provider launched into it since that call began and the launches under
// way that hold a place in it. Each count is a launchCount, as each
// subnet's free addresses are (launchcount.go).
type reservationLedger struct {
	mu  sync.Mutex
	seq uint64
	ids map[string]*reservationCount
	// describedAt is when each class's reservations were last described.
	describedAt map[string]time.Time
}

// reservationCount is one reservation's count (its available instances),
// the launches since, and the places launches under way hold in it.
type reservationCount struct {
	launchCount
	held int
}

func (l *reservationLedger) count(id string) *reservationCount { return entry(&l.ids, id) }

// begin returns the number a call about to start includes launches up to.
func (l *reservationLedger) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// observe records EC2's available count of a reservation, from a call
// begun at seq.
func (l *reservationLedger) observe(id string, available int, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(id).observe(available, seq) // not when EC2 refused a launch since: that is newer
}

// left is how many more instances a reservation takes; fallback is the
// class's status figure, for a reservation the provider has not read.
func (c *reservationCount) left(fallback int) int {
	n := fallback
	if c.known {
		n = c.value
	}
	return max(n-c.since()-c.held, 0)
}

// available is how many more instances the reservation takes.
func (l *reservationLedger) available(id string, fallback int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count(id).left(fallback)
}

// take holds a place in the reservation of ids with the most room and
// returns it, or "" when none has any.
func (l *reservationLedger) take(ids []string, fallback map[string]int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	best, room := "", 0
	for _, id := range ids {
		if n := l.count(id).left(fallback[id]); n > room || n == room && n > 0 && id < best {
			best, room = id, n
		}
	}
	if best != "" {
		l.count(best).held++
	}
	return best
}

// release gives back a place take held.
func (l *reservationLedger) release(id string) {
	if id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.count(id); c.held > 0 {
		c.held--
	}
}

// launched records an instance launched into the reservation.
func (l *reservationLedger) launched(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.count(id).launched(l.seq)
}

// full records EC2's answer that the reservation has no room
// (ReservationCapacityExceeded), until a call begun after it says
// otherwise.
func (l *reservationLedger) full(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	l.count(id).refused(l.seq)
}

// described records when a class's reservations were described.
func (l *reservationLedger) described(class string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.describedAt == nil {
		l.describedAt = map[string]time.Time{}
	}
	l.describedAt[class] = at
}

// stale: the class's reservations were described longer than
// reservationsTTL ago, or never by this provider.
func (l *reservationLedger) stale(class string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.describedAt[class]
	return !ok || now.Sub(at) > reservationsTTL
}

func (l *reservationLedger) forget(class string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.describedAt, class)
}

// reservationPlan is where a reserved launch's offers go: the offers with a
// reservation that has room, cheapest first, the reservation of each type
// and zone (one: a fleet takes one pool per type and subnet), and the
// reservation whose place the launch holds, that of the cheapest offer,
// where EC2's lowest-price fleet launches first.
type reservationPlan struct {
	offers []cloudprovider.Offer
	byPool map[reservationPool]string
	held   string
}

// reservationPool is an instance type in a zone.
type reservationPool struct{ instanceType, zone string }

// planReservations chooses a reservation with room for each offer; offers
// whose reservations have none are refused without asking EC2, added to
// short.
func (p *Provider) planReservations(ctx context.Context, class *v1alpha1.EC2NodeClass, offers []cloudprovider.Offer, short *addressShortage) reservationPlan {
	plan := reservationPlan{byPool: map[reservationPool]string{}}
	for _, o := range offers {
		pool := reservationPool{o.InstanceType.Name, o.Zone}
		if _, ok := plan.byPool[pool]; ok {
			plan.offers = append(plan.offers, o)
			continue
		}
		var id string
		if plan.held == "" {
			id = p.reservationFor(class, pool.instanceType, pool.zone)
			plan.held = id
		} else {
			id = p.roomiestReservation(class, pool.instanceType, pool.zone)
		}
		if id == "" {
			short.reservationsFull(ctx, o)
			continue
		}
		plan.byPool[pool] = id
		plan.offers = append(plan.offers, o)
	}
	return plan
}

// roomiestReservation is the class's reservation of the type in the zone
// with the most room, without holding a place in it, or "".
func (p *Provider) roomiestReservation(class *v1alpha1.EC2NodeClass, instanceType, zone string) string {
	id := p.reservationFor(class, instanceType, zone)
	p.reservations.release(id)
	return id
}
