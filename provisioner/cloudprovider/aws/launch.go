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

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// MaxOverrides caps the overrides of one CreateFleet request (instance
// type × subnet), as the design sets it: enough choice for EC2 to find
// capacity, few enough to keep the request small.
const MaxOverrides = 60

// Create launches one instance for the claim with CreateFleet. It first
// looks for an instance already launched for the claim's UID (a retry
// after a crash), and sends a ClientToken derived from the UID and the
// request, so that EC2 itself returns the first launch's result to a
// retried request (the SDK retrying a lost response), while a later call
// with other offers or another launch template (after capacity errors, or
// a changed node class) is a new request rather than one EC2 answers with
// the old failure or IdempotentParameterMismatch for ever. Claims whose
// requests are the same but for the claim, arriving together, share one
// fleet (fleet.go).
func (p *Provider) Create(ctx context.Context, l cloudprovider.Launch) (*cloudprovider.Instance, error) {
	logger := klog.FromContext(ctx)
	if existing, err := p.launchedFor(ctx, l.ClaimUID); err != nil {
		return nil, err
	} else if existing != nil {
		logger.Info("Instance already launched for nodeclaim; adopting it", "nodeClaim", l.NodeClaim, "providerID", existing.ProviderID)
		return existing, nil
	}
	class, err := p.nodeClass(ctx, l.NodeClass)
	if err != nil {
		return nil, err
	}
	if len(l.Offers) == 0 {
		return nil, &cloudprovider.InsufficientCapacityError{}
	}
	// One capacity type, one architecture and one image per fleet: those
	// of the cheapest offer (a claim is pinned to its capacity type and
	// architecture when it is created; the image is the one of its
	// type's variant, standard or NVIDIA or Neuron).
	capacityType, arch := l.Offers[0].CapacityType, l.Offers[0].InstanceType.Labels[corev1.LabelArchStable]
	image, ok := imageFor(class.Status.AMIs, arch, p.variantOfType(l.Offers[0].InstanceType.Name))
	if !ok {
		return nil, &cloudprovider.NodeClassNotReadyError{NodeClass: class.Name, Reason: fmt.Sprintf("no image for %s (%s)", l.Offers[0].InstanceType.Name, arch)}
	}
	// A claim whose pods ask for EFA gets the EFA interfaces of its
	// type attached (the node advertises as many as are attached), so its
	// fleet holds only offers with as many as the cheapest.
	efa := efaInterfaces(l.Requests, l.Offers[0].InstanceType)
	var offers []cloudprovider.Offer
	for _, o := range l.Offers {
		if o.CapacityType != capacityType || o.InstanceType.Labels[corev1.LabelArchStable] != arch || efaInterfaces(l.Requests, o.InstanceType) != efa {
			continue
		}
		if img, ok := imageFor(class.Status.AMIs, arch, p.variantOfType(o.InstanceType.Name)); ok && img.ID == image.ID {
			offers = append(offers, o)
		}
	}
	ami := image.ID
	// The kubelet sets the instance type's own labels (instance type,
	// zone, region, architecture, operating system) when it registers;
	// the user data carries the claim's, the capacity type (Nodeforge's key and Karpenter's) and
	// the class's DRA drivers (dra.go), the same for every offer of the fleet.
	labels := maps.Clone(l.Template.Labels)
	maps.Copy(labels, draLabels(class))
	labels[v1alpha1.LabelCapacityType] = capacityType
	labels[v1alpha1.LabelKarpenterCapacityType] = capacityType
	short := &addressShortage{class: class.Name}
	var plan reservationPlan
	if capacityType == v1alpha1.CapacityTypeReserved {
		// Each type goes into one of the class's reservations of it with
		// room; the cheapest holds its place until the launch's answer.
		plan = p.planReservations(ctx, class, offers, short)
		defer p.reservations.release(plan.held)
		offers = plan.offers
	}
	overrides, byOverride := p.overrides(ctx, class, offers, short)
	if len(overrides) == 0 && len(short.offers) > 0 {
		return nil, short.wrap(&cloudprovider.InsufficientCapacityError{Offers: short.offers})
	}
	prioritized := capacityType == v1alpha1.CapacityTypeOnDemand && overlaid(offers)
	if prioritized {
		for i := range overrides {
			overrides[i].Priority = sdkaws.Float64(float64(i))
		}
	}
	configs, templates, err := p.launchTemplateConfigs(ctx, class, ami, labels, l.Template.RegistrationTaints(), efa, overrides, plan)
	if err != nil {
		return nil, err
	}
	tags := p.tags(class, l)
	in := fleetInput(templates[0], capacityType, overrides, tags)
	in.LaunchTemplateConfigs = configs
	if prioritized {
		in.OnDemandOptions.AllocationStrategy = ec2types.FleetOnDemandAllocationStrategyPrioritized
	}
	p.mu.Lock()
	attempt := p.fleetErrors[l.ClaimUID]
	p.mu.Unlock()
	in.ClientToken = sdkaws.String(clientToken(l.ClaimUID, capacityType, configs, attempt))
	return p.launchFleet(ctx, &fleetRequest{
		l: l, class: class, in: in, template: templates[0], templates: templates, ami: ami, capacityType: capacityType, attempt: attempt,
		offers: offers, byOverride: byOverride, short: short, reservationOf: plan.byPool, done: make(chan struct{}),
	})
}

