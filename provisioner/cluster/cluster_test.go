package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
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
		if err := RegisterIndexes(ctx, idx); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.fields) != len(Indexes()) || len(b.fields) != len(Indexes()) {
		t.Errorf("indexed %v on the first manager and %v on the second; want each of %d once", a.fields, b.fields, len(Indexes()))
	}
}

// TestIndexesReadWhatTheyName: each index reads the field it is named
// for; a bound pod is not indexed as nominated.
func TestIndexesReadWhatTheyName(t *testing.T) {
	pending := &corev1.Pod{Status: corev1.PodStatus{NominatedNodeName: "claim-a"}}
	bound := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{NominatedNodeName: "node-a"}}
	node := &corev1.Node{Spec: corev1.NodeSpec{ProviderID: "aws:///zone-a/i-1"}}
	nc := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec:   v1alpha1.NodeClaimSpec{NodePool: "pool", NodeClassRef: v1alpha1.NodeClassReference{Kind: "EC2NodeClass", Name: "default"}},
		Status: v1alpha1.NodeClaimStatus{NodeName: "node-a", ProviderID: "aws:///zone-a/i-1"}}
	want := map[string]map[client.Object][]string{
		IndexPodNominated:    {pending: {"claim-a"}, bound: nil},
		IndexPodNode:         {pending: {""}, bound: {"node-a"}},
		IndexNodeProviderID:  {node: {"aws:///zone-a/i-1"}},
		IndexClaimNode:       {nc: {"node-a"}},
		IndexClaimProviderID: {nc: {"aws:///zone-a/i-1"}},
		IndexClaimPool:       {nc: {"pool"}},
		IndexClaimClass:      {nc: {"EC2NodeClass/default"}},
	}
	for _, i := range Indexes() {
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
	ds := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "d"}}}}
	rs := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "r"}}}}
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}
	if !OwnedByDaemonSet(ds) || OwnedByDaemonSet(rs) || !IsMirror(mirror) || IsMirror(rs) {
		t.Errorf("daemonset %v, replicaset %v, mirror %v, replicaset as mirror %v; want true, false, true, false",
			OwnedByDaemonSet(ds), OwnedByDaemonSet(rs), IsMirror(mirror), IsMirror(rs))
	}
}

// TestClaimsWhereKeepsWhatTheControllerOwns: a node's claims are found
// through the index, and keep leaves out the claims another controller
// owns: disruption takes Initialized and Disrupting claims not being
// deleted, the lifecycle controller the rest.
func TestClaimsWhereKeepsWhatTheControllerOwns(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	claim := func(name string, phase v1alpha1.NodeClaimPhase, deleting bool) *v1alpha1.NodeClaim {
		nc := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.NodeClaimStatus{Phase: phase, NodeName: "node-a"}}
		if deleting {
			nc.DeletionTimestamp, nc.Finalizers = &metav1.Time{Time: time.Now()}, []string{v1alpha1.FinalizerTermination}
		}
		return nc
	}
	b := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		claim("initialized", v1alpha1.NodeClaimInitialized, false),
		claim("disrupting", v1alpha1.NodeClaimDisrupting, false),
		claim("registered", v1alpha1.NodeClaimRegistered, false),
		claim("terminating", v1alpha1.NodeClaimInitialized, true))
	for _, i := range Indexes() {
		b = b.WithIndex(i.Object, i.Field, i.Extract)
	}
	c := b.Build()
	names := func(keep func(*v1alpha1.NodeClaim) bool) []string {
		var out []string
		for _, r := range ClaimsWhere(ctx, c, IndexClaimNode, "node-a", keep) {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(nil), []string{"disrupting", "initialized", "registered", "terminating"}; !slices.Equal(got, want) {
		t.Errorf("all claims of node-a: %v, want %v", got, want)
	}
	if got, want := names(Disrupted), []string{"disrupting", "initialized"}; !slices.Equal(got, want) {
		t.Errorf("disruption's: %v, want %v", got, want)
	}
	if got, want := names(func(nc *v1alpha1.NodeClaim) bool { return !Disrupted(nc) }), []string{"registered", "terminating"}; !slices.Equal(got, want) {
		t.Errorf("the lifecycle's: %v, want %v", got, want)
	}
	if got := ClaimsWhere(ctx, c, IndexClaimNode, "", nil); got != nil {
		t.Errorf("an empty value found %v", got)
	}
}
