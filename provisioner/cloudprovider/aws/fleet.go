package aws

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// EC2 refills an account's CreateFleet tokens at 5 a second (EC2 API
// reference, "Request throttling": a mutating API's bucket holds 50), so a
// burst of 2,000 claims launched one fleet each would wait minutes for
// them. Claims whose requests are the same but for the claim (one launch
// template, capacity type and override list: claims of one pool with the
// same options) and that arrive within fleetWindow of the first are
// launched by one fleet of as many instances, and the instances handed
// one per claim.
//
// Such a fleet cannot tag each instance with its own claim when it makes
// them, and tagging them after (CreateTags, a mutating call per instance)
// would spend the tokens merging saves and needs a permission the
// documented policy does not give. So its instances carry the tags all
// share and one tag per claim of the fleet, TagFleetClaimPrefix+UID with
// the claim's name as value, and TagFleet naming the fleet's request; the
// claims are sorted by UID, the instances by ID, and the n-th claim gets
// the n-th instance. The provider that launched them remembers the pairs
// (launched.go); a provider that starts again pairs them again from the
// tags (instancesByClaim), which holds for as long as a claim may still
// be launching (--launch-ttl, minutes), since EC2 lists terminated
// instances for about an hour. After that no launch asks, and the claim's
// status names its instance. Registration accepts an instance that names
// the claim among its claims (Instance.LaunchedFor), and the garbage
// collector keeps one while a claim it names may still take it.
const (
	// fleetWindow is how long a fleet waits for more claims. Unlike Gets
	// (batch.go), a fleet is not sent at once when none is in flight:
	// the claims of a batch close within moments of each other, and the
	// first would go alone.
	fleetWindow = 100 * time.Millisecond
	// TagFleet names the request of a fleet that launched for several
	// claims: the hash in its ClientToken.
	TagFleet = v1alpha1.Group + "/fleet"
	// TagFleetClaimPrefix, followed by a claim's UID, is the key of the
	// tag a fleet of several claims puts on every instance for each claim;
	// its value is the claim's name.
	TagFleetClaimPrefix = v1alpha1.Group + "/claim-"
	// maxTags is the most tags EC2 puts on one resource.
	maxTags = 50
	// maxMerged caps the claims of one fleet below what the tags allow.
	maxMerged = 40
)

// fleetRequest is one claim's CreateFleet, sent alone or with others'.
type fleetRequest struct {
	l                           cloudprovider.Launch
	class                       *v1alpha1.EC2NodeClass
	in                          *ec2.CreateFleetInput // the claim's own: its tags, its token
	template, ami, capacityType string
	// templates are the fleet's launch templates, template first: more
	// than one for a reserved launch, one per reservation.
	templates  []string
	attempt    int
	offers     []cloudprovider.Offer
	byOverride map[overrideKey]cloudprovider.Offer
	short      *addressShortage
	// reservationOf is, for a reserved launch, the reservation each
	// instance type and zone goes into.
	reservationOf map[reservationPool]string

	done chan struct{}
	out  *cloudprovider.Instance
	err  error
}

// key is what must be equal for requests to share a fleet.
func (r *fleetRequest) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\n%s\n%s\n", r.template, r.capacityType, r.l.NodePool, r.class.Name)
	if o := r.in.OnDemandOptions; o != nil {
		fmt.Fprintf(&b, "on-demand %s\n", o.AllocationStrategy)
	}
	for i, c := range r.in.LaunchTemplateConfigs {
		if i > 0 {
			fmt.Fprintf(&b, "template %s\n", sdkaws.ToString(c.LaunchTemplateSpecification.LaunchTemplateName))
		}
		for _, o := range c.Overrides {
			fmt.Fprintf(&b, "%s %s %s %v\n", o.InstanceType, sdkaws.ToString(o.SubnetId), sdkaws.ToString(o.AvailabilityZone), sdkaws.ToFloat64(o.Priority))
		}
	}
	return b.String()
}

