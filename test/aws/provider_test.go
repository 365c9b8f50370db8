package aws

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/provisioner/controllers/garbage"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func reconcileRequest(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// TestSelectorsResolve checks how each kind of selector term resolves
// through DescribeSubnets, DescribeSecurityGroups and DescribeImages.
func TestSelectorsResolve(t *testing.T) {
	r := newRegion(t, nil, nil)
	t.Run("tags find the three discovery subnets, one per zone, and the tagged group; the alias, through SSM, the recommended EKS image per architecture and variant", func(t *testing.T) {
		want := v1alpha1.EC2NodeClassStatus{
			Subnets: []v1alpha1.ResolvedSubnet{
				{ID: "subnet-0c1a4f3e2d5b60a01", Zone: "us-west-2a", ZoneID: "usw2-az1"},
				{ID: "subnet-0c1a4f3e2d5b60b02", Zone: "us-west-2b", ZoneID: "usw2-az2"},
				{ID: "subnet-0c1a4f3e2d5b60c03", Zone: "us-west-2c", ZoneID: "usw2-az3"},
			},
			SubnetCount:    3,
			SecurityGroups: []v1alpha1.ResolvedSecurityGroup{{ID: "sg-0e5d4c3b2a1f09871", Name: "sandbox-nodes"}},
			AMIs: []v1alpha1.ResolvedAMI{
				{ID: "ami-0e7a1d2c3b4f50001", Name: "amazon-eks-node-al2023-x86_64-standard-1.37-v20261101", Architecture: "amd64", Variant: "standard"},
				{ID: "ami-0e7a1d2c3b4f50006", Name: "amazon-eks-node-al2023-x86_64-nvidia-1.37-v20261101", Architecture: "amd64", Variant: "nvidia"},
				{ID: "ami-0e7a1d2c3b4f50009", Name: "amazon-eks-node-al2023-x86_64-neuron-1.37-v20261101", Architecture: "amd64", Variant: "neuron"},
				{ID: "ami-0e7a1d2c3b4f50002", Name: "amazon-eks-node-al2023-arm64-standard-1.37-v20261101", Architecture: "arm64", Variant: "standard"},
				{ID: "ami-0e7a1d2c3b4f50007", Name: "amazon-eks-node-al2023-arm64-nvidia-1.37-v20261101", Architecture: "arm64", Variant: "nvidia"},
			},
			InstanceProfile: "NodeforgeNodeInstanceProfile",
		}
		got := r.class.Status
		got.Conditions = nil
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("status (-want,+got):\n%s", diff)
		}
		if c := ready(r.class); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Ready = %+v, want True", c)
		}
	})
	t.Run("ids, a group name, a pinned alias and an image name with its owner resolve to exactly those", func(t *testing.T) {
		class := r.resolve(t, className(t), v1alpha1.EC2NodeClassSpec{
			InstanceProfile:            "p",
			SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{ID: "subnet-0c1a4f3e2d5b60d04"}},
			SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Name: "default"}},
			AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Name: "nodeforge-custom-*", Owner: "self"}},
		})
		if got := class.Status.Subnets; len(got) != 1 || got[0].ID != "subnet-0c1a4f3e2d5b60d04" || got[0].Zone != "us-west-2a" {
			t.Errorf("subnets = %+v", got)
		}
		if got := class.Status.SecurityGroups; len(got) != 1 || got[0].ID != "sg-0e5d4c3b2a1f09872" {
			t.Errorf("security groups = %+v", got)
		}
		if got := class.Status.AMIs; len(got) != 1 || got[0].ID != "ami-0c5f0d1e2a3b40005" || got[0].Architecture != "amd64" {
			t.Errorf("amis = %+v", got)
		}
		pinned := r.resolve(t, className(t)+"-pinned", v1alpha1.EC2NodeClassSpec{
			InstanceProfile:            "p",
			SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{ID: "subnet-0c1a4f3e2d5b60d04"}},
			SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{ID: "sg-0e5d4c3b2a1f09872"}},
			AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@v20261001"}},
		})
		var ids []string
		for _, a := range pinned.Status.AMIs {
			ids = append(ids, a.ID)
		}
		// October has standard images of both architectures and an x86_64
		// NVIDIA one: the pinned parameters of the others do not exist.
		if !slices.Equal(ids, []string{"ami-0e7a1d2c3b4f50003", "ami-0e7a1d2c3b4f50008", "ami-0e7a1d2c3b4f50004"}) {
			t.Errorf("al2023@v20261001 resolved to %v, want the October images: standard x86_64, nvidia x86_64, standard arm64", ids)
		}
	})
	t.Run("selectors that match nothing leave the class not Ready, saying which, and InstanceTypes refuses it", func(t *testing.T) {
		class := r.resolve(t, className(t), v1alpha1.EC2NodeClassSpec{
			InstanceProfile:            "p",
			SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{"team": "nobody"}}},
			SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
			AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Tags: map[string]string{"team": "nobody"}}},
		})
		c := ready(class)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "no subnet matches subnetSelectorTerms") || !strings.Contains(c.Message, "no image matches amiSelectorTerms") {
			t.Fatalf("Ready = %+v, want False naming the subnets and images", c)
		}
		pool := r.pool()
		pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
		_, err := r.provider.InstanceTypes(context.Background(), pool)
		var notReady *cloudprovider.NodeClassNotReadyError
		if !errors.As(err, &notReady) {
			t.Errorf("InstanceTypes of a pool with that class = %v, want a NodeClassNotReadyError", err)
		}
	})
}

// offering finds the type's offering in a zone with a capacity type.
func offering(types []v1alpha1.InstanceType, name, zone, ct string) (*v1alpha1.InstanceType, *v1alpha1.Offering) {
	for i := range types {
		if types[i].Name != name {
			continue
		}
		for j := range types[i].Offerings {
			o := &types[i].Offerings[j]
			if o.Zone == zone && string(o.CapacityType) == ct {
				return &types[i], o
			}
		}
		return &types[i], nil
	}
	return nil, nil
}

