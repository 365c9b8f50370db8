package disruption

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// interruptionSetup: spot nodes n1 and n2 (instances i-n1, i-n2), each
// with a pod no other node can take, a cheaper spot type to replace them
// with, and the handler of an interruption queue.
type interruptionSetup struct {
	kube        client.Client
	rec         *events.FakeRecorder
	c           *Controller
	in          *Interruption
	unavailable *cloudprovider.UnavailableOfferings
	now         time.Time
}

func newInterruptionSetup(ctx context.Context, t *testing.T) *interruptionSetup {
	t.Helper()
	objs := replacementFixture("spot", cpuType("c7.large", 2, "spot", 0.05))
	for _, o := range objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Status.ProviderID = "aws:///zone-a/i-" + nc.Status.NodeName
			nc.Finalizers = []string{v1alpha1.FinalizerTermination}
		}
	}
	s := &interruptionSetup{rec: events.NewFakeRecorder(100), now: time.Now(), unavailable: cloudprovider.NewUnavailableOfferings(time.Hour)}
	s.kube = testobj.Client(append(objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	clock := func() time.Time { return s.now }
	s.c = New(NewExecutor(s.kube, s.kube, kubefake.NewClientset(), s.rec, clock))
	s.c.Executor().SetReplacer(NewReplacer(s.kube, s.kube, newScheduler(ctx, t), limits.NewLedger(s.kube, cloudfake.New())))
	s.in = NewInterruption(s.c.Executor(), s.kube, s.kube, nil, s.unavailable, clock)
	return s
}

func (s *interruptionSetup) claim(ctx context.Context, t *testing.T, name string) *v1alpha1.NodeClaim {
	t.Helper()
	var nc v1alpha1.NodeClaim
	if err := s.kube.Get(ctx, client.ObjectKey{Name: name}, &nc); err != nil {
		t.Fatal(err)
	}
	return &nc
}

// gone reports whether the claim is deleted or being deleted.
func (s *interruptionSetup) gone(ctx context.Context, name string) bool {
	var nc v1alpha1.NodeClaim
	err := s.kube.Get(ctx, client.ObjectKey{Name: name}, &nc)
	return err != nil || !nc.DeletionTimestamp.IsZero()
}

// TestSpotInterruptionReplacesThenDrainsByHalfTheNotice: a spot
// interruption warning sent 30s ago (2 minutes' notice) marks the
// offering unavailable, launches a replacement at once and leaves the
// node running while it comes up; halfway through the notice the node is
// drained though the replacement is not ready.
func TestSpotInterruptionReplacesThenDrainsByHalfTheNotice(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newInterruptionSetup(ctx, t)
	sent := s.now.Add(-30 * time.Second)
	msg := cloudprovider.Interruption{Kind: cloudprovider.SpotInterruption, InstanceIDs: []string{"i-n1"}, Sent: sent, Deadline: sent.Add(2 * time.Minute),
		Detail: "EC2 spot interruption warning for instance i-n1 (terminate)"}
	action, err := s.in.Handle(ctx, msg)
	if err != nil || action != "replacing" {
		t.Fatalf("Handle = %q, %v; want replacing", action, err)
	}
	if ok, _ := s.unavailable.Unavailable("c7.xlarge", "zone-a", "spot"); !ok {
		t.Error("the interrupted offering (c7.xlarge spot in zone-a) is not marked unavailable")
	}
	reps := replacementsOf(ctx, t, s.kube, "p-n1")
	if len(reps) != 1 {
		t.Fatalf("%d replacements of p-n1, want 1; events:\n%s", len(reps), drain(s.rec))
	}
	old := s.claim(ctx, t, "p-n1")
	wantBy := sent.Add(time.Minute).UTC().Format(time.RFC3339)
	if got := old.Annotations[v1alpha1.AnnotationDrainStart]; got != wantBy {
		t.Errorf("drain-start %q, want %q (halfway through the notice)", got, wantBy)
	}
	if evs := drain(s.rec); !strings.Contains(evs, v1alpha1.ReasonInterrupted) || !strings.Contains(evs, "i-n1") {
		t.Errorf("no Interrupted Event naming the instance; events:\n%s", evs)
	}
	if _, err := settle(s.c, ctx, old); err != nil {
		t.Fatal(err)
	}
	if s.gone(ctx, "p-n1") {
		t.Fatal("p-n1 drained at once though its replacement has 30s to come up")
	}
	s.now = s.now.Add(31 * time.Second)
	if _, err := settle(s.c, ctx, s.claim(ctx, t, "p-n1")); err != nil {
		t.Fatal(err)
	}
	if !s.gone(ctx, "p-n1") {
		t.Fatalf("p-n1 not drained halfway through its notice; events:\n%s", drain(s.rec))
	}
	if evs := drain(s.rec); !strings.Contains(evs, "before replacement "+reps[0].Name+" is ready") {
		t.Errorf("the Disrupting Event does not say the node went before its replacement was ready; events:\n%s", evs)
	}
	if s.gone(ctx, "p-n2") {
		t.Error("p-n2, not interrupted, is gone")
	}
}

// TestInterruptionReadsTheClaimLive: the cache's copy of the claim is
// older than the API server's (its status was just written, as when the
// node's pods were bound): the interruption is handled at once, on the
// API server's copy, not refused for a conflict and left for the
// message's redelivery half a notice later.
func TestInterruptionReadsTheClaimLive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newInterruptionSetup(ctx, t)
	var objs []client.Object
	for _, o := range replacementFixture("spot", cpuType("c7.large", 2, "spot", 0.05)) {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Status.ProviderID = "aws:///zone-a/i-" + nc.Status.NodeName
		}
		objs = append(objs, o)
	}
	stale := testobj.Client(append(objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	nc := s.claim(ctx, t, "p-n1")
	nc.Spec.NominatedPods = 0
	nc.Labels["bound"] = "yes"
	if err := s.kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	s.in.cache = stale
	action, err := s.in.Handle(ctx, cloudprovider.Interruption{Kind: cloudprovider.SpotInterruption, InstanceIDs: []string{"i-n1"}, Sent: s.now, Deadline: s.now.Add(2 * time.Minute), Detail: "spot"})
	if err != nil || action != "replacing" {
		t.Fatalf("Handle on a stale cache = %q, %v; want replacing", action, err)
	}
	if reps := replacementsOf(ctx, t, s.kube, "p-n1"); len(reps) != 1 {
		t.Errorf("%d replacements of p-n1, want 1", len(reps))
	}
	if got := s.claim(ctx, t, "p-n1"); got.Labels["bound"] != "yes" || got.Annotations[v1alpha1.AnnotationDrainStart] == "" {
		t.Errorf("the live claim's change was lost or the interruption not recorded: labels %v, annotations %v", got.Labels, got.Annotations)
	}
}

// TestInterruptionMessages: a replacement that could not be launched does
// not call an interruption off; a terminated instance is drained at once,
// with no replacement and nothing marked; a rebalance recommendation only
// records an Event; a message for no claim's instance is let go.
func TestInterruptionMessages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("replacement gone", func(t *testing.T) {
		s := newInterruptionSetup(ctx, t)
		if _, err := s.in.Handle(ctx, cloudprovider.Interruption{Kind: cloudprovider.SpotInterruption, InstanceIDs: []string{"i-n1"}, Sent: s.now, Deadline: s.now.Add(2 * time.Minute), Detail: "spot"}); err != nil {
			t.Fatal(err)
		}
		reps := replacementsOf(ctx, t, s.kube, "p-n1")
		if len(reps) != 1 {
			t.Fatalf("%d replacements, want 1", len(reps))
		}
		if err := s.kube.Delete(ctx, &reps[0]); err != nil {
			t.Fatal(err)
		}
		s.now = s.now.Add(DefaultTimers.ReplacementGrace)
		if _, err := settle(s.c, ctx, s.claim(ctx, t, "p-n1")); err != nil {
			t.Fatal(err)
		}
		if !s.gone(ctx, "p-n1") {
			t.Fatalf("interruption called off when its replacement could not be launched; events:\n%s", drain(s.rec))
		}
	})

	t.Run("instance terminated", func(t *testing.T) {
		s := newInterruptionSetup(ctx, t)
		action, err := s.in.Handle(ctx, cloudprovider.Interruption{Kind: cloudprovider.InstanceStopping, InstanceIDs: []string{"i-n2"}, Sent: s.now, Detail: "EC2 instance i-n2 is terminated"})
		if err != nil || action != "disrupted" {
			t.Fatalf("Handle = %q, %v; want disrupted", action, err)
		}
		if !s.gone(ctx, "p-n2") {
			t.Error("p-n2, whose instance is terminated, is not drained at once")
		}
		if reps := replacementsOf(ctx, t, s.kube, "p-n2"); len(reps) != 0 {
			t.Errorf("a replacement was launched for a node already gone: %d", len(reps))
		}
		if ok, _ := s.unavailable.Unavailable("c7.xlarge", "zone-a", "spot"); ok {
			t.Error("a terminated instance marked its offering unavailable; only spot interruptions say capacity is short")
		}
	})

	t.Run("rebalance recommendation", func(t *testing.T) {
		s := newInterruptionSetup(ctx, t)
		action, err := s.in.Handle(ctx, cloudprovider.Interruption{Kind: cloudprovider.RebalanceRecommendation, InstanceIDs: []string{"i-n1"}, Sent: s.now, Detail: "rebalance"})
		if err != nil || action != "recorded" {
			t.Fatalf("Handle = %q, %v; want recorded", action, err)
		}
		if s.gone(ctx, "p-n1") || len(replacementsOf(ctx, t, s.kube, "p-n1")) != 0 || s.claim(ctx, t, "p-n1").Annotations[v1alpha1.AnnotationReplacement] != "" {
			t.Error("a rebalance recommendation disrupted the node")
		}
		if evs := drain(s.rec); !strings.Contains(evs, v1alpha1.ReasonRebalanceRecommended) {
			t.Errorf("no RebalanceRecommended Event; events:\n%s", evs)
		}
	})

	t.Run("unknown instance", func(t *testing.T) {
		s := newInterruptionSetup(ctx, t)
		action, err := s.in.Handle(ctx, cloudprovider.Interruption{Kind: cloudprovider.SpotInterruption, InstanceIDs: []string{"i-n10"}, Sent: s.now, Detail: "spot"})
		if err != nil || action != "unknownInstance" {
			t.Fatalf("Handle = %q, %v; want unknownInstance (i-n10 is not i-n1)", action, err)
		}
		if s.gone(ctx, "p-n1") || s.gone(ctx, "p-n2") {
			t.Error("a message for another instance disrupted a node")
		}
	})
}

