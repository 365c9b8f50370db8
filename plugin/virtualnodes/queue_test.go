package virtualnodes

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestPodsRefusedWhileACatalogIsWrittenAreRetriedOnceItIsWhole: a new
// pool's catalog arrives one family object at a time, each a resync; a
// pod refused meanwhile is sent back to the scheduler once, when the last
// object makes the pool whole, and not again when only the pool's status
// changes. Before, every object sent it back (16 tries in 0.4 s in the
// sandbox's walk-through).
func TestPodsRefusedWhileACatalogIsWrittenAreRetriedOnceItIsWhole(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	if err := h.plugin.resyncPools(ctx, testobj.Client()); err != nil {
		t.Fatal(err)
	}
	if _, s := h.schedule(ctx, testPod("early", "1", "1Gi")); s.IsSuccess() {
		t.Fatal("a pod was nominated with no pool")
	}
	var retries []int
	h.plugin.activate = func(pods map[string]*corev1.Pod) { retries = append(retries, len(pods)) }

	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "parts"}}
	api := testobj.Client(np)
	types := benchCatalog()[:30]
	const parts = 3
	for i := range parts {
		cat := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("parts.f%d", i)}, Spec: v1alpha1.InstanceTypeCatalogSpec{
			NodePool: "parts", ObjectCount: parts, InstanceTypes: types[i*10 : (i+1)*10]}}
		if err := api.Create(ctx, cat); err != nil {
			t.Fatal(err)
		}
		if err := h.plugin.resyncPools(ctx, api); err != nil {
			t.Fatal(err)
		}
		if want := 0; i < parts-1 && len(retries) != want {
			t.Fatalf("after catalog object %d of %d the refused pod was sent back %d times, want %d", i+1, parts, len(retries), want)
		}
	}
	if len(retries) != 1 || retries[0] != 1 {
		t.Fatalf("once the catalog is whole: sent back %v, want once, the one pod", retries)
	}
	if h.plugin.pools["parts"] == nil {
		t.Fatal("the whole catalog made no pool")
	}
	// Refused again (say, too large for every type), then the pool's
	// status changes: nothing a decision reads changed.
	h.plugin.mu.Lock()
	h.plugin.refused["uid-early"] = testPod("early", "1", "1Gi")
	h.plugin.mu.Unlock()
	np.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	if err := api.Status().Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := h.plugin.resyncPools(ctx, api); err != nil {
		t.Fatal(err)
	}
	if len(retries) != 1 {
		t.Fatalf("a status write to the pool sent refused pods back: %v", retries)
	}
	// Its spec changes: that may change the answer.
	if err := api.Get(ctx, client.ObjectKeyFromObject(np), np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Weight = new(int32)
	if err := api.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := h.plugin.resyncPools(ctx, api); err != nil {
		t.Fatal(err)
	}
	if len(retries) != 2 {
		t.Fatalf("a change to the pool's spec did not send the refused pod back: %v", retries)
	}
}

// TestNominatedPodWaitsOutOfTheQueueForItsClaimsNode: PreEnqueue gates a
// pod nominated to a claim until the claim's node is registered without
// the binding taint, the node event's queueing hint says Queue for that
// node only, and a pod nominated nowhere passes.
func TestNominatedPodWaitsOutOfTheQueueForItsClaimsNode(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	cs := kubefake.NewClientset()
	inf := informers.NewSharedInformerFactory(cs, 0)
	nodes := inf.Core().V1().Nodes()
	h.plugin.nodes = nodes.Lister()
	pod := testPod("a", "1", "1Gi")
	if s := h.plugin.PreEnqueue(ctx, pod); !s.IsSuccess() {
		t.Fatalf("a pod nominated nowhere is gated: %s", s.Message())
	}
	c, s := h.schedule(ctx, pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	pod.Status.NominatedNodeName = c.name
	if s := h.plugin.PreEnqueue(ctx, pod); s.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("PreEnqueue of a pod nominated to open claim %s: %v, want it gated", c.name, s)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sim-2"}}
	for _, n := range []*corev1.Node{node, other} {
		if err := nodes.Informer().GetStore().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	h.plugin.mu.Lock()
	h.plugin.book.committedChanged(&v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: v1alpha1.NodeClaimSpec{NodePool: "bench"},
		Status: v1alpha1.NodeClaimStatus{Phase: v1alpha1.NodeClaimRegistered, NodeName: node.Name}})
	h.plugin.mu.Unlock()
	logger := klog.Background()
	for _, tc := range []struct {
		node *corev1.Node
		want fwk.QueueingHint
	}{{node, fwk.QueueSkip}, {other, fwk.QueueSkip}} {
		if got, err := h.plugin.claimNodeOpened(logger, pod, nil, tc.node); err != nil || got != tc.want {
			t.Errorf("hint for node %s (taints %v): %v, %v; want %v", tc.node.Name, tc.node.Spec.Taints, got, err, tc.want)
		}
	}
	if s := h.plugin.PreEnqueue(ctx, pod); s.IsSuccess() {
		t.Fatal("a pod whose claim's node still carries the binding taint passed PreEnqueue")
	}

	open := node.DeepCopy()
	open.Spec.Taints = nil
	if err := nodes.Informer().GetStore().Update(open); err != nil {
		t.Fatal(err)
	}
	if got, err := h.plugin.claimNodeOpened(logger, pod, node, open); err != nil || got != fwk.Queue {
		t.Errorf("hint for the claim's node once open: %v, %v; want Queue", got, err)
	}
	if s := h.plugin.PreEnqueue(ctx, pod); !s.IsSuccess() {
		t.Fatalf("a pod whose claim's node is open is still gated: %s", s.Message())
	}
}
