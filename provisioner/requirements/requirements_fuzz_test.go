package requirements

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
)

// FuzzMatchesAgreesWithTheScheduler: for any requirement the scheduler can
// read and any label value (or none), Matches answers as the scheduler's
// own node affinity does on a node with that label. Requirements the
// scheduler refuses are left out: the API refuses them in pools.
func FuzzMatchesAgreesWithTheScheduler(f *testing.F) {
	f.Add("In", "a", "b", "a", true)
	f.Add("NotIn", "a", "b", "c", true)
	f.Add("NotIn", "a", "", "", false)
	f.Add("Exists", "", "", "x", true)
	f.Add("DoesNotExist", "", "", "", false)
	f.Add("Gt", "5", "", "6", true)
	f.Add("Lt", "5", "", "+4", true)
	f.Add("Gt", "-1", "", "0", false)
	f.Add("Gt", "007", "", "8", true)
	f.Fuzz(func(t *testing.T, op, v1, v2, value string, present bool) {
		var values []string
		for _, v := range []string{v1, v2} {
			if v != "" {
				values = append(values, v)
			}
		}
		operator := corev1.NodeSelectorOperator(op)
		r := v1alpha1.NodeSelectorRequirementWithMinValues{Key: "example.com/k", Operator: operator, Values: values}
		term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: r.Key, Operator: operator, Values: values}}}
		sel, err := nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}})
		if err != nil {
			return // the scheduler cannot read it
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		if present {
			node.Labels[r.Key] = value
		}
		if want, got := sel.Match(node), Matches(r, value, present); got != want {
			t.Errorf("%s %v on value %q (present %v): Matches says %v, the scheduler %v", op, values, value, present, got, want)
		}
	})
}
