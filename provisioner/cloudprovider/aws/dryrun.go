package aws

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// A class whose selectors resolve can still be unable to launch: the
// provisioner's policy may lack ec2:CreateFleet, ec2:RunInstances (which
// an instant fleet calls as the caller), ec2:CreateTags for tagging on
// create, or iam:PassRole for the class's instance profile, or allow them
// only under tag conditions the class's tags do not meet; and an account
// without the spot service-linked role cannot launch spot at all. Those
// show only when a launch is made, and then cost a claim's registration
// TTL (denied) or 10 minutes of retries (no spot role). So the provider
// asks EC2 with DryRun, which checks the caller's permissions for the
// request as sent and does nothing else (412 DryRunOperation: allowed),
// whenever a class resolves: a launch template with the class's user
// data, profile and tags; an instance with its image, profile, subnet,
// security groups and tags; and an instant fleet of each capacity type
// with one cheap type in one of its subnets, tagged as launches are.

// Condition types the launch check sets.
const (
	// ConditionLaunchAllowed is False when EC2 refused a dry run of what
	// a launch of the class sends; the class is then not Ready.
	ConditionLaunchAllowed = "LaunchAllowed"
	// ConditionSpotLaunchAllowed is False when spot launches of the class
	// are refused (no spot service-linked role, or a policy that denies
	// spot): the class's spot offerings are withheld, on-demand stays.
	ConditionSpotLaunchAllowed = "SpotLaunchAllowed"
)

// spotRoleCode is EC2's answer to a spot request in an account without
// the spot service-linked role whose caller may not create it.
const spotRoleCode = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"

// SpotRoleFix is the command that creates the spot service-linked role.
const SpotRoleFix = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"

// launchCheck is what the dry runs of one class found.
type launchCheck struct {
	key string // hash of what the dry runs sent
	at  time.Time
	// denied says which dry run EC2 refused and EC2's message (which
	// names the IAM action), deniedReason the condition's reason; "" when
	// every on-demand dry run was allowed.
	denied, deniedReason string
	// spot says why spot may not launch; "" when it may.
	spot, spotReason string
	// stale: a launch was refused since; check at the next resolution.
	stale bool
}

// checkLaunch returns the class's launch check for the status it
// resolved to, from the cache while what it would send is unchanged and
// the check is younger than LaunchCheckInterval (LaunchCheckRetry when it
// found something wrong), and otherwise by dry runs. It returns an error
// only when a call failed (not when EC2 refused one).
func (p *Provider) checkLaunch(ctx context.Context, class *v1alpha1.EC2NodeClass, status v1alpha1.EC2NodeClassStatus) (launchCheck, error) {
	resolved := class.DeepCopy()
	resolved.Status = *status.DeepCopy()
	key, err := nodeshape.Hash(struct {
		Spec    v1alpha1.EC2NodeClassSpec
		Profile string
		Subnets []v1alpha1.ResolvedSubnet
		Groups  []v1alpha1.ResolvedSecurityGroup
		AMIs    []v1alpha1.ResolvedAMI
	}{resolved.Spec, status.InstanceProfile, status.Subnets, status.SecurityGroups, status.AMIs})
	if err != nil {
		return launchCheck{}, err
	}
	now := p.now()
	p.mu.Lock()
	c, ok := p.checks[class.Name]
	p.mu.Unlock()
	ttl := p.opts.LaunchCheckInterval
	if c.denied != "" || c.spot != "" {
		ttl = p.opts.LaunchCheckRetry
	}
	if ok && c.key == key && !c.stale && now.Sub(c.at) < ttl {
		return c, nil
	}
	c, err = p.dryRun(ctx, resolved)
	if err != nil {
		return launchCheck{}, err
	}
	c.key, c.at = key, now
	p.mu.Lock()
	p.checks[class.Name] = c
	p.mu.Unlock()
	return c, nil
}

// recheckLaunch makes the next resolution of the class check again: a
// launch was refused.
func (p *Provider) recheckLaunch(class string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.checks[class]; ok {
		c.stale = true
		p.checks[class] = c
	}
}

// noSpotRole records that a launch of the class found no spot
// service-linked role: its spot offerings are withheld at once, and the
// next resolution checks again and says so in the class's conditions.
func (p *Provider) noSpotRole(class, message string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.checks[class]
	c.spot, c.spotReason, c.stale = spotRoleMessage(message), "ServiceLinkedRoleMissing", true
	p.checks[class] = c
}

