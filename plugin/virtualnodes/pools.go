package virtualnodes

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// option is one instance type a claim can become, in one group, at a price.
type option struct {
	name  string
	it    *v1alpha1.InstanceType
	alloc *framework.Resource
	price float64
	// devices says which DRA devices its node publishes (nodeshape.DevicesKey).
	devices string
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
	np *v1alpha1.NodePool
	// template is what every new claim of the pool is nominated with.
	template nodeshape.Template
	// hash is the template's nodeshape.PoolHash, stamped on every new
	// claim so that the provisioner can tell when the pool has changed
	// since (drift).
	hash   string
	weight int32
	groups []*group // cheapest first
	// maxAllocatable is, per resource, the most any instance type offers:
	// what the Event quotes when a pod asks for more.
	maxAllocatable map[corev1.ResourceName]resource.Quantity
	maxType        map[corev1.ResourceName]string
	// capacity of each instance type in the catalog, for counting claims
	// the provisioner has closed but not launched yet.
	capacity map[string]corev1.ResourceList
	// minValues: a requirement of the pool sets minValues, which every
	// claim's options must keep (nodeshape.MinValuesUnmet).
	minValues bool
}

// minValuesUnmet says which of the pool's minValues requirements opts (of
// group g) do not keep, "" when they keep them all.
func (g *group) minValuesUnmet(opts []*option) string {
	if !g.pool.minValues {
		return ""
	}
	types := make([]*v1alpha1.InstanceType, len(opts))
	for i, o := range opts {
		types[i] = o.it
	}
	return nodeshape.MinValuesUnmet(g.pool.template, g.pool.np.Spec.Template.Spec.Requirements, types, g.zone, g.capacityType)
}

// cheapest keeps the max cheapest of opts, or more when fewer would not
// keep the pool's minValues.
func (g *group) cheapest(opts []*option, max int) []*option {
	if len(opts) <= max {
		return opts
	}
	for n := max; n < len(opts); n++ {
		if g.minValuesUnmet(opts[:n]) == "" {
			return opts[:n]
		}
	}
	return opts
}

// newPool groups a catalog's available offerings.
func newPool(np *v1alpha1.NodePool, cat *v1alpha1.InstanceTypeCatalog) (*pool, error) {
	p := &pool{np: np, template: nodeshape.ForPool(np), maxAllocatable: map[corev1.ResourceName]resource.Quantity{}, maxType: map[corev1.ResourceName]string{}, capacity: map[string]corev1.ResourceList{},
		minValues: nodeshape.HasMinValues(np.Spec.Template.Spec.Requirements)}
	if np.Spec.Weight != nil {
		p.weight = *np.Spec.Weight
	}
	var err error
	if p.hash, err = nodeshape.PoolHash(np); err != nil {
		return nil, err
	}
	for i := range cat.Spec.InstanceTypes {
		it := &cat.Spec.InstanceTypes[i]
		for name, q := range it.Allocatable {
			if cur, ok := p.maxAllocatable[name]; !ok || q.Cmp(cur) > 0 {
				p.maxAllocatable[name], p.maxType[name] = q, it.Name
			}
		}
		p.capacity[it.Name] = it.Capacity
	}
	// The catalog holds only what the pool's requirements allow.
	offers, err := nodeshape.Offers(p.template, cat.Spec.InstanceTypes, nil)
	if err != nil {
		return nil, err
	}
	groups := map[nodeshape.Group]*group{}
	for i := range offers {
		o := &offers[i]
		key := o.Group()
		g := groups[key]
		if g == nil {
			g = &group{pool: p, zone: key.Zone, capacityType: key.CapacityType, arch: key.Arch}
			groups[key] = g
			p.groups = append(p.groups, g)
		}
		// Offers come cheapest first, so each group's options do too.
		g.options = append(g.options, &option{name: o.InstanceType.Name, it: &o.InstanceType, alloc: framework.NewResource(o.InstanceType.Allocatable), price: o.Price,
			devices: nodeshape.DevicesKey(o.InstanceType.ResourceSlices)})
	}
	for _, g := range p.groups {
		g.largest = slices.MaxFunc(g.options, func(a, b *option) int {
			return cmp.Or(cmp.Compare(a.alloc.MilliCPU, b.alloc.MilliCPU), cmp.Compare(a.alloc.Memory, b.alloc.Memory), cmp.Compare(a.alloc.AllowedPodNumber, b.alloc.AllowedPodNumber))
		})
		ph := g.node(p.template, "placeholder-"+p.np.Name+"-"+g.zone+"-"+g.capacityType+"-"+g.arch, nil)
		delete(ph.Labels, corev1.LabelInstanceTypeStable)
		ph.Status.Allocatable = corev1.ResourceList{}
		g.placeholder = framework.NewNodeInfo()
		g.placeholder.SetNode(ph)
	}
	slices.SortFunc(p.groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.options[0].price, b.options[0].price), cmp.Compare(a.zone, b.zone), cmp.Compare(a.capacityType, b.capacityType), cmp.Compare(a.arch, b.arch))
	})
	return p, nil
}

