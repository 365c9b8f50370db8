package nodeshape

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func hashPool() *v1alpha1.NodePool {
	return testobj.Pool("p").NodeLabel("team", "web").NodeLabel("env", "prod").NodeLabel("tier", "front").
		NodeAnnotation("example.com/owner", "alice").NodeAnnotation("example.com/cost", "42").
		Taints(v1alpha1.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}, v1alpha1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}).
		StartupTaints(v1alpha1.Taint{Key: "cni", Effect: corev1.TaintEffectNoSchedule}).
		Require(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64", "arm64").
		Require(corev1.LabelTopologyZone, corev1.NodeSelectorOpNotIn, "zone-c").
		Class("SimulatedNodeClass", "default").ExpireAfter("720h").
		Obj()
}

func mustHash(t *testing.T, np *v1alpha1.NodePool) string {
	t.Helper()
	h, err := PoolHash(np)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestPoolHashIsStable: the same template hashes the same, however its
// maps were built and however its sets are ordered; what is not part of
// what a node is launched with changes nothing.
func TestPoolHashIsStable(t *testing.T) {
	base := mustHash(t, hashPool())
	if base == "" {
		t.Fatal("empty hash")
	}
	same := map[string]func(*v1alpha1.NodePool){
		"nothing changed": func(*v1alpha1.NodePool) {},
		"labels built in another order": func(np *v1alpha1.NodePool) {
			np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"tier": "front", "env": "prod", "team": "web"}
		},
		"taints in another order": func(np *v1alpha1.NodePool) {
			ts := np.Spec.Template.Spec.Taints
			ts[0], ts[1] = ts[1], ts[0]
		},
		"requirements and their values in another order": func(np *v1alpha1.NodePool) {
			rs := np.Spec.Template.Spec.Requirements
			rs[0], rs[1] = rs[1], rs[0]
			rs[1].Values = []string{"arm64", "amd64"}
		},
		"expireAfter": func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.ExpireAfter = "24h" },
		"terminationGracePeriod": func(np *v1alpha1.NodePool) {
			np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: 3600e9}
		},
		"disruption": func(np *v1alpha1.NodePool) { np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never },
		"limits and weight": func(np *v1alpha1.NodePool) {
			np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("10")}
			np.Spec.Weight = ptr.To[int32](5)
		},
		"status": func(np *v1alpha1.NodePool) { np.Status.Nodes = 3 },
	}
	for name, change := range same {
		np := hashPool()
		change(np)
		if got := mustHash(t, np); got != base {
			t.Errorf("%s: hash changed from %s to %s", name, base, got)
		}
	}
}

// TestPoolHashSeesEveryLaunchField: a change to each field the node is
// launched with changes the hash.
func TestPoolHashSeesEveryLaunchField(t *testing.T) {
	base := mustHash(t, hashPool())
	changed := map[string]func(*v1alpha1.NodePool){
		"a label value":       func(np *v1alpha1.NodePool) { np.Spec.Template.ObjectMeta.Labels["team"] = "api" },
		"a label added":       func(np *v1alpha1.NodePool) { np.Spec.Template.ObjectMeta.Labels["new"] = "x" },
		"an annotation value": func(np *v1alpha1.NodePool) { np.Spec.Template.ObjectMeta.Annotations["example.com/owner"] = "bob" },
		"annotations removed": func(np *v1alpha1.NodePool) { np.Spec.Template.ObjectMeta.Annotations = nil },
		"a taint value":       func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.Taints[0].Value = "api" },
		"a taint effect":      func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.Taints[1].Effect = corev1.TaintEffectNoSchedule },
		"a startup taint":     func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.StartupTaints = nil },
		"a requirement value": func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.Requirements[0].Values = []string{"amd64"} },
		"a requirement's operator": func(np *v1alpha1.NodePool) {
			np.Spec.Template.Spec.Requirements[1].Operator = corev1.NodeSelectorOpIn
		},
		"a requirement's minValues": func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.Requirements[0].MinValues = ptr.To[int32](2) },
		"the node class's name":     func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.NodeClassRef.Name = "other" },
		"the node class's kind":     func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.NodeClassRef.Kind = "EC2NodeClass" },
	}
	seen := map[string]string{base: "the base template"}
	for name, change := range changed {
		np := hashPool()
		change(np)
		got := mustHash(t, np)
		if other, dup := seen[got]; dup {
			t.Errorf("%s: hash %s is the same as for %s", name, got, other)
		}
		seen[got] = name
	}
}

// TestUnmetNamesTheRequirementTheNodeBreaks: the first requirement a
// node's labels break is returned; requirements on labels the node does
// not carry, other than the well-known ones, are not applied.
func TestUnmetNamesTheRequirementTheNodeBreaks(t *testing.T) {
	labels := map[string]string{corev1.LabelArchStable: "amd64", corev1.LabelTopologyZone: "zone-a", "team": "web"}
	for _, tc := range []struct {
		name string
		reqs []v1alpha1.NodeSelectorRequirementWithMinValues
		want string // key of the unmet requirement, "" for none
	}{
		{"all met", []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64"), req("team", corev1.NodeSelectorOpExists)}, ""},
		{"the zone is no longer allowed", []v1alpha1.NodeSelectorRequirementWithMinValues{req(corev1.LabelArchStable, corev1.NodeSelectorOpIn, "amd64"), req(corev1.LabelTopologyZone, corev1.NodeSelectorOpNotIn, "zone-a")}, corev1.LabelTopologyZone},
		{"a well-known label the node lacks is required", []v1alpha1.NodeSelectorRequirementWithMinValues{req(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")}, v1alpha1.LabelCapacityType},
		{"a label of someone else's the node lacks is not applied", []v1alpha1.NodeSelectorRequirementWithMinValues{req("example.com/rack", corev1.NodeSelectorOpIn, "r1")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Unmet(tc.reqs, labels)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("unmet %s, want none", got.Key)
			case tc.want != "" && (got == nil || got.Key != tc.want):
				t.Errorf("unmet %v, want the requirement on %s", got, tc.want)
			}
		})
	}
}
