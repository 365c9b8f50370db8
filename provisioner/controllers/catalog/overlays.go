package catalog

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// overlay is a NodeOverlay ready to match: its selector built once.
type overlay struct {
	o      *v1alpha1.NodeOverlay
	weight int32
	// sel is nil for an overlay without requirements, which selects
	// every offering.
	sel *nodeaffinity.NodeSelector
}

// rankOverlays returns the overlays by precedence, highest weight first
// and, among equal weights, by name. One whose requirements do not parse
// (which the API server refuses) is left out; its status says why.
func rankOverlays(list []v1alpha1.NodeOverlay) []overlay {
	out := make([]overlay, 0, len(list))
	for i := range list {
		o := &list[i]
		sel, err := selectorOf(o)
		if err != nil {
			continue
		}
		out = append(out, overlay{o: o, weight: overlayWeight(o), sel: sel})
	}
	slices.SortFunc(out, func(a, b overlay) int {
		return cmp.Or(cmp.Compare(b.weight, a.weight), cmp.Compare(a.o.Name, b.o.Name))
	})
	return out
}

// selectorOf is the selector of o's requirements; nil (every offering)
// when it has none.
func selectorOf(o *v1alpha1.NodeOverlay) (*nodeaffinity.NodeSelector, error) {
	if len(o.Spec.Requirements) == 0 {
		return nil, nil
	}
	reqs := make([]corev1.NodeSelectorRequirement, len(o.Spec.Requirements))
	for j, r := range o.Spec.Requirements {
		reqs[j] = corev1.NodeSelectorRequirement{Key: r.Key, Operator: r.Operator, Values: r.Values}
	}
	return nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}}})
}

func overlayWeight(o *v1alpha1.NodeOverlay) int32 {
	if o.Spec.Weight == nil {
		return 0
	}
	return *o.Spec.Weight
}

func (ov overlay) matches(node *corev1.Node) bool {
	return ov.sel == nil || ov.sel.Match(node)
}

func (ov overlay) setsPrice() bool {
	return ov.o.Spec.Price != nil || ov.o.Spec.PriceAdjustment != nil
}

// samePrice says whether two overlays set a price the same way.
func samePrice(a, b *v1alpha1.NodeOverlay) bool {
	eq := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.Spec.Price, b.Spec.Price) && eq(a.Spec.PriceAdjustment, b.Spec.PriceAdjustment)
}

// conflict is two overlays of one weight that set one field of a type:
// winner (its name sorts first) applies, loser does not.
type conflict struct {
	winner, loser, instanceType string
	// field is "price" or a capacity name.
	field string
}

// plan is what the overlays do to one instance type of a pool: which
// overlay sets each offering's price and each capacity name, and the
// conflicts between overlays of equal weight.
type plan struct {
	// price holds, by offering index, the overlay that sets its price.
	price map[int]*v1alpha1.NodeOverlay
	// capacity holds, by resource name, the overlay that sets it.
	capacity  map[corev1.ResourceName]*v1alpha1.NodeOverlay
	conflicts []conflict
	// selected names every overlay that selects an offering of the type,
	// whether or not it sets anything on it.
	selected map[string]bool
}

// planFor decides, field by field, which overlay applies to it in pool
// template t: of the overlays that select the offering (for a price) or
// any offering of the type (for capacity, which the API server lets no
// overlay make depend on zone or capacity type), the first by rank that
// sets the field. A later one of the same weight that sets it otherwise
// is a conflict, and loses.
func planFor(t nodeshape.Template, it *v1alpha1.InstanceType, ranked []overlay) plan {
	p := plan{price: map[int]*v1alpha1.NodeOverlay{}, capacity: map[corev1.ResourceName]*v1alpha1.NodeOverlay{}, selected: map[string]bool{}}
	if len(ranked) == 0 {
		return p
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: t.NodeLabels(it, "", "")}}
	typeWide := make([]bool, len(ranked))
	for j, off := range it.Offerings {
		node.Labels[corev1.LabelTopologyZone] = off.Zone
		node.Labels[v1alpha1.LabelCapacityType] = string(off.CapacityType)
		node.Labels[v1alpha1.LabelKarpenterCapacityType] = string(off.CapacityType)
		var setter *overlay
		for k := range ranked {
			ov := &ranked[k]
			if !ov.matches(node) {
				continue
			}
			typeWide[k] = true
			p.selected[ov.o.Name] = true
			if !ov.setsPrice() {
				continue
			}
			switch {
			case setter == nil:
				setter = ov
				p.price[j] = ov.o
			case setter.weight == ov.weight && !samePrice(setter.o, ov.o):
				p.addConflict(conflict{winner: setter.o.Name, loser: ov.o.Name, instanceType: it.Name, field: "price"})
			}
		}
	}
	setters := map[corev1.ResourceName]*overlay{}
	for k := range ranked {
		ov := &ranked[k]
		if !typeWide[k] {
			continue
		}
		for name, q := range ov.o.Spec.Capacity {
			first := setters[name]
			if first == nil {
				setters[name] = ov
				p.capacity[name] = ov.o
				continue
			}
			if had := first.o.Spec.Capacity[name]; first.weight == ov.weight && had.Cmp(q) != 0 {
				p.addConflict(conflict{winner: first.o.Name, loser: ov.o.Name, instanceType: it.Name, field: string(name)})
			}
		}
	}
	return p
}

