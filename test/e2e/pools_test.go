package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// poolFromDefault creates a NodePool named name: a copy of the sandbox's
// default pool (its node class, consolidationPolicy WhenEmpty) with
// edit's changes.
func poolFromDefault(t *testing.T, kube client.Client, name string, edit func(*v1alpha1.NodePool)) *v1alpha1.NodePool {
	t.Helper()
	ctx := context.Background()
	var def v1alpha1.NodePool
	poll(t, "the sandbox's default NodePool", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *def.Spec.DeepCopy()}
	if edit != nil {
		edit(np)
	}
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	return np
}

// onDemandTeamPool makes np's nodes carry team=<pool> (what the tests'
// pods select) and be on-demand nodes of the given instance types, in the
// zones given, or any.
func onDemandTeamPool(np *v1alpha1.NodePool, pool string, types []string, zones ...string) {
	np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(pool)}
	np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
		{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: types},
		{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
	}
	if len(zones) > 0 {
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements,
			v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: zones})
	}
}