// TestInstanceTypesPricesAndAllocatable checks real instance types as the
// provider describes them from DescribeInstanceTypes, the offerings, the
// spot price history and the shipped on-demand table, against figures
// worked out by hand (see the comments).
func TestInstanceTypesPricesAndAllocatable(t *testing.T) {
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	types, err := r.provider.InstanceTypes(context.Background(), r.pool())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, zone, arch      string
		allocCPU, allocMemMiB int64
		pods, gpus            int64
		onDemand              float64
	}{
		// m5.large: 2 vCPU, 8192 MiB, 3 ENIs × 10 IPv4: 29 pods;
		// 8192 − ⌈7.5%⌉ = 7577; − (255 + 11·29) − 100 = 6903 MiB; 2000 − 70 = 1930m.
		// On-demand $0.096/h (us-east-1's, standing in for us-west-2).
		{name: "m5.large", zone: "us-west-2a", arch: "amd64", allocCPU: 1930, allocMemMiB: 6903, pods: 29, onDemand: 0.096},
		// m5.xlarge: 4 vCPU, 16384 MiB, 4 × 15: 58 pods; 15155 − 893 − 100 = 14162; 4000 − 80.
		{name: "m5.xlarge", zone: "us-west-2b", arch: "amd64", allocCPU: 3920, allocMemMiB: 14162, pods: 58, onDemand: 0.192},
		// c6g.large: Graviton, 2 vCPU, 4096 MiB, 3 × 10: 29 pods; 3788 − 574 − 100 = 3114.
		{name: "c6g.large", zone: "us-west-2c", arch: "arm64", allocCPU: 1930, allocMemMiB: 3114, pods: 29, onDemand: 0.068},
		// t3.medium: 2 vCPU, 4096 MiB, 3 × 6: 17 pods; 3788 − 442 − 100 = 3246.
		{name: "t3.medium", zone: "us-west-2a", arch: "amd64", allocCPU: 1930, allocMemMiB: 3246, pods: 17, onDemand: 0.0416},
		// g4dn.xlarge: 4 vCPU, 16384 MiB, 3 × 10: 29 pods, one NVIDIA T4;
		// 15155 − 574 − 100 = 14481.
		{name: "g4dn.xlarge", zone: "us-west-2a", arch: "amd64", allocCPU: 3920, allocMemMiB: 14481, pods: 29, gpus: 1, onDemand: 0.526},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			it, od := offering(types, tc.name, tc.zone, "on-demand")
			if it == nil || od == nil {
				t.Fatalf("%s has no on-demand offering in %s", tc.name, tc.zone)
			}
			gpu := it.Capacity[aws.ResourceGPU]
			got := []int64{it.Allocatable.Cpu().MilliValue(), it.Allocatable.Memory().Value() >> 20, it.Capacity.Pods().Value(), gpu.Value()}
			want := []int64{tc.allocCPU, tc.allocMemMiB, tc.pods, tc.gpus}
			if !slices.Equal(got, want) {
				t.Errorf("allocatable cpu (m), memory (MiB), pods, gpus = %v, want %v", got, want)
			}
			if it.Labels[corev1.LabelArchStable] != tc.arch {
				t.Errorf("arch = %q, want %q", it.Labels[corev1.LabelArchStable], tc.arch)
			}
			if p, _ := strconv.ParseFloat(od.Price, 64); p != tc.onDemand {
				t.Errorf("on-demand price = %v, want %v", p, tc.onDemand)
			}
			_, spot := offering(types, tc.name, tc.zone, "spot")
			if spot == nil {
				t.Fatalf("no spot offering")
			}
			if p, _ := strconv.ParseFloat(spot.Price, 64); p != world.SpotPrices[tc.name][tc.zone] {
				t.Errorf("spot price = %v, want the spot price history's %v", p, world.SpotPrices[tc.name][tc.zone])
			}
		})
	}
	t.Run("instance attribute labels are read from DescribeInstanceTypes over the wire", func(t *testing.T) {
		for name, want := range map[string]map[string]string{
			// Facts of the fake's catalogue (the published type
			// specifications): one NVIDIA T4 of 16 GiB, 125 GB of local
			// NVMe, 5 Gbit/s baseline, encryption in transit.
			"g4dn.xlarge": {
				v1alpha1.LabelInstanceCategory: "g", v1alpha1.LabelInstanceFamily: "g4dn", v1alpha1.LabelInstanceGeneration: "4", v1alpha1.LabelInstanceSize: "xlarge",
				v1alpha1.LabelInstanceCPU: "4", v1alpha1.LabelInstanceCPUManufacturer: "intel", v1alpha1.LabelInstanceMemory: "16384",
				v1alpha1.LabelInstanceGPUName: "t4", v1alpha1.LabelInstanceGPUCount: "1", v1alpha1.LabelInstanceGPUManufacturer: "nvidia", v1alpha1.LabelInstanceGPUMemory: "16384",
				v1alpha1.LabelInstanceLocalNVMe: "125", v1alpha1.LabelInstanceHypervisor: "nitro", v1alpha1.LabelInstanceNetworkBandwidth: "5000",
				v1alpha1.LabelInstanceEncryptionInTransitSupported: "true",
				corev1.LabelArchStable:                             "amd64", corev1.LabelOSStable: "linux", corev1.LabelTopologyRegion: "us-west-2",
			},
			// Graviton, no GPU, no local storage: no such labels.
			"c6g.large": {
				v1alpha1.LabelInstanceCategory: "c", v1alpha1.LabelInstanceFamily: "c6g", v1alpha1.LabelInstanceGeneration: "6", v1alpha1.LabelInstanceSize: "large",
				v1alpha1.LabelInstanceCPU: "2", v1alpha1.LabelInstanceCPUManufacturer: "aws", v1alpha1.LabelInstanceMemory: "4096",
				v1alpha1.LabelInstanceHypervisor: "nitro", v1alpha1.LabelInstanceNetworkBandwidth: "750", v1alpha1.LabelInstanceEncryptionInTransitSupported: "false",
				corev1.LabelArchStable: "arm64", corev1.LabelOSStable: "linux", corev1.LabelTopologyRegion: "us-west-2",
			},
		} {
			it, _ := offering(types, name, "us-west-2a", "on-demand")
			if it == nil {
				t.Fatalf("%s is not in the catalog", name)
			}
			if diff := cmp.Diff(want, it.Labels); diff != "" {
				t.Errorf("%s labels (-want,+got):\n%s", name, diff)
			}
		}
	})
	t.Run("a type is offered only in the zones EC2 offers it in", func(t *testing.T) {
		if it, o := offering(types, "g4dn.xlarge", "us-west-2c", "on-demand"); it == nil || o != nil {
			t.Errorf("g4dn.xlarge offered in us-west-2c, where DescribeInstanceTypeOfferings does not list it")
		}
	})
	t.Run("the class's kubelet settings change allocatable", func(t *testing.T) {
		spec := r.class.Spec.DeepCopy()
		spec.Kubelet = &v1alpha1.KubeletConfiguration{MaxPods: ptr(int32(110))}
		class := r.resolve(t, className(t), *spec)
		pool := r.pool()
		pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
		types, err := r.provider.InstanceTypes(context.Background(), pool)
		if err != nil {
			t.Fatal(err)
		}
		// m5.large with 110 pods: 7577 − (255 + 1210) − 100 = 6012 MiB.
		it, _ := offering(types, "m5.large", "us-west-2a", "on-demand")
		if got := []int64{it.Capacity.Pods().Value(), it.Allocatable.Memory().Value() >> 20}; !slices.Equal(got, []int64{110, 6012}) {
			t.Errorf("pods, allocatable memory = %v, want [110 6012]", got)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// offers are the options of a launch, cheapest first, as the lifecycle
// controller passes them: here every offering of the given types.
func (r *region) offers(t *testing.T, capacityType string, names ...string) []cloudprovider.Offer {
	t.Helper()
	types, err := r.provider.InstanceTypes(context.Background(), r.pool())
	if err != nil {
		t.Fatal(err)
	}
	var out []cloudprovider.Offer
	for _, it := range types {
		if len(names) > 0 && !slices.Contains(names, it.Name) {
			continue
		}
		for _, o := range it.Offerings {
			if string(o.CapacityType) != capacityType {
				continue
			}
			p, _ := strconv.ParseFloat(o.Price, 64)
			out = append(out, cloudprovider.Offer{InstanceType: it, Zone: o.Zone, CapacityType: capacityType, Price: p})
		}
	}
	slices.SortStableFunc(out, func(a, b cloudprovider.Offer) int {
		switch {
		case a.Price < b.Price:
			return -1
		case a.Price > b.Price:
			return 1
		}
		return 0
	})
	return out
}

var claims atomic.Int32

// launch is a launch for a new claim of the test's class.
func (r *region) launch(offers []cloudprovider.Offer) cloudprovider.Launch {
	n := claims.Add(1)
	return cloudprovider.Launch{
		NodeClaim: fmt.Sprintf("claim-%d", n), ClaimUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", n), NodePool: "pool",
		Template:  nodeshape.Template{Labels: map[string]string{v1alpha1.LabelNodePool: "pool", "intent": "apps"}},
		NodeClass: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: r.class.Name},
		Offers:    offers,
	}
}

// lastRequest is the last request of the action the fake received.
func (r *region) lastRequest(t *testing.T, action string) ec2fake.Request {
	t.Helper()
	reqs := r.ec2.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Action == action {
			return reqs[i]
		}
	}
	t.Fatalf("no %s request was sent", action)
	return ec2fake.Request{}
}

// overrides reads the override list of a CreateFleet request, as sent.
func overrides(req ec2fake.Request) [][2]string {
	var out [][2]string
	for i := 1; ; i++ {
		prefix := fmt.Sprintf("LaunchTemplateConfigs.1.Overrides.%d.", i)
		it := req.Form.Get(prefix + "InstanceType")
		if it == "" {
			return out
		}
		out = append(out, [2]string{it, req.Form.Get(prefix + "SubnetId")})
	}
}

// TestLaunch checks the CreateFleet requests the provider sends and what it
// makes of EC2's answers.
func TestLaunch(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)

	t.Run("spot: an instant fleet of one, price-capacity-optimized, every offer as an override cheapest first, a ClientToken from the claim, tags on instance, volume and fleet", func(t *testing.T) {
		offers := r.offers(t, "spot", "m5.large", "m5.xlarge", "m7i.large")
		l := r.launch(offers)
		in, err := r.provider.Create(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		req := r.lastRequest(t, "CreateFleet")
		f := req.Form
		for key, want := range map[string]string{
			"Type": "instant",
			"TargetCapacitySpecification.TotalTargetCapacity":             "1",
			"TargetCapacitySpecification.DefaultTargetCapacityType":       "spot",
			"SpotOptions.AllocationStrategy":                              "price-capacity-optimized",
			"LaunchTemplateConfigs.1.LaunchTemplateSpecification.Version": "$Latest",
		} {
			if got := f.Get(key); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		if token := f.Get("ClientToken"); !strings.HasPrefix(token, "nodeforge-"+l.ClaimUID+"-") || len(token) > 64 {
			t.Errorf("ClientToken = %q, want nodeforge-<claim UID>-<request hash>, at most 64 characters", token)
		}
		if f.Get("OnDemandOptions.AllocationStrategy") != "" {
			t.Errorf("a spot fleet sent on-demand options")
		}
		got := overrides(req)
		if len(got) != len(offers) {
			t.Fatalf("%d overrides, want one per offer (%d): %v", len(got), len(offers), got)
		}
		for i, o := range offers {
			if got[i][0] != o.InstanceType.Name || !strings.HasPrefix(got[i][1], "subnet-") {
				t.Errorf("override %d = %v, want %s in a subnet of %s", i, got[i], o.InstanceType.Name, o.Zone)
			}
		}
		// The cheapest offer had capacity, so it launched.
		if in.InstanceType != offers[0].InstanceType.Name || in.Zone != offers[0].Zone || in.CapacityType != "spot" {
			t.Errorf("launched %s in %s (%s), want the cheapest offer %s in %s", in.InstanceType, in.Zone, in.CapacityType, offers[0].InstanceType.Name, offers[0].Zone)
		}
		var tagged []string
		for i := 1; f.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i)) != ""; i++ {
			rt := f.Get(fmt.Sprintf("TagSpecification.%d.ResourceType", i))
			tags := map[string]string{}
			for j := 1; f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j)) != ""; j++ {
				tags[f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Key", i, j))] = f.Get(fmt.Sprintf("TagSpecification.%d.Tag.%d.Value", i, j))
			}
			if tags[aws.TagCluster] != "conformance" || tags[aws.TagNodeClaim] != l.NodeClaim || tags[aws.TagNodePool] != "pool" || tags["kubernetes.io/cluster/conformance"] != "owned" {
				t.Errorf("%s tags = %v", rt, tags)
			}
			tagged = append(tagged, rt)
		}
		slices.Sort(tagged)
		if !slices.Equal(tagged, []string{"fleet", "instance", "volume"}) {
			t.Errorf("tagged %v, want fleet, instance and volume", tagged)
		}
		// The instance carries them as EC2 has it.
		var inst ec2fake.Instance
		for _, i := range r.ec2.Instances() {
			if strings.HasSuffix(in.ProviderID, "/"+i.ID) {
				inst = i
			}
		}
		if inst.Tags[aws.TagNodeClaimUID] != l.ClaimUID || inst.Lifecycle != "spot" {
			t.Errorf("instance %s: tags %v, lifecycle %q", inst.ID, inst.Tags, inst.Lifecycle)
		}
	})

	t.Run("on-demand: lowest-price, and the launch template has the image, IMDSv2 with hop limit 1, the group, the profile and user data joining the cluster", func(t *testing.T) {
		offers := r.offers(t, "on-demand", "c6g.large", "m6g.large")
		if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
			t.Fatal(err)
		}
		f := r.lastRequest(t, "CreateFleet").Form
		if got := f.Get("OnDemandOptions.AllocationStrategy"); got != "lowest-price" {
			t.Errorf("OnDemandOptions.AllocationStrategy = %q, want lowest-price", got)
		}
		if got := f.Get("TargetCapacitySpecification.DefaultTargetCapacityType"); got != "on-demand" {
			t.Errorf("DefaultTargetCapacityType = %q", got)
		}
		name := f.Get("LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName")
		var lt *ec2fake.LaunchTemplate
		for _, t := range r.ec2.LaunchTemplates() {
			if t.Name == name {
				lt = &t
			}
		}
		if lt == nil {
			t.Fatalf("launch template %q was not created", name)
		}
		if lt.ImageID != "ami-0e7a1d2c3b4f50002" {
			t.Errorf("image %s, want the arm64 EKS image for Graviton types", lt.ImageID)
		}
		if lt.MetadataOptions == nil || lt.MetadataOptions.HTTPTokens != "required" || lt.MetadataOptions.HTTPPutResponseHopLimit != 1 {
			t.Errorf("metadata options %+v, want IMDSv2 required and hop limit 1", lt.MetadataOptions)
		}
		if !slices.Equal(lt.SecurityGroupIDs, []string{"sg-0e5d4c3b2a1f09871"}) || lt.IAMInstanceProfileName != "NodeforgeNodeInstanceProfile" {
			t.Errorf("groups %v, profile %q", lt.SecurityGroupIDs, lt.IAMInstanceProfileName)
		}
		nc, labels, taints, err := aws.ParseNodeConfig(lt.UserData)
		if err != nil {
			t.Fatal(err)
		}
		if nc.Spec.Cluster.Name != "conformance" || nc.Spec.Cluster.APIServerEndpoint != "https://api.conformance.example" {
			t.Errorf("NodeConfig cluster %+v", nc.Spec.Cluster)
		}
		if labels["intent"] != "apps" || labels[v1alpha1.LabelCapacityType] != "on-demand" || len(taints) != 1 || taints[0].Key != v1alpha1.TaintBinding {
			t.Errorf("the node would register with labels %v and taints %v", labels, taints)
		}
		// A second launch from the same class reuses the template.
		before := r.ec2.Calls("CreateLaunchTemplate")
		if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
			t.Fatal(err)
		}
		if after := r.ec2.Calls("CreateLaunchTemplate"); after != before {
			t.Errorf("CreateLaunchTemplate called again (%d → %d) for an unchanged class", before, after)
		}
	})

	t.Run("capacity errors on the cheapest options: the next launches, and the refused ones come back to be avoided", func(t *testing.T) {
		offers := r.offers(t, "spot", "m5.large", "m5.xlarge", "m5.2xlarge")
		cheapest := offers[0]
		r.ec2.FailCapacity(ec2fake.CapacityFault{InstanceType: cheapest.InstanceType.Name, CapacityType: "spot"})
		defer r.ec2.ClearFaults()
		in, err := r.provider.Create(ctx, r.launch(offers))
		if err != nil {
			t.Fatal(err)
		}
		if in.InstanceType == cheapest.InstanceType.Name {
			t.Fatalf("launched %s, which has no capacity", in.InstanceType)
		}
		refused := map[string]bool{}
		for _, o := range in.Refused {
			refused[o.InstanceType.Name+"/"+o.Zone] = true
		}
		if !refused[cheapest.InstanceType.Name+"/"+cheapest.Zone] {
			t.Errorf("refused %v, want it to include %s in %s", in.Refused, cheapest.InstanceType.Name, cheapest.Zone)
		}
	})

	t.Run("no capacity for any option: an InsufficientCapacityError naming every option", func(t *testing.T) {
		offers := r.offers(t, "spot", "m5.large", "c5.large")
		r.ec2.FailCapacity(ec2fake.CapacityFault{CapacityType: "spot", Code: "MaxSpotInstanceCountExceeded"})
		defer r.ec2.ClearFaults()
		_, err := r.provider.Create(ctx, r.launch(offers))
		var ice *cloudprovider.InsufficientCapacityError
		if !errors.As(err, &ice) || len(ice.Offers) != len(offers) {
			t.Fatalf("Create = %v, want an InsufficientCapacityError for all %d offers", err, len(offers))
		}
	})

	t.Run("partial fulfilment: errors for some overrides alongside the instance that launched", func(t *testing.T) {
		offers := r.offers(t, "on-demand", "m5.large")
		// m5.large launches only in the last zone tried.
		r.ec2.FailCapacity(ec2fake.CapacityFault{InstanceType: "m5.large", Zone: "us-west-2a", Code: "InsufficientInstanceCapacity"})
		r.ec2.FailCapacity(ec2fake.CapacityFault{InstanceType: "m5.large", Zone: "us-west-2b", Code: "InsufficientFreeAddressesInSubnet"})
		defer r.ec2.ClearFaults()
		in, err := r.provider.Create(ctx, r.launch(offers))
		if err != nil {
			t.Fatal(err)
		}
		if in.Zone != "us-west-2c" || len(in.Refused) != 2 {
			t.Errorf("launched in %s with %d refused options, want us-west-2c and 2", in.Zone, len(in.Refused))
		}
	})

	t.Run("at most 60 overrides, the cheapest", func(t *testing.T) {
		var many []cloudprovider.Offer
		base := r.offers(t, "on-demand")
		for i := 0; len(many) < 75; i++ {
			o := base[i%len(base)]
			o.Price += float64(i) // distinct, increasing
			many = append(many, o)
		}
		if _, err := r.provider.Create(ctx, r.launch(many)); err != nil {
			t.Fatal(err)
		}
		got := overrides(r.lastRequest(t, "CreateFleet"))
		if len(got) > aws.MaxOverrides {
			t.Errorf("%d overrides sent, want at most %d", len(got), aws.MaxOverrides)
		}
		if got[0][0] != many[0].InstanceType.Name {
			t.Errorf("first override %v, want the cheapest %s", got[0], many[0].InstanceType.Name)
		}
	})

	t.Run("the same claim launched twice runs one instance", func(t *testing.T) {
		l := r.launch(r.offers(t, "spot", "c5.large"))
		first, err := r.provider.Create(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		fleets := r.ec2.Calls("CreateFleet")
		second, err := r.provider.Create(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if second.ProviderID != first.ProviderID || r.ec2.Calls("CreateFleet") != fleets {
			t.Errorf("second Create gave %s (first %s) after %d more CreateFleet calls", second.ProviderID, first.ProviderID, r.ec2.Calls("CreateFleet")-fleets)
		}
	})

	t.Run("authorisation errors are AccessDeniedErrors, not retried", func(t *testing.T) {
		r.ec2.Deny("CreateFleet", true)
		defer r.ec2.Deny("CreateFleet", false)
		before := r.ec2.Calls("CreateFleet")
		_, err := r.provider.Create(ctx, r.launch(r.offers(t, "spot", "c5.large")))
		if !cloudprovider.IsAccessDenied(err) || !strings.Contains(err.Error(), "UnauthorizedOperation") {
			t.Fatalf("Create = %v, want an AccessDeniedError quoting UnauthorizedOperation", err)
		}
		if n := r.ec2.Calls("CreateFleet") - before; n != 1 {
			t.Errorf("CreateFleet sent %d times, want once", n)
		}
	})
}

// TestRetries checks that throttling is retried with backoff and surfaced
// when it lasts, and that a lost CreateFleet response retried by the SDK
// with the same ClientToken launches one instance.
func TestRetries(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)
	offers := r.offers(t, "spot", "m5.large")

	t.Run("throttled twice, then the launch succeeds", func(t *testing.T) {
		r.ec2.Throttle("CreateFleet", 2)
		before := r.ec2.Calls("CreateFleet")
		if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
			t.Fatalf("Create after two throttles: %v", err)
		}
		if n := r.ec2.Calls("CreateFleet") - before; n != 3 {
			t.Errorf("CreateFleet sent %d times, want 3", n)
		}
	})
	t.Run("throttled beyond the attempts: the error is returned, not swallowed", func(t *testing.T) {
		r.ec2.Throttle("CreateFleet", 3) // as many as the client's attempts
		_, err := r.provider.Create(ctx, r.launch(offers))
		if err == nil || !strings.Contains(err.Error(), "RequestLimitExceeded") || cloudprovider.IsAccessDenied(err) || cloudprovider.IsInsufficientCapacity(err) {
			t.Fatalf("Create = %v, want the RequestLimitExceeded error", err)
		}
	})
	t.Run("a response lost on the way back is retried with the same ClientToken and launches nothing twice", func(t *testing.T) {
		var lost atomic.Bool
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(strings.NewReader(string(body)))
			if strings.Contains(string(body), "Action=CreateFleet") && lost.CompareAndSwap(false, true) {
				// EC2 acts on the request, then the connection drops
				// before the answer arrives.
				r.ec2.ServeHTTP(httptest.NewRecorder(), req)
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
			r.ec2.ServeHTTP(w, req)
		}))
		defer front.Close()
		prov := r.providerVia(t, front.URL)
		before := len(r.ec2.Instances())
		l := r.launch(offers)
		in, err := prov.Create(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if !lost.Load() {
			t.Fatal("no response was lost")
		}
		var tokens []string
		for _, req := range r.ec2.Requests() {
			if req.Action == "CreateFleet" && strings.HasPrefix(req.Form.Get("ClientToken"), "nodeforge-"+l.ClaimUID+"-") {
				tokens = append(tokens, req.Form.Get("ClientToken"))
			}
		}
		if len(tokens) != 2 || tokens[0] != tokens[1] {
			t.Errorf("CreateFleet with the claim's tokens %v, want the same token twice (the lost one and the retry)", tokens)
		}
		if n := len(r.ec2.Instances()) - before; n != 1 {
			t.Errorf("%d instances launched, want 1 (%s)", n, in.ProviderID)
		}
	})
}