// addConflict records c once per pair and field.
func (p *plan) addConflict(c conflict) {
	if !slices.Contains(p.conflicts, c) {
		p.conflicts = append(p.conflicts, c)
	}
}

// applied names the overlays that set a field of the type, sorted.
func (p *plan) applied() []string {
	set := map[string]bool{}
	for _, o := range p.price {
		set[o.Name] = true
	}
	for _, o := range p.capacity {
		set[o.Name] = true
	}
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// withOverlays returns types with the overlays applied as planFor
// decides: each offering's price set or adjusted, capacity names added
// to capacity and allocatable (huge pages taken from allocatable memory,
// as the kubelet takes them), and the names of the overlays that applied
// in Overlays. Types no overlay changes are returned as they are; the
// others are copies.
func withOverlays(t nodeshape.Template, types []v1alpha1.InstanceType, overlays []v1alpha1.NodeOverlay) []v1alpha1.InstanceType {
	ranked := rankOverlays(overlays)
	if len(ranked) == 0 {
		return types
	}
	out := slices.Clone(types)
	for i := range out {
		p := planFor(t, &out[i], ranked)
		names := p.applied()
		if len(names) == 0 {
			continue
		}
		it := out[i].DeepCopy()
		for j, o := range p.price {
			it.Offerings[j].Price = adjustPrice(it.Offerings[j].Price, o)
		}
		for name, o := range p.capacity {
			addCapacity(it, name, o.Spec.Capacity[name])
		}
		it.Overlays = names
		out[i] = *it
	}
	return out
}

// addCapacity sets name to q in it's capacity and allocatable. For huge
// pages, allocatable memory loses what the type's huge pages of that size
// gain: the kubelet reports pre-allocated huge pages apart from memory.
func addCapacity(it *v1alpha1.InstanceType, name corev1.ResourceName, q resource.Quantity) {
	if it.Capacity == nil {
		it.Capacity = corev1.ResourceList{}
	}
	if it.Allocatable == nil {
		it.Allocatable = corev1.ResourceList{}
	}
	if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
		grow := q.DeepCopy()
		grow.Sub(it.Allocatable[name])
		if mem, ok := it.Allocatable[corev1.ResourceMemory]; ok {
			mem.Sub(grow)
			if mem.Sign() < 0 {
				mem = resource.MustParse("0")
			}
			it.Allocatable[corev1.ResourceMemory] = mem
		}
	}
	it.Capacity[name] = q.DeepCopy()
	it.Allocatable[name] = q.DeepCopy()
}

// adjustPrice is price as o sets it: o's price, or price changed by o's
// priceAdjustment (an amount, or a percentage of it), never below 0.
// Decimal arithmetic keeps "0.0416" halved "0.0208", not a float's
// nearest neighbour; the result keeps at most 6 decimals.
func adjustPrice(price string, o *v1alpha1.NodeOverlay) string {
	if o.Spec.Price != nil {
		return *o.Spec.Price
	}
	base, ok := new(big.Rat).SetString(price)
	if !ok || o.Spec.PriceAdjustment == nil {
		return price
	}
	adj := *o.Spec.PriceAdjustment
	pct := strings.HasSuffix(adj, "%")
	delta, ok := new(big.Rat).SetString(strings.TrimPrefix(strings.TrimSuffix(adj, "%"), "+"))
	if !ok {
		return price
	}
	if pct {
		delta.Mul(delta, base).Quo(delta, big.NewRat(100, 1))
	}
	out := base.Add(base, delta)
	if out.Sign() < 0 {
		out.SetInt64(0)
	}
	return trimDecimals(out.FloatString(6))
}

// trimDecimals drops trailing zeros after the point, and the point.
func trimDecimals(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// String says the conflict for a person.
func (c conflict) String() string {
	what := "the price"
	if c.field != "price" {
		what = "capacity " + c.field
	}
	return fmt.Sprintf("%s and %s, of the same weight, both set %s of %s; %s applies, its name sorting first", c.winner, c.loser, what, c.instanceType, c.winner)
}
