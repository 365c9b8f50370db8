package virtualnodes

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

// option is one instance type a claim can become, in one group, at a price.
type option struct {
	name        string
	labels      map[string]string
	capacity    v1.ResourceList // what pool limits count
	allocatable v1.ResourceList
	alloc       *framework.Resource
	price       float64
}

// group is where a new node of a pool can be launched: one zone, one
// capacity type, one architecture. Nodes of one group differ only in
// instance type, so one Filter run on the group's largest type decides
// everything but size, and sizes are compared directly.
type group struct {
	pool         *pool
	zone         string
	capacityType string
	arch         string
	options      []*option // cheapest first
	largest      *option
	placeholder  *framework.NodeInfo
}

// pool is a NodePool with its published catalog, ready for decisions.
type pool struct {
	np     *v1alpha1.NodePool
	weight int32
	groups []*group // cheapest first
	// maxAllocatable is, per resource, the most any instance type offers:
	// what the Event quotes when a pod asks for more.
	maxAllocatable map[v1.ResourceName]resource.Quantity
	maxType        map[v1.ResourceName]string
	// capacity of each instance type in the catalog, for counting claims
	// the provisioner has closed but not launched yet.
	capacity map[string]v1.ResourceList
}

// newPool groups a catalog's available offerings.
func newPool(np *v1alpha1.NodePool, cat *v1alpha1.InstanceTypeCatalog) (*pool, error) {
	p := &pool{np: np, maxAllocatable: map[v1.ResourceName]resource.Quantity{}, maxType: map[v1.ResourceName]string{}, capacity: map[string]v1.ResourceList{}}
	if np.Spec.Weight != nil {
		p.weight = *np.Spec.Weight
	}
	groups := map[[3]string]*group{}
	for i := range cat.Spec.InstanceTypes {
		it := &cat.Spec.InstanceTypes[i]
		for name, q := range it.Allocatable {
			if cur, ok := p.maxAllocatable[name]; !ok || q.Cmp(cur) > 0 {
				p.maxAllocatable[name], p.maxType[name] = q, it.Name
			}
		}
		p.capacity[it.Name] = it.Capacity
		arch := it.Labels[v1.LabelArchStable]
		for _, o := range it.Offerings {
			if !o.Available {
				continue
			}
			price, err := strconv.ParseFloat(o.Price, 64)
			if err != nil {
				return nil, fmt.Errorf("instance type %s in %s: price %q: %w", it.Name, o.Zone, o.Price, err)
			}
			key := [3]string{o.Zone, string(o.CapacityType), arch}
			g := groups[key]
			if g == nil {
				g = &group{pool: p, zone: o.Zone, capacityType: string(o.CapacityType), arch: arch}
				groups[key] = g
			}
			g.options = append(g.options, &option{name: it.Name, labels: it.Labels, capacity: it.Capacity, allocatable: it.Allocatable, alloc: framework.NewResource(it.Allocatable), price: price})
		}
	}
	for _, g := range groups {
		slices.SortStableFunc(g.options, func(a, b *option) int {
			return cmp.Or(cmp.Compare(a.price, b.price), cmp.Compare(a.name, b.name))
		})
		g.largest = slices.MaxFunc(g.options, func(a, b *option) int {
			return cmp.Or(cmp.Compare(a.alloc.MilliCPU, b.alloc.MilliCPU), cmp.Compare(a.alloc.Memory, b.alloc.Memory), cmp.Compare(a.alloc.AllowedPodNumber, b.alloc.AllowedPodNumber))
		})
		ph := g.node("placeholder-"+p.np.Name+"-"+g.zone+"-"+g.capacityType+"-"+g.arch, nil)
		delete(ph.Labels, v1.LabelInstanceTypeStable)
		ph.Status.Allocatable = v1.ResourceList{}
		g.placeholder = framework.NewNodeInfo()
		g.placeholder.SetNode(ph)
		p.groups = append(p.groups, g)
	}
	slices.SortFunc(p.groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.options[0].price, b.options[0].price), cmp.Compare(a.zone, b.zone), cmp.Compare(a.capacityType, b.capacityType), cmp.Compare(a.arch, b.arch))
	})
	return p, nil
}

// node is the Node a claim of this group would register as, with instance
// type o (or the group's largest when nil) and the given name as hostname.
// Startup taints are left out: pods need not tolerate them to be
// provisioned for, as the taints go once the node is initialised.
func (g *group) node(name string, o *option) *v1.Node {
	if o == nil {
		o = g.largest
	}
	labels := g.pool.np.Spec.Template.ObjectMeta.NodeLabels()
	maps.Copy(labels, o.labels)
	maps.Copy(labels, map[string]string{
		v1alpha1.LabelNodePool:     g.pool.np.Name,
		v1alpha1.LabelCapacityType: g.capacityType,
		v1.LabelInstanceTypeStable: o.name,
		v1.LabelTopologyZone:       g.zone,
		v1.LabelHostname:           name,
		v1.LabelOSStable:           "linux",
	})
	if g.arch != "" {
		labels[v1.LabelArchStable] = g.arch
	}
	if os, ok := o.labels[v1.LabelOSStable]; ok {
		labels[v1.LabelOSStable] = os
	}
	return &v1.Node{
		ObjectMeta: metaName(name, labels),
		Spec:       v1.NodeSpec{Taints: v1alpha1.CoreTaints(g.pool.np.Spec.Template.Spec.Taints)},
		Status:     v1.NodeStatus{Allocatable: o.allocatable.DeepCopy(), Capacity: o.allocatable.DeepCopy()},
	}
}