// TestRetryWithOtherOffersIsANewRequest: a claim whose first fleet
// completed without an instance (no capacity) is retried with other offers,
// as the provisioner does once it has marked the first ones unavailable; the
// retry is a new request that launches, not the first one's answer again
// or IdempotentParameterMismatch.
func TestRetryWithOtherOffersIsANewRequest(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)
	r.ec2.FailCapacity(ec2fake.CapacityFault{InstanceType: "m5.large", CapacityType: "spot"})
	t.Cleanup(r.ec2.ClearFaults)
	l := r.launch(r.offers(t, "spot", "m5.large"))
	if _, err := r.provider.Create(ctx, l); !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("first fleet: %v, want insufficient capacity", err)
	}
	l.Offers = r.offers(t, "spot", "m5.xlarge")
	in, err := r.provider.Create(ctx, l)
	if err != nil {
		t.Fatalf("retry with other offers: %v", err)
	}
	if in.InstanceType != "m5.xlarge" {
		t.Errorf("retry launched %s, want m5.xlarge", in.InstanceType)
	}
}

// TestOnDemandFleetFollowsAnOverlaysPrices: a NodeOverlay made m5.xlarge
// cheaper than m5.large in the catalog, so the launcher's offers list it
// first. The on-demand fleet then goes by priority in that order, and EC2
// (the fake, as EC2 does) launches m5.xlarge; the same offers without an
// overlay go by lowest price, which EC2 reckons by its own prices and so
// launches m5.large.
func TestOnDemandFleetFollowsAnOverlaysPrices(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)
	discounted := func(overlays []string) []cloudprovider.Offer {
		var out []cloudprovider.Offer
		for _, o := range r.offers(t, "on-demand", "m5.large", "m5.xlarge") {
			if o.InstanceType.Name == "m5.xlarge" {
				o.Price /= 10
				o.InstanceType.Overlays = overlays
			}
			out = append(out, o)
		}
		slices.SortStableFunc(out, nodeshape.CheapestFirst)
		return out
	}
	for _, tc := range []struct {
		overlays           []string
		strategy, launched string
	}{
		{[]string{"discount"}, "prioritized", "m5.xlarge"},
		{nil, "lowest-price", "m5.large"},
	} {
		in, err := r.provider.Create(ctx, r.launch(discounted(tc.overlays)))
		if err != nil {
			t.Fatal(err)
		}
		f := r.lastRequest(t, "CreateFleet").Form
		if got := f.Get("OnDemandOptions.AllocationStrategy"); got != tc.strategy {
			t.Errorf("overlays %v: OnDemandOptions.AllocationStrategy = %q, want %q", tc.overlays, got, tc.strategy)
		}
		if tc.strategy == "prioritized" {
			for i := 1; f.Get(fmt.Sprintf("LaunchTemplateConfigs.1.Overrides.%d.InstanceType", i)) != ""; i++ {
				if got := f.Get(fmt.Sprintf("LaunchTemplateConfigs.1.Overrides.%d.Priority", i)); got != strconv.Itoa(i-1) {
					t.Errorf("override %d has priority %q, want %d (its place in the catalog's order)", i, got, i-1)
				}
			}
		}
		if in.InstanceType != tc.launched {
			t.Errorf("overlays %v: launched %s, want %s", tc.overlays, in.InstanceType, tc.launched)
		}
	}
}

