package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/eksnode"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// realRegion is a fake region whose catalogue is ec2fake.RealInstanceTypes:
// every shape that changes what a node reports.
func realRegion(t *testing.T) *region {
	t.Helper()
	world := ec2fake.DefaultWorld()
	world.InstanceTypes = ec2fake.RealInstanceTypes()
	world.OnDemandPrices = ec2fake.RealOnDemandPrices()
	world.Offerings = nil
	spot := map[string]map[string]float64{}
	for name, price := range world.OnDemandPrices {
		spot[name] = map[string]float64{}
		for _, z := range world.Zones {
			spot[name][z.Name] = price / 3
		}
	}
	world.SpotPrices = spot
	return newRegion(t, &world, nil)
}

// TestVirtualNodeIsTheRegisteredNode launches every instance type the
// provider offers, through the real SDK, boots each instance from the user
// data and launch template the provider made (package eksnode: nodeadm,
// the kubelet and the device plugins, written apart from the provider),
// and holds what registers against the instance type the provider offered:
// CPU, pods, ephemeral storage and every device resource equal, and
// allocatable equal; memory equal once the provider has seen a node of
// the type, and never promised above the node's before. It does so under
// each kubelet setting that changes the figures.
func TestVirtualNodeIsTheRegisteredNode(t *testing.T) {
	r := realRegion(t)
	settings := map[string]*v1alpha1.KubeletConfiguration{
		"defaults":     nil,
		"maxPods":      {MaxPods: ptr(int32(110))},
		"podsPerCore":  {PodsPerCore: ptr(int32(2))},
		"reservedENIs": {ReservedENIs: ptr(int32(1))},
		"reserved": {
			KubeReserved:   map[string]v1alpha1.KubeletValue{"cpu": "250m"},
			SystemReserved: map[string]v1alpha1.KubeletValue{"memory": "300Mi"},
			EvictionHard:   map[string]v1alpha1.KubeletValue{"memory.available": "5%", "nodefs.available": "15%"},
		},
	}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		t.Run(name, func(t *testing.T) {
			spec := r.class.Spec.DeepCopy()
			spec.Kubelet = settings[name]
			class := r.resolve(t, className(t), *spec)
			pool := r.pool()
			pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
			types, err := r.provider.InstanceTypes(context.Background(), pool)
			if err != nil {
				t.Fatal(err)
			}
			if offered := len(types); offered != len(ec2fake.RealInstanceTypes()) {
				t.Fatalf("%d instance types offered, want every one of the region's %d", offered, len(ec2fake.RealInstanceTypes()))
			}
			for _, it := range types {
				r.checkNodeOf(t, pool, class, it)
			}
		})
	}
}

