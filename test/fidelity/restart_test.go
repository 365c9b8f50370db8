package fidelity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// TestRestartKeepsNominations restarts the scheduler between two batches
// of pods of one workload: the open claim is rebuilt from the API server,
// pods retried after the restart keep their nominations (no second claim
// for a pod), and the new pods join the same claim.
func TestRestartKeepsNominations(t *testing.T) {
	ctx := context.Background()
	ns := "restart-" + utilrand.String(4)
	np := pool("restart")
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}})
	t.Cleanup(func() { cleanup(t, ns, []*v1alpha1.NodePool{np}) })
	mustCreate(t, np.DeepCopy())
	types, err := nodeshape.FilterInstanceTypes(nodeshape.ForPool(np), nil, catalog)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: np.Name, Labels: map[string]string{v1alpha1.LabelNodePool: np.Name}},
		Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: np.Name, InstanceTypes: types}})

	b := podOf("restart").Req("1", "1Gi").Owner("ReplicaSet", "restart", "rs-restart-uid")
	stop := startScheduler(t, "before-restart", true, nil)
	var first []*corev1.Pod
	for _, p := range times(3, b) {
		first = append(first, createPod(t, ns, p))
	}
	before := waitNominated(t, ns, first)
	stop()
	if len(before) != 1 {
		t.Fatalf("%d claims before the restart, want 1", len(before))
	}

	stop = startScheduler(t, "after-restart", true, nil)
	defer stop()
	all := first
	for _, p := range times(2, b) {
		all = append(all, createPod(t, ns, p))
	}
	after := waitNominated(t, ns, all)
	if len(after) != 1 || after[0].Name != before[0].Name {
		names := []string{}
		for _, nc := range after {
			names = append(names, nc.Name)
		}
		t.Fatalf("claims after the restart %v, want only %s", names, before[0].Name)
	}
	if after[0].Spec.NominatedPods != 5 {
		t.Errorf("claim %s records %d pods, want 5", after[0].Name, after[0].Spec.NominatedPods)
	}
	for _, p := range first {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.NominatedNodeName != before[0].Name {
			t.Errorf("pod %s moved from %s to %s across the restart", p.Name, before[0].Name, got.Status.NominatedNodeName)
		}
	}
}
