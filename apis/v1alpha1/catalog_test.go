package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestByPool(t *testing.T) {
	part := func(name, pool, price string, types ...string) InstanceTypeCatalog {
		c := InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: InstanceTypeCatalogSpec{NodePool: pool, Provider: "simulated"}}
		for _, t := range types {
			c.Spec.InstanceTypes = append(c.Spec.InstanceTypes, InstanceType{Name: t, Offerings: []Offering{{Zone: "zone-a", CapacityType: CapacityTypeSpot, Price: price, Available: true}}})
		}
		c.Spec.InstanceTypeCount = int32(len(c.Spec.InstanceTypes))
		return c
	}
	counted := func(c InstanceTypeCatalog, n int32) InstanceTypeCatalog {
		c.Spec.ObjectCount = n
		return c
	}
	// summary is what a reader decides from: pool → its types with the
	// price of each, so a test sees which object a duplicate came from.
	summary := func(m map[string]*InstanceTypeCatalog) map[string][]string {
		out := map[string][]string{}
		for pool, c := range m {
			if c.Name != pool || c.Spec.NodePool != pool || int(c.Spec.InstanceTypeCount) != len(c.Spec.InstanceTypes) {
				t.Errorf("merged catalog of %s is named %q, nodePool %q, count %d of %d types", pool, c.Name, c.Spec.NodePool, c.Spec.InstanceTypeCount, len(c.Spec.InstanceTypes))
			}
			out[pool] = []string{}
			for _, it := range c.Spec.InstanceTypes {
				out[pool] = append(out[pool], it.Name+"@"+it.Offerings[0].Price)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cats []InstanceTypeCatalog
		want map[string][]string
	}{{
		name: "the family objects of a pool merge into one catalog sorted by type name",
		cats: []InstanceTypeCatalog{part("default.m7", "default", "1", "m7.xlarge", "m7.large"), part("default.c7", "default", "1", "c7.large")},
		want: map[string][]string{"default": {"c7.large@1", "m7.large@1", "m7.xlarge@1"}},
	}, {
		name: "objects are keyed by spec.nodePool, whatever their names",
		cats: []InstanceTypeCatalog{part("gpu", "default", "1", "g6.xlarge"), part("default.c7", "batch", "1", "c7.large")},
		want: map[string][]string{"default": {"g6.xlarge@1"}, "batch": {"c7.large@1"}},
	}, {
		name: "a type listed twice is taken from the object whose name sorts first, in any list order",
		cats: []InstanceTypeCatalog{part("default.z", "default", "2", "m7.large"), part("default.a", "default", "1", "m7.large")},
		want: map[string][]string{"default": {"m7.large@1"}},
	}, {
		name: "an object without spec.nodePool belongs to no pool",
		cats: []InstanceTypeCatalog{part("default", "", "1", "m7.large")},
		want: map[string][]string{},
	}, {
		name: "a pool with fewer objects than all of them count is still being written, and left out",
		cats: []InstanceTypeCatalog{counted(part("default.m7", "default", "1", "m7.large"), 2), counted(part("batch.c7", "batch", "1", "c7.large"), 1)},
		want: map[string][]string{"batch": {"c7.large@1"}},
	}, {
		// As while a pool loses a family: m7 already counts the one object
		// left, c7 (about to go) still counts two.
		name: "a pool with as many objects as the smallest count among them is there",
		cats: []InstanceTypeCatalog{counted(part("default.m7", "default", "1", "m7.large"), 1), counted(part("default.c7", "default", "1", "c7.large"), 2)},
		want: map[string][]string{"default": {"c7.large@1", "m7.large@1"}},
	}, {
		name: "a pool whose objects list no types has an empty catalog",
		cats: []InstanceTypeCatalog{part("default.m7", "default", "1")},
		want: map[string][]string{"default": {}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, summary(ByPool(tc.cats))); diff != "" {
				t.Errorf("ByPool (-want,+got):\n%s", diff)
			}
		})
	}
}