// launchTemplateConfigs are the fleet's launch templates with their
// overrides, in the overrides' order: one template for every launch but a
// reserved one, which has one per reservation (each names its own, and
// its nodes' labels name it too), each with the overrides of its
// reservation's type and zone. It returns the templates' names too, in order.
func (p *Provider) launchTemplateConfigs(ctx context.Context, class *v1alpha1.EC2NodeClass, ami string, labels map[string]string, taints []corev1.Taint, efa int32,
	overrides []ec2types.FleetLaunchTemplateOverridesRequest, plan reservationPlan) ([]ec2types.FleetLaunchTemplateConfigRequest, []string, error) {
	spec := func(name string) *ec2types.FleetLaunchTemplateSpecificationRequest {
		return &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateName: sdkaws.String(name), Version: sdkaws.String("$Latest")}
	}
	if plan.byPool == nil {
		template, err := p.ensureLaunchTemplate(ctx, class, ami, labels, taints, efa, "")
		if err != nil {
			return nil, nil, err
		}
		return []ec2types.FleetLaunchTemplateConfigRequest{{LaunchTemplateSpecification: spec(template), Overrides: overrides}}, []string{template}, nil
	}
	var configs []ec2types.FleetLaunchTemplateConfigRequest
	var templates []string
	index := map[string]int{} // reservation -> config
	for _, o := range overrides {
		id := plan.byPool[reservationPool{string(o.InstanceType), sdkaws.ToString(o.AvailabilityZone)}]
		i, ok := index[id]
		if !ok {
			withID := maps.Clone(labels)
			maps.Copy(withID, reservationLabels(id))
			template, err := p.ensureLaunchTemplate(ctx, class, ami, withID, taints, efa, id)
			if err != nil {
				return nil, nil, err
			}
			i = len(configs)
			index[id] = i
			configs = append(configs, ec2types.FleetLaunchTemplateConfigRequest{LaunchTemplateSpecification: spec(template)})
			templates = append(templates, template)
		}
		configs[i].Overrides = append(configs[i].Overrides, o)
	}
	return configs, templates, nil
}

