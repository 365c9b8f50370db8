package garbage

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
)

func node(name, providerID string, ours bool, created time.Time) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created), Finalizers: []string{v1alpha1.FinalizerTermination}}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if ours {
		n.Labels = map[string]string{v1alpha1.LabelNodePool: "default"}
	}
	return n
}

func TestCollect(t *testing.T) {
	now := time.Now()
	cloud := cloudfake.New()
	for _, in := range []*cloudprovider.Instance{
		{ProviderID: "sim:///a/owned", NodeClaim: "owned", Launched: now.Add(-time.Hour)},
		{ProviderID: "sim:///a/orphan", NodeClaim: "gone", Launched: now.Add(-time.Hour)},
		{ProviderID: "sim:///a/young", NodeClaim: "launching", Launched: now.Add(-10 * time.Second)},
		// Of one fleet launched for claims sa, sb and sc: sa took the
		// first, sb is still launching and may take the second; sc took
		// another, so the third, of a fleet for sa and sc, serves no one.
		{ProviderID: "sim:///a/shared-1", NodeClaims: []string{"sa", "sb", "sc"}, Launched: now.Add(-time.Hour)},
		{ProviderID: "sim:///a/shared-2", NodeClaims: []string{"sa", "sb", "sc"}, Launched: now.Add(-time.Hour)},
		{ProviderID: "sim:///a/shared-3", NodeClaims: []string{"sa", "sc"}, Launched: now.Add(-time.Hour)},
		{ProviderID: "sim:///a/sc", NodeClaim: "sc", Launched: now.Add(-time.Hour)},
	} {
		cloud.Add(in)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	claim := func(name, providerID string, launched time.Time) *v1alpha1.NodeClaim {
		nc := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
		nc.Status.ProviderID = providerID
		nc.Status.Conditions = []metav1.Condition{{Type: "Launched", Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.NewTime(launched)}}
		return nc
	}
	kube := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		claim("owned", "sim:///a/owned", now.Add(-time.Hour)),
		claim("sa", "sim:///a/shared-1", now.Add(-time.Hour)),
		claim("sb", "", now.Add(-time.Hour)),
		claim("sc", "sim:///a/sc", now.Add(-time.Hour)),
		claim("vanished", "sim:///a/vanished", now.Add(-time.Hour)),
		// Launched after the cloud was listed: not in the list, but young.
		claim("fresh", "sim:///a/fresh", now.Add(-time.Second)),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "orphan-node"}, Spec: corev1.NodeSpec{ProviderID: "sim:///a/orphan"}},
		// Left behind by a crash after its orphan instance was terminated.
		node("leftover", "sim:///a/terminated-earlier", true, now.Add(-time.Hour)),
		// Not ours, or named by a claim, or too young to judge: kept.
		node("foreign", "other:///x", false, now.Add(-time.Hour)),
		node("fresh-node", "sim:///a/fresh", true, now.Add(-time.Hour)),
		node("just-registered", "sim:///a/not-listed-yet", true, now.Add(-time.Second)),
	).Build()
	g := New(kube, cloud)
	g.now = func() time.Time { return now }
	if err := g.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"sim:///a/owned": true, "sim:///a/orphan": false, "sim:///a/young": true,
		"sim:///a/shared-1": true, "sim:///a/shared-2": true, "sim:///a/shared-3": false} {
		if _, err := cloud.Get(context.Background(), id); (err == nil) != want {
			t.Errorf("instance %s exists=%v, want %v", id, !want, want)
		}
	}
	var nodes corev1.NodeList
	_ = kube.List(context.Background(), &nodes)
	var kept []string
	for _, n := range nodes.Items {
		kept = append(kept, n.Name)
	}
	if want := []string{"foreign", "fresh-node", "just-registered"}; !slices.Equal(kept, want) {
		t.Errorf("nodes kept %v, want %v (the orphan's and the leftover deleted)", kept, want)
	}
	var nc v1alpha1.NodeClaim
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "vanished"}, &nc); err == nil {
		t.Errorf("the claim whose instance vanished was kept")
	}
	for _, kept := range []string{"owned", "fresh"} {
		if err := kube.Get(context.Background(), client.ObjectKey{Name: kept}, &nc); err != nil {
			t.Errorf("claim %s was deleted: %v", kept, err)
		}
	}
}
