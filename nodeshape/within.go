package nodeshape

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// OutsidePoolError says what of a claim its pool's template would not
// make: Field is the spec field ("nodeClassRef", "labels", ...), Detail
// what differs.
type OutsidePoolError struct {
	Field, Detail string
}

func (e *OutsidePoolError) Error() string {
	return "spec." + e.Field + " " + e.Detail
}

// WithinPool reports, as an *OutsidePoolError, the first thing the claim
// asks for that its pool np, as it is now, would not make; nil when it
// asks for nothing more. The claim's node class, labels (the template's
// and LabelNodePool, which every claim carries), annotations, taints and
// startup taints must be the template's; each of the pool's requirements
// must be among the claim's, or one no looser (Narrows): the claim's
// instance types, zone, capacity type and architecture narrow the pool's
// (ClaimRequirements), and any other requirement only narrows what is
// launched. A requirement's minValues is not compared: fewer options to
// launch from is still a node the pool makes.
//
// A claim made before its pool was edited is outside it too: the node it
// would become is drifted from the pool already.
func WithinPool(nc *v1alpha1.NodeClaim, np *v1alpha1.NodePool) error {
	if nc.Spec.NodePool != np.Name {
		return &OutsidePoolError{"nodePool", fmt.Sprintf("is %q, not %q", nc.Spec.NodePool, np.Name)}
	}
	tmpl := &np.Spec.Template.Spec
	if got, want := nc.Spec.NodeClassRef, tmpl.NodeClassRef; got != want {
		return &OutsidePoolError{"nodeClassRef", fmt.Sprintf("names %s, not the pool's %s", classString(got), classString(want))}
	}
	claim, pool := ForClaim(nc), ForPool(np)
	// The claim's own labels, not ForClaim's: that sets the pool label
	// right, which a claim saying another pool is not.
	labels := maps.Clone(nc.Spec.Labels)
	if _, ok := labels[v1alpha1.LabelNodePool]; !ok {
		labels = claim.Labels
	}
	if why := mapDiff("label", labels, pool.Labels); why != "" {
		return &OutsidePoolError{"labels", why}
	}
	if why := mapDiff("annotation", claim.Annotations, pool.Annotations); why != "" {
		return &OutsidePoolError{"annotations", why}
	}
	if why := taintsDiff("taint", claim.Taints, pool.Taints); why != "" {
		return &OutsidePoolError{"taints", why}
	}
	if why := taintsDiff("startup taint", claim.StartupTaints, pool.StartupTaints); why != "" {
		return &OutsidePoolError{"startupTaints", why}
	}
	for _, p := range tmpl.Requirements {
		if !slices.ContainsFunc(nc.Spec.Requirements, func(q v1alpha1.NodeSelectorRequirementWithMinValues) bool { return Narrows(q, p) }) {
			return &OutsidePoolError{"requirements", fmt.Sprintf("have nothing as narrow as the pool's %s", requirementString(p))}
		}
	}
	return nil
}

