package nodeshape

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// withinPool is a pool with a bit of everything a claim copies.
func withinPool() *v1alpha1.NodePool {
	return testobj.Pool("apps").NodeLabel("intent", "apps").NodeAnnotation("example.com/owner", "team-a").Class("SimulatedNodeClass", "default").
		Taints(v1alpha1.Taint{Key: "dedicated", Value: "apps", Effect: corev1.TaintEffectNoSchedule}, v1alpha1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}).
		StartupTaints(v1alpha1.Taint{Key: "cni", Effect: corev1.TaintEffectNoExecute}).
		Require(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "c7.large", "m7.large", "r7.large").
		Require(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "zone-a", "zone-b").
		Require(corev1.LabelArchStable, corev1.NodeSelectorOpNotIn, "arm64").
		Require("nodeforge.dev/instance-generation", corev1.NodeSelectorOpGt, "5").
		Obj()
}

// madeFrom is the claim the scheduler plugin writes for pool np.
func madeFrom(np *v1alpha1.NodePool, arch string) *v1alpha1.NodeClaim {
	t := ForPool(np)
	return &v1alpha1.NodeClaim{Spec: v1alpha1.NodeClaimSpec{
		NodePool:     np.Name,
		Requirements: ClaimRequirements(np.Spec.Template.Spec.Requirements, []string{"m7.large", "c7.large"}, "zone-b", "spot", arch),
		Labels:       t.Labels, Annotations: t.Annotations, Taints: t.Taints, StartupTaints: t.StartupTaints,
		NodeClassRef: np.Spec.Template.Spec.NodeClassRef,
	}}
}

// at is the claim's requirement on key.
func at(nc *v1alpha1.NodeClaim, key string) *v1alpha1.NodeSelectorRequirementWithMinValues {
	for i := range nc.Spec.Requirements {
		if nc.Spec.Requirements[i].Key == key {
			return &nc.Spec.Requirements[i]
		}
	}
	panic("no requirement on " + key)
}

func TestWithinPool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(nc *v1alpha1.NodeClaim, np *v1alpha1.NodePool)
		field string // "" when the claim is within its pool
		want  string // in the error
	}{
		{name: "a claim the scheduler made is within its pool"},
		{name: "a claim of an unknown architecture keeps the pool's own requirement and is within it",
			edit: func(nc *v1alpha1.NodeClaim, np *v1alpha1.NodePool) { *nc = *madeFrom(np, "") }},
		{name: "taints in another order are the same taints", edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
			nc.Spec.Taints = []corev1.Taint{nc.Spec.Taints[1], nc.Spec.Taints[0]}
		}},
		{name: "a claim without the pool label gets it on its node all the same", edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
			delete(nc.Spec.Labels, v1alpha1.LabelNodePool)
		}},
		{name: "another node class is refused", field: "nodeClassRef", want: "names SimulatedNodeClass/privileged",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { nc.Spec.NodeClassRef.Name = "privileged" }},
		{name: "another pool is refused", field: "nodePool",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { nc.Spec.NodePool = "other" }},
		{name: "a restricted label added is refused", field: "labels", want: "node-restriction.kubernetes.io/pci=true",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				nc.Spec.Labels["node-restriction.kubernetes.io/pci"] = "true"
			}},
		{name: "a label's value changed is refused", field: "labels", want: "intent=db; the pool's template has intent=apps",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { nc.Spec.Labels["intent"] = "db" }},
		{name: "a label of the pool's left out is refused", field: "labels", want: "lack the pool's template label intent=apps",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { delete(nc.Spec.Labels, "intent") }},
		{name: "the node's pool label set to another pool is refused", field: "labels",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { nc.Spec.Labels[v1alpha1.LabelNodePool] = "other" }},
		{name: "an annotation added is refused", field: "annotations", want: "example.com/admin=yes",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				nc.Spec.Annotations = map[string]string{"example.com/owner": "team-a", "example.com/admin": "yes"}
			}},
		{name: "a taint left out is refused", field: "taints", want: "lack the pool's template taint gpu:NoExecute",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) { nc.Spec.Taints = nc.Spec.Taints[:1] }},
		{name: "a taint's effect changed is refused", field: "taints", want: "dedicated=apps:PreferNoSchedule",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				nc.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "apps", Effect: corev1.TaintEffectPreferNoSchedule}, nc.Spec.Taints[1]}
			}},
		{name: "a startup taint added is refused", field: "startupTaints", want: "have startup taint other:NoSchedule",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				nc.Spec.StartupTaints = append(nc.Spec.StartupTaints, corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
			}},
		{name: "an instance type outside the pool's is refused", field: "requirements", want: "node.kubernetes.io/instance-type In [c7.large m7.large r7.large]",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				at(nc, corev1.LabelInstanceTypeStable).Values = []string{"p5.48xlarge"}
			}},
		{name: "a requirement of the pool's dropped is refused", field: "requirements", want: "nodeforge.dev/instance-generation Gt [5]",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				*at(nc, "nodeforge.dev/instance-generation") = req("example.com/other", "Exists")
			}},
		{name: "a requirement loosened is refused", field: "requirements", want: "nodeforge.dev/instance-generation Gt [5]",
			edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
				at(nc, "nodeforge.dev/instance-generation").Values = []string{"2"}
			}},
		{name: "a requirement narrowed and one added are within the pool", edit: func(nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) {
			at(nc, "nodeforge.dev/instance-generation").Values = []string{"6"}
			nc.Spec.Requirements = append(nc.Spec.Requirements, req("example.com/rack", corev1.NodeSelectorOpIn, "r1"))
		}},
		{name: "a claim made before its pool's template changed is outside it", field: "labels", want: "intent=apps; the pool's template has intent=web",
			edit: func(_ *v1alpha1.NodeClaim, np *v1alpha1.NodePool) {
				np.Spec.Template.ObjectMeta.Labels["intent"] = "web"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := withinPool()
			nc := madeFrom(np, "amd64")
			if tc.edit != nil {
				tc.edit(nc, np)
			}
			err := WithinPool(nc, np)
			var outside *OutsidePoolError
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.field == "":
			case !errors.As(err, &outside):
				t.Errorf("got %v, want an *OutsidePoolError on spec.%s", err, tc.field)
			case outside.Field != tc.field || !strings.Contains(err.Error(), tc.want):
				t.Errorf("got %q on spec.%s, want spec.%s saying %q", err, outside.Field, tc.field, tc.want)
			}
		})
	}
}

