package catalog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// correction is a device template a running node contradicts.
type correction struct {
	instanceType, driver, node string
	// was and is are the template's devices and the node's.
	was, is v1alpha1.ResourceSliceTemplate
}

func (c correction) String() string {
	return fmt.Sprintf("node %s of type %s publishes %s of DRA driver %s where the template said %s",
		c.node, c.instanceType, describeDevices(c.is), c.driver, describeDevices(c.was))
}

// describeDevices is "2 devices (gpu-0, gpu-1)".
func describeDevices(t v1alpha1.ResourceSliceTemplate) string {
	names := make([]string, len(t.Devices))
	for i, d := range t.Devices {
		names[i] = d.Name
	}
	noun := "devices"
	if len(names) == 1 {
		noun = "device"
	}
	return fmt.Sprintf("%d %s (%s)", len(names), noun, strings.Join(names, ", "))
}

// withObserved returns types with each device template that a running
// node of the pool contradicts replaced by what the node publishes
// (nodeshape.Observed): a template, the provider's or a DeviceTemplate's,
// is a belief about nodes not yet launched, and a node of the type is the
// fact. Of several nodes of a type, the one with the fewest devices is
// believed, so that a virtual node never promises more than a real one
// had. A driver whose slices a node has not all published yet, or does
// not publish, corrects nothing. Types nothing corrects are returned as
// they are; the others are copies.
func (c *Controller) withObserved(ctx context.Context, pool *v1alpha1.NodePool, types []v1alpha1.InstanceType) ([]v1alpha1.InstanceType, []correction, error) {
	if !slices.ContainsFunc(types, func(it v1alpha1.InstanceType) bool { return len(it.ResourceSlices) > 0 }) {
		return types, nil, nil
	}
	var nodes corev1.NodeList
	if err := c.client.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: pool.Name}); err != nil {
		return nil, nil, fmt.Errorf("listing the nodes of nodepool %s: %w", pool.Name, err)
	}
	byType := map[string][]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.DeletionTimestamp == nil {
			byType[n.Labels[corev1.LabelInstanceTypeStable]] = append(byType[n.Labels[corev1.LabelInstanceTypeStable]], n)
		}
	}
	var out []v1alpha1.InstanceType
	var fixes []correction
	for i := range types {
		on := byType[types[i].Name]
		if len(on) == 0 || len(types[i].ResourceSlices) == 0 {
			continue
		}
		slices.SortFunc(on, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
		observed, found, err := c.observe(ctx, types[i], on)
		if err != nil {
			return nil, nil, err
		}
		if len(found) == 0 {
			continue
		}
		if out == nil {
			out = slices.Clone(types)
		}
		out[i].ResourceSlices = observed
		fixes = append(fixes, found...)
	}
	if out == nil {
		return types, nil, nil
	}
	return out, fixes, nil
}

// observe returns it's templates with those its nodes contradict
// replaced, and the corrections.
func (c *Controller) observe(ctx context.Context, it v1alpha1.InstanceType, nodes []*corev1.Node) ([]v1alpha1.ResourceSliceTemplate, []correction, error) {
	published := make([][]resourcev1.ResourceSlice, len(nodes))
	for k, n := range nodes {
		var list resourcev1.ResourceSliceList
		if err := c.client.List(ctx, &list, client.MatchingFields{cluster.IndexSliceNode: n.Name}); err != nil {
			return nil, nil, fmt.Errorf("listing the ResourceSlices of node %s: %w", n.Name, err)
		}
		published[k] = list.Items
	}
	out := slices.Clone(it.ResourceSlices)
	var fixes []correction
	for j, t := range it.ResourceSlices {
		var best *correction
		for k, n := range nodes {
			devices, ok := nodeshape.PublishedDevices(published[k], t.Driver)
			if !ok {
				continue
			}
			if best == nil || len(devices) < len(best.is.Devices) {
				best = &correction{instanceType: it.Name, driver: t.Driver, node: n.Name, was: t, is: nodeshape.Observed(t, devices)}
			}
		}
		if best == nil || nodeshape.SameTemplate(best.is, t) {
			continue
		}
		out[j] = best.is
		fixes = append(fixes, *best)
	}
	return out, fixes, nil
}

// reportCorrections logs each correction and records it on the pool
// once per content: a template that is wrong for a running node is worth
// fixing where it comes from (the provider's table, a DeviceTemplate),
// and until then every node of the type that has not run yet is
// believed to have what the running one has.
func (c *Controller) reportCorrections(ctx context.Context, pool *v1alpha1.NodePool, fixes []correction) {
	for _, f := range fixes {
		key := pool.Name + "/" + f.instanceType + "/" + f.driver
		said := f.String()
		c.mu.Lock()
		old := c.corrected[key]
		c.corrected[key] = said
		c.mu.Unlock()
		if old == said {
			continue
		}
		klog.FromContext(ctx).Info("A running node contradicts its type's device template; publishing what the node has", "nodePool", klog.KObj(pool),
			"instanceType", f.instanceType, "driver", f.driver, "node", f.node, "templateDevices", len(f.was.Devices), "nodeDevices", len(f.is.Devices))
		if c.recorder != nil {
			c.recorder.Eventf(pool, nil, corev1.EventTypeWarning, v1alpha1.ReasonDevicesCorrected, v1alpha1.ActionPublishCatalog,
				"%s; virtual nodes of %s now carry what the node publishes", said, f.instanceType)
		}
	}
}

// poolsOfSlice maps a ResourceSlice to the pool of its node, whose
// catalog it may correct.
func (c *Controller) poolsOfSlice(ctx context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*resourcev1.ResourceSlice)
	if !ok || s.Spec.NodeName == nil {
		return nil
	}
	var node corev1.Node
	if err := c.client.Get(ctx, client.ObjectKey{Name: *s.Spec.NodeName}, &node); err != nil {
		return nil
	}
	if pool := node.Labels[v1alpha1.LabelNodePool]; pool != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pool}}}
	}
	return nil
}
