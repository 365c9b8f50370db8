package aws

import (
	"context"
	"errors"
	"maps"
	"slices"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// liveStates are the states of an instance that still exists; terminated
// instances stay visible in EC2 for a while and count as gone.
var liveStates = []string{"pending", "running", "stopping", "stopped", "shutting-down"}

// Get returns the instance, or ErrNotFound once it is terminated or gone.
// Gets that arrive together are answered by one DescribeInstances
// (batch.go, describeIDs).
func (p *Provider) Get(ctx context.Context, providerID string) (*cloudprovider.Instance, error) {
	id, err := instanceID(providerID)
	if err != nil {
		return nil, err
	}
	got, err := p.gets.call(ctx, id)
	if err != nil {
		return nil, err
	}
	// The node of the instance is labelled with its type's attributes
	// when it is adopted: they must be known.
	if _, described := got.Labels[corev1.LabelArchStable]; !described {
		cat, err := p.refresh(ctx)
		if err != nil {
			return nil, err
		}
		if info, ok := cat.types[got.InstanceType]; ok {
			labels := p.labels(info)
			maps.Copy(labels, got.Labels) // a reservation's
			got.Labels = labels
		}
	}
	return got, nil
}

// maxInstanceIDs is the most instance IDs EC2 takes in one
// DescribeInstances or TerminateInstances; maxFilterValues the most
// values of one filter.
const (
	maxInstanceIDs  = 1000
	maxFilterValues = 200
)

// describeIDs answers a batch of Gets: each live instance EC2 lists, and
// ErrNotFound for the others. Asked by ID, EC2 fails the whole call with
// InvalidInstanceID.NotFound (or .Malformed) when one ID names no
// instance it knows, which one caller's gone instance would make every
// caller's answer; so such a batch is asked again with the instance-id
// filter, which lists what exists and leaves the rest out.
func (p *Provider) describeIDs(ctx context.Context, ids []string) map[string]result[*cloudprovider.Instance] {
	out := make(map[string]result[*cloudprovider.Instance], len(ids))
	found, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
	if badInstanceID(err) {
		klog.FromContext(ctx).V(4).Info("An instance of the batch is unknown to EC2; asking again by filter", "instances", len(ids), "err", err.Error())
		found, err = nil, nil
		for chunk := range slices.Chunk(ids, maxFilterValues) {
			part, e := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: sdkaws.String("instance-id"), Values: chunk}}})
			found, err = append(found, part...), errors.Join(err, e)
		}
	}
	byID := map[string]*cloudprovider.Instance{}
	for _, in := range found {
		id, _ := instanceID(in.ProviderID)
		byID[id] = in
	}
	for _, id := range ids {
		switch in, ok := byID[id]; {
		case ok:
			out[id] = result[*cloudprovider.Instance]{v: in}
		case err != nil:
			out[id] = result[*cloudprovider.Instance]{err: err}
		default:
			out[id] = result[*cloudprovider.Instance]{err: cloudprovider.ErrNotFound}
		}
	}
	return out
}

// badInstanceID: EC2 refused a call for an instance ID it does not know.
func badInstanceID(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "InvalidInstanceID.NotFound" || api.ErrorCode() == "InvalidInstanceID.Malformed")
}

// List returns the live instances tagged with this cluster.
func (p *Provider) List(ctx context.Context) ([]*cloudprovider.Instance, error) {
	return p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: sdkaws.String("tag:" + TagCluster), Values: []string{p.opts.ClusterName}},
		{Name: sdkaws.String("instance-state-name"), Values: liveStates},
	}})
}

// describe returns the live instances EC2 lists for in, every page.
func (p *Provider) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]*cloudprovider.Instance, error) {
	var out []*cloudprovider.Instance
	pages := ec2.NewDescribeInstancesPaginator(p.ec2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classifyDescribe(err)
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				if live(in) {
					out = append(out, p.instance(in))
				}
			}
		}
	}
	return out, nil
}

// classifyDescribe keeps EC2's own error where the caller looks at its
// code (badInstanceID), classified otherwise.
func classifyDescribe(err error) error {
	if badInstanceID(err) {
		return err
	}
	return classify("DescribeInstances", err)
}