// TestDRATemplatesAreTheRegisteredNodesSlices: under a class whose nodes
// run the NVIDIA GPU DRA driver, every type is launched and booted as in
// TestVirtualNodeIsTheRegisteredNode (the same figures, nvidia.com/gpu on
// neither side), and each type's slice templates are what its node
// publishes: the same drivers, the same devices by name, each template
// attribute and capacity equal on the node's device (which adds its own:
// uuid, versions, PCI). A type with NVIDIA GPUs but no template publishes
// no slice, and the node has the driver's label the virtual node has.
func TestDRATemplatesAreTheRegisteredNodesSlices(t *testing.T) {
	r := realRegion(t)
	spec := r.class.Spec.DeepCopy()
	spec.DRADrivers = []string{cloudprovider.DriverNVIDIAGPU}
	class := r.resolve(t, className(t)+"-dra", *spec)
	pool := r.pool()
	pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
	types, err := r.provider.InstanceTypes(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	label := v1alpha1.LabelDRADriver(cloudprovider.DriverNVIDIAGPU)
	withTemplates := 0
	for _, it := range types {
		if it.Labels[v1alpha1.LabelInstanceGPUManufacturer] != "nvidia" {
			continue // no NVIDIA GPUs: TestVirtualNodeIsTheRegisteredNode holds it
		}
		node := r.checkNodeOf(t, pool, class, it)
		if it.Labels[label] != "true" || node.Labels[label] != "true" {
			t.Errorf("%s: label %s virtual %q, registered %q; want true on both", it.Name, label, it.Labels[label], node.Labels[label])
		}
		published := node.Slices(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-of-" + it.Name}})
		if len(it.ResourceSlices) != len(published) {
			t.Errorf("%s: %d slice templates, the node publishes %d slices", it.Name, len(it.ResourceSlices), len(published))
			continue
		}
		if len(published) > 0 {
			withTemplates++
		}
		for i, tmpl := range it.ResourceSlices {
			got := published[i]
			if got.Spec.Driver != tmpl.Driver || len(got.Spec.Devices) != len(tmpl.Devices) {
				t.Errorf("%s: template %s of %d devices, the node publishes %s with %d", it.Name, tmpl.Driver, len(tmpl.Devices), got.Spec.Driver, len(got.Spec.Devices))
				continue
			}
			for j, want := range tmpl.Devices {
				d := got.Spec.Devices[j]
				if d.Name != want.Name {
					t.Errorf("%s: device %d named %s, the node's %s", it.Name, j, want.Name, d.Name)
				}
				for k, v := range want.Attributes {
					if diff := cmp.Diff(v, d.Attributes[k]); diff != "" {
						t.Errorf("%s %s: attribute %s (-template,+node):\n%s", it.Name, want.Name, k, diff)
					}
				}
				for k, v := range want.Capacity {
					if has := d.Capacity[k].Value; has.Cmp(v.Value) != 0 {
						t.Errorf("%s %s: capacity %s %s, the node's %s", it.Name, want.Name, k, v.Value.String(), has.String())
					}
				}
			}
		}
	}
	if withTemplates == 0 {
		t.Error("no type carried a template: the region's GPU types are not what the test expects")
	}
}

// checkNodeOf launches one instance of it for a claim whose pods ask for
// each of its devices, boots it, compares, and returns the node.
func (r *region) checkNodeOf(t *testing.T, pool *v1alpha1.NodePool, class *v1alpha1.EC2NodeClass, it v1alpha1.InstanceType) eksnode.Node {
	t.Helper()
	ctx := context.Background()
	o := it.Offerings[0]
	l := r.launch([]cloudprovider.Offer{{InstanceType: it, Zone: o.Zone, CapacityType: string(o.CapacityType)}})
	l.NodeClass.Name = class.Name
	l.Requests = corev1.ResourceList{}
	for name, q := range it.Capacity {
		if isDevice(name) {
			l.Requests[name] = q
		}
	}
	in, err := r.provider.Create(ctx, l)
	if err != nil {
		t.Fatalf("%s: launching: %v", it.Name, err)
	}
	node := r.boot(t, in)
	// Memory: the provider's estimate never promises more than the node
	// has; once it has seen the node, it offers exactly the node's.
	if got, has := it.Capacity[corev1.ResourceMemory], node.Capacity[corev1.ResourceMemory]; got.Cmp(has) > 0 {
		t.Errorf("%s: memory %s promised before any node registered, above the node's %s", it.Name, got.String(), has.String())
	}
	r.provider.RegisteredNode(ctx, in, &corev1.Node{Status: corev1.NodeStatus{Capacity: node.Capacity, Allocatable: node.Allocatable}})
	types, err := r.provider.InstanceTypes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(types, func(x v1alpha1.InstanceType) bool { return x.Name == it.Name })
	if i < 0 {
		t.Fatalf("%s no longer offered", it.Name)
	}
	it = types[i]
	if diff := resourcesDiff(it.Capacity, node.Capacity); diff != "" {
		t.Errorf("%s capacity, virtual node against registered node:\n%s", it.Name, diff)
	}
	if diff := resourcesDiff(it.Allocatable, node.Allocatable); diff != "" {
		t.Errorf("%s allocatable, virtual node against registered node:\n%s", it.Name, diff)
	}
	return node
}

// boot is the node the instance registers, as its kubelet reports it.
func (r *region) boot(t *testing.T, in *cloudprovider.Instance) eksnode.Node {
	t.Helper()
	var found *ec2fake.Instance
	for _, x := range r.ec2.Instances() {
		if x.Tags["nodeforge.dev/nodeclaim"] == in.NodeClaim {
			found = &x
		}
	}
	if found == nil {
		t.Fatalf("no instance of claim %s", in.NodeClaim)
	}
	var typ ec2fake.InstanceType
	for _, x := range ec2fake.RealInstanceTypes() {
		if x.Name == found.Type {
			typ = x
		}
	}
	node, err := eksnode.Join(typ, eksnode.BootOf(*found, r.ec2.LaunchTemplates(), true))
	if err != nil {
		t.Fatalf("booting %s: %v", found.ID, err)
	}
	return node
}

func isDevice(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage:
		return false
	}
	return true
}

// resourcesDiff lists the resources whose quantities differ, or that
// only one side has.
func resourcesDiff(virtual, registered corev1.ResourceList) string {
	out := ""
	names := slices.Sorted(maps.Keys(virtual))
	for name := range registered {
		if _, ok := virtual[name]; !ok {
			names = append(names, name)
		}
	}
	for _, name := range names {
		v, vok := virtual[name]
		n, nok := registered[name]
		if vok && nok && v.Cmp(n) == 0 {
			continue
		}
		out += fmt.Sprintf("  %s: virtual %s, registered %s\n", name, show(v, vok), show(n, nok))
	}
	return out
}

func show(q resource.Quantity, ok bool) string {
	if !ok {
		return "(none)"
	}
	return fmt.Sprintf("%s (%d)", q.String(), q.Value())
}

// TestMaxPodsAboveTheAddressesIsReported: a class's maxPods above what the
// VPC CNI can address on some types without prefix delegation leaves the
// class Ready but says so, naming the types and the fix; without maxPods
// the figure is each type's own.
func TestMaxPodsAboveTheAddressesIsReported(t *testing.T) {
	r := newRegion(t, nil, nil)
	if c := meta.FindStatusCondition(r.class.Status.Conditions, aws.ConditionMaxPodsAddressable); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("without maxPods: %s = %+v, want True", aws.ConditionMaxPodsAddressable, c)
	}
	spec := r.class.Spec.DeepCopy()
	spec.Kubelet = &v1alpha1.KubeletConfiguration{MaxPods: ptr(int32(110))}
	class := r.resolve(t, className(t)+"-110", *spec)
	c := meta.FindStatusCondition(class.Status.Conditions, aws.ConditionMaxPodsAddressable)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ExceedsAddresses" ||
		!strings.Contains(c.Message, "c5.large 29") || !strings.Contains(c.Message, "ENABLE_PREFIX_DELEGATION") {
		t.Errorf("maxPods 110: %s = %+v, want False naming c5.large's 29 and prefix delegation", aws.ConditionMaxPodsAddressable, c)
	}
	if r := ready(class); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("the class is not Ready: %+v; a maxPods above the addresses is a warning", r)
	}
}