// providerVia is the test region's provider reaching EC2 through url.
func (r *region) providerVia(t *testing.T, url string) *aws.Provider {
	t.Helper()
	p, err := aws.New(clientFor(url, 3), kube, mustPrices(t), aws.Options{
		Region: "us-west-2", ClusterName: "conformance", ClusterEndpoint: "https://api.conformance.example", KubernetesVersion: "1.37",
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTerminateAndGarbageCollection checks Delete, Get and List, and the
// garbage collector with this provider against the API server.
func TestTerminateAndGarbageCollection(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)
	in, err := r.provider.Create(ctx, r.launch(r.offers(t, "on-demand", "m5.large")))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Delete terminates, then says not found, again and again", func(t *testing.T) {
		if err := r.provider.Delete(ctx, in.ProviderID); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := r.provider.Delete(ctx, in.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
				t.Errorf("Delete of a terminated instance = %v, want ErrNotFound", err)
			}
		}
		if _, err := r.provider.Get(ctx, in.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Errorf("Get of a terminated instance = %v, want ErrNotFound", err)
		}
		if err := r.provider.Delete(ctx, "aws:///us-west-2a/i-0123456789abcdef0"); !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Errorf("Delete of an unknown instance = %v, want ErrNotFound", err)
		}
	})
	t.Run("an instance of ours without a claim is terminated after the grace period; ours with a claim, and others', are kept; a claim whose instance vanished is deleted", func(t *testing.T) {
		old := time.Now().Add(-time.Hour)
		orphan := r.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", LaunchTime: old,
			Tags: map[string]string{aws.TagCluster: "conformance", aws.TagNodeClaim: "gone", aws.TagNodePool: "pool"}})
		young := r.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01",
			Tags: map[string]string{aws.TagCluster: "conformance", aws.TagNodeClaim: "just-launched"}})
		foreign := r.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", LaunchTime: old,
			Tags: map[string]string{aws.TagCluster: "another-cluster"}})
		claimed := r.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", LaunchTime: old,
			Tags: map[string]string{aws.TagCluster: "conformance", aws.TagNodeClaim: "gc-kept"}})
		kept := storedClaim(t, "gc-kept", "aws:///us-west-2a/"+claimed.ID)
		vanished := storedClaim(t, "gc-vanished", "aws:///us-west-2a/i-0fffffffffffffff0")
		if err := garbage.New(kube, r.provider).Collect(ctx); err != nil {
			t.Fatal(err)
		}
		state := map[string]string{}
		for _, i := range r.ec2.Instances() {
			state[i.ID] = i.State
		}
		for id, want := range map[string]string{orphan.ID: "terminated", young.ID: "running", foreign.ID: "running", claimed.ID: "running"} {
			if !strings.HasPrefix(state[id], want[:4]) && !(want == "terminated" && state[id] == "shutting-down") {
				t.Errorf("instance %s is %s, want %s", id, state[id], want)
			}
		}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(kept), kept); err != nil {
			t.Errorf("claim with a live instance: %v", err)
		}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vanished), vanished); err == nil && vanished.DeletionTimestamp.IsZero() {
			t.Errorf("claim %s whose instance vanished was not deleted", vanished.Name)
		}
	})
}