// Delete terminates the instance. It returns nil while termination is
// under way and ErrNotFound once the instance is terminated or unknown, so
// callers call again until then. Deletes that arrive together are sent as
// one TerminateInstances (terminateIDs), as their Gets are one
// DescribeInstances.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	in, err := p.Get(ctx, providerID)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return cloudprovider.ErrNotFound
	}
	if err != nil {
		return err
	}
	id, _ := instanceID(providerID)
	terminated, err := p.terminations.call(ctx, id)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return cloudprovider.ErrNotFound
	}
	if err != nil {
		return err
	}
	if terminated {
		klog.FromContext(ctx).Info("Terminated instance", "providerID", providerID, "instanceType", in.InstanceType, "nodeClaim", in.NodeClaim)
		return cloudprovider.ErrNotFound
	}
	klog.FromContext(ctx).Info("Terminating instance", "providerID", providerID, "instanceType", in.InstanceType, "nodeClaim", in.NodeClaim)
	return nil
}

// terminateIDs answers a batch of Deletes: whether each instance is
// terminated already. As with describeIDs, one ID EC2 does not know
// (terminated and gone since its Get) fails the whole call, so such a
// batch is sent again one instance a call, each with its own answer.
func (p *Provider) terminateIDs(ctx context.Context, ids []string) map[string]result[bool] {
	out := make(map[string]result[bool], len(ids))
	resp, err := p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if badInstanceID(err) && len(ids) > 1 {
		klog.FromContext(ctx).V(4).Info("An instance of the batch is unknown to EC2; terminating one at a time", "instances", len(ids), "err", err.Error())
		for _, id := range ids {
			maps.Copy(out, p.terminateIDs(ctx, []string{id}))
		}
		return out
	}
	if err != nil {
		err = classify("TerminateInstances", err)
		for _, id := range ids {
			out[id] = result[bool]{err: err}
		}
		return out
	}
	for _, id := range ids {
		out[id] = result[bool]{}
	}
	for _, t := range resp.TerminatingInstances {
		if t.CurrentState != nil && t.CurrentState.Name == ec2types.InstanceStateNameTerminated {
			out[sdkaws.ToString(t.InstanceId)] = result[bool]{v: true}
		}
	}
	return out
}

func live(in ec2types.Instance) bool {
	return in.State == nil || in.State.Name != ec2types.InstanceStateNameTerminated
}

// instance converts what EC2 says of an instance.
func (p *Provider) instance(in ec2types.Instance) *cloudprovider.Instance {
	tags := map[string]string{}
	for _, t := range in.Tags {
		tags[sdkaws.ToString(t.Key)] = sdkaws.ToString(t.Value)
	}
	zone := ""
	if in.Placement != nil {
		zone = sdkaws.ToString(in.Placement.AvailabilityZone)
	}
	ct := v1alpha1.CapacityTypeOnDemand
	reservation := ""
	switch {
	case in.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot:
		ct = v1alpha1.CapacityTypeSpot
	case in.CapacityReservationId != nil && in.CapacityReservationSpecification != nil &&
		in.CapacityReservationSpecification.CapacityReservationPreference == ec2types.CapacityReservationPreferenceCapacityReservationsOnly:
		// Launched into a reservation it named (reservations.go), as
		// Karpenter's AWS provider tells its reserved instances; one that
		// landed in an open reservation unasked is on-demand.
		ct, reservation = v1alpha1.CapacityTypeReserved, sdkaws.ToString(in.CapacityReservationId)
	}
	out := &cloudprovider.Instance{
		ProviderID: providerID(zone, sdkaws.ToString(in.InstanceId)), InstanceType: string(in.InstanceType), Zone: zone, CapacityType: ct,
		NodeClaim: tags[TagNodeClaim], NodePool: tags[TagNodePool], Launched: sdkaws.ToTime(in.LaunchTime), ImageID: sdkaws.ToString(in.ImageId),
		Stopping: in.State != nil && slices.Contains([]ec2types.InstanceStateName{ec2types.InstanceStateNameStopping, ec2types.InstanceStateNameStopped, ec2types.InstanceStateNameShuttingDown}, in.State.Name),
	}
	if claims := fleetClaims(tags); tags[TagNodeClaim] == "" && len(claims) > 0 {
		out.NodeClaims = slices.Sorted(maps.Values(claims))
	}
	p.mu.Lock()
	if ct == v1alpha1.CapacityTypeSpot {
		out.Price = p.catalog.spot[out.InstanceType][zone]
	}
	info, described := p.catalog.types[out.InstanceType]
	p.mu.Unlock()
	if described {
		out.Labels = p.labels(info)
	}
	switch ct {
	case v1alpha1.CapacityTypeOnDemand:
		out.Price, _ = p.onDemandPrice(out.InstanceType)
	case v1alpha1.CapacityTypeReserved:
		price, _ := p.onDemandPrice(out.InstanceType)
		out.Price = price * reservedPriceFactor
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		maps.Copy(out.Labels, reservationLabels(reservation))
	}
	return out
}
