package v1alpha1

import (
	"cmp"
	"slices"
)

// ByPool merges catalog objects into one catalog per NodePool, keyed by
// spec.nodePool. The provisioner publishes a pool's catalog as several
// objects (one per instance-type family), and every reader decides over the
// pool's whole catalog, so each reader goes through this one merge rather
// than through object names.
//
// A merged catalog is named after its pool; its instance types are sorted by
// name. A type listed by two objects of one pool (which the provisioner
// never writes) is taken from the object whose name sorts first, so the
// result does not depend on the order of cats. Objects without
// spec.nodePool are skipped. The merged catalogs share the instance types'
// maps and slices with cats: treat them as read-only.
//
// Objects are written one by one. A pool is left out while it has fewer
// objects than every one of them counts (spec.objectCount), so a catalog
// being written for the first time is not there yet rather than there with
// some families missing. Later changes never hide it: the provisioner
// creates new objects before it updates the others (and their count) and
// deletes old ones last, so while a pool gains or loses families a reader
// sees each type the catalog keeps, and for a moment some of the types
// coming or going.
func ByPool(cats []InstanceTypeCatalog) map[string]*InstanceTypeCatalog {
	order := make([]*InstanceTypeCatalog, 0, len(cats))
	for i := range cats {
		if cats[i].Spec.NodePool != "" {
			order = append(order, &cats[i])
		}
	}
	slices.SortFunc(order, func(a, b *InstanceTypeCatalog) int { return cmp.Compare(a.Name, b.Name) })
	out := map[string]*InstanceTypeCatalog{}
	seen := map[string]map[string]bool{} // pool → type names taken
	objects, want := map[string]int32{}, map[string]int32{}
	for _, c := range order {
		pool := c.Spec.NodePool
		objects[pool]++
		if n := max(c.Spec.ObjectCount, 1); want[pool] == 0 || n < want[pool] {
			want[pool] = n
		}
		m := out[pool]
		if m == nil {
			m = &InstanceTypeCatalog{TypeMeta: c.TypeMeta}
			m.Name, m.Spec.NodePool, m.Spec.Provider = pool, pool, c.Spec.Provider
			out[pool], seen[pool] = m, map[string]bool{}
		}
		for _, it := range c.Spec.InstanceTypes {
			if !seen[pool][it.Name] {
				seen[pool][it.Name] = true
				m.Spec.InstanceTypes = append(m.Spec.InstanceTypes, it)
			}
		}
	}
	for pool, m := range out {
		if objects[pool] < want[pool] {
			delete(out, pool)
			continue
		}
		slices.SortFunc(m.Spec.InstanceTypes, func(a, b InstanceType) int { return cmp.Compare(a.Name, b.Name) })
		m.Spec.InstanceTypeCount = int32(len(m.Spec.InstanceTypes))
	}
	return out
}