// clientToken is the CreateFleet idempotency token of one request of a
// claim: "nodeforge-<claim UID>-<16 hex digits of the request's hash>", at
// most 64 ASCII characters (EC2 API reference, "Ensuring idempotency").
// The hash covers what changes between attempts: the launch templates, the
// capacity type, the overrides in order, and how many fleets of the claim
// this process saw fail for other reasons than capacity (attempt). A
// provisioner that restarts counts from 0 again: the first retry may get
// the old answer back, the next is new; and a fleet that launched is
// found by its claim's tag before any retry.
func clientToken(claimUID, capacityType string, configs []ec2types.FleetLaunchTemplateConfigRequest, attempt int) string {
	h := sha256.New()
	for i, c := range configs {
		template := sdkaws.ToString(c.LaunchTemplateSpecification.LaunchTemplateName)
		if i == 0 {
			fmt.Fprintf(h, "%s\n%s\n", template, capacityType)
			if attempt > 0 {
				fmt.Fprintf(h, "attempt %d\n", attempt)
			}
		} else {
			fmt.Fprintf(h, "template %s\n", template)
		}
		for _, o := range c.Overrides {
			fmt.Fprintf(h, "%s %s %v\n", o.InstanceType, sdkaws.ToString(o.SubnetId), sdkaws.ToFloat64(o.Priority))
		}
	}
	return "nodeforge-" + claimUID + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

type overrideKey struct{ instanceType, subnet string }

// overrides pairs each offer with the subnet of its zone that has the most
// free addresses (subnets.go), cheapest first, at most MaxOverrides. One
// subnet per zone keeps the overrides for instance types, where EC2's
// choice matters; the other subnets of the zone are there for the next
// launch should this one run out. Offers in a zone where no subnet of the
// class has a free address are left out and added to short, which says
// why.
func (p *Provider) overrides(ctx context.Context, class *v1alpha1.EC2NodeClass, offers []cloudprovider.Offer, short *addressShortage) ([]ec2types.FleetLaunchTemplateOverridesRequest, map[overrideKey]cloudprovider.Offer) {
	chosen, full := p.subnetsByRoom(ctx, class)
	sorted := slices.Clone(offers)
	slices.SortStableFunc(sorted, func(a, b cloudprovider.Offer) int { return cmp.Compare(a.Price, b.Price) })
	var out []ec2types.FleetLaunchTemplateOverridesRequest
	by := map[overrideKey]cloudprovider.Offer{}
	for _, o := range sorted {
		if subnets, ok := full[o.Zone]; ok {
			short.closeZone(ctx, o, subnets)
			continue
		}
		c, ok := chosen[o.Zone]
		if !ok || len(out) == MaxOverrides {
			continue
		}
		subnet := c.id
		key := overrideKey{o.InstanceType.Name, subnet}
		if _, dup := by[key]; dup {
			continue
		}
		by[key] = o
		out = append(out, ec2types.FleetLaunchTemplateOverridesRequest{
			InstanceType: ec2types.InstanceType(o.InstanceType.Name), SubnetId: sdkaws.String(subnet), AvailabilityZone: sdkaws.String(o.Zone),
		})
	}
	return out, by
}

// overlaid says whether a NodeOverlay changed one of the offers' types,
// its price perhaps. An on-demand fleet then goes by priority, the
// overrides' order (the offers' prices as the catalog has them, cheapest
// first), rather than by lowest price, which EC2 reckons by its own
// prices and so would launch what the overlay made dearer. Spot keeps
// price-capacity-optimized: it weighs interruption, which no overlay
// knows of.
func overlaid(offers []cloudprovider.Offer) bool {
	return slices.ContainsFunc(offers, func(o cloudprovider.Offer) bool { return len(o.InstanceType.Overlays) > 0 })
}

func overrideOffer(by map[overrideKey]cloudprovider.Offer, lto *ec2types.LaunchTemplateAndOverridesResponse) (cloudprovider.Offer, bool) {
	if lto == nil || lto.Overrides == nil {
		return cloudprovider.Offer{}, false
	}
	o, ok := by[overrideKey{string(lto.Overrides.InstanceType), sdkaws.ToString(lto.Overrides.SubnetId)}]
	return o, ok
}

func offerOfType(offers []cloudprovider.Offer, instanceType, zone string) cloudprovider.Offer {
	for _, o := range offers {
		if o.InstanceType.Name == instanceType && o.Zone == zone {
			return o
		}
	}
	return cloudprovider.Offer{InstanceType: v1alpha1.InstanceType{Name: instanceType}, Zone: zone}
}

// tags go on the instance, its volumes and the fleet.
func (p *Provider) tags(class *v1alpha1.EC2NodeClass, l cloudprovider.Launch) []ec2types.Tag {
	m := maps.Clone(class.Spec.Tags)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, map[string]string{
		"Name": l.NodeClaim,
		"kubernetes.io/cluster/" + p.opts.ClusterName: "owned",
		TagCluster:      p.opts.ClusterName,
		TagNodePool:     l.NodePool,
		TagNodeClaim:    l.NodeClaim,
		TagNodeClaimUID: l.ClaimUID,
		TagNodeClass:    class.Name,
		// What EKS tags its own nodes' instances with, and the EKS
		// console and cost reports group instances by.
		TagEKSClusterName: p.opts.ClusterName,
	})
	return toTags(m)
}

func toTags(m map[string]string) []ec2types.Tag {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]ec2types.Tag, 0, len(keys))
	for _, k := range keys {
		out = append(out, ec2types.Tag{Key: sdkaws.String(k), Value: sdkaws.String(m[k])})
	}
	return out
}

