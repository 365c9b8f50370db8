package nodeshape

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ResourceSlices are the slices the DRA drivers of a node named node
// publish, from its instance type's templates: one a driver, on the node
// (spec.nodeName), in a pool named after the node, generation 1, one
// slice, as the NVIDIA GPU driver and DRANET name theirs. A virtual node
// carries them, so that the scheduler's DynamicResources plugin
// allocates on it as on the node it becomes.
func ResourceSlices(node string, templates []v1alpha1.ResourceSliceTemplate) []*resourcev1.ResourceSlice {
	out := make([]*resourcev1.ResourceSlice, 0, len(templates))
	for _, t := range templates {
		out = append(out, &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-" + strings.ReplaceAll(t.Driver, ".", "-")},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   t.Driver,
				NodeName: ptr.To(node),
				Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
				Devices:  t.Devices,
			},
		})
	}
	return out
}

// DevicesKey says which devices a node of a type publishes: the same
// key, the same slices ("" for none).
func DevicesKey(templates []v1alpha1.ResourceSliceTemplate) string {
	if len(templates) == 0 {
		return ""
	}
	raw, err := json.Marshal(templates)
	if err != nil {
		return "unencodable"
	}
	return string(raw)
}

// SameDevices says whether two instance types' nodes publish the same
// devices: a claim whose pods plan on devices keeps only types that
// do, so that what was planned holds on whichever one launches.
func SameDevices(a, b []v1alpha1.ResourceSliceTemplate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Driver != b[i].Driver || len(a[i].Devices) != len(b[i].Devices) {
			return false
		}
		for j := range a[i].Devices {
			if !equality.Semantic.DeepEqual(a[i].Devices[j], b[i].Devices[j]) {
				return false
			}
		}
	}
	return true
}

// PublishedDevices are the devices of driver a node published in slices
// (the node's), and whether its pools are whole: every pool of the
// driver, at its newest generation, with as many slices as it says it
// has. Until they are, the node's devices are not all known.
func PublishedDevices(published []resourcev1.ResourceSlice, driver string) ([]resourcev1.Device, bool) {
	type pool struct {
		generation int64
		want       int64
		slices     []*resourcev1.ResourceSlice
	}
	pools := map[string]*pool{}
	for i := range published {
		s := &published[i]
		if s.Spec.Driver != driver {
			continue
		}
		p := pools[s.Spec.Pool.Name]
		if p == nil || s.Spec.Pool.Generation > p.generation {
			p = &pool{generation: s.Spec.Pool.Generation}
			pools[s.Spec.Pool.Name] = p
		} else if s.Spec.Pool.Generation < p.generation {
			continue
		}
		p.want = s.Spec.Pool.ResourceSliceCount
		p.slices = append(p.slices, s)
	}
	if len(pools) == 0 {
		return nil, false
	}
	var out []resourcev1.Device
	for _, p := range pools {
		if int64(len(p.slices)) < p.want {
			return nil, false
		}
		for _, s := range p.slices {
			out = append(out, s.Spec.Devices...)
		}
	}
	slices.SortFunc(out, func(a, b resourcev1.Device) int { return cmp.Compare(a.Name, b.Name) })
	return out, true
}

// Observed is template t as a node of its type published it (devices,
// from PublishedDevices): the node's devices, each with only the
// attributes and capacities t names, since the others (a GPU's uuid, its
// PCI bus ID) differ from node to node and no node not yet launched has
// them. What a template cannot say of a device is left out too: taints
// (DeviceTaintRules put them), counters and per-device node selection.
func Observed(t v1alpha1.ResourceSliceTemplate, devices []resourcev1.Device) v1alpha1.ResourceSliceTemplate {
	attrs, caps := sets.New[resourcev1.QualifiedName](), sets.New[resourcev1.QualifiedName]()
	for _, d := range t.Devices {
		attrs.Insert(slices.Collect(maps.Keys(d.Attributes))...)
		caps.Insert(slices.Collect(maps.Keys(d.Capacity))...)
	}
	out := v1alpha1.ResourceSliceTemplate{Driver: t.Driver}
	for _, d := range devices {
		d = *d.DeepCopy()
		maps.DeleteFunc(d.Attributes, func(k resourcev1.QualifiedName, _ resourcev1.DeviceAttribute) bool { return !attrs.Has(k) })
		maps.DeleteFunc(d.Capacity, func(k resourcev1.QualifiedName, _ resourcev1.DeviceCapacity) bool { return !caps.Has(k) })
		if len(d.Attributes) == 0 {
			d.Attributes = nil
		}
		if len(d.Capacity) == 0 {
			d.Capacity = nil
		}
		d.Taints, d.ConsumesCounters = nil, nil
		d.NodeName, d.NodeSelector, d.AllNodes = nil, nil, nil
		out.Devices = append(out.Devices, d)
	}
	return out
}

// SameTemplate says whether two templates of a driver describe the same
// devices, in whatever order.
func SameTemplate(a, b v1alpha1.ResourceSliceTemplate) bool {
	byName := func(x, y resourcev1.Device) int { return cmp.Compare(x.Name, y.Name) }
	return SameDevices(
		[]v1alpha1.ResourceSliceTemplate{{Driver: a.Driver, Devices: slices.SortedFunc(slices.Values(a.Devices), byName)}},
		[]v1alpha1.ResourceSliceTemplate{{Driver: b.Driver, Devices: slices.SortedFunc(slices.Values(b.Devices), byName)}})
}