// fleetMerger holds the fleets still open to more claims, by key.
type fleetMerger struct {
	// window and max, when set, replace fleetWindow and the tag budget's
	// limit (tests).
	window time.Duration
	max    int

	mu   sync.Mutex
	open map[string]*fleetGroup
	// inflight are the requests not answered yet, by claim UID.
	inflight map[string]*fleetRequest
}

type fleetGroup struct {
	ctx     context.Context
	members []*fleetRequest
}

// launchFleet sends r with the other requests of its key that arrive
// within fleetWindow, and waits for its answer. A claim whose request is
// still waiting or in flight (its caller gave up waiting, and the claim is
// tried again) waits for that one: one fleet a claim at a time.
func (p *Provider) launchFleet(ctx context.Context, r *fleetRequest) (*cloudprovider.Instance, error) {
	f := &p.fleets
	limit := min(maxMerged, maxTags-len(sharedTags(r.in))-2) // and Name, TagFleet
	if f.max > 0 {
		limit = min(limit, f.max)
	}
	key := r.key()
	f.mu.Lock()
	if f.open == nil {
		f.open, f.inflight = map[string]*fleetGroup{}, map[string]*fleetRequest{}
	}
	if m, ok := f.inflight[r.l.ClaimUID]; ok {
		f.mu.Unlock()
		return m.wait(ctx)
	}
	if in, ok := p.launched.recentFor(r.l.ClaimUID, p.now()); ok {
		// Launched since this call's launchedFor looked.
		f.mu.Unlock()
		return in, nil
	}
	f.inflight[r.l.ClaimUID] = r
	if limit < 2 {
		f.mu.Unlock()
		p.sendFleet(ctx, []*fleetRequest{r})
		return r.out, r.err
	}
	g := f.open[key]
	if g == nil {
		g = &fleetGroup{ctx: context.WithoutCancel(ctx)}
		f.open[key] = g
		time.AfterFunc(cmp.Or(f.window, fleetWindow), func() { p.sendGroup(key, g) })
	}
	g.members = append(g.members, r)
	if len(g.members) >= limit {
		// Full: closed to more claims now, sent at once.
		delete(f.open, key)
		go p.sendMembers(g)
	}
	f.mu.Unlock()
	return r.wait(ctx)
}