// storedClaim stores a NodeClaim launched an hour ago, past the collector's
// grace period, on the instance of providerID.
func storedClaim(t *testing.T, name, providerID string) *v1alpha1.NodeClaim {
	t.Helper()
	ctx := context.Background()
	launched := testobj.Claim(name).Pool("pool").Class("EC2NodeClass", "x").Phase(v1alpha1.NodeClaimLaunched).ProviderID(providerID).
		ConditionAt(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched", time.Now().Add(-time.Hour)).Obj()
	nc := launched.DeepCopy()
	if err := kube.Create(ctx, nc); err != nil { // the API server leaves the status out
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	nc.Status = launched.Status
	if err := kube.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestLaunchTemplatesAreCollected: a template a launch used recently is
// kept; one unused for the grace period goes, and so does every template of
// a class that is gone; a launch that needs a collected template makes it
// again and launches. Over the wire, against the fake's own count.
func TestLaunchTemplatesAreCollected(t *testing.T) {
	ctx := context.Background()
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	offers := r.offers(t, "on-demand", "m5.large")
	if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
		t.Fatal(err)
	}
	if n := len(r.ec2.LaunchTemplates()); n != 1 {
		t.Fatalf("%d launch templates after a launch, want 1", n)
	}
	classes := map[string]bool{r.class.Name: true}
	if n, err := r.provider.CollectLaunchTemplates(ctx, classes, time.Hour); err != nil || n != 0 {
		t.Fatalf("collecting a template used just now: deleted %d (%v), want 0", n, err)
	}
	if n, err := r.provider.CollectLaunchTemplates(ctx, map[string]bool{}, time.Hour); err != nil || n != 1 {
		t.Fatalf("collecting the template of a class that is gone: deleted %d (%v), want 1", n, err)
	}
	if n := len(r.ec2.LaunchTemplates()); n != 0 {
		t.Fatalf("%d launch templates left, want 0", n)
	}
	// The provider forgot it: the next launch makes it again.
	if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
		t.Fatalf("launching after the template was collected: %v", err)
	}
	if n := len(r.ec2.LaunchTemplates()); n != 1 {
		t.Fatalf("%d launch templates after a second launch, want 1", n)
	}
	// A grace of zero: made and used before now, so unused for longer.
	if n, err := r.provider.CollectLaunchTemplates(ctx, classes, 0); err != nil || n != 1 {
		t.Fatalf("collecting an unused template past its grace: deleted %d (%v), want 1", n, err)
	}
	// Deleted behind the provider's back: CreateFleet says so, the provider
	// forgets it, and the retry makes it again.
	if _, err := r.provider.Create(ctx, r.launch(offers)); err != nil {
		t.Fatal(err)
	}
	for _, lt := range r.ec2.LaunchTemplates() {
		if _, err := r.client.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: sdkaws.String(lt.ID)}); err != nil {
			t.Fatal(err)
		}
	}
	l := r.launch(offers)
	if _, err := r.provider.Create(ctx, l); err == nil {
		t.Fatal("launching from a template deleted behind the provider's back succeeded; the test expects CreateFleet to refuse it")
	}
	if _, err := r.provider.Create(ctx, l); err != nil {
		t.Fatalf("retrying the launch: %v", err)
	}
}