func spotRoleMessage(ec2Message string) string {
	return fmt.Sprintf("EC2 refused spot: %s (%s). Create the spot service-linked role with `%s`; until a check passes (every few minutes) the class offers no spot capacity", ec2Message, spotRoleCode, SpotRoleFix)
}

// spotWithheld: spot offerings of the class are not offered, by its
// SpotLaunchAllowed condition (what any replica's check found) or by what
// this provider saw since.
func (p *Provider) spotWithheld(class *v1alpha1.EC2NodeClass) bool {
	if meta.IsStatusConditionFalse(class.Status.Conditions, ConditionSpotLaunchAllowed) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checks[class.Name].spot != ""
}

// verdict reads EC2's answer to a dry run: allowed (DryRunOperation),
// denied with EC2's message, the spot role missing, or an error when the
// call itself failed.
type verdict struct {
	allowed  bool
	code     string
	message  string
	spotRole bool
}

func readDryRun(op string, err error) (verdict, error) {
	var api smithy.APIError
	switch {
	case err == nil:
		// A dry run does not succeed; a server that ignored DryRun did
		// what was asked, which proves it allowed.
		return verdict{allowed: true}, nil
	case !errors.As(err, &api):
		return verdict{}, fmt.Errorf("%s (DryRun): %w", op, err)
	case api.ErrorCode() == "DryRunOperation":
		return verdict{allowed: true}, nil
	case api.ErrorCode() == spotRoleCode:
		return verdict{code: api.ErrorCode(), message: api.ErrorMessage(), spotRole: true}, nil
	case deniedCodes[api.ErrorCode()]:
		return verdict{code: api.ErrorCode(), message: api.ErrorMessage()}, nil
	}
	return verdict{}, classify(op+" (DryRun)", err)
}

// dryRun asks EC2 what the class's launches would be answered: its launch
// template, an instance of it (which checks iam:PassRole), and a fleet of
// each capacity type.
func (p *Provider) dryRun(ctx context.Context, class *v1alpha1.EC2NodeClass) (launchCheck, error) {
	var c launchCheck
	probe := p.probeOf(class)
	for _, step := range []struct {
		op   string
		call func(context.Context, launchProbe) error
	}{
		{"CreateLaunchTemplate", p.dryRunTemplate},
		{"RunInstances", p.dryRunInstance},
	} {
		v, err := readDryRun(step.op, step.call(ctx, probe))
		if err != nil {
			return c, err
		}
		if !v.allowed {
			c.deny(step.op, v)
		}
	}
	for _, capacityType := range []string{v1alpha1.CapacityTypeOnDemand, v1alpha1.CapacityTypeSpot} {
		overrides := []ec2types.FleetLaunchTemplateOverridesRequest{{
			InstanceType: ec2types.InstanceType(probe.instanceType), SubnetId: sdkaws.String(probe.subnet.ID), AvailabilityZone: sdkaws.String(probe.subnet.Zone),
		}}
		fleet := fleetInput(probe.template, capacityType, overrides, probe.tags)
		fleet.DryRun = sdkaws.Bool(true)
		_, err := p.ec2.CreateFleet(ctx, fleet)
		v, err := readDryRun("CreateFleet", err)
		switch {
		case err != nil:
			return c, err
		case v.allowed:
		case capacityType == v1alpha1.CapacityTypeOnDemand:
			c.deny("CreateFleet", v)
		case v.spotRole:
			c.spot, c.spotReason = spotRoleMessage(v.message), "ServiceLinkedRoleMissing"
		default:
			// Spot alone refused (a policy on ec2:InstanceMarketType, say):
			// the class still launches on-demand.
			c.spot, c.spotReason = fmt.Sprintf("EC2 refused a dry run of a spot CreateFleet: %s: %s; the class offers no spot capacity until a check passes", v.code, v.message), "SpotDenied"
		}
	}
	return c, nil
}

// launchProbe is what the dry runs launch: the class's image (checkImage),
// first subnet, a cheap type there, and the tags and template name a
// launch of the class would have.
type launchProbe struct {
	class        *v1alpha1.EC2NodeClass
	ami          v1alpha1.ResolvedAMI
	subnet       v1alpha1.ResolvedSubnet
	instanceType string
	template     string
	tags         []ec2types.Tag
}