// ensureLaunchTemplate returns the name of the launch template for the
// class, image, user data and capacity reservation ("" for none), creating
// it if needed. The name carries a
// hash of the content, so a changed class gets a new template and a
// template once created never needs updating.
func (p *Provider) ensureLaunchTemplate(ctx context.Context, class *v1alpha1.EC2NodeClass, ami string, labels map[string]string, taints []corev1.Taint, efa int32, reservation string) (string, error) {
	userData, err := UserData(p.opts, class, labels, taints)
	if err != nil {
		return "", err
	}
	data := withEFA(p.templateData(class, ami, userData, reservation), efa)
	sum, err := nodeshape.Hash(data)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("nodeforge/%s/%s/%s", p.opts.ClusterName, class.Name, sum)
	p.mu.Lock()
	_, known := p.templates[name]
	if known {
		p.templateUsed[name] = p.now()
	}
	p.mu.Unlock()
	if known {
		return name, nil
	}
	// The claims of a burst that need a new template need the same one:
	// one of them looks for it and makes it, the others wait for that.
	_, err, _ = p.templateFlight.Do(name, func() (any, error) {
		_, err := p.ec2.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{name}})
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "InvalidLaunchTemplateName.NotFoundException" {
			tags := toTags(map[string]string{TagCluster: p.opts.ClusterName, TagNodeClass: class.Name, "kubernetes.io/cluster/" + p.opts.ClusterName: "owned"})
			_, err = p.ec2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
				LaunchTemplateName: sdkaws.String(name),
				LaunchTemplateData: data,
				TagSpecifications:  []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate, Tags: tags}},
			})
			if errors.As(err, &api) && api.ErrorCode() == "InvalidLaunchTemplateName.AlreadyExistsException" {
				err = nil // another replica or an earlier attempt made it
			}
			if err == nil {
				klog.FromContext(ctx).Info("Created launch template", "launchTemplate", name, "ec2NodeClass", class.Name, "ami", ami)
			}
		}
		if err != nil {
			return nil, classify("launch template "+name, err)
		}
		p.mu.Lock()
		p.templates[name] = ami
		p.templateUsed[name] = p.now()
		p.mu.Unlock()
		return nil, nil
	})
	if err != nil {
		return "", err
	}
	return name, nil
}

// templateData is a launch template's content. Instances of a template
// with a reservation run in it (preference capacity-reservations-only,
// the reservation as target, as Karpenter's reserved launch templates
// have it); those of a class with reservation terms but of a template
// without one in none (reservations.go), and other classes' as EC2 has
// it by default (open).
func (p *Provider) templateData(class *v1alpha1.EC2NodeClass, ami, userData, reservation string) *ec2types.RequestLaunchTemplateData {
	data := &ec2types.RequestLaunchTemplateData{
		ImageId:            sdkaws.String(ami),
		UserData:           sdkaws.String(userData),
		IamInstanceProfile: &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: sdkaws.String(class.Status.InstanceProfile)},
	}
	switch {
	case reservation != "":
		data.CapacityReservationSpecification = &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
			CapacityReservationPreference: ec2types.CapacityReservationPreferenceCapacityReservationsOnly,
			CapacityReservationTarget:     &ec2types.CapacityReservationTarget{CapacityReservationId: sdkaws.String(reservation)},
		}
	case len(class.Spec.CapacityReservationSelectorTerms) > 0:
		data.CapacityReservationSpecification = &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
			CapacityReservationPreference: ec2types.CapacityReservationPreferenceNone,
		}
	}
	for _, g := range class.Status.SecurityGroups {
		data.SecurityGroupIds = append(data.SecurityGroupIds, g.ID)
	}
	mo := class.Spec.MetadataOptions
	if mo == nil {
		mo = &v1alpha1.MetadataOptions{HTTPEndpoint: "enabled", HTTPProtocolIPv6: "disabled", HTTPPutResponseHopLimit: 1, HTTPTokens: "required"}
	}
	data.MetadataOptions = &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
		HttpEndpoint:            ec2types.LaunchTemplateInstanceMetadataEndpointState(cmp.Or(mo.HTTPEndpoint, "enabled")),
		HttpProtocolIpv6:        ec2types.LaunchTemplateInstanceMetadataProtocolIpv6(cmp.Or(mo.HTTPProtocolIPv6, "disabled")),
		HttpPutResponseHopLimit: sdkaws.Int32(cmp.Or(mo.HTTPPutResponseHopLimit, 1)),
		HttpTokens:              ec2types.LaunchTemplateHttpTokensState(cmp.Or(mo.HTTPTokens, "required")),
	}
	bdms := class.Spec.BlockDeviceMappings
	if len(bdms) == 0 {
		t := true
		bdms = []v1alpha1.BlockDeviceMapping{{DeviceName: "/dev/xvda", RootVolume: true, EBS: v1alpha1.BlockDevice{VolumeSize: defaultRootVolumeGiB, VolumeType: "gp3", Encrypted: &t, DeleteOnTermination: &t}}}
	}
	for _, m := range bdms {
		ebs := &ec2types.LaunchTemplateEbsBlockDeviceRequest{
			VolumeSize: sdkaws.Int32(m.EBS.VolumeSize), VolumeType: ec2types.VolumeType(cmp.Or(m.EBS.VolumeType, "gp3")),
			Iops: m.EBS.IOPS, Throughput: m.EBS.Throughput,
			Encrypted: sdkaws.Bool(m.EBS.Encrypted == nil || *m.EBS.Encrypted), DeleteOnTermination: sdkaws.Bool(m.EBS.DeleteOnTermination == nil || *m.EBS.DeleteOnTermination),
		}
		if m.EBS.KMSKeyID != "" {
			ebs.KmsKeyId = sdkaws.String(m.EBS.KMSKeyID)
		}
		data.BlockDeviceMappings = append(data.BlockDeviceMappings, ec2types.LaunchTemplateBlockDeviceMappingRequest{DeviceName: sdkaws.String(m.DeviceName), Ebs: ebs})
	}
	return data
}

