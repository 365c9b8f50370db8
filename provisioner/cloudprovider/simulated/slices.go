package simulated

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// publishSlices creates the ResourceSlices of a registered node, as its
// DRA drivers' kubelet plugins do once they start: each template of its
// instance type in a slice of the node's own (spec.nodeName, a pool
// named after the node), each device with the attributes that differ from
// node to node added (for NVIDIA GPUs: uuid, driver and CUDA driver
// versions, PCI bus ID and PCIe root, as the NVIDIA driver publishes
// them). The slices are owned by the node, so they go with it.
func (c *Cloud) publishSlices(ctx context.Context, node *corev1.Node, in Record) error {
	if len(in.ResourceSlices) == 0 {
		return nil
	}
	if node.UID == "" {
		if err := c.getNode(ctx, node.Name, node); err != nil {
			return err
		}
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	for _, t := range in.ResourceSlices {
		slice := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name + "-" + strings.ReplaceAll(t.Driver, ".", "-"), OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: t.Driver, NodeName: ptr.To(node.Name),
				Pool: resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			},
		}
		for i, d := range t.Devices {
			d = *d.DeepCopy()
			if t.Driver == cloudprovider.DriverNVIDIAGPU {
				nodeOwn(&d, node.Name, i)
			}
			slice.Spec.Devices = append(slice.Spec.Devices, d)
		}
		if err := c.kube.Create(ctx, slice); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ResourceSlice %s: %w", slice.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Simulated DRA driver published its ResourceSlice", "node", node.Name, "driver", t.Driver, "devices", len(t.Devices), "resourceSlice", slice.Name)
	}
	return nil
}

// nodeOwn adds to the i-th GPU of a node what the NVIDIA driver says of it
// beside its model: its uuid, the driver's versions, and where it sits on
// the PCI bus.
func nodeOwn(d *resourcev1.Device, node string, i int) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", node, i)
	sum := h.Sum64()
	if d.Attributes == nil {
		d.Attributes = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	}
	d.Attributes["uuid"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", sum>>32, sum>>16&0xffff, sum&0xffff, i, sum&0xffffffffffff))}
	d.Attributes["driverVersion"] = resourcev1.DeviceAttribute{VersionValue: ptr.To("580.95.5")}
	d.Attributes["cudaDriverVersion"] = resourcev1.DeviceAttribute{VersionValue: ptr.To("13.0.0")}
	d.Attributes["resource.kubernetes.io/pciBusID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x10+i))}
	d.Attributes["resource.kubernetes.io/pcieRoot"] = resourcev1.DeviceAttribute{StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", 0x10+i))}
}
