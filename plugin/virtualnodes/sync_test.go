package virtualnodes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// flakyReader fails its first failures Lists, then reads through.
type flakyReader struct {
	client.Reader
	failures int
	err      error
}

func (f *flakyReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if f.failures > 0 {
		f.failures--
		return f.err
	}
	return f.Reader.List(ctx, list, opts...)
}

// TestFailedPoolResyncKeepsThePoolsAndIsRetriedWithBackoff: a List that
// fails is an error naming what was listed, the pools stay as they were,
// and the resync is queued again after a backoff and then succeeds.
func TestFailedPoolResyncKeepsThePoolsAndIsRetriedWithBackoff(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	boom := errors.New("apiserver unavailable")
	// The API server holds no NodePool: a resync that succeeds drops "bench".
	api := &flakyReader{Reader: testobj.Client(), failures: 2, err: boom}

	if err := h.plugin.resyncPools(ctx, api); !errors.Is(err, boom) || !strings.Contains(err.Error(), "listing nodepools") {
		t.Errorf("resyncPools with the List failing = %v, want an error listing nodepools wrapping %v", err, boom)
	}

	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, time.Second))
	defer q.ShutDown()
	q.Add(resyncPoolsKey)
	if h.plugin.resyncNext(ctx, api, q) {
		t.Fatal("resyncNext reported success while the List failed")
	}
	if h.plugin.pools["bench"] == nil {
		t.Error("a failed resync dropped the pools it could not read")
	}
	if n := q.NumRequeues(resyncPoolsKey); n != 1 {
		t.Errorf("requeues after one failure = %d, want 1 (retried with backoff)", n)
	}

	done := make(chan bool)
	go func() { done <- h.plugin.resyncNext(ctx, api, q) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("the retried resync failed with the API server answering")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failed resync was never retried")
	}
	if h.plugin.pools["bench"] != nil {
		t.Error("the retried resync kept a pool the API server no longer has")
	}
	if n := q.NumRequeues(resyncPoolsKey); n != 0 {
		t.Errorf("requeues after success = %d, want 0 (backoff reset)", n)
	}
}

// TestClaimDeletedWithoutAnEventIsForgotten: a claim written once and then
// deleted by the provisioner without the plugin ever hearing of it (its
// informer never saw the claim, as when the API server restarts between
// the two) is forgotten at its next write, which finds it gone, and its
// pods are decided again; before, the write was retried for ever and the
// pods stayed nominated to a claim that did not exist.
func TestClaimDeletedWithoutAnEventIsForgotten(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	api := testobj.Client()
	c, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	h.plugin.flush(ctx, api)
	var written v1alpha1.NodeClaim
	if err := api.Get(ctx, client.ObjectKey{Name: c.name}, &written); err != nil {
		t.Fatalf("the claim was not written: %v", err)
	}
	if err := api.Delete(ctx, &written); err != nil {
		t.Fatal(err)
	}
	// A second pod joins the claim, which makes it dirty again.
	if again, s := h.schedule(ctx, testPod("b", "1", "1Gi")); !s.IsSuccess() || again != c {
		t.Fatalf("pod b went to %v (%s), want the open claim %s", again, s.Message(), c.name)
	}
	h.plugin.flush(ctx, api)
	h.plugin.mu.Lock()
	defer h.plugin.mu.Unlock()
	if h.plugin.book.claim(c.name) != nil {
		t.Errorf("claim %s, deleted in the API server, is still in the plugin's book", c.name)
	}
	for _, name := range []string{"a", "b"} {
		found := false
		for _, p := range h.plugin.refused {
			found = found || p.Name == name
		}
		if !found {
			t.Errorf("pod %s of the deleted claim is not queued to be decided again", name)
		}
	}
}

