package cloudprovider

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestSpecHashIsStableAndSeesEveryChange: equal specs hash equal however
// their maps were built; a change to any field changes the hash.
func TestSpecHashIsStableAndSeesEveryChange(t *testing.T) {
	spec := func(tags map[string]string, delay time.Duration) v1alpha1.SimulatedNodeClassSpec {
		return v1alpha1.SimulatedNodeClassSpec{RegistrationDelay: &metav1.Duration{Duration: delay}, Tags: tags}
	}
	a := map[string]string{}
	b := map[string]string{}
	for _, k := range []string{"team", "env", "cost-center", "owner", "app"} {
		a[k] = k + "-value"
	}
	for _, k := range []string{"app", "owner", "cost-center", "env", "team"} {
		b[k] = k + "-value"
	}
	hash := func(s v1alpha1.SimulatedNodeClassSpec) string {
		t.Helper()
		h, err := SpecHash(s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := hash(spec(a, time.Second))
	if got := hash(spec(b, time.Second)); got != base {
		t.Errorf("equal specs built in another order hash %s and %s", base, got)
	}
	changed := map[string]v1alpha1.SimulatedNodeClassSpec{
		"a tag value":        spec(map[string]string{"team": "other"}, time.Second),
		"the delay":          spec(a, 2*time.Second),
		"a fault":            {RegistrationDelay: &metav1.Duration{Duration: time.Second}, Tags: a, Faults: []v1alpha1.SimulatedFault{{Kind: v1alpha1.FaultNeverRegister}}},
		"the delay left out": {Tags: a},
	}
	for what, s := range changed {
		if hash(s) == base {
			t.Errorf("changing %s left the hash at %s", what, base)
		}
	}
}

// declaring is a scripted provider that declares one node class.
type declaring struct{ scripted }

func (declaring) NodeClasses() []NodeClass {
	return []NodeClass{{Kind: "SimulatedNodeClass", New: func() client.Object { return &v1alpha1.SimulatedNodeClass{} }}}
}

// TestDecoratorsKeepTheNodeClassDeclaration: generic code reads the
// declaration through the decorated provider main builds.
func TestDecoratorsKeepTheNodeClassDeclaration(t *testing.T) {
	got := WithMetrics(WithDeadline(declaring{}, time.Minute)).NodeClasses()
	if len(got) != 1 || got[0].Kind != "SimulatedNodeClass" {
		t.Errorf("decorated NodeClasses = %+v, want the provider's SimulatedNodeClass", got)
	}
	if ServedKinds(got) != "SimulatedNodeClass" {
		t.Errorf("ServedKinds = %q", ServedKinds(got))
	}
}
