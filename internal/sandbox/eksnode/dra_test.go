package eksnode

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// TestTheNVIDIADriverIsTheProvidersTable: the fake NVIDIA DRA driver
// publishes the figures the aws provider's templates promise, model by
// model, under the same driver name. The fake keeps its own table, as
// nothing under internal/ imports the provisioner; this test holds them
// equal.
func TestTheNVIDIADriverIsTheProvidersTable(t *testing.T) {
	if DriverNVIDIAGPU != cloudprovider.DriverNVIDIAGPU {
		t.Errorf("the fake's driver is %q, the provider's %q", DriverNVIDIAGPU, cloudprovider.DriverNVIDIAGPU)
	}
	provider := map[string]NVIDIAGPU{}
	for model, g := range cloudprovider.NVIDIAGPUs {
		provider[model] = NVIDIAGPU{g.ProductName, g.Architecture, g.ComputeCapability, g.MemoryMiB}
	}
	if diff := cmp.Diff(provider, NVIDIAGPUs); diff != "" {
		t.Errorf("NVIDIA GPU models, the provider's against the fake driver's (-provider,+fake):\n%s", diff)
	}
}

// TestANodeRunningTheNVIDIADRADriver: a node labelled for the NVIDIA DRA
// driver's DaemonSet offers no nvidia.com/gpu and publishes one slice of
// its GPUs, in its own pool, owned by it; each GPU has the template's
// attributes and the node's own uuid and PCI attributes. Without the
// label, the device plugin counts the GPUs. A model the fake driver does
// not know publishes nothing.
func TestANodeRunningTheNVIDIADRADriver(t *testing.T) {
	label := "    flags:\n    - --node-labels=" + v1alpha1.LabelDRADriver(DriverNVIDIAGPU) + "=true\n"
	g5 := ec2fake.InstanceType{Name: "g5.12xlarge", VCPUs: 48, MemoryMiB: 196608, MaxENIs: 8, IPv4PerENI: 30,
		GPUs: []ec2fake.GPU{{Name: "A10G", Manufacturer: "NVIDIA", Count: 4, MemoryMiB: 22888}}}
	node, err := Join(g5, Boot{UserData: userData(label), RootGiB: 20})
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := node.Capacity["nvidia.com/gpu"]; ok {
		t.Errorf("nvidia.com/gpu = %s on a node whose GPUs the DRA driver offers", q.String())
	}
	k8sNode := &corev1.Node{}
	k8sNode.Name, k8sNode.UID = "ip-10-0-0-1.us-west-2.compute.internal", types.UID("uid-1")
	got := node.Slices(k8sNode)
	if len(got) != 1 {
		t.Fatalf("%d slices, want one", len(got))
	}
	s := got[0]
	if s.Spec.Driver != DriverNVIDIAGPU || *s.Spec.NodeName != k8sNode.Name || s.Spec.Pool.Name != k8sNode.Name || s.Spec.Pool.ResourceSliceCount != 1 ||
		len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("slice %s: driver %s, node %v, pool %+v, owners %+v", s.Name, s.Spec.Driver, *s.Spec.NodeName, s.Spec.Pool, s.OwnerReferences)
	}
	if len(s.Spec.Devices) != 4 {
		t.Fatalf("%d devices, want the 4 A10Gs", len(s.Spec.Devices))
	}
	d := s.Spec.Devices[3]
	mem := d.Capacity["memory"].Value
	if d.Name != "gpu-3" || *d.Attributes["productName"].StringValue != "NVIDIA A10G" || mem.Value() != 23028<<20 ||
		d.Attributes["uuid"].StringValue == nil || *d.Attributes["resource.kubernetes.io/pcieRoot"].StringValue != "pci0000:13" {
		t.Errorf("device %s: attributes %v, memory %s", d.Name, d.Attributes, mem.String())
	}

	plugin, err := Join(g5, Boot{UserData: userData("    flags: []\n"), RootGiB: 20})
	if err != nil {
		t.Fatal(err)
	}
	if q := plugin.Capacity["nvidia.com/gpu"]; q.Value() != 4 || len(plugin.DRADevices) != 0 {
		t.Errorf("without the label: nvidia.com/gpu = %s, DRA devices %v; want 4 and none", q.String(), plugin.DRADevices)
	}

	v100 := ec2fake.InstanceType{Name: "p3.2xlarge", VCPUs: 8, MemoryMiB: 62464, MaxENIs: 4, IPv4PerENI: 15,
		GPUs: []ec2fake.GPU{{Name: "V100", Manufacturer: "NVIDIA", Count: 1, MemoryMiB: 16384}}}
	unknown, err := Join(v100, Boot{UserData: userData(label), RootGiB: 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := unknown.Capacity["nvidia.com/gpu"]; ok || len(unknown.Slices(k8sNode)) != 0 {
		t.Errorf("a V100 node running the DRA driver: capacity %v, slices %v; want neither", unknown.Capacity, unknown.Slices(k8sNode))
	}
}