// fakeQueue hands out its messages once, then nothing, and records Done.
type fakeQueue struct {
	mu      sync.Mutex
	msgs    []cloudprovider.Interruption
	fail    int // Receive errors before the messages
	done    []string
	drained chan struct{}
}

func (q *fakeQueue) Receive(ctx context.Context) ([]cloudprovider.Interruption, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail > 0 {
		q.fail--
		return nil, errors.New("throttled")
	}
	if len(q.msgs) > 0 {
		m := q.msgs
		q.msgs = nil
		return m, nil
	}
	select {
	case <-q.drained:
	default:
		close(q.drained)
	}
	q.mu.Unlock()
	<-ctx.Done()
	q.mu.Lock()
	return nil, ctx.Err()
}

func (q *fakeQueue) Done(_ context.Context, m cloudprovider.Interruption) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done = append(q.done, m.Handle)
	return nil
}

// TestInterruptionLoopRemovesWhatItHandled: after a queue error (retried),
// each message handled is removed from the queue.
func TestInterruptionLoopRemovesWhatItHandled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newInterruptionSetup(ctx, t)
	q := &fakeQueue{fail: 1, drained: make(chan struct{}), msgs: []cloudprovider.Interruption{
		{Kind: cloudprovider.UnknownMessage, Handle: "h1", Detail: "not JSON"},
		{Kind: cloudprovider.InstanceStopping, InstanceIDs: []string{"i-n2"}, Handle: "h2", Sent: s.now, Detail: "stopped"},
	}}
	s.in.queue = q
	errc := make(chan error, 1)
	go func() { errc <- s.in.Start(ctx) }()
	select {
	case <-q.drained:
	case <-time.After(time.Minute):
		t.Fatal("the loop never came back for more messages")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if strings.Join(q.done, ",") != "h1,h2" {
		t.Errorf("messages removed: %v, want h1,h2", q.done)
	}
	if !s.gone(context.Background(), "p-n2") {
		t.Error("the stopped instance's claim was not disrupted")
	}
}

// TestDrainStartWrittenByAnOlderProvisionerIsRead: a claim interrupted
// before the upgrade carries its drain start under the old key; it is
// read, the new key first when both are there.
func TestDrainStartWrittenByAnOlderProvisionerIsRead(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        time.Time
		ok          bool
	}{
		{"the new key", map[string]string{v1alpha1.AnnotationDrainStart: at.Format(time.RFC3339)}, at, true},
		{"the old key", map[string]string{v1alpha1.AnnotationDrainStartBefore: at.Format(time.RFC3339)}, at, true},
		{"both, the new first", map[string]string{v1alpha1.AnnotationDrainStart: at.Format(time.RFC3339),
			v1alpha1.AnnotationDrainStartBefore: at.Add(time.Hour).Format(time.RFC3339)}, at, true},
		{"neither", nil, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := &v1alpha1.NodeClaim{}
			nc.Annotations = tc.annotations
			got, ok := drainStart(nc)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("drainStart: %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
