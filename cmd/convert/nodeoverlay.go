package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// The NodeOverlay fields the converter knows are those of Karpenter's
// published karpenter.sh_nodeoverlays.yaml (karpenter.sh/v1alpha1, of
// kubernetes-sigs/karpenter v1.8 and later): requirements, weight, price,
// priceAdjustment and capacity.

// overlayVersion is the version of Karpenter's NodeOverlay.
const overlayVersion = "v1alpha1"

// maxOverlayCapacity is how many capacity names a Nodeforge overlay
// takes (the CRD's maxProperties).
const maxOverlayCapacity = 10

// karpenterPriceAdjustment is what Karpenter's priceAdjustment pattern
// accepts and Nodeforge's does too once a bare fraction gets its leading
// zero: a signed amount, or a signed percentage.
var karpenterPriceAdjustment = regexp.MustCompile(`^([+-])([0-9]*)(\.[0-9]+)?(%?)$`)

// overlayPrice is what price takes, in Karpenter and Nodeforge alike.
var overlayPrice = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// nodeOverlay converts a Karpenter NodeOverlay. Its requirements must all
// carry over, or it is not written: an overlay with one requirement
// fewer would change the price or capacity of more types than it did.
func (c *converter) nodeOverlay(src fields) map[string]any {
	out := map[string]any{"apiVersion": nodeforgeVersion, "kind": "NodeOverlay", "metadata": c.metadata(src)}
	spec, _ := src.object("spec")
	outSpec := map[string]any{}
	reqs, offeringKeys := c.overlayRequirements(spec)
	if len(reqs) > 0 {
		outSpec["requirements"] = reqs
	}
	if w, ok := spec.integer("weight"); ok {
		if w < 1 || w > 10000 {
			c.drop(spec.at("weight"), fmt.Sprintf("weight %d: Nodeforge's overlay weights are from 1 to 10000, as Karpenter's", w))
		} else {
			outSpec["weight"] = c.carry(w)
		}
	}
	if p, ok := spec.str("price"); ok {
		if !overlayPrice.MatchString(p) {
			c.drop(spec.at("price"), fmt.Sprintf("price %q is not a decimal number of dollars such as 0.05", p))
		} else {
			outSpec["price"] = c.carry(p)
		}
	}
	if a, ok := spec.str("priceAdjustment"); ok {
		if conv, why := priceAdjustment(a); why != "" {
			c.drop(spec.at("priceAdjustment"), why)
		} else {
			outSpec["priceAdjustment"] = c.carry(conv)
		}
	}
	if capacity := c.overlayCapacity(spec, offeringKeys); len(capacity) > 0 {
		outSpec["capacity"] = capacity
	}
	spec.rest()
	src.rest()
	_, price := outSpec["price"]
	_, adj := outSpec["priceAdjustment"]
	_, capacity := outSpec["capacity"]
	if !price && !adj && !capacity {
		c.skip("it sets no price, priceAdjustment or capacity that Nodeforge carries, so it would change nothing (Nodeforge refuses such an overlay)")
	}
	out["spec"] = outSpec
	return out
}

// overlayRequirements converts the overlay's requirements, and says
// whether one is on the zone or capacity type. A requirement on a key
// of the user's own selects the pools whose template has that label, in
// both. One left behind keeps the whole overlay from being written.
func (c *converter) overlayRequirements(spec fields) ([]any, bool) {
	list, _ := spec.list("requirements")
	path := spec.at("requirements")
	var out []any
	offering := false
	for i, v := range list {
		p := path.Index(i)
		f, ok := spec.item(p, v)
		if !ok {
			c.skip("one of its requirements is not an object")
			continue
		}
		var r requirement
		r.Key, _ = f.str("key")
		r.Operator, _ = f.str("operator")
		r.Values, _ = f.strings("values")
		f.rest()
		if r.Key == karpenterGroup+"/nodepool" {
			r.Key = v1alpha1.LabelNodePool
		} else {
			r.Key = nodeforgeKey(r.Key)
			if why := unsupportedKey(r.Key); why != "" {
				c.drop(p, fmt.Sprintf("requirement on %s: %s", r.Key, why))
				c.skip(fmt.Sprintf("requirement %s is not carried over, and without it the overlay would apply to more instance types than it did", p))
				continue
			}
		}
		for _, msg := range validation.IsQualifiedName(r.Key) {
			c.drop(p.Child("key"), fmt.Sprintf("%s is not a label key: %s", r.Key, msg))
			c.skip(fmt.Sprintf("requirement %s is not carried over", p))
		}
		valuePath := func(j int) *field.Path { return p.Child("values").Index(j) }
		if !c.operatorValues(p, valuePath, &r) {
			c.skip(fmt.Sprintf("requirement %s is not carried over, and without it the overlay would apply to more instance types than it did", p))
			continue
		}
		offering = offering || r.Key == corev1.LabelTopologyZone || r.Key == v1alpha1.LabelCapacityType
		out = append(out, c.carry(r.out()))
	}
	return out, offering
}

// priceAdjustment is a as Nodeforge writes it ("+.5" is "+0.5"), or why
// it is not carried over.
func priceAdjustment(a string) (string, string) {
	m := karpenterPriceAdjustment.FindStringSubmatch(a)
	if m == nil || (m[2] == "" && m[3] == "") {
		return "", fmt.Sprintf("priceAdjustment %q is not a signed amount or percentage such as -0.5 or -10%%", a)
	}
	whole := m[2]
	if whole == "" {
		whole = "0"
	}
	out := m[1] + whole + m[3] + m[4]
	if m[1] == "-" && m[4] == "%" {
		if q, err := resource.ParseQuantity(whole + m[3]); err != nil || q.Cmp(resource.MustParse("100")) > 0 {
			return "", fmt.Sprintf("priceAdjustment %s takes off more than 100%% of a price", a)
		}
	}
	return out, ""
}

// overlayCapacity converts the capacity the overlay adds: extended
// resources and huge pages, at most maxOverlayCapacity of them, none
// when its requirements depend on the zone or capacity type (Nodeforge
// refuses capacity that does).
func (c *converter) overlayCapacity(spec fields, offeringKeys bool) map[string]any {
	sub, ok := spec.object("capacity")
	if !ok {
		return nil
	}
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(sub.m)) {
		v := sub.m[k]
		p := sub.path.Key(k)
		delete(sub.m, k)
		q, err := resource.ParseQuantity(fmt.Sprint(v))
		switch {
		case offeringKeys:
			c.drop(p, "Nodeforge refuses capacity on an overlay whose requirements name topology.kubernetes.io/zone or the capacity type: a node has the same resources wherever and however it is bought; write an overlay of its own for the capacity, without those requirements")
		case err != nil:
			c.drop(p, fmt.Sprintf("%v is not a quantity", v))
		case q.Sign() <= 0:
			c.drop(p, "Nodeforge adds only amounts more than zero")
		case !strings.HasPrefix(k, corev1.ResourceHugePagesPrefix) && (!strings.Contains(k, "/") || kubernetesDomain.MatchString(k) || strings.HasPrefix(k, "requests.")):
			c.drop(p, "Nodeforge's overlays add extended resources (a name with a domain outside kubernetes.io) and huge pages only")
		case len(out) == maxOverlayCapacity:
			c.drop(p, fmt.Sprintf("a Nodeforge overlay adds at most %d resources; write another overlay with the same requirements for the rest", maxOverlayCapacity))
		default:
			out[k] = c.carry(q.String())
		}
	}
	return out
}