// poolsFrom pairs NodePools with their catalogs, keyed by pool name: each
// the merge of the pool's catalog objects (v1alpha1.ByPool).
func poolsFrom(nps []v1alpha1.NodePool, cats map[string]*v1alpha1.InstanceTypeCatalog) ([]*pool, []error) {
	var out []*pool
	var errs []error
	for i := range nps {
		cat, ok := cats[nps[i].Name]
		if !ok || nps[i].DeletionTimestamp != nil {
			continue
		}
		pl, err := newPool(&nps[i], cat)
		if err != nil {
			errs = append(errs, fmt.Errorf("nodepool %s: %w", nps[i].Name, err))
			continue
		}
		if len(pl.groups) > 0 {
			out = append(out, pl)
		}
	}
	return out, errs
}

// narrow returns the options that can take the requested resources with
// podCount pods and whose nodes (of template t) every pod in pods accepts.
func (g *group) narrow(t nodeshape.Template, options []*option, req *framework.Resource, podCount int, pods ...*corev1.Pod) []*option {
	var selective []nodeaffinity.RequiredNodeAffinity
	for _, p := range pods {
		if selectsOnNodeLabels(p) {
			selective = append(selective, nodeaffinity.GetRequiredNodeAffinity(p))
		}
	}
	// Sized for every option at once: a new claim's narrowing keeps most
	// of its group's hundreds, and growing by append cost twice that.
	out := make([]*option, 0, len(options))
	// Node affinity reads labels (and the name): the probe carries each
	// option's labels, without copying its resources.
	probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}
	for _, o := range options {
		if !nodeshape.Fits(o.alloc, req, podCount) {
			continue
		}
		if len(selective) > 0 {
			probe.Labels = t.NodeLabels(o.it, g.zone, g.capacityType)
			probe.Labels[corev1.LabelHostname] = probe.Name
			ok := true
			for _, na := range selective {
				if match, _ := na.Match(probe); !match {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

// selectsOnNodeLabels reports whether the pod's placement depends on node
// labels at all; only then do options need checking one by one.
func selectsOnNodeLabels(pod *corev1.Pod) bool {
	return len(pod.Spec.NodeSelector) > 0 || pod.Spec.Affinity != nil && pod.Spec.Affinity.NodeAffinity != nil && pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil
}

// largest is the option with the most CPU, then memory.
func largest(options []*option) *option {
	return slices.MaxFunc(options, func(a, b *option) int {
		return cmp.Or(cmp.Compare(a.alloc.MilliCPU, b.alloc.MilliCPU), cmp.Compare(a.alloc.Memory, b.alloc.Memory))
	})
}

// node is the Node a claim of this group nominated with template t would
// register as, with instance type o (or the group's largest when nil) and
// the given name as hostname: nodeshape's node, the one the provisioner
// launches.
func (g *group) node(t nodeshape.Template, name string, o *option) *corev1.Node {
	if o == nil {
		o = g.largest
	}
	return t.Node(name, o.it, g.zone, g.capacityType)
}