// nodeadmInstanceInfo is nodeadm's own record of each type's default
// network card (nodeadm/internal/kubelet/instance-info.jsonl,
// awslabs/amazon-eks-ami): interfaces and IPv4 addresses per interface,
// from which it computes max pods.
var nodeadmInstanceInfo = map[string][2]int64{
	"t3.micro": {2, 2}, "t3.medium": {3, 6}, "m5.large": {3, 10}, "m5.xlarge": {4, 15}, "m5.2xlarge": {4, 15},
	"c5.large": {3, 10}, "c5.xlarge": {4, 15}, "r5.large": {3, 10}, "m6g.large": {3, 10}, "m6g.xlarge": {4, 15},
	"c6g.large": {3, 10}, "m7i.large": {3, 10}, "m7i.xlarge": {4, 15}, "m7i.2xlarge": {4, 15}, "c7i.large": {3, 10},
	"c7g.xlarge": {4, 15}, "g4dn.xlarge": {3, 10}, "inf2.xlarge": {4, 15}, "trn1.2xlarge": {4, 15}, "c5n.9xlarge": {8, 30},
	"inf2.24xlarge": {15, 50}, "trn1.32xlarge": {5, 50}, "p4d.24xlarge": {15, 50}, "p5.48xlarge": {2, 50},
	"g5.12xlarge": {15, 50}, "g4ad.16xlarge": {8, 30}, "dl1.24xlarge": {15, 50}, "c6in.32xlarge": {8, 50},
	"m6idn.32xlarge": {8, 50}, "c5n.18xlarge": {15, 50},
}

// TestMaxPodsAgreeWithNodeadm holds the provider's max pods and
// kube-reserved memory for every type of RealInstanceTypes against
// nodeadm's figures, and logs the table docs/aws.md shows (-v).
func TestMaxPodsAgreeWithNodeadm(t *testing.T) {
	r := realRegion(t)
	types, err := r.provider.InstanceTypes(context.Background(), r.pool())
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string]ec2fake.InstanceType{}
	for _, it := range ec2fake.RealInstanceTypes() {
		shapes[it.Name] = it
	}
	table := "| instance type | network cards × interfaces | nodeadm max pods | Nodeforge max pods | before (every card) | kube-reserved memory (MiB) | allocatable memory (MiB, 7.5% estimate) |\n|---|---|---|---|---|---|---|\n"
	for _, it := range types {
		facts, ok := nodeadmInstanceInfo[it.Name]
		if !ok {
			t.Errorf("%s: no nodeadm figures in the test", it.Name)
			continue
		}
		nodeadm := facts[0]*(facts[1]-1) + 2
		pods := it.Capacity.Pods().Value()
		if pods != nodeadm {
			t.Errorf("%s: max pods %d, nodeadm's %d", it.Name, pods, nodeadm)
		}
		reserved := 11*nodeadm + 255
		mem := it.Capacity[corev1.ResourceMemory]
		alloc := it.Allocatable[corev1.ResourceMemory]
		if got := (mem.Value() - alloc.Value()) >> 20; got != reserved+100 {
			t.Errorf("%s: memory reserved %d MiB, want nodeadm's kube-reserved %d + 100 eviction", it.Name, got, reserved)
		}
		shape := shapes[it.Name]
		cards := fmt.Sprintf("1 × %d", shape.MaxENIs)
		if n := len(shape.NetworkCards); n > 0 {
			cards = fmt.Sprintf("%d × %d", n, shape.NetworkCards[0])
		}
		before := int64(shape.MaxENIs)*int64(shape.IPv4PerENI-1) + 2
		table += fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d |\n", it.Name, cards, nodeadm, pods, before, reserved, alloc.Value()>>20)
	}
	t.Logf("max pods and memory, provider against nodeadm:\n%s", table)
}
