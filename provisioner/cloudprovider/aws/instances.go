package aws

import (
	"context"
	"errors"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// liveStates are the states of an instance that still exists; terminated
// instances stay visible in EC2 for a while and count as gone.
var liveStates = []string{"pending", "running", "stopping", "stopped", "shutting-down"}

// Get returns the instance, or ErrNotFound once it is terminated or gone.
func (p *Provider) Get(ctx context.Context, providerID string) (*cloudprovider.Instance, error) {
	id, err := instanceID(providerID)
	if err != nil {
		return nil, err
	}
	out, err := p.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return nil, classify("DescribeInstances", err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if aws.ToString(in.InstanceId) == id && live(in) {
				got := p.instance(in)
				// The node of the instance is labelled with its type's
				// attributes when it is adopted: they must be known.
				if got.Labels == nil {
					cat, err := p.refresh(ctx)
					if err != nil {
						return nil, err
					}
					if info, ok := cat.types[got.InstanceType]; ok {
						got.Labels = p.labels(info)
					}
				}
				return got, nil
			}
		}
	}
	return nil, cloudprovider.ErrNotFound
}

// List returns the live instances tagged with this cluster.
func (p *Provider) List(ctx context.Context) ([]*cloudprovider.Instance, error) {
	return p.describe(ctx, []ec2types.Filter{
		{Name: aws.String("tag:" + TagCluster), Values: []string{p.opts.ClusterName}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	})
}

// launchedFor finds a live instance launched for the claim UID, if any.
func (p *Provider) launchedFor(ctx context.Context, claimUID string) (*cloudprovider.Instance, error) {
	found, err := p.describe(ctx, []ec2types.Filter{
		{Name: aws.String("tag:" + TagNodeClaimUID), Values: []string{claimUID}},
		{Name: aws.String("tag:" + TagCluster), Values: []string{p.opts.ClusterName}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	})
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return found[0], nil
}

func (p *Provider) describe(ctx context.Context, filters []ec2types.Filter) ([]*cloudprovider.Instance, error) {
	var out []*cloudprovider.Instance
	pages := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{Filters: filters})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeInstances", err)
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

// Delete terminates the instance. It returns nil while termination is
// under way and ErrNotFound once the instance is terminated or unknown, so
// callers call again until then.
func (p *Provider) Delete(ctx context.Context, providerID string) error {
	in, err := p.Get(ctx, providerID)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return cloudprovider.ErrNotFound
	}
	if err != nil {
		return err
	}
	id, _ := instanceID(providerID)
	out, err := p.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		err = classify("TerminateInstances", err)
		if errors.Is(err, cloudprovider.ErrNotFound) {
			return cloudprovider.ErrNotFound
		}
		return err
	}
	for _, t := range out.TerminatingInstances {
		if t.CurrentState != nil && t.CurrentState.Name == ec2types.InstanceStateNameTerminated {
			klog.FromContext(ctx).Info("Terminated instance", "providerID", providerID, "instanceType", in.InstanceType, "nodeClaim", in.NodeClaim)
			return cloudprovider.ErrNotFound
		}
	}
	klog.FromContext(ctx).Info("Terminating instance", "providerID", providerID, "instanceType", in.InstanceType, "nodeClaim", in.NodeClaim)
	return nil
}

func live(in ec2types.Instance) bool {
	return in.State == nil || in.State.Name != ec2types.InstanceStateNameTerminated
}

// instance converts what EC2 says of an instance.
func (p *Provider) instance(in ec2types.Instance) *cloudprovider.Instance {
	tags := map[string]string{}
	for _, t := range in.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	zone := ""
	if in.Placement != nil {
		zone = aws.ToString(in.Placement.AvailabilityZone)
	}
	ct := v1alpha1.CapacityTypeOnDemand
	if in.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
		ct = v1alpha1.CapacityTypeSpot
	}
	out := &cloudprovider.Instance{
		ProviderID: providerID(zone, aws.ToString(in.InstanceId)), InstanceType: string(in.InstanceType), Zone: zone, CapacityType: ct,
		NodeClaim: tags[TagNodeClaim], NodePool: tags[TagNodePool], Launched: aws.ToTime(in.LaunchTime), ImageID: aws.ToString(in.ImageId),
		Stopping: in.State != nil && slices.Contains([]ec2types.InstanceStateName{ec2types.InstanceStateNameStopping, ec2types.InstanceStateNameStopped, ec2types.InstanceStateNameShuttingDown}, in.State.Name),
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
	if ct == v1alpha1.CapacityTypeOnDemand {
		out.Price, _ = p.onDemandPrice(out.InstanceType)
	}
	return out
}
