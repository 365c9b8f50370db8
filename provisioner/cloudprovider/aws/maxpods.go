package aws

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ConditionMaxPodsAddressable is False, while the class stays Ready, when
// its kubelet.maxPods is more than the VPC CNI can address on some of the
// region's instance types without prefix delegation: pods bound past that
// figure stay in ContainerCreating unless the cluster's aws-node runs with
// ENABLE_PREFIX_DELEGATION, which Nodeforge cannot see.
const ConditionMaxPodsAddressable = "MaxPodsAddressable"

// maxPodsAddressable judges the class's maxPods against the addresses of
// the region's instance types; known is false when the region could not
// be described (the condition is then left as it was).
func (p *Provider) maxPodsAddressable(ctx context.Context, class *v1alpha1.EC2NodeClass) (ok bool, reason, message string, known bool) {
	k := class.Spec.Kubelet
	if k == nil || k.MaxPods == nil {
		return true, "FromNetworkInterfaces", "max pods is what each type's default network card can address", true
	}
	cat, err := p.refresh(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Not judging maxPods against the region's types: they could not be described", "ec2NodeClass", class.Name, "err", err.Error())
		return false, "", "", false
	}
	want := int64(*k.MaxPods)
	var short []string
	for _, name := range cat.typeNames {
		if addressable := ENILimitedPods(cat.types[name], 0); addressable < want {
			short = append(short, fmt.Sprintf("%s %d", name, addressable))
		}
	}
	if len(short) == 0 {
		return true, "WithinAddresses", fmt.Sprintf("every instance type of the region can address %d pods", want), true
	}
	shown := short
	if len(shown) > 5 {
		shown = shown[:5]
	}
	return false, "ExceedsAddresses", fmt.Sprintf(
		"maxPods %d is more than the VPC CNI can address without prefix delegation on %d of the region's %d instance types (%s%s); pods past that stay in ContainerCreating unless aws-node runs with ENABLE_PREFIX_DELEGATION=true, else lower maxPods or leave it unset",
		want, len(short), len(cat.typeNames), strings.Join(shown, ", "), map[bool]string{true: ", …", false: ""}[len(short) > len(shown)]), true
}
