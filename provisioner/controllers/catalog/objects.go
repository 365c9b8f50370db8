package catalog

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// partBytes bounds the JSON of the instance types one catalog object
// holds. etcd refuses values over 1.5 MiB; the API server adds metadata and
// managedFields (one entry per instance type, smaller than the type), so a
// part of at most 256 KiB of types stays near a third of the limit.
const partBytes = 256 << 10

// family is the instance-type family of a type name: the name up to its
// first '.', as AWS names them (m5 of m5.large, u-6tb1 of u-6tb1.metal). A
// name without a dot is its own family.
func family(instanceType string) string {
	f, _, _ := strings.Cut(instanceType, ".")
	return f
}

// objectName names part (1, 2, …) of a pool's family: <pool>.<family>, and
// <pool>.<family>.<part> from the second part on. The '.' keeps names
// apart where '-' would not: pool "a-b" with family "c" and pool "a" with
// family "b-c" would both be "a-b-c", but a family never holds a '.', so
// "<pool>.<family>" splits back at its last dot. Families that are not
// DNS labels (capitals, underscores) and names past 253 characters are
// made valid with a readable prefix and a hash of what they stand for, so
// every name is deterministic and still distinct.
func objectName(pool, fam string, part int) string {
	f := dnsLabel(fam)
	name := pool + "." + f
	if part > 1 {
		name += "." + strconv.Itoa(part)
	}
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	suffix := name[len(pool):] // ".<family>[.<part>]", at most 63+1+1+10 characters
	keep := validation.DNS1123SubdomainMaxLength - len(suffix) - 9
	return strings.TrimRight(pool[:keep], "-.") + "-" + hash8(pool) + suffix
}

// dnsLabel is fam if it is a DNS label, else a lower-case spelling of it
// with other characters turned to '-', followed by a hash of fam.
func dnsLabel(fam string) string {
	if len(validation.IsDNS1123Label(fam)) == 0 {
		return fam
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, fam)
	clean = strings.Trim(clean[:min(len(clean), validation.DNS1123LabelMaxLength-9)], "-")
	if clean == "" {
		return "x" + hash8(fam)
	}
	return clean + "-" + hash8(fam)
}

func hash8(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

// objectsFor splits a pool's catalog into the objects the controller
// writes: one per family, families too large for one object split into
// parts of at most partBytes of JSON (a single larger type alone in its
// part). Each carries the pool in spec.nodePool and the label
// nodeforge.dev/nodepool, how many objects there are, and the pool as its
// controller. Families and
// the types within them are sorted by name, so the same catalog always
// gives the same objects.
//
// Parts are cut on each type's size with every offering spelled
// unavailable (the longer spelling), so marking an offering unavailable,
// or available again, changes only the object that lists it and never
// moves a type to another part.
func objectsFor(pool *v1alpha1.NodePool, provider string, types []v1alpha1.InstanceType) []v1alpha1.InstanceTypeCatalog {
	byFamily := map[string][]v1alpha1.InstanceType{}
	for _, it := range types {
		f := family(it.Name)
		byFamily[f] = append(byFamily[f], it)
	}
	owner := metav1.NewControllerRef(pool, v1alpha1.SchemeGroupVersion.WithKind("NodePool"))
	var out []v1alpha1.InstanceTypeCatalog
	for _, fam := range slices.Sorted(maps.Keys(byFamily)) {
		members := byFamily[fam]
		slices.SortFunc(members, func(a, b v1alpha1.InstanceType) int { return cmp.Compare(a.Name, b.Name) })
		for i, part := range parts(members) {
			out = append(out, v1alpha1.InstanceTypeCatalog{
				ObjectMeta: metav1.ObjectMeta{
					Name:            objectName(pool.Name, fam, i+1),
					Labels:          map[string]string{v1alpha1.LabelNodePool: pool.Name},
					OwnerReferences: []metav1.OwnerReference{*owner},
				},
				Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: pool.Name, Provider: provider, InstanceTypeCount: int32(len(part)), InstanceTypes: part},
			})
		}
	}
	for i := range out {
		out[i].Spec.ObjectCount = int32(len(out))
	}
	return out
}

// parts cuts a family's types, in order, into runs of at most partBytes.
func parts(types []v1alpha1.InstanceType) [][]v1alpha1.InstanceType {
	var out [][]v1alpha1.InstanceType
	start, size := 0, 0
	for i := range types {
		n := encodedSize(types[i])
		if i > start && size+n > partBytes {
			out = append(out, types[start:i])
			start, size = i, 0
		}
		size += n + 1 // and a comma
	}
	return append(out, types[start:])
}

// encodedSize is the JSON length of it with every offering unavailable.
func encodedSize(it v1alpha1.InstanceType) int {
	it.Offerings = slices.Clone(it.Offerings)
	for i := range it.Offerings {
		it.Offerings[i].Available = false
	}
	b, err := json.Marshal(it)
	if err != nil {
		return 0 // a quantity that does not encode would fail the write anyway
	}
	return len(b)
}
