package virtualnodes

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFirstKIsTheHeadOfASort: firstK keeps exactly the first k of a
// stable sort of everything added, whatever k and the order of adding,
// ties in the key broken by the order the claims came in (as fillSlack
// and grow use it).
func TestFirstKIsTheHeadOfASort(t *testing.T) {
	type item struct {
		key   float64
		order int
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n, k := rng.IntN(60), 1+rng.IntN(20)
		var all []item
		f := firstK[item]{k: k, cmp: func(a, b item) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.order, b.order)) }}
		for i := range n {
			it := item{key: float64(rng.IntN(8)) / 4, order: i}
			all = append(all, it)
			f.add(it)
		}
		slices.SortStableFunc(all, func(a, b item) int { return cmp.Compare(a.key, b.key) })
		want := all[:min(k, len(all))]
		if !slices.Equal(f.items, want) {
			t.Fatalf("round %d (n=%d, k=%d): firstK kept %v, the sort's head is %v", round, n, k, f.items, want)
		}
	}
}