// TestImagesPerVariantAndDrift: through SSM's public parameters, a type with
// an NVIDIA GPU launches from the NVIDIA image and others from the standard
// one, each recorded on the instance; once AWS publishes a newer
// recommended image, the class resolves to it and a node of the old image
// has drifted, saying which; a class pinned to a release does not move.
func TestImagesPerVariantAndDrift(t *testing.T) {
	ctx := context.Background()
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	launch := func(name string) *cloudprovider.Instance {
		t.Helper()
		in, err := r.provider.Create(ctx, r.launch(r.offers(t, "on-demand", name)))
		if err != nil {
			t.Fatalf("launching %s: %v", name, err)
		}
		return in
	}
	gpu, plain := launch("g4dn.xlarge"), launch("m5.large")
	if gpu.ImageID != "ami-0e7a1d2c3b4f50006" || plain.ImageID != "ami-0e7a1d2c3b4f50001" {
		t.Fatalf("images: g4dn.xlarge %s, m5.large %s; want the nvidia ami-0e7a1d2c3b4f50006 and the standard ami-0e7a1d2c3b4f50001", gpu.ImageID, plain.ImageID)
	}
	for _, in := range r.ec2.Instances() {
		if want := map[string]string{"g4dn.xlarge": gpu.ImageID, "m5.large": plain.ImageID}[in.Type]; in.ImageID != want {
			t.Errorf("EC2 launched %s from %s, want %s", in.Type, in.ImageID, want)
		}
	}
	drifted := func(class *v1alpha1.EC2NodeClass, in *cloudprovider.Instance) string {
		nc := &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: class.Name}}}
		nc.Status.ImageID, nc.Status.InstanceType = in.ImageID, in.InstanceType
		_, why, _, err := cloudprovider.NodeClassDrift(ctx, kube, r.provider.NodeClasses(), nc)
		if err != nil {
			t.Fatal(err)
		}
		return why
	}
	if why := drifted(r.class, plain); why != "" {
		t.Fatalf("a node of the current image drifted: %s", why)
	}
	pinned := r.resolve(t, className(t)+"-pinned", v1alpha1.EC2NodeClassSpec{
		InstanceProfile:            "p",
		SubnetSelectorTerms:        r.class.Spec.SubnetSelectorTerms,
		SecurityGroupSelectorTerms: r.class.Spec.SecurityGroupSelectorTerms,
		AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@v20261101"}},
	})
	// AWS publishes a December release of the standard x86_64 image.
	r.ec2.AddImage(ec2fake.Image{ID: "ami-0e7a1d2c3b4f50010", Name: "amazon-eks-node-al2023-x86_64-standard-1.37-v20261201",
		OwnerID: ec2fake.EKSAccountID, OwnerAlias: "amazon", Architecture: "x86_64", State: "available", Public: true})
	r.ssm.Put(ssmfake.RecommendedImageIDParameter("1.37", "x86_64", "standard"), "ami-0e7a1d2c3b4f50010")
	for _, name := range []string{r.class.Name, pinned.Name} {
		if _, err := aws.NewNodeClassController(kube, r.provider).Reconcile(ctx, reconcileRequest(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*v1alpha1.EC2NodeClass{r.class, pinned} {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			t.Fatal(err)
		}
	}
	if why := drifted(r.class, plain); !strings.Contains(why, "image ami-0e7a1d2c3b4f50001 is not the one EC2NodeClass") || !strings.Contains(why, "(ami-0e7a1d2c3b4f50010, amazon-eks-node-al2023-x86_64-standard-1.37-v20261201)") {
		t.Errorf("a node of the old standard image: drift %q, want it to name the old image and the new one", why)
	}
	if why := drifted(r.class, gpu); why != "" {
		t.Errorf("a node of the unchanged nvidia image drifted: %s", why)
	}
	// AWS withdraws the NVIDIA parameter: the GPU node keeps its image,
	// there being none to replace it with.
	r.ssm.Delete(ssmfake.RecommendedImageIDParameter("1.37", "x86_64", "nvidia"))
	if _, err := aws.NewNodeClassController(kube, r.provider).Reconcile(ctx, reconcileRequest(r.class.Name)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(r.class), r.class); err != nil {
		t.Fatal(err)
	}
	if why := drifted(r.class, gpu); why != "" {
		t.Errorf("a GPU node whose variant the class no longer has an image for drifted: %s", why)
	}
	if why := drifted(pinned, plain); why != "" {
		t.Errorf("a node of a class pinned to v20261101 drifted when a newer release came out: %s", why)
	}
}

// TestRetryAfterAFleetErrorIsANewRequest: a fleet that launched nothing for
// another reason than capacity (an instance profile IAM has not
// propagated to EC2 yet, say) is retried with a new ClientToken: EC2
// answers a token it has seen with the same failure, and the claim would
// never launch.
func TestRetryAfterAFleetErrorIsANewRequest(t *testing.T) {
	ctx := context.Background()
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	r.ec2.FailCapacity(ec2fake.CapacityFault{Code: "InvalidParameterValue"})
	l := r.launch(r.offers(t, "on-demand", "m5.large"))
	if _, err := r.provider.Create(ctx, l); err == nil || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("launch while EC2 refuses the fleet: %v, want its InvalidParameterValue", err)
	}
	first := r.lastRequest(t, "CreateFleet").Form.Get("ClientToken")
	r.ec2.ClearFaults()
	if _, err := r.provider.Create(ctx, l); err != nil {
		t.Fatalf("retrying once EC2 accepts the fleet: %v", err)
	}
	if second := r.lastRequest(t, "CreateFleet").Form.Get("ClientToken"); second == first {
		t.Errorf("the retry reused ClientToken %s", first)
	}
}

