package disruption

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// emptyWorld is claim p-abcde of pool p (consolidateAfter 30s) on node
// n1, with pods in both the cache and the API server, and the emptiness
// method; emptyFor settles it past consolidateAfter.
type emptyWorld struct {
	c    *Controller
	kube client.Client
	live *kubefake.Clientset
	now  time.Time
}

func newEmptyWorld(t *testing.T, pods ...*corev1.Pod) *emptyWorld {
	t.Helper()
	objs := []client.Object{
		testobj.Pool("p").ConsolidateAfter("30s").Obj(),
		testobj.Claim("p-abcde").UID("uid-1").Pool("p").Phase(v1alpha1.NodeClaimInitialized).NodeName("n1").Obj(),
		testobj.Node("n1").Obj(),
	}
	var live []runtime.Object
	for _, p := range pods {
		objs, live = append(objs, p), append(live, p.DeepCopy())
	}
	w := &emptyWorld{now: time.Now()}
	w.kube = testobj.Client(objs...)
	w.live = kubefake.NewClientset(live...)
	now := func() time.Time { return w.now }
	w.c = New(NewExecutor(w.kube, w.kube, w.live, events.NewFakeRecorder(10), now), NewEmptiness(w.kube, w.live, now))
	return w
}

// settlePast reconciles the claim, lets consolidateAfter pass, and
// reconciles it again; it reports whether the claim was disrupted.
func (w *emptyWorld) settlePast(t *testing.T, between func()) bool {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		if i == 2 {
			w.now = w.now.Add(31 * time.Second)
			if between != nil {
				between()
			}
		}
		nc := getClaim(ctx, t, w.kube, "p-abcde")
		if nc == nil {
			return true
		}
		if _, err := settle(w.c, ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	nc := getClaim(ctx, t, w.kube, "p-abcde")
	return nc == nil || nc.Status.Phase == v1alpha1.NodeClaimDisrupting
}

// TestANodeWithOnlyDaemonSetAndStaticPodsIsEmpty: a static pod's mirror
// is the node's own and cannot go elsewhere; with a daemonset pod beside
// it the node is empty, and is disrupted after consolidateAfter. Before,
// the mirror pod counted as an occupant and such nodes were never
// removed.
func TestANodeWithOnlyDaemonSetAndStaticPodsIsEmpty(t *testing.T) {
	ds := testobj.Pod("ds").Namespace("kube-system").OwnedBy("DaemonSet", "d").Node("n1").Obj()
	static := testobj.Pod("proxy-n1").Namespace("kube-system").Annotation(corev1.MirrorPodAnnotationKey, "hash").OwnedBy("Node", "n1").Node("n1").Obj()
	web := testobj.Pod("web").Node("n1").Obj()
	for _, tc := range []struct {
		name  string
		pods  []*corev1.Pod
		empty bool
	}{
		{"a node with only a daemonset pod and a static pod is empty", []*corev1.Pod{ds, static}, true},
		{"a node running a pod beside a static pod is not", []*corev1.Pod{static, web}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if disrupted := newEmptyWorld(t, tc.pods...).settlePast(t, nil); disrupted != tc.empty {
				t.Errorf("disrupted as empty = %v, want %v", disrupted, tc.empty)
			}
		})
	}
}

// TestTheLastLookSeesAPodBoundBetweenItsLists: at the last look a pod is
// nominated to the node; between the look's two lists it is bound there.
// Listing the bound pods first missed it in both (not bound yet; then
// bound, so no longer a pending nomination), and the node was deleted
// under it. It fails with the lists the other way round.
func TestTheLastLookSeesAPodBoundBetweenItsLists(t *testing.T) {
	ctx := context.Background()
	w := newEmptyWorld(t)
	var lists atomic.Int32
	w.live.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) == 2 {
			// The scheduler binds it now.
			p, err := w.live.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "default", "web")
			if err == nil {
				bound := p.(*corev1.Pod).DeepCopy()
				bound.Spec.NodeName = "n1"
				_ = w.live.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), bound, "default")
			}
		}
		return false, nil, nil
	})
	disrupted := w.settlePast(t, func() {
		web := testobj.Pod("web").Nominated("n1").Obj()
		if _, err := w.live.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		lists.Store(0)
	})
	if disrupted {
		t.Error("disrupted a node a pod was bound to between the last look's lists")
	}
}

// TestAPodBindingItsVolumesKeepsTheNode: the scheduler assumed a pod onto
// the node before the taint and its PreBind is still provisioning its
// WaitForFirstConsumer volume: the pod is neither bound nor nominated
// yet, but its claim names the node (volume.kubernetes.io/selected-node).
// The last look sees that and calls the disruption off.
func TestAPodBindingItsVolumesKeepsTheNode(t *testing.T) {
	ctx := context.Background()
	w := newEmptyWorld(t)
	disrupted := w.settlePast(t, func() {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-web-0", Namespace: "default",
			Annotations: map[string]string{annSelectedNode: "n1"}}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
		if _, err := w.live.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if disrupted {
		t.Error("disrupted a node whose pod's volume is being provisioned there")
	}
}