func TestNarrows(t *testing.T) {
	const k = "example.com/gen"
	for _, tc := range []struct {
		name string
		q, p v1alpha1.NodeSelectorRequirementWithMinValues
		want bool
	}{
		{"In a subset narrows In", req(k, "In", "a"), req(k, "In", "a", "b"), true},
		{"In a value more does not narrow In", req(k, "In", "a", "c"), req(k, "In", "a", "b"), false},
		{"In values outside NotIn's narrows it", req(k, "In", "a"), req(k, "NotIn", "b"), true},
		{"In a value NotIn refuses does not narrow it", req(k, "In", "a", "b"), req(k, "NotIn", "b"), false},
		{"NotIn more values narrows NotIn", req(k, "NotIn", "a", "b"), req(k, "NotIn", "b"), true},
		{"NotIn fewer values does not narrow NotIn", req(k, "NotIn", "a"), req(k, "NotIn", "a", "b"), false},
		{"NotIn does not narrow In", req(k, "NotIn", "a"), req(k, "In", "b"), false},
		{"In narrows Exists", req(k, "In", "a"), req(k, "Exists"), true},
		{"Gt narrows Exists", req(k, "Gt", "1"), req(k, "Exists"), true},
		{"NotIn does not narrow Exists: it admits nodes without the label", req(k, "NotIn", "a"), req(k, "Exists"), false},
		{"DoesNotExist narrows NotIn", req(k, "DoesNotExist"), req(k, "NotIn", "a"), true},
		{"DoesNotExist does not narrow Exists", req(k, "DoesNotExist"), req(k, "Exists"), false},
		{"Exists does not narrow DoesNotExist", req(k, "Exists"), req(k, "DoesNotExist"), false},
		{"Gt higher narrows Gt", req(k, "Gt", "7"), req(k, "Gt", "5"), true},
		{"Gt the same narrows Gt", req(k, "Gt", "5"), req(k, "Gt", "5"), true},
		{"Gt lower does not narrow Gt", req(k, "Gt", "4"), req(k, "Gt", "5"), false},
		{"Lt lower narrows Lt", req(k, "Lt", "3"), req(k, "Lt", "5"), true},
		{"Lt does not narrow Gt", req(k, "Lt", "3"), req(k, "Gt", "1"), false},
		{"In numbers above the bound narrows Gt", req(k, "In", "6", "9"), req(k, "Gt", "5"), true},
		{"In a number at the bound does not narrow Gt", req(k, "In", "5", "9"), req(k, "Gt", "5"), false},
		{"In a word does not narrow Gt", req(k, "In", "six"), req(k, "Gt", "5"), false},
		{"Gt above NotIn's values narrows NotIn", req(k, "Gt", "5"), req(k, "NotIn", "3", "x"), true},
		{"Gt admitting a value NotIn refuses does not narrow it", req(k, "Gt", "5"), req(k, "NotIn", "6"), false},
		{"Gt does not narrow In", req(k, "Gt", "5"), req(k, "In", "6"), false},
		{"another key does not narrow", req("other", "In", "a"), req(k, "In", "a"), false},
	} {
		if got := Narrows(tc.q, tc.p); got != tc.want {
			t.Errorf("%s: Narrows(%v, %v) = %v, want %v", tc.name, tc.q, tc.p, got, tc.want)
		}
	}
}

// TestClaimRequirementsAreWithinThePool: what the plugin writes for a
// claim, and the disruption controller for a replacement, passes the
// check the provisioner makes before launch, whatever the pool requires.
func TestClaimRequirementsAreWithinThePool(t *testing.T) {
	for _, reqs := range [][]v1alpha1.NodeSelectorRequirementWithMinValues{
		nil,
		{req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64", "arm64")},
		{req(corev1.LabelArchStable, corev1.NodeSelectorOpExists)},
		{req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpNotIn, "reserved"), req(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpNotIn, "x.large")},
		{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7.large", "m7.large"}, MinValues: ptrTo(int32(2))}},
	} {
		np := withinPool()
		np.Spec.Template.Spec.Requirements = reqs
		for _, arch := range []string{"amd64", ""} {
			if err := WithinPool(madeFrom(np, arch), np); err != nil {
				t.Errorf("pool requiring %v, claim of arch %q: %v", reqs, arch, err)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
