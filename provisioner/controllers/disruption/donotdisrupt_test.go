package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// expiredSetup is an initialized claim of pool "p", on node n1, past its
// expireAfter, with the Expiration method: nothing but do-not-disrupt or
// a budget keeps it. cache holds objs (the manager's view); live holds
// liveObjs (the API server's), which start the same unless a test says.
type expiredSetup struct {
	c      *Controller
	kube   client.Client
	live   *kubefake.Clientset
	events *events.FakeRecorder
	nc     *v1alpha1.NodeClaim
	now    time.Time
}

func newExpired(t *testing.T, pool *v1alpha1.NodePool, node *corev1.Node, pods ...*corev1.Pod) *expiredSetup {
	t.Helper()
	return newHeldSetup(t, nil, pool, node, pods...)
}

// newDrifted is newExpired's claim, found drifted (a voluntary
// disruption, which do-not-disrupt holds) rather than expired.
func newDrifted(t *testing.T, pool *v1alpha1.NodePool, node *corev1.Node, pods ...*corev1.Pod) *expiredSetup {
	t.Helper()
	return newHeldSetup(t, alwaysDrifted{}, pool, node, pods...)
}

// newHeldSetup: m decides (nil: expiration).
func newHeldSetup(t *testing.T, m Method, pool *v1alpha1.NodePool, node *corev1.Node, pods ...*corev1.Pod) *expiredSetup {
	t.Helper()
	s := &expiredSetup{now: at("2026-03-10T10:00:00Z"), events: events.NewFakeRecorder(20)}
	s.nc = testobj.Claim("p-abcde").UID("uid-1").Created(s.now.Add(-2 * time.Hour)).Pool("p").ExpireAfter("1h").
		Phase(v1alpha1.NodeClaimInitialized).NodeName(node.Name).Obj()
	objs := []client.Object{pool, s.nc, node}
	live := []runtime.Object{node.DeepCopy()}
	for _, p := range pods {
		objs, live = append(objs, p), append(live, p.DeepCopy())
	}
	s.kube = testobj.Client(objs...)
	s.live = kubefake.NewClientset(live...)
	now := func() time.Time { return s.now }
	if m == nil {
		m = NewExpiration(now)
	}
	s.c = New(NewExecutor(s.kube, s.kube, s.live, s.events, now), m)
	return s
}

func (s *expiredSetup) reconcile(t *testing.T) {
	t.Helper()
	var nc v1alpha1.NodeClaim
	if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(s.nc), &nc); err != nil {
		return // deleted: disrupted
	}
	if _, err := settle(s.c, context.Background(), &nc); err != nil {
		t.Fatal(err)
	}
}

func (s *expiredSetup) disrupted(t *testing.T) bool {
	t.Helper()
	var nc v1alpha1.NodeClaim
	err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(s.nc), &nc)
	return err != nil || nc.Status.Phase == v1alpha1.NodeClaimDisrupting
}