// TestAFailedRefreshKeepsWhatTheClassResolvedTo: a class that resolved
// stays Ready with what it resolved to when a refresh fails (EC2 throttles
// past the SDK's retries), saying so in its Refreshed condition, so that
// one throttled call does not take its pools offline; the next good
// refresh clears the condition.
func TestAFailedRefreshKeepsWhatTheClassResolvedTo(t *testing.T) {
	ctx := context.Background()
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	before := r.class.Status.DeepCopy()
	if c := ready(r.class); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v, want True before the failed refresh", c)
	}
	r.ec2.Throttle("DescribeSubnets", 3) // the test client's attempts
	ctrl := aws.NewNodeClassController(kube, r.provider)
	if _, err := ctrl.Reconcile(ctx, reconcileRequest(r.class.Name)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(r.class), r.class); err != nil {
		t.Fatal(err)
	}
	if c := ready(r.class); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready after a failed refresh = %+v, want True still", c)
	}
	if diff := cmp.Diff(before.AMIs, r.class.Status.AMIs); diff != "" || len(r.class.Status.Subnets) != len(before.Subnets) {
		t.Errorf("after a failed refresh the class lost what it resolved to: subnets %d (was %d), images (-before,+after):\n%s", len(r.class.Status.Subnets), len(before.Subnets), diff)
	}
	refreshed := meta.FindStatusCondition(r.class.Status.Conditions, aws.ConditionRefreshed)
	if refreshed == nil || refreshed.Status != metav1.ConditionFalse || !strings.Contains(refreshed.Message, "DescribeSubnets") {
		t.Errorf("Refreshed = %+v, want False naming DescribeSubnets", refreshed)
	}
	if _, err := ctrl.Reconcile(ctx, reconcileRequest(r.class.Name)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(r.class), r.class); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(r.class.Status.Conditions, aws.ConditionRefreshed); c != nil {
		t.Errorf("Refreshed = %+v after a good refresh, want it gone", c)
	}
}

