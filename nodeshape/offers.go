package nodeshape

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Offer is one launch option: an instance type in a zone with a capacity
// type, at a price in dollars per hour.
type Offer struct {
	InstanceType v1alpha1.InstanceType
	Zone         string
	CapacityType string
	Price        float64
}

// Offers are the available offerings of types whose node (of template t)
// meets reqs (Accepts), cheapest first; ties go to the instance type name,
// then the zone and capacity type, so the plugin and the provisioner agree
// on which of two equal prices is "the cheapest".
func Offers(t Template, types []v1alpha1.InstanceType, reqs []v1alpha1.NodeSelectorRequirementWithMinValues) ([]Offer, error) {
	var out []Offer
	for i := range types {
		it := &types[i]
		for _, o := range it.Offerings {
			if !o.Available {
				continue
			}
			price, err := strconv.ParseFloat(o.Price, 64)
			if err != nil {
				return nil, fmt.Errorf("instance type %s in %s (%s): price %q: %w", it.Name, o.Zone, o.CapacityType, o.Price, err)
			}
			if ok, err := Accepts(t, reqs, it, o.Zone, string(o.CapacityType)); err != nil {
				return nil, err
			} else if !ok {
				continue
			}
			out = append(out, Offer{InstanceType: *it, Zone: o.Zone, CapacityType: string(o.CapacityType), Price: price})
		}
	}
	slices.SortStableFunc(out, CheapestFirst)
	return out, nil
}

// CheapestFirst orders offers by price, then instance type name, zone and
// capacity type.
func CheapestFirst(a, b Offer) int {
	return cmp.Or(cmp.Compare(a.Price, b.Price), cmp.Compare(a.InstanceType.Name, b.InstanceType.Name), cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.CapacityType, b.CapacityType))
}