func (p *Provider) probeOf(class *v1alpha1.EC2NodeClass) launchProbe {
	ami := checkImage(class.Status.AMIs)
	subnet := class.Status.Subnets[0]
	return launchProbe{
		class: class, ami: ami, subnet: subnet,
		instanceType: p.cheapType(ami.Architecture, subnet.Zone),
		template:     fmt.Sprintf("nodeforge/%s/%s/launch-check", p.opts.ClusterName, class.Name),
		tags:         p.tags(class, cloudprovider.Launch{NodeClaim: "launch-check", NodePool: "launch-check", ClaimUID: "launch-check"}),
	}
}

// deny records the first refusal.
func (c *launchCheck) deny(op string, v verdict) {
	if c.denied == "" {
		c.denied = fmt.Sprintf("EC2 refused a dry run of %s: %s: %s", op, v.code, v.message)
		c.deniedReason = op + "Denied"
	}
}

// dryRunTemplate dry-runs the class's launch template, tagged as
// ensureLaunchTemplate tags it.
func (p *Provider) dryRunTemplate(ctx context.Context, probe launchProbe) error {
	class := probe.class
	userData, err := UserData(p.opts, class, map[string]string{v1alpha1.LabelCapacityType: v1alpha1.CapacityTypeOnDemand}, nil)
	if err != nil {
		return err
	}
	_, err = p.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		DryRun:             sdkaws.Bool(true),
		LaunchTemplateName: sdkaws.String(probe.template),
		LaunchTemplateData: p.templateData(class, probe.ami.ID, userData, ""),
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate,
			Tags: toTags(map[string]string{TagCluster: p.opts.ClusterName, TagNodeClass: class.Name, "kubernetes.io/cluster/" + p.opts.ClusterName: "owned"})}},
	})
	return err
}

// dryRunInstance dry-runs one instance of the class. An instant fleet
// launches with ec2:RunInstances as the caller, and passes the profile's
// role (iam:PassRole): a dry run of the instance itself is what checks
// both, since the fleet's dry run cannot name a template that does not
// exist yet.
func (p *Provider) dryRunInstance(ctx context.Context, probe launchProbe) error {
	class := probe.class
	in := &ec2.RunInstancesInput{
		DryRun:             sdkaws.Bool(true),
		ImageId:            sdkaws.String(probe.ami.ID),
		InstanceType:       ec2types.InstanceType(probe.instanceType),
		MinCount:           sdkaws.Int32(1),
		MaxCount:           sdkaws.Int32(1),
		SubnetId:           sdkaws.String(probe.subnet.ID),
		IamInstanceProfile: &ec2types.IamInstanceProfileSpecification{Name: sdkaws.String(class.Status.InstanceProfile)},
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: probe.tags},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: probe.tags},
		},
	}
	for _, g := range class.Status.SecurityGroups {
		in.SecurityGroupIds = append(in.SecurityGroupIds, g.ID)
	}
	tokens := ec2types.HttpTokensStateRequired
	if mo := class.Spec.MetadataOptions; mo != nil {
		tokens = ec2types.HttpTokensState(cmp.Or(mo.HTTPTokens, "required"))
	}
	in.MetadataOptions = &ec2types.InstanceMetadataOptionsRequest{HttpTokens: tokens}
	_, err := p.ec2.RunInstances(ctx, in)
	return err
}

// checkImage is the image the check launches: the standard amd64 one if
// the class has it.
func checkImage(amis []v1alpha1.ResolvedAMI) v1alpha1.ResolvedAMI {
	for _, a := range amis {
		if a.Architecture == "amd64" && (a.Variant == "" || a.Variant == VariantStandard) {
			return a
		}
	}
	return amis[0]
}

// cheapType is the cheapest on-demand type of the architecture offered in
// the zone, from the catalog as last described (no call is made for it),
// or a small burstable type when the catalog is empty.
func (p *Provider) cheapType(arch, zone string) string {
	p.mu.Lock()
	cat := p.catalog
	p.mu.Unlock()
	best, bestPrice := "", math.Inf(1)
	for _, name := range cat.typeNames {
		if architecture(cat.types[name]) != arch {
			continue
		}
		if price, ok := p.onDemandPrice(name); ok && price < bestPrice && slices.Contains(cat.offered[name], zone) {
			best, bestPrice = name, price
		}
	}
	if best != "" {
		return best
	}
	if arch == "arm64" {
		return "t4g.micro"
	}
	return "t3.micro"
}