// TestAliasWithoutSSMPermission: a provisioner whose policy predates the
// SSM parameters still resolves an alias, to the standard images found by
// name, and the class says so; GPU types are then not offered.
func TestAliasWithoutSSMPermission(t *testing.T) {
	ctx := context.Background()
	world := ec2fake.DefaultWorld()
	r := newRegion(t, &world, nil)
	r.ssm.FailNext("GetParameters", 100, http.StatusBadRequest, "AccessDeniedException")
	class := r.resolve(t, className(t)+"-nossm", r.class.Spec)
	var got []string
	for _, a := range class.Status.AMIs {
		got = append(got, a.Architecture+"/"+a.Variant+"="+a.ID)
	}
	if !slices.Equal(got, []string{"amd64/standard=ami-0e7a1d2c3b4f50001", "arm64/standard=ami-0e7a1d2c3b4f50002"}) {
		t.Errorf("images without SSM: %v, want the standard ones found by name", got)
	}
	c := meta.FindStatusCondition(class.Status.Conditions, aws.ConditionAMIsReady)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "standard images only, found by name") {
		t.Errorf("AMIsReady = %+v, want True saying the images were found by name", c)
	}
	pool := r.pool()
	pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
	types, err := r.provider.InstanceTypes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if it, _ := offering(types, "g4dn.xlarge", "us-west-2a", "on-demand"); it != nil {
		t.Error("g4dn.xlarge offered with no NVIDIA image")
	}
}