// Narrows reports whether every node q admits, p admits too: both are on
// one key, and q is p or narrower (In a subset of p's values, NotIn a
// superset, Gt a bound as high or higher, ...).
func Narrows(q, p v1alpha1.NodeSelectorRequirementWithMinValues) bool {
	if q.Key != p.Key {
		return false
	}
	// Whether p admits a node whose label has the value v.
	admits := func(v string) bool {
		switch p.Operator {
		case corev1.NodeSelectorOpIn:
			return slices.Contains(p.Values, v)
		case corev1.NodeSelectorOpNotIn:
			return !slices.Contains(p.Values, v)
		case corev1.NodeSelectorOpExists:
			return true
		case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
			n, ok1 := integer(v)
			bound, ok2 := integer(p.Values...)
			return ok1 && ok2 && (p.Operator == corev1.NodeSelectorOpGt && n > bound || p.Operator == corev1.NodeSelectorOpLt && n < bound)
		}
		return false // DoesNotExist admits no value
	}
	switch q.Operator {
	case corev1.NodeSelectorOpIn:
		// Finitely many values, each a node p must admit.
		return len(q.Values) > 0 && !slices.ContainsFunc(q.Values, func(v string) bool { return !admits(v) })
	case corev1.NodeSelectorOpDoesNotExist:
		// Only nodes without the label, which NotIn and DoesNotExist admit.
		return p.Operator == corev1.NodeSelectorOpNotIn || p.Operator == corev1.NodeSelectorOpDoesNotExist
	case corev1.NodeSelectorOpNotIn:
		// Nodes without the label too, and every value but q's.
		return p.Operator == corev1.NodeSelectorOpNotIn && !slices.ContainsFunc(p.Values, func(v string) bool { return !slices.Contains(q.Values, v) })
	case corev1.NodeSelectorOpExists:
		return p.Operator == corev1.NodeSelectorOpExists
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		bound, ok := integer(q.Values...)
		if !ok {
			return false
		}
		switch p.Operator {
		case corev1.NodeSelectorOpExists:
			return true
		case corev1.NodeSelectorOpNotIn:
			// Every value p refuses is one q refuses.
			return !slices.ContainsFunc(p.Values, func(v string) bool {
				n, ok := integer(v)
				return ok && (q.Operator == corev1.NodeSelectorOpGt && n > bound || q.Operator == corev1.NodeSelectorOpLt && n < bound)
			})
		case q.Operator:
			pb, ok := integer(p.Values...)
			return ok && (q.Operator == corev1.NodeSelectorOpGt && bound >= pb || q.Operator == corev1.NodeSelectorOpLt && bound <= pb)
		}
	}
	return false
}

// integer is the one value of a Gt or Lt requirement, as the scheduler
// reads it.
func integer(values ...string) (int64, bool) {
	if len(values) != 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(values[0], 10, 64)
	return n, err == nil
}

// mapDiff says how got differs from want, naming the first key that
// differs, or "".
func mapDiff(what string, got, want map[string]string) string {
	keys := slices.Sorted(maps.Keys(got))
	for _, k := range keys {
		w, ok := want[k]
		switch {
		case !ok:
			return fmt.Sprintf("have %s %s=%s, which the pool's template does not", what, k, got[k])
		case w != got[k]:
			return fmt.Sprintf("have %s %s=%s; the pool's template has %s=%s", what, k, got[k], k, w)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[k]; !ok {
			return fmt.Sprintf("lack the pool's template %s %s=%s", what, k, want[k])
		}
	}
	return ""
}

// taintsDiff says how got differs from want, in any order, naming the
// first taint that differs, or "". Only key, value and effect count, as
// on a Node.
func taintsDiff(what string, got, want []corev1.Taint) string {
	g, w := nodeTaints(got), nodeTaints(want)
	for _, t := range g {
		if i, ok := slices.BinarySearchFunc(w, t, compareTaints); ok {
			w = slices.Delete(w, i, i+1)
			continue
		}
		return fmt.Sprintf("have %s %s, which the pool's template does not", what, taintString(t))
	}
	if len(w) > 0 {
		return fmt.Sprintf("lack the pool's template %s %s", what, taintString(w[0]))
	}
	return ""
}

// nodeTaints are taints as a Node compares them (no timeAdded), sorted.
func nodeTaints(taints []corev1.Taint) []corev1.Taint {
	out := make([]corev1.Taint, len(taints))
	for i, t := range taints {
		out[i] = corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
	}
	slices.SortFunc(out, compareTaints)
	return out
}

func compareTaints(a, b corev1.Taint) int {
	return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Effect, b.Effect))
}

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

func classString(r v1alpha1.NodeClassReference) string {
	return r.Kind + "/" + r.Name + " (" + r.Group + ")"
}

func requirementString(r v1alpha1.NodeSelectorRequirementWithMinValues) string {
	if len(r.Values) == 0 {
		return r.Key + " " + string(r.Operator)
	}
	return fmt.Sprintf("%s %s [%s]", r.Key, r.Operator, strings.Join(r.Values, " "))
}