// drained returns the Events recorded so far.
func (s *expiredSetup) drained() []string {
	var out []string
	for {
		select {
		case e := <-s.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func blockedEvents(evs []string) []string {
	var out []string
	for _, e := range evs {
		if strings.Contains(e, v1alpha1.ReasonDisruptionBlocked) {
			out = append(out, e)
		}
	}
	return out
}

func plainPool() *v1alpha1.NodePool {
	return testobj.Pool("p").Obj()
}

func annotatedPod(name, node string, annotations map[string]string) *corev1.Pod {
	p := testobj.Pod(name).Node(node).Obj()
	p.Annotations = annotations
	return p
}

var doNotDisrupt = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}

// TestDoNotDisruptOnAPodOrTheNodeHoldsADriftedNode: a drifted node is
// not disrupted while a running pod bound to it, or the node itself, says
// do-not-disrupt; the claim gets one DisruptionBlocked Event naming what
// holds it, and the node is not even tainted (the cache's view decides
// before the taint; the live look after it is the backstop). Finished
// pods, pods on other nodes and other values of the annotation do not
// hold it.
//
// Karpenter's karpenter.sh/do-not-disrupt holds it the same way.
func TestDoNotDisruptOnAPodOrTheNodeHoldsADriftedNode(t *testing.T) {
	succeeded := annotatedPod("done", "n1", doNotDisrupt)
	succeeded.Status.Phase = corev1.PodSucceeded
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		pods     []*corev1.Pod
		heldBy   string // "" when the node is disrupted
		wantNote string
	}{
		{"a pod on the node says do-not-disrupt", testobj.Node("n1").Obj(),
			[]*corev1.Pod{annotatedPod("plain", "n1", nil), annotatedPod("web-1", "n1", doNotDisrupt)}, "pod", "Drifted: not disrupting node n1: pod default/web-1 has nodeforge.dev/do-not-disrupt=true"},
		{"the node says do-not-disrupt", testobj.Node("n1").Annotation(v1alpha1.AnnotationDoNotDisrupt, "true").Obj(),
			nil, "node", "Drifted: not disrupting node n1: node n1 has nodeforge.dev/do-not-disrupt=true"},
		{"a pod says Karpenter's karpenter.sh/do-not-disrupt", testobj.Node("n1").Obj(),
			[]*corev1.Pod{annotatedPod("moved", "n1", map[string]string{v1alpha1.AnnotationKarpenterDoNotDisrupt: "true"})}, "pod", "Drifted: not disrupting node n1: pod default/moved has karpenter.sh/do-not-disrupt=true"},
		{"the node says Karpenter's karpenter.sh/do-not-disrupt", testobj.Node("n1").Annotation(v1alpha1.AnnotationKarpenterDoNotDisrupt, "true").Obj(),
			nil, "node", "Drifted: not disrupting node n1: node n1 has karpenter.sh/do-not-disrupt=true"},
		{"only a finished pod says it", testobj.Node("n1").Obj(), []*corev1.Pod{succeeded}, "", ""},
		{"only a pod on another node says it", testobj.Node("n1").Obj(), []*corev1.Pod{annotatedPod("elsewhere", "n2", doNotDisrupt)}, "", ""},
		{"a pod says do-not-disrupt=false", testobj.Node("n1").Obj(),
			[]*corev1.Pod{annotatedPod("web-1", "n1", map[string]string{v1alpha1.AnnotationDoNotDisrupt: "false"})}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newDrifted(t, plainPool(), tc.node, tc.pods...)
			s.reconcile(t)
			s.reconcile(t) // the same verdict again: no second Event
			blocked := blockedEvents(s.drained())
			if tc.heldBy == "" {
				if !s.disrupted(t) {
					t.Errorf("the drifted node was not disrupted")
				}
				if len(blocked) > 0 {
					t.Errorf("unexpected Events: %q", blocked)
				}
				return
			}
			if s.disrupted(t) {
				t.Fatalf("disrupted a node held by do-not-disrupt on its %s", tc.heldBy)
			}
			if len(blocked) != 1 || !strings.HasSuffix(blocked[0], tc.wantNote) {
				t.Errorf("DisruptionBlocked Events %q; want exactly one ending %q", blocked, tc.wantNote)
			}
			n, err := s.live.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var cached corev1.Node
			if err := s.kube.Get(context.Background(), client.ObjectKey{Name: "n1"}, &cached); err != nil {
				t.Fatal(err)
			}
			if len(n.Spec.Taints)+len(cached.Spec.Taints) > 0 {
				t.Errorf("a held node was tainted: %v", cached.Spec.Taints)
			}
		})
	}
}

// TestDoNotDisruptDoesNotHoldAnExpiredNode: expiry is forceful, as
// Karpenter's v1 expiry is: do-not-disrupt on a pod, the node or the
// claim does not hold the decision (the drain holds such pods until the
// claim's terminationGracePeriod, in the NodeClaim controller). It fails
// while do-not-disrupt holds expiry.
func TestDoNotDisruptDoesNotHoldAnExpiredNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  *corev1.Node
		pods  []*corev1.Pod
		claim map[string]string
	}{
		{"a pod says do-not-disrupt", testobj.Node("n1").Obj(), []*corev1.Pod{annotatedPod("web-1", "n1", doNotDisrupt)}, nil},
		{"the node says do-not-disrupt", testobj.Node("n1").Annotation(v1alpha1.AnnotationDoNotDisrupt, "true").Obj(), nil, nil},
		{"the claim says do-not-disrupt", testobj.Node("n1").Obj(), nil, doNotDisrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newExpired(t, plainPool(), tc.node, tc.pods...)
			if tc.claim != nil {
				var nc v1alpha1.NodeClaim
				if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(s.nc), &nc); err != nil {
					t.Fatal(err)
				}
				nc.Annotations = tc.claim
				if err := s.kube.Update(context.Background(), &nc); err != nil {
					t.Fatal(err)
				}
			}
			s.reconcile(t)
			if !s.disrupted(t) {
				t.Errorf("the expired node was held by do-not-disrupt")
			}
			if blocked := blockedEvents(s.drained()); len(blocked) > 0 {
				t.Errorf("DisruptionBlocked Events for an expired node: %q", blocked)
			}
		})
	}
}

