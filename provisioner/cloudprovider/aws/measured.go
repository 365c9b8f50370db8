package aws

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// measuredMemory keeps the memory capacity that registered nodes reported,
// by instance type and image. A node's memory is what its kernel sees: the
// type's memory less what the hypervisor and the kernel keep, which no API
// publishes. Offerings start from the estimate (Options'
// VMMemoryOverheadPercent) and take the measured figure once a node of
// the type and image has registered, as Karpenter's discovered-capacity
// cache does. Another image (another kernel) may see another figure, so
// the image is part of the key; the lowest figure seen is kept, so that a
// virtual node never promises more than one real node had.
type measuredMemory struct {
	mu sync.Mutex
	by map[measuredKey]resource.Quantity
	// onChange are called, outside mu, when a figure changed.
	onChange []func()
}

type measuredKey struct{ instanceType, image string }

// observe records a registered node's memory capacity.
func (m *measuredMemory) observe(instanceType, image string, memory resource.Quantity) bool {
	if instanceType == "" || image == "" || memory.Sign() <= 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.by == nil {
		m.by = map[measuredKey]resource.Quantity{}
	}
	k := measuredKey{instanceType, image}
	if old, ok := m.by[k]; ok && old.Cmp(memory) <= 0 {
		return false
	}
	m.by[k] = memory.DeepCopy()
	return true
}

// memory is the measured memory of the type's nodes under the class's
// images, when a node of the type has registered with each of them: the
// lowest, since one launch template may use any of them. With an image
// not yet measured, the estimate stands.
func (m *measuredMemory) memory(instanceType string, images []v1alpha1.ResolvedAMI) (resource.Quantity, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var low resource.Quantity
	found := false
	for _, im := range images {
		q, ok := m.by[measuredKey{instanceType, im.ID}]
		if !ok {
			continue
		}
		if !found || q.Cmp(low) < 0 {
			low = q
		}
		found = true
	}
	return low, found
}

// OnMeasured calls f whenever a registered node changed the memory of an
// instance type's offerings: the pools' catalogs should be published
// again then, not at their next periodic publication.
func (p *Provider) OnMeasured(f func()) {
	p.measured.mu.Lock()
	defer p.measured.mu.Unlock()
	p.measured.onChange = append(p.measured.onChange, f)
}

// RegisteredNode keeps the memory the node of an instance reports, for
// later offerings of its type and image (measuredMemory).
func (p *Provider) RegisteredNode(ctx context.Context, in *cloudprovider.Instance, node *corev1.Node) {
	mem, ok := node.Status.Capacity[corev1.ResourceMemory]
	if !ok || in == nil {
		return
	}
	if p.measured.observe(in.InstanceType, in.ImageID, mem) {
		estimate := in.Capacity[corev1.ResourceMemory]
		klog.FromContext(ctx).V(2).Info("Measured an instance type's memory", "instanceType", in.InstanceType, "image", in.ImageID,
			"node", klog.KObj(node), "memory", mem.String(), "estimate", estimate.String())
		p.measured.mu.Lock()
		notify := slices.Clone(p.measured.onChange)
		p.measured.mu.Unlock()
		for _, f := range notify {
			f()
		}
	}
}