// wait waits for r's answer. A caller that stops waiting leaves the
// fleet to launch: the claim's retry finds the instance (launchedFor).
func (r *fleetRequest) wait(ctx context.Context) (*cloudprovider.Instance, error) {
	select {
	case <-r.done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// sendGroup sends g once, whichever of its timer and its last member
// comes first.
func (p *Provider) sendGroup(key string, g *fleetGroup) {
	f := &p.fleets
	f.mu.Lock()
	if f.open[key] != g {
		f.mu.Unlock()
		return
	}
	delete(f.open, key)
	f.mu.Unlock()
	p.sendMembers(g)
}

func (p *Provider) sendMembers(g *fleetGroup) {
	ctx, cancel := context.WithTimeout(g.ctx, batchCallTimeout)
	defer cancel()
	p.sendFleet(ctx, g.members)
}

// sendFleet sends one CreateFleet for the requests, which share a key,
// and gives each its answer. One request goes as it is; several go as one
// fleet of as many instances (mergedFleet).
func (p *Provider) sendFleet(ctx context.Context, rs []*fleetRequest) {
	defer func() {
		p.fleets.mu.Lock()
		for _, r := range rs {
			delete(p.fleets.inflight, r.l.ClaimUID)
			close(r.done)
		}
		p.fleets.mu.Unlock()
	}()
	logger := klog.FromContext(ctx)
	first := rs[0]
	in := first.in
	if len(rs) > 1 {
		in = mergedFleet(rs)
		logger.V(2).Info("Creating one fleet for several nodeclaims", "nodeClaims", len(rs), "launchTemplate", first.template, "capacityType", first.capacityType, "overrides", len(in.LaunchTemplateConfigs[0].Overrides))
	} else {
		logger.V(2).Info("Creating fleet", "nodeClaim", first.l.NodeClaim, "launchTemplate", first.template, "capacityType", first.capacityType, "overrides", len(in.LaunchTemplateConfigs[0].Overrides))
	}
	began := p.now()
	out, err := p.ec2.CreateFleet(ctx, in)
	if err != nil {
		for _, r := range rs {
			// It may have launched, its answer lost: the retry looks again.
			p.launched.unanswered(r.l.ClaimUID, began)
		}
		if templateNotFound(err) {
			// Collected meanwhile (launchtemplates.go): the retry makes it.
			for _, t := range first.templates {
				p.forgetTemplate(t)
			}
		}
		err = classify("CreateFleet", err)
		if cloudprovider.IsAccessDenied(err) {
			p.recheckLaunch(first.class.Name)
		}
		for _, r := range rs {
			r.err = err
		}
		return
	}
	refused, other, denied := p.readFleetErrors(ctx, first, out.Errors)
	if denied != nil {
		for _, r := range rs {
			r.err = denied
		}
		return
	}
	p.handOut(ctx, rs, out.Instances, refused, other)
}

// readFleetErrors sorts a fleet's errors: offers refused for capacity (or
// for want of the spot role, withheld from then on), subnets out of
// addresses (recorded on the first request's shortage), a denial, which
// fails every request, and the other errors.
func (p *Provider) readFleetErrors(ctx context.Context, first *fleetRequest, errs []ec2types.CreateFleetError) (refused []cloudprovider.Offer, other []error, denied error) {
	logger := klog.FromContext(ctx)
	for _, e := range errs {
		code := sdkaws.ToString(e.ErrorCode)
		o, ok := overrideOffer(first.byOverride, e.LaunchTemplateAndOverrides)
		switch {
		case code == codeNoFreeAddresses && ok:
			p.noFreeAddresses(ctx, first.class, overrideSubnet(e.LaunchTemplateAndOverrides), o, first.short)
		case capacityCodes[code] && ok:
			refused = append(refused, o)
			if id := first.reservationOf[reservationPool{o.InstanceType.Name, o.Zone}]; id != "" {
				// Full or gone: no room until EC2 says otherwise.
				p.reservations.full(id)
				logger.Info("Capacity reservation refused the launch", "capacityReservation", id, "instanceType", o.InstanceType.Name, "zone", o.Zone, "code", code)
			}
			logger.V(2).Info("Fleet option refused", "instanceType", o.InstanceType.Name, "zone", o.Zone, "capacityType", o.CapacityType, "code", code)
		case code == spotRoleCode && ok:
			// No spot service-linked role: the class's spot offerings are
			// withheld (dryrun.go) and this claim's refused like capacity.
			p.noSpotRole(first.class.Name, sdkaws.ToString(e.ErrorMessage))
			refused = append(refused, o)
		case deniedCodes[code]:
			p.recheckLaunch(first.class.Name)
			return nil, nil, &cloudprovider.AccessDeniedError{Op: "CreateFleet", Err: &smithy.GenericAPIError{Code: code, Message: sdkaws.ToString(e.ErrorMessage)}}
		default:
			if templateNotFound(&smithy.GenericAPIError{Code: code}) {
				for _, t := range first.templates {
					p.forgetTemplate(t)
				}
			}
			other = append(other, fmt.Errorf("%s: %s", code, sdkaws.ToString(e.ErrorMessage)))
		}
	}
	return refused, other, nil
}

// handOut gives each request its instance of the fleet's, or its error.
// Claims by UID, instances by ID: the pairing a provider that starts again
// makes from the tags (instancesByClaim).
func (p *Provider) handOut(ctx context.Context, rs []*fleetRequest, launched []ec2types.CreateFleetInstance, refused []cloudprovider.Offer, other []error) {
	first := rs[0]
	type fleetInstance struct {
		id string
		fi ec2types.CreateFleetInstance
	}
	var instances []fleetInstance
	for _, fi := range launched {
		p.subnetRooms.launched(overrideSubnet(fi.LaunchTemplateAndOverrides), len(fi.InstanceIds))
		for _, id := range fi.InstanceIds {
			instances = append(instances, fleetInstance{id: id, fi: fi})
		}
	}
	slices.SortFunc(instances, func(a, b fleetInstance) int { return cmp.Compare(a.id, b.id) })
	byUID := slices.Clone(rs)
	slices.SortFunc(byUID, func(a, b *fleetRequest) int { return cmp.Compare(a.l.ClaimUID, b.l.ClaimUID) })
	if len(instances) > len(rs) {
		klog.FromContext(ctx).Error(nil, "Fleet launched more instances than asked; the extra ones will be garbage-collected", "asked", len(rs), "launched", len(instances))
	}
	for i, r := range byUID {
		if i < len(instances) {
			r.out = p.launchedInstance(r, instances[i].id, instances[i].fi, append(refused, first.short.offers...))
			continue
		}
		switch {
		case len(other) == 0 && (len(refused) > 0 || len(first.short.notes) > 0):
			// Offers refused for capacity or in zones out of addresses are
			// unavailable for now; a subnet out of addresses in a zone with
			// another adds none, and the retry uses that other subnet.
			r.err = first.short.wrap(&cloudprovider.InsufficientCapacityError{Offers: append(refused, first.short.offers...)})
		case len(other) == 0:
			r.err = errors.New("CreateFleet launched no instance and reported no error")
		default:
			// EC2 answers a token it has seen with the answer it gave: the
			// retry of a fleet that failed for another reason than
			// capacity (an instance profile IAM has not propagated yet,
			// say) is a new request.
			p.mu.Lock()
			p.fleetErrors[r.l.ClaimUID]++
			p.mu.Unlock()
			r.err = fmt.Errorf("CreateFleet launched no instance: %w", errors.Join(other...))
		}
	}
}

// launchedInstance is the instance id of the fleet's answer fi, launched
// for r, and remembered as launched for it.
func (p *Provider) launchedInstance(r *fleetRequest, id string, fi ec2types.CreateFleetInstance, refused []cloudprovider.Offer) *cloudprovider.Instance {
	o, _ := overrideOffer(r.byOverride, fi.LaunchTemplateAndOverrides)
	zone := o.Zone
	if fi.LaunchTemplateAndOverrides != nil && fi.LaunchTemplateAndOverrides.Overrides != nil && fi.LaunchTemplateAndOverrides.Overrides.AvailabilityZone != nil {
		zone = *fi.LaunchTemplateAndOverrides.Overrides.AvailabilityZone
	}
	if o.InstanceType.Name == "" {
		o = offerOfType(r.offers, string(fi.InstanceType), zone)
	}
	p.mu.Lock()
	delete(p.fleetErrors, r.l.ClaimUID)
	p.mu.Unlock()
	ct := v1alpha1.CapacityTypeOnDemand
	if fi.Lifecycle == ec2types.InstanceLifecycleSpot {
		ct = v1alpha1.CapacityTypeSpot
	}
	labels := o.InstanceType.Labels
	if reservation := r.reservationOf[reservationPool{string(fi.InstanceType), zone}]; reservation != "" {
		// Its template named the reservation, with capacity-reservations-only:
		// it runs there or not at all.
		ct = v1alpha1.CapacityTypeReserved
		labels = maps.Clone(labels)
		maps.Copy(labels, reservationLabels(reservation))
		p.reservations.launched(reservation)
	}
	in := &cloudprovider.Instance{
		ProviderID: providerID(zone, id), InstanceType: string(fi.InstanceType), Zone: zone, CapacityType: ct,
		Price: o.Price, Capacity: o.InstanceType.Capacity, Allocatable: o.InstanceType.Allocatable, Labels: labels, ImageID: r.ami,
		NodeClaim: r.l.NodeClaim, NodePool: r.l.NodePool, Launched: p.now(),
	}
	p.launched.launched(r.l.ClaimUID, in, p.now())
	withRefused := *in
	withRefused.Refused = refused
	return &withRefused
}

// mergedFleet is one request for all of rs: their shared request with a
// target capacity of one instance each, the tags they share plus each
// claim's (TagFleetClaimPrefix), and a ClientToken of its own.
func mergedFleet(rs []*fleetRequest) *ec2.CreateFleetInput {
	in := *rs[0].in
	spec := *in.TargetCapacitySpecification
	spec.TotalTargetCapacity = sdkaws.Int32(int32(len(rs)))
	in.TargetCapacitySpecification = &spec
	tags := map[string]string{}
	for _, t := range sharedTags(rs[0].in) {
		tags[sdkaws.ToString(t.Key)] = sdkaws.ToString(t.Value)
	}
	tags["Name"] = rs[0].l.NodePool
	uids := make([]string, 0, len(rs))
	h := sha256.New()
	for _, r := range rs {
		tags[TagFleetClaimPrefix+r.l.ClaimUID] = r.l.NodeClaim
		uids = append(uids, r.l.ClaimUID)
	}
	slices.Sort(uids)
	// The token covers the claims and what their own tokens cover, so a
	// retry of the same fleet is EC2's first answer, and any other fleet
	// a new one.
	fmt.Fprintf(h, "%s\n", strings.Join(uids, ","))
	for _, r := range rs {
		fmt.Fprintf(h, "%s\n", sdkaws.ToString(r.in.ClientToken))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:32]
	tags[TagFleet] = sum
	in.TagSpecifications = tagSpecifications(toTags(tags))
	in.ClientToken = sdkaws.String("nodeforge-fleet-" + sum)
	return &in
}

// sharedTags are a claim's request's tags less those of the claim.
func sharedTags(in *ec2.CreateFleetInput) []ec2types.Tag {
	var out []ec2types.Tag
	for _, t := range in.TagSpecifications[0].Tags {
		switch sdkaws.ToString(t.Key) {
		case TagNodeClaim, TagNodeClaimUID, "Name":
		default:
			out = append(out, t)
		}
	}
	return out
}

// tagSpecifications put tags on a fleet's instances, their volumes and
// the fleet.
func tagSpecifications(tags []ec2types.Tag) []ec2types.TagSpecification {
	return []ec2types.TagSpecification{
		{ResourceType: ec2types.ResourceTypeInstance, Tags: tags},
		{ResourceType: ec2types.ResourceTypeVolume, Tags: tags},
		{ResourceType: ec2types.ResourceTypeFleet, Tags: tags},
	}
}

// fleetClaims reads the claims a fleet of several launched an instance
// for, from its tags: UID to name.
func fleetClaims(tags map[string]string) map[string]string {
	var out map[string]string
	for k, v := range tags {
		if uid, ok := strings.CutPrefix(k, TagFleetClaimPrefix); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[uid] = v
		}
	}
	return out
}

// fleetPairs pairs the instances of one fleet of several claims with
// those claims as sendFleet did: claims by UID, instances by ID. ids must
// be every instance of the fleet EC2 lists, terminated ones included.
func fleetPairs(claims map[string]string, ids []string) map[string]string {
	uids := slices.Sorted(maps.Keys(claims))
	ids = slices.Clone(ids)
	slices.Sort(ids)
	out := map[string]string{}
	for i, uid := range uids {
		if i < len(ids) {
			out[ids[i]] = uid
		}
	}
	return out
}
