package aws

import (
	"context"
	"strings"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// TestDRADriversOfTheClass: under a class whose nodes run the NVIDIA GPU
// DRA driver, a type with NVIDIA GPUs of a known model carries that
// driver's slice template and no nvidia.com/gpu; one of an unknown model
// carries neither; other devices and other classes are left as the
// device plugins count them; every type of such a class has the driver's
// label.
func TestDRADriversOfTheClass(t *testing.T) {
	withGPUs := func(it ec2types.InstanceTypeInfo, manufacturer, model string, n int32) ec2types.InstanceTypeInfo {
		it.GpuInfo = &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Manufacturer: sdkaws.String(manufacturer), Name: sdkaws.String(model), Count: sdkaws.Int32(n)}}}
		return it
	}
	p5 := withGPUs(info("p5.48xlarge", 192, 2097152, 64, 50, 0), "NVIDIA", "H100", 8)
	p5.NetworkInfo.EfaSupported = sdkaws.Bool(true)
	p5.NetworkInfo.EfaInfo = &ec2types.EfaInfo{MaximumEfaInterfaces: sdkaws.Int32(32)}
	slice := func(model string, n int) []v1alpha1.ResourceSliceTemplate {
		s, err := cloudprovider.NVIDIAGPUSlice(model, n)
		if err != nil {
			t.Fatal(err)
		}
		return []v1alpha1.ResourceSliceTemplate{s}
	}
	dra := &v1alpha1.EC2NodeClass{Spec: v1alpha1.EC2NodeClassSpec{DRADrivers: []string{cloudprovider.DriverNVIDIAGPU}}}
	plugins := &v1alpha1.EC2NodeClass{}
	label := v1alpha1.LabelDRADriver(cloudprovider.DriverNVIDIAGPU)
	for _, tc := range []struct {
		name       string
		info       ec2types.InstanceTypeInfo
		class      *v1alpha1.EC2NodeClass
		wantSlices []v1alpha1.ResourceSliceTemplate
		wantGPUs   int64 // nvidia.com/gpu in capacity and allocatable; 0 for none
		wantLabel  bool
		wantOther  map[corev1.ResourceName]int64
	}{
		{name: "a T4 type of a DRA class carries the driver's slice of one T4 and no nvidia.com/gpu",
			info: info("g4dn.xlarge", 4, 16384, 3, 10, 1), class: dra, wantSlices: slice("t4", 1), wantLabel: true},
		{name: "an H100 type of a DRA class carries 8 GPUs and keeps its EFA interfaces",
			info: p5, class: dra, wantSlices: slice("h100", 8), wantLabel: true, wantOther: map[corev1.ResourceName]int64{v1alpha1.ResourceEFA: 32}},
		{name: "a GPU model the table does not know gets no template and no nvidia.com/gpu",
			info: withGPUs(info("p3.2xlarge", 8, 62464, 4, 15, 0), "NVIDIA", "V100", 1), class: dra, wantLabel: true},
		{name: "an AMD type of a DRA class keeps amd.com/gpu",
			info: withGPUs(info("g4ad.xlarge", 4, 16384, 2, 4, 0), "AMD", "Radeon Pro V520", 1), class: dra, wantLabel: true,
			wantOther: map[corev1.ResourceName]int64{v1alpha1.ResourceAMDGPU: 1}},
		{name: "a type without GPUs of a DRA class has the label only",
			info: info("m5.large", 2, 8192, 3, 10, 0), class: dra, wantLabel: true},
		{name: "a T4 type of a class whose nodes run the device plugin keeps nvidia.com/gpu",
			info: info("g4dn.xlarge", 4, 16384, 3, 10, 1), class: plugins, wantGPUs: 1},
		{name: "a T4 type without a class keeps nvidia.com/gpu",
			info: info("g4dn.xlarge", 4, 16384, 3, 10, 1), wantGPUs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Provider{opts: Options{Region: "us-west-2", VMMemoryOverheadPercent: ptr.To(0.075)}}
			it := p.instanceType(context.Background(), tc.info, tc.class)
			if diff := cmp.Diff(tc.wantSlices, it.ResourceSlices); diff != "" {
				t.Errorf("resource slices (-want,+got):\n%s", diff)
			}
			for what, rl := range map[string]corev1.ResourceList{"capacity": it.Capacity, "allocatable": it.Allocatable} {
				q, ok := rl[v1alpha1.ResourceNVIDIAGPU]
				if got := q.Value(); ok != (tc.wantGPUs > 0) || got != tc.wantGPUs {
					t.Errorf("%s nvidia.com/gpu = %s (present %v), want %d", what, q.String(), ok, tc.wantGPUs)
				}
			}
			for name, n := range tc.wantOther {
				if q := it.Capacity[name]; q.Value() != n {
					t.Errorf("capacity %s = %s, want %d", name, q.String(), n)
				}
			}
			if got := it.Labels[label] == "true"; got != tc.wantLabel {
				t.Errorf("label %s = %q, want it set: %v", label, it.Labels[label], tc.wantLabel)
			}
		})
	}
}

// TestUnknownGPUModelIsLoggedOnce: a model without a template is named at
// V(2) the first time a type of it is described, not on every refresh.
func TestUnknownGPUModelIsLoggedOnce(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 2})
	ctx := klog.NewContext(context.Background(), logger)
	p := &Provider{opts: Options{Region: "us-west-2", VMMemoryOverheadPercent: ptr.To(0.075)}}
	class := &v1alpha1.EC2NodeClass{Spec: v1alpha1.EC2NodeClassSpec{DRADrivers: []string{cloudprovider.DriverNVIDIAGPU}}}
	v100 := info("p3.2xlarge", 8, 62464, 4, 15, 0)
	v100.GpuInfo = &ec2types.GpuInfo{Gpus: []ec2types.GpuDeviceInfo{{Manufacturer: sdkaws.String("NVIDIA"), Name: sdkaws.String("V100"), Count: sdkaws.Int32(1)}}}
	for range 3 {
		p.instanceType(ctx, v100, class)
		p.instanceType(ctx, info("g4dn.xlarge", 4, 16384, 3, 10, 1), class)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"gpu"="v100"`) {
		t.Errorf("log lines %q, want one naming gpu v100", lines)
	}
}