// efaInterfaces is how many EFA interfaces a launch of the type attaches:
// all the type takes (DescribeInstanceTypes' maximumEfaInterfaces, as
// Capacity advertises them) when the claim's pods ask for EFA, else none.
func efaInterfaces(requests corev1.ResourceList, it v1alpha1.InstanceType) int32 {
	if q, ok := requests[v1alpha1.ResourceEFA]; !ok || q.IsZero() {
		return 0
	}
	n := it.Capacity[v1alpha1.ResourceEFA]
	return int32(n.Value())
}

// withEFA attaches n EFA interfaces to the template's instances, one per
// network card from the default one (device index 0 there: the primary
// interface; 1 on the others), as EC2's EFA guide lays them out. The
// security groups move onto the interfaces: EC2 refuses a template that
// sets both.
func withEFA(data *ec2types.RequestLaunchTemplateData, n int32) *ec2types.RequestLaunchTemplateData {
	if n <= 0 {
		return data
	}
	for card := range n {
		data.NetworkInterfaces = append(data.NetworkInterfaces, ec2types.LaunchTemplateInstanceNetworkInterfaceSpecificationRequest{
			NetworkCardIndex:    sdkaws.Int32(card),
			DeviceIndex:         sdkaws.Int32(min(card, 1)),
			InterfaceType:       sdkaws.String("efa"),
			Groups:              data.SecurityGroupIds,
			DeleteOnTermination: sdkaws.Bool(true),
		})
	}
	data.SecurityGroupIds = nil
	return data
}

// fleetInput is an instant fleet of one instance from the template, of the
// capacity type, with the overrides in order, tagged on its instances,
// volumes and itself: on-demand by lowest price, spot price-capacity
// optimised, reserved as on-demand (its templates name the reservations).
// Launches and the class's dry run (dryrun.go) send the same shape.
func fleetInput(template, capacityType string, overrides []ec2types.FleetLaunchTemplateOverridesRequest, tags []ec2types.Tag) *ec2.CreateFleetInput {
	target := ec2types.DefaultTargetCapacityType(capacityType)
	if capacityType == v1alpha1.CapacityTypeReserved {
		target = ec2types.DefaultTargetCapacityTypeOnDemand
	}
	in := &ec2.CreateFleetInput{
		Type: ec2types.FleetTypeInstant,
		LaunchTemplateConfigs: []ec2types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateName: sdkaws.String(template), Version: sdkaws.String("$Latest")},
			Overrides:                   overrides,
		}},
		TargetCapacitySpecification: &ec2types.TargetCapacitySpecificationRequest{
			TotalTargetCapacity:       sdkaws.Int32(1),
			DefaultTargetCapacityType: target,
		},
		TagSpecifications: tagSpecifications(tags),
	}
	if capacityType == v1alpha1.CapacityTypeSpot {
		in.SpotOptions = &ec2types.SpotOptionsRequest{AllocationStrategy: ec2types.SpotAllocationStrategyPriceCapacityOptimized}
	} else {
		in.OnDemandOptions = &ec2types.OnDemandOptionsRequest{AllocationStrategy: ec2types.FleetOnDemandAllocationStrategyLowestPrice}
	}
	return in
}
