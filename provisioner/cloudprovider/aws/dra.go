package aws

import (
	"context"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// runsDRADriver reports whether the class's nodes run the DRA driver
// named (spec.draDrivers).
func runsDRADriver(class *v1alpha1.EC2NodeClass, driver string) bool {
	if class == nil {
		return false
	}
	for _, d := range class.Spec.DRADrivers {
		if d == driver {
			return true
		}
	}
	return false
}

// draLabels are the labels of the class's nodes that say which DRA
// drivers run there (v1alpha1.LabelDRADriver): the kubelet registers
// with them (the user data carries them) and every instance type of the
// class has them, so that the virtual node and the node agree on them.
func draLabels(class *v1alpha1.EC2NodeClass) map[string]string {
	if class == nil || len(class.Spec.DRADrivers) == 0 {
		return nil
	}
	out := make(map[string]string, len(class.Spec.DRADrivers))
	for _, d := range class.Spec.DRADrivers {
		out[v1alpha1.LabelDRADriver(d)] = "true"
	}
	return out
}

// withDRADrivers changes a type of the class into what a node running
// the class's DRA drivers offers. Under the NVIDIA GPU DRA driver (which
// replaces the device plugin, so the node advertises no nvidia.com/gpu),
// a type whose NVIDIA GPUs are all of one model in
// cloudprovider.NVIDIAGPUs carries that driver's slice template; a type
// with another model carries none, so no DRA claim is provisioned for it
// rather than one decided on figures its node would not publish. Such a
// model is logged once at V(2).
func (p *Provider) withDRADrivers(ctx context.Context, info ec2types.InstanceTypeInfo, class *v1alpha1.EC2NodeClass, it *v1alpha1.InstanceType) {
	if !runsDRADriver(class, cloudprovider.DriverNVIDIAGPU) {
		return
	}
	if _, ok := it.Capacity[v1alpha1.ResourceNVIDIAGPU]; !ok {
		return
	}
	delete(it.Capacity, v1alpha1.ResourceNVIDIAGPU)
	delete(it.Allocatable, v1alpha1.ResourceNVIDIAGPU)
	model, count := nvidiaGPUs(info)
	if template, err := cloudprovider.NVIDIAGPUSlice(model, count); err == nil {
		it.ResourceSlices = append(it.ResourceSlices, template)
		return
	}
	if _, logged := p.unknownGPUModels.LoadOrStore(model, true); !logged {
		klog.FromContext(ctx).V(2).Info("NVIDIA GPU model has no DRA template; its instance types are not offered to DRA claims",
			"gpu", model, "instanceType", it.Name, "driver", cloudprovider.DriverNVIDIAGPU)
	}
}

// nvidiaGPUs is the model and count of the type's NVIDIA GPUs: the model
// EC2 names (GpuInfo), lower case as the instance labels give it, or ""
// when the type has GPUs of several NVIDIA models, which no template
// describes.
func nvidiaGPUs(info ec2types.InstanceTypeInfo) (model string, count int) {
	if info.GpuInfo == nil {
		return "", 0
	}
	models := 0
	for _, g := range info.GpuInfo.Gpus {
		if !strings.EqualFold(sdkaws.ToString(g.Manufacturer), "nvidia") {
			continue
		}
		models++
		model, count = strings.ToLower(sdkaws.ToString(g.Name)), count+int(sdkaws.ToInt32(g.Count))
	}
	if models > 1 {
		return "", count
	}
	return model, count
}