// TestDisruptionBlockedEventIsNotRepeatedUntilItChangesOrFiveMinutesPass:
// a claim held for the same reason gets its Event once per five minutes;
// a change in what holds it is news at once.
func TestDisruptionBlockedEventIsNotRepeatedUntilItChangesOrFiveMinutesPass(t *testing.T) {
	ctx := context.Background()
	s := newDrifted(t, plainPool(), testobj.Node("n1").Obj(), annotatedPod("a", "n1", doNotDisrupt))
	s.reconcile(t)
	s.now = s.now.Add(4 * time.Minute)
	s.reconcile(t)
	if got := blockedEvents(s.drained()); len(got) != 1 {
		t.Fatalf("within five minutes: %d Events (%q), want 1", len(got), got)
	}
	s.now = s.now.Add(time.Minute)
	s.reconcile(t)
	if got := blockedEvents(s.drained()); len(got) != 1 {
		t.Fatalf("five minutes on: %d Events (%q), want 1 more", len(got), got)
	}
	// Pod a goes, pod b holds it now: news.
	if err := s.kube.Delete(ctx, annotatedPod("a", "n1", nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Create(ctx, annotatedPod("b", "n1", doNotDisrupt)); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	if got := blockedEvents(s.drained()); len(got) != 1 || !strings.Contains(got[0], "pod default/b") {
		t.Fatalf("when another pod holds it: Events %q, want one naming default/b", got)
	}
}

// TestPodAnnotatedDoNotDisruptBeforeTheLastLookCallsItOff: the cache has
// not seen the annotation yet, the API server has: the node is tainted,
// looked at again live, and untainted; the claim stays and says why.
// Once the annotation is gone the node is disrupted.
func TestPodAnnotatedDoNotDisruptBeforeTheLastLookCallsItOff(t *testing.T) {
	ctx := context.Background()
	s := newDrifted(t, plainPool(), testobj.Node("n1").Obj(), annotatedPod("web-1", "n1", nil))
	annotated := annotatedPod("web-1", "n1", doNotDisrupt)
	if _, err := s.live.CoreV1().Pods("default").Update(ctx, annotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	if s.disrupted(t) {
		t.Fatal("disrupted a node whose pod was annotated do-not-disrupt before the last look")
	}
	var n corev1.Node
	if err := s.kube.Get(ctx, client.ObjectKey{Name: "n1"}, &n); err != nil {
		t.Fatal(err)
	}
	if len(n.Spec.Taints) > 0 {
		t.Errorf("the node kept its taint after the disruption was called off: %v", n.Spec.Taints)
	}
	if got := blockedEvents(s.drained()); len(got) != 1 || !strings.Contains(got[0], "pod default/web-1") {
		t.Errorf("Events %q; want one DisruptionBlocked naming default/web-1", got)
	}
	if _, err := s.live.CoreV1().Pods("default").Update(ctx, annotatedPod("web-1", "n1", nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Called off: not chosen again before the retry, even with the
	// annotation gone.
	s.reconcile(t)
	if s.disrupted(t) {
		t.Fatalf("disrupted again before the retry (%s) after a call-off", DefaultTimers.ReplacementRetry)
	}
	s.now = s.now.Add(DefaultTimers.ReplacementRetry)
	s.reconcile(t)
	if !s.disrupted(t) {
		t.Error("the node was not disrupted once the annotation was gone and the retry had passed")
	}
}

// TestScheduledBudgetHoldsExpirationOnlyWithinItsWindow: a budget of zero
// nodes for Expired, in its window, keeps an expired node and asks again
// when the window closes if that is within the usual wait; out of it, the
// node is disrupted.
func TestScheduledBudgetHoldsExpirationOnlyWithinItsWindow(t *testing.T) {
	p := plainPool()
	b := scheduled("0 9 * * *", time.Hour) // 09:00–10:00 UTC
	b.Reasons = []v1alpha1.DisruptionReason{"Expired"}
	p.Spec.Disruption.Budgets = []v1alpha1.Budget{b}
	s := newExpired(t, p, testobj.Node("n1").Obj())
	s.now = at("2026-03-10T09:59:56Z")
	var nc v1alpha1.NodeClaim
	if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(s.nc), &nc); err != nil {
		t.Fatal(err)
	}
	res, err := settle(s.c, context.Background(), &nc)
	if err != nil {
		t.Fatal(err)
	}
	if s.disrupted(t) {
		t.Fatal("disrupted within the window of a budget of zero")
	}
	if res.RequeueAfter != 4*time.Second {
		t.Errorf("held by a window closing in 4s, asked again after %s; want 4s", res.RequeueAfter)
	}
	s.now = at("2026-03-10T10:00:00Z")
	s.reconcile(t)
	if !s.disrupted(t) {
		t.Error("not disrupted once the window closed")
	}
}
