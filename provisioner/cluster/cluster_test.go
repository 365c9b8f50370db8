package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// indexer records the fields indexed on it.
type indexer struct{ fields []string }

func (i *indexer) IndexField(_ context.Context, obj client.Object, field string, _ client.IndexerFunc) error {
	i.fields = append(i.fields, field)
	return nil
}

// TestIndexesAreRegisteredOncePerManager: the first controller to set up
// registers every index; the next, on the same manager, registers none
// (a second IndexField of one name fails in controller-runtime); another
// manager gets its own.
func TestIndexesAreRegisteredOncePerManager(t *testing.T) {
	ctx := context.Background()
	a, b := &indexer{}, &indexer{}
	for _, idx := range []*indexer{a, a, b} {
		if err := cluster.RegisterIndexes(ctx, idx); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.fields) != len(cluster.Indexes()) || len(b.fields) != len(cluster.Indexes()) {
		t.Errorf("indexed %v on the first manager and %v on the second; want each of %d once", a.fields, b.fields, len(cluster.Indexes()))
	}
}

// TestIndexesReadWhatTheyName: each index reads the field it is named
// for; a bound pod is not indexed as nominated, nor a slice of no one
// node by node.
func TestIndexesReadWhatTheyName(t *testing.T) {
	pending := testobj.Pod("pending").Nominated("claim-a").Obj()
	bound := testobj.Pod("bound").Node("node-a").Nominated("node-a").Obj()
	node := testobj.Node("node-a").ProviderID("aws:///zone-a/i-1").Obj()
	nc := testobj.Claim("c").Pool("pool").Class("EC2NodeClass", "default").NodeName("node-a").ProviderID("aws:///zone-a/i-1").Obj()
	slice := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{NodeName: ptr.To("node-a")}}
	shared := &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{AllNodes: ptr.To(true)}}
	want := map[string]map[client.Object][]string{
		cluster.IndexPodNominated:    {pending: {"claim-a"}, bound: nil},
		cluster.IndexPodNode:         {pending: {""}, bound: {"node-a"}},
		cluster.IndexSliceNode:       {slice: {"node-a"}, shared: nil},
		cluster.IndexNodeProviderID:  {node: {"aws:///zone-a/i-1"}},
		cluster.IndexClaimNode:       {nc: {"node-a"}},
		cluster.IndexClaimProviderID: {nc: {"aws:///zone-a/i-1"}},
		cluster.IndexClaimPool:       {nc: {"pool"}},
		cluster.IndexClaimClass:      {nc: {"EC2NodeClass/default"}},
	}
	for _, i := range cluster.Indexes() {
		cases, ok := want[i.Field]
		if !ok {
			t.Errorf("index %s is not tested", i.Field)
			continue
		}
		for obj, values := range cases {
			if got := i.Extract(obj); !slices.Equal(got, values) {
				t.Errorf("index %s of %T: %q, want %q", i.Field, obj, got, values)
			}
		}
	}
}

// TestPodsTheirNodeOwns: daemonset and mirror pods are their node's own.
func TestPodsTheirNodeOwns(t *testing.T) {
	ds := testobj.Pod("ds").OwnedBy("DaemonSet", "d").Obj()
	rs := testobj.Pod("rs").OwnedBy("ReplicaSet", "r").Obj()
	mirror := testobj.Pod("mirror").Annotation(corev1.MirrorPodAnnotationKey, "x").Obj()
	for _, tc := range []struct {
		name string
		is   func(*corev1.Pod) bool
		pod  *corev1.Pod
		want bool
	}{
		{"a daemonset's pod is owned by a daemonset", cluster.OwnedByDaemonSet, ds, true},
		{"a replicaset's pod is not", cluster.OwnedByDaemonSet, rs, false},
		{"a static pod's mirror is a mirror", cluster.IsMirror, mirror, true},
		{"a replicaset's pod is not", cluster.IsMirror, rs, false},
	} {
		if got := tc.is(tc.pod); got != tc.want {
			t.Errorf("%s: got %v", tc.name, got)
		}
	}
}

// TestClaimsWhereKeepsWhatTheControllerOwns: a node's claims are found
// through the index, and keep leaves out the claims another controller
// owns: disruption takes Initialized and Disrupting claims not being
// deleted, the lifecycle controller the rest.
func TestClaimsWhereKeepsWhatTheControllerOwns(t *testing.T) {
	ctx := context.Background()
	claim := func(name string, phase v1alpha1.NodeClaimPhase) *testobj.ClaimWrapper {
		return testobj.Claim(name).Phase(phase).NodeName("node-a")
	}
	c := testobj.Client(
		claim("initialized", v1alpha1.NodeClaimInitialized).Obj(),
		claim("disrupting", v1alpha1.NodeClaimDisrupting).Obj(),
		claim("registered", v1alpha1.NodeClaimRegistered).Obj(),
		claim("terminating", v1alpha1.NodeClaimInitialized).Deleting(time.Now()).Obj())
	names := func(keep func(*v1alpha1.NodeClaim) bool) []string {
		var out []string
		for _, r := range cluster.ClaimsWhere(ctx, c, cluster.IndexClaimNode, "node-a", keep) {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(nil), []string{"disrupting", "initialized", "registered", "terminating"}; !slices.Equal(got, want) {
		t.Errorf("all claims of node-a: %v, want %v", got, want)
	}
	if got, want := names(cluster.Disrupted), []string{"disrupting", "initialized"}; !slices.Equal(got, want) {
		t.Errorf("disruption's: %v, want %v", got, want)
	}
	if got, want := names(func(nc *v1alpha1.NodeClaim) bool { return !cluster.Disrupted(nc) }), []string{"registered", "terminating"}; !slices.Equal(got, want) {
		t.Errorf("the lifecycle's: %v, want %v", got, want)
	}
	if got := cluster.ClaimsWhere(ctx, c, cluster.IndexClaimNode, "", nil); got != nil {
		t.Errorf("an empty value found %v", got)
	}
}
