package garbage

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func node(name, providerID string, ours bool, created time.Time) *corev1.Node {
	n := testobj.Node(name).Created(created).Finalizer(v1alpha1.FinalizerTermination).ProviderID(providerID)
	if ours {
		n.Label(v1alpha1.LabelNodePool, "default")
	}
	return n.Obj()
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
	claim := func(name, providerID string, launched time.Time) *v1alpha1.NodeClaim {
		return testobj.Claim(name).ProviderID(providerID).ConditionAt(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched", launched).Obj()
	}
	kube := testobj.Client(
		claim("owned", "sim:///a/owned", now.Add(-time.Hour)),
		claim("sa", "sim:///a/shared-1", now.Add(-time.Hour)),
		claim("sb", "", now.Add(-time.Hour)),
		claim("sc", "sim:///a/sc", now.Add(-time.Hour)),
		claim("vanished", "sim:///a/vanished", now.Add(-time.Hour)),
		// Launched after the cloud was listed: not in the list, but young.
		claim("fresh", "sim:///a/fresh", now.Add(-time.Second)),
		testobj.Node("orphan-node").ProviderID("sim:///a/orphan").Obj(),
		// Left behind by a crash after its orphan instance was terminated.
		node("leftover", "sim:///a/terminated-earlier", true, now.Add(-time.Hour)),
		// Not ours, or named by a claim, or too young to judge: kept.
		node("foreign", "other:///x", false, now.Add(-time.Hour)),
		node("fresh-node", "sim:///a/fresh", true, now.Add(-time.Hour)),
		node("just-registered", "sim:///a/not-listed-yet", true, now.Add(-time.Second)),
	)
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