// TestPodsNominatedAfterTheLastWriteLeaveAClaimClosedUnderThem: the
// provisioner closes a claim (a status write of its own) after the
// plugin wrote it with pod a and before it wrote pod b. The instance it
// launches holds what the spec it read counts: a. The plugin's next write
// conflicts; a keeps its nomination, and b is decided again at once
// rather than waiting for a node that has no room for it.
func TestPodsNominatedAfterTheLastWriteLeaveAClaimClosedUnderThem(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	api := testobj.Client()
	c, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	h.plugin.flush(ctx, api)
	if again, s := h.schedule(ctx, testPod("b", "1", "1Gi")); !s.IsSuccess() || again != c {
		t.Fatalf("pod b went to %v (%s), want the open claim %s", again, s.Message(), c.name)
	}
	var nc v1alpha1.NodeClaim
	if err := api.Get(ctx, client.ObjectKey{Name: c.name}, &nc); err != nil {
		t.Fatal(err)
	}
	if nc.Spec.NominatedPods != 1 {
		t.Fatalf("the claim was written with %d pods, want 1 (a)", nc.Spec.NominatedPods)
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunching
	if err := api.Status().Update(ctx, &nc); err != nil {
		t.Fatal(err)
	}
	var retried []string
	h.plugin.activate = func(pods map[string]*corev1.Pod) {
		for _, p := range pods {
			retried = append(retried, p.Name)
		}
	}
	h.plugin.flush(ctx, api)
	if n := h.plugin.nominationOf(testPod("a", "1", "1Gi")); n == nil || n.claim != c.name {
		t.Errorf("pod a, which the closed claim counts, lost its nomination: %v", n)
	}
	if n := h.plugin.nominationOf(testPod("b", "1", "1Gi")); n != nil {
		t.Errorf("pod b, nominated after the claim's last write, is still nominated to %s", n.claim)
	}
	if !slices.Equal(retried, []string{"b"}) {
		t.Errorf("pods sent back to be decided again: %v, want [b]", retried)
	}
	if c.open {
		t.Error("the claim the provisioner closed is still open to nominations")
	}
	// b is decided again onto another claim; then the informer brings
	// b's update from before, naming the closed claim: not a move.
	b := testPod("b", "1", "1Gi")
	c2, s := h.schedule(ctx, b)
	if !s.IsSuccess() || c2 == c {
		t.Fatalf("pod b decided again went to %v (%s), want a claim other than %s", c2, s.Message(), c.name)
	}
	stale := b.DeepCopy()
	stale.Status.NominatedNodeName = c.name
	h.plugin.nominationMoved(stale)
	if n := h.plugin.nominationOf(b); n == nil || n.claim != c2.name {
		t.Errorf("after a stale update naming %s, pod b is nominated to %v, want %s", c.name, n, c2.name)
	}
	if !c2.open {
		t.Errorf("a stale update closed claim %s", c2.name)
	}
}

// TestNameTakenByAClaimOfAnotherClassIsForgotten: a create that finds a
// Nominating claim of the same name and pool updates it only if it is
// the same claim; one made with another node class is not, the API
// server refuses the update (the class is immutable, modelled here by
// the interceptor), and the plugin forgets its claim and decides its
// pods again instead of retrying the write for ever.
func TestNameTakenByAClaimOfAnotherClassIsForgotten(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	c, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	taken := c.object()
	taken.Spec.NodeClassRef.Name = "someone-elses"
	api := interceptor.NewClient(testobj.Client(taken),
		interceptor.Funcs{Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			var cur v1alpha1.NodeClaim
			if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err == nil && cur.Spec.NodeClassRef != obj.(*v1alpha1.NodeClaim).Spec.NodeClassRef {
				return apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("NodeClaim").GroupKind(), obj.GetName(),
					field.ErrorList{field.Invalid(field.NewPath("spec", "nodeClassRef"), nil, "nodeClassRef is immutable")})
			}
			return cl.Update(ctx, obj, opts...)
		}})
	h.plugin.flush(ctx, api)
	h.plugin.mu.Lock()
	defer h.plugin.mu.Unlock()
	if h.plugin.book.claim(c.name) != nil {
		t.Errorf("claim %s, whose name another claim holds, is still in the plugin's book", c.name)
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(h.plugin.refused)), func(p *corev1.Pod) bool { return p.Name == "a" }) {
		t.Error("pod a is not queued to be decided again")
	}
	var kept v1alpha1.NodeClaim
	if err := api.Get(ctx, client.ObjectKey{Name: c.name}, &kept); err != nil || kept.Spec.NodeClassRef.Name != "someone-elses" {
		t.Errorf("the other claim became %v (%v); want it left as it was", kept.Spec.NodeClassRef, err)
	}
}

// TestEachClaimChangeIsOneWrite: a claim's first write is one create and
// each later change one update, the nominated pods and the last
// nomination time in its spec beside what they need; the plugin never
// writes a claim's status, and a flush with nothing changed writes
// nothing.
func TestEachClaimChangeIsOneWrite(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, []*pool{benchPool(t)})
	writes := map[string]int{}
	api := interceptor.NewClient(testobj.Client(),
		interceptor.Funcs{
			Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				writes["create"]++
				return cl.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				writes["update"]++
				return cl.Update(ctx, obj, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				writes[sub]++
				return cl.SubResource(sub).Update(ctx, obj, opts...)
			},
		})
	read := func(name string) v1alpha1.NodeClaim {
		t.Helper()
		var nc v1alpha1.NodeClaim
		if err := api.Get(ctx, client.ObjectKey{Name: name}, &nc); err != nil {
			t.Fatal(err)
		}
		return nc
	}

	c, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	h.plugin.flush(ctx, api)
	if want := map[string]int{"create": 1}; !maps.Equal(writes, want) {
		t.Fatalf("first write of a claim: %v, want %v", writes, want)
	}
	first := read(c.name)
	if first.Spec.NominatedPods != 1 || first.Spec.LastNominationTime == nil {
		t.Fatalf("created claim counts %d pods, last nomination %v; want 1 and a time", first.Spec.NominatedPods, first.Spec.LastNominationTime)
	}

	h.plugin.now = func() time.Time { return first.Spec.LastNominationTime.Add(300 * time.Millisecond) }
	if again, s := h.schedule(ctx, testPod("b", "1", "1Gi")); !s.IsSuccess() || again != c {
		t.Fatalf("pod b went to %v (%s), want the open claim %s", again, s.Message(), c.name)
	}
	h.plugin.flush(ctx, api)
	if want := map[string]int{"create": 1, "update": 1}; !maps.Equal(writes, want) {
		t.Fatalf("after a second nomination: %v, want %v", writes, want)
	}
	second := read(c.name)
	if second.Spec.NominatedPods != 2 || !second.Spec.LastNominationTime.After(first.Spec.LastNominationTime.Time) {
		t.Fatalf("updated claim counts %d pods, last nomination %v (was %v); want 2 and later", second.Spec.NominatedPods,
			second.Spec.LastNominationTime, first.Spec.LastNominationTime)
	}

	h.plugin.flush(ctx, api)
	if want := map[string]int{"create": 1, "update": 1}; !maps.Equal(writes, want) {
		t.Errorf("a flush with nothing changed wrote: %v, want %v", writes, want)
	}
}
