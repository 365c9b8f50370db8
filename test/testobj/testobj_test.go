package testobj

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// TestClientServesEveryIndexTheControllersRead: each of cluster.Indexes
// finds its object on the fake client, so no test need register one.
func TestClientServesEveryIndexTheControllersRead(t *testing.T) {
	ctx := context.Background()
	pending := Pod("pending").Nominated("pool-abcde").Obj()
	bound := Pod("bound").Node("n1").Obj()
	node := Node("n1").ProviderID("fake:///zone-a/i-1").Obj()
	nc := Claim("pool-abcde").Pool("pool").Class("SimulatedNodeClass", "default").NodeName("n1").ProviderID("fake:///zone-a/i-1").Obj()
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"}, Spec: resourcev1.ResourceSliceSpec{NodeName: ptr.To("n1")}}
	kube := Client(pending, bound, node, nc, slice)
	cases := map[string]struct {
		list  client.ObjectList
		value string
		names func(client.ObjectList) []string
	}{
		cluster.IndexPodNominated:    {&corev1.PodList{}, "pool-abcde", podNames},
		cluster.IndexPodNode:         {&corev1.PodList{}, "n1", podNames},
		cluster.IndexSliceNode:       {&resourcev1.ResourceSliceList{}, "n1", sliceNames},
		cluster.IndexNodeProviderID:  {&corev1.NodeList{}, "fake:///zone-a/i-1", nodeNames},
		cluster.IndexClaimNode:       {&v1alpha1.NodeClaimList{}, "n1", claimNames},
		cluster.IndexClaimProviderID: {&v1alpha1.NodeClaimList{}, "fake:///zone-a/i-1", claimNames},
		cluster.IndexClaimPool:       {&v1alpha1.NodeClaimList{}, "pool", claimNames},
		cluster.IndexClaimClass:      {&v1alpha1.NodeClaimList{}, "SimulatedNodeClass/default", claimNames},
	}
	want := map[string]string{cluster.IndexPodNominated: "pending", cluster.IndexPodNode: "bound", cluster.IndexSliceNode: "n1-gpu", cluster.IndexNodeProviderID: "n1"}
	for _, i := range cluster.Indexes() {
		tc, ok := cases[i.Field]
		if !ok {
			t.Errorf("index %s is not tested", i.Field)
			continue
		}
		if err := kube.List(ctx, tc.list, client.MatchingFields{i.Field: tc.value}); err != nil {
			t.Errorf("listing by %s: %v", i.Field, err)
			continue
		}
		name := want[i.Field]
		if name == "" {
			name = nc.Name
		}
		if got := tc.names(tc.list); len(got) != 1 || got[0] != name {
			t.Errorf("%s=%s found %v, want [%s]", i.Field, tc.value, got, name)
		}
	}
}

func podNames(l client.ObjectList) (out []string) {
	for _, p := range l.(*corev1.PodList).Items {
		out = append(out, p.Name)
	}
	return out
}

func sliceNames(l client.ObjectList) (out []string) {
	for _, s := range l.(*resourcev1.ResourceSliceList).Items {
		out = append(out, s.Name)
	}
	return out
}

func nodeNames(l client.ObjectList) (out []string) {
	for _, n := range l.(*corev1.NodeList).Items {
		out = append(out, n.Name)
	}
	return out
}

func claimNames(l client.ObjectList) (out []string) {
	for _, nc := range l.(*v1alpha1.NodeClaimList).Items {
		out = append(out, nc.Name)
	}
	return out
}

// TestClientKeepsStatusApart: as the API server does for a kind with the
// status subresource, Update leaves a claim's status alone and
// Status().Update writes only the status.
func TestClientKeepsStatusApart(t *testing.T) {
	ctx := context.Background()
	kube := Client(Claim("c").Pool("pool").Phase(v1alpha1.NodeClaimLaunching).Obj())
	var nc v1alpha1.NodeClaim
	get := func() {
		t.Helper()
		if err := kube.Get(ctx, client.ObjectKey{Name: "c"}, &nc); err != nil {
			t.Fatal(err)
		}
	}
	get()
	nc.Status.Phase, nc.Spec.NominatedPods = v1alpha1.NodeClaimLaunched, 2
	if err := kube.Update(ctx, &nc); err != nil {
		t.Fatal(err)
	}
	get()
	if nc.Status.Phase != v1alpha1.NodeClaimLaunching || nc.Spec.NominatedPods != 2 {
		t.Fatalf("after Update: phase %s, nominated pods %d; want Launching, 2", nc.Status.Phase, nc.Spec.NominatedPods)
	}
	nc.Status.Phase, nc.Spec.NominatedPods = v1alpha1.NodeClaimLaunched, 3
	if err := kube.Status().Update(ctx, &nc); err != nil {
		t.Fatal(err)
	}
	get()
	if nc.Status.Phase != v1alpha1.NodeClaimLaunched || nc.Spec.NominatedPods != 2 {
		t.Errorf("after Status().Update: phase %s, nominated pods %d; want Launched, 2", nc.Status.Phase, nc.Spec.NominatedPods)
	}
}

// TestObjReturnsACopy: one wrapper makes objects that share nothing.
func TestObjReturnsACopy(t *testing.T) {
	w := Pod("web").Req("cpu", "1").Label("app", "web")
	a, b := w.Obj(), w.Obj()
	a.Labels["app"] = "changed"
	a.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = Resources("cpu", "2")[corev1.ResourceCPU]
	if b.Labels["app"] != "web" || b.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Errorf("a change to one pod reached the other: %v %v", b.Labels, b.Spec.Containers[0].Resources.Requests)
	}
}
