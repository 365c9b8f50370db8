package disruption

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// expiredFixture: the replacement fixture (n1 and n2, each a pod that fits
// nowhere else), both claims expired.
func expiredFixture(cheaper ...v1alpha1.InstanceType) []client.Object {
	objs := replacementFixture("on-demand", cheaper...)
	for _, o := range objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Spec.ExpireAfter = "1h"
			nc.CreationTimestamp = metav1.NewTime(time.Now().Add(-2 * time.Hour))
		}
	}
	return objs
}

func getClaim(ctx context.Context, t *testing.T, kube client.Client, name string) *v1alpha1.NodeClaim {
	t.Helper()
	var nc v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKey{Name: name}, &nc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return &nc
}

func nodeTainted(ctx context.Context, t *testing.T, kube client.Client, name string) bool {
	t.Helper()
	var n corev1.Node
	if err := kube.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(n.Spec.Taints, isDisruptedTaint)
}

// TestAClaimMarkedDisruptingIsDeletedOnItsNextReconcile (defect 1): the
// Delete after the Disrupting write fails, every retry (the API server
// refusing for a while, 429); the claim is left Disrupting, and its next reconcile deletes
// it rather than leave it tainted, paid for and counted forever.
func TestAClaimMarkedDisruptingIsDeletedOnItsNextReconcile(t *testing.T) {
	ctx := context.Background()
	defer func(b wait.Backoff) { writeBackoff = b }(writeBackoff)
	writeBackoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}
	var failing, failed atomic.Bool
	failing.Store(true)
	base := testobj.Client(append(expiredFixture(), replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	kube := interceptor.NewClient(base, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			if _, ok := o.(*v1alpha1.NodeClaim); ok && failing.Load() {
				failed.Store(true)
				return apierrors.NewTooManyRequests("injected: the API server is busy", 1)
			}
			return c.Delete(ctx, o, opts...)
		}})
	now := time.Now()
	clock := func() time.Time { return now }
	c := New(NewExecutor(kube, kube, kubefake.NewClientset(), events.NewFakeRecorder(100), clock), NewExpiration(clock))
	// No replacer: the expired node is drained at once. The delete
	// fails: the reconcile says so.
	if _, err := settle(c, ctx, getClaim(ctx, t, kube, "p-n1")); err == nil {
		t.Error("a reconcile whose delete failed reported no error")
	}
	nc := getClaim(ctx, t, kube, "p-n1")
	if nc == nil || nc.Status.Phase != v1alpha1.NodeClaimDisrupting || !failed.Load() {
		t.Fatalf("want p-n1 marked Disrupting and its Delete failed, every try; got %+v, failed %v", nc, failed.Load())
	}
	failing.Store(false)
	if _, err := settle(c, ctx, nc); err != nil {
		t.Fatal(err)
	}
	if nc := getClaim(ctx, t, kube, "p-n1"); nc != nil {
		t.Fatalf("p-n1 is still there in phase %s after its next reconcile: a claim marked Disrupting must be deleted", nc.Status.Phase)
	}
}

// TestSweepLiftsTaintsNoCommandHolds (defect 2): a taint left by a
// command that died (a crash, a lost lease) is lifted at start; a node
// whose claim is Disrupting or waits for its replacement keeps it, and
// so does a node no claim owns (the garbage collector's).
func TestSweepLiftsTaintsNoCommandHolds(t *testing.T) {
	ctx := context.Background()
	f := &consolidationFixture{}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.node(n)
	}
	stray := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}
	objs := append(f.objs, stray)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			o.Spec.Taints = []corev1.Taint{disruptedTaint}
		case *v1alpha1.NodeClaim:
			switch o.Name {
			case "p-n2":
				o.Status.Phase = v1alpha1.NodeClaimDisrupting
			case "p-n3":
				o.Annotations = map[string]string{v1alpha1.AnnotationReplacement: "p-new"}
			}
		}
	}
	kube := testobj.Client(objs...)
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, time.Now)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]bool{"n1": false, "n2": true, "n3": true, "stray": true} {
		if got := nodeTainted(ctx, t, kube, node); got != want {
			t.Errorf("node %s tainted %v after the sweep, want %v", node, got, want)
		}
	}
}

// TestACalledOffCommandLiftsItsTaint (defect 2): a command called off
// lifts its taint though the cache never showed it (read live), and
// though its context ended with the process's lease.
func TestACalledOffCommandLiftsItsTaint(t *testing.T) {
	for _, tc := range []string{"the cache never saw the taint", "the lease is lost during the pause"} {
		t.Run(tc, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := &consolidationFixture{}
			f.node("n1")
			// The API server, through a client that, like a real one,
			// does nothing for a context that is over.
			live := interceptor.NewClient(testobj.Client(append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					return errors.Join(ctx.Err(), c.Get(ctx, key, o, opts...))
				},
				Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					return c.Update(ctx, o, opts...)
				}})
			var before corev1.Node
			if err := live.Get(ctx, client.ObjectKey{Name: "n1"}, &before); err != nil {
				t.Fatal(err)
			}
			// The cache: writes go through, reads of the node are as
			// they were before the command.
			cache := interceptor.NewClient(live, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					if n, ok := o.(*corev1.Node); ok {
						before.DeepCopyInto(n)
						return nil
					}
					return c.Get(ctx, key, o, opts...)
				}})
			e := NewExecutor(cache, live, kubefake.NewClientset(), nil, time.Now)
			cmd := &Command{Reason: v1alpha1.DisruptionReasonEmpty, Why: "test", Budgeted: true,
				Targets: []Target{{Claim: getClaim(ctx, t, live, "p-n1"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}}}
			if tc == "the cache never saw the taint" {
				cmd.Check = func(ctx context.Context) (string, error) {
					if !nodeTainted(ctx, t, live, "n1") {
						t.Error("not tainted before the last look")
					}
					return "a pod was bound", nil
				}
			} else {
				cmd.Pause = time.Hour
				go func() {
					for !nodeTainted(ctx, t, live, "n1") {
						time.Sleep(time.Millisecond)
					}
					cancel()
				}()
			}
			_, err := e.Run(ctx, cmd)
			if tc == "the cache never saw the taint" && err != nil {
				t.Fatal(err)
			}
			if nodeTainted(context.Background(), t, live, "n1") {
				t.Error("the node is still tainted after its command was called off")
			}
			if nc := getClaim(context.Background(), t, live, "p-n1"); nc == nil || nc.Status.Phase != v1alpha1.NodeClaimInitialized {
				t.Errorf("the claim of a called-off command changed: %+v", nc)
			}
			if e.budgets.pending["uid-n1"] != "" {
				t.Error("the called-off command's budget was not released")
			}
		})
	}
}

// TestOneClaimIsInOneCommandAtATime (defect 5): while consolidation holds
// a claim in its pause, expiration chooses it too. The second is not
// taken; when the first is called off, its undoing (the taint lifted, the
// budget released) does not undo anything of the second's, and the
// second then runs to the end.
func TestOneClaimIsInOneCommandAtATime(t *testing.T) {
	ctx := context.Background()
	kube := testobj.Client(append(expiredFixture(), replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	rec := events.NewFakeRecorder(100)
	c := New(NewExecutor(kube, kube, kubefake.NewClientset(), rec, time.Now), NewExpiration(time.Now))
	e := c.Executor()
	inPause, release := make(chan struct{}), make(chan struct{})
	first := &Command{Reason: Underutilized, Why: "consolidating", Budgeted: true, Voluntary: true,
		Targets: []Target{{Claim: getClaim(ctx, t, kube, "p-n1"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}},
		Check: func(context.Context) (string, error) {
			close(inPause)
			<-release
			return "a pod was bound meanwhile", nil
		}}
	done := make(chan error)
	go func() {
		_, err := e.Run(ctx, first)
		done <- err
	}()
	<-inPause
	if !e.Busy("uid-n1") {
		t.Fatal("the claim of a command in its pause is not Busy")
	}
	res, err := settle(c, ctx, getClaim(ctx, t, kube, "p-n1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("a claim in another command is not asked about again (%+v)", res)
	}
	if ok, _ := e.Run(ctx, &Command{Reason: Unhealthy, Targets: first.Targets}); ok {
		t.Error("a second command on a claim in a command was taken")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if nodeTainted(ctx, t, kube, "n1") {
		t.Error("the called-off command left its taint")
	}
	if _, err := settle(c, ctx, getClaim(ctx, t, kube, "p-n1")); err != nil {
		t.Fatal(err)
	}
	if nc := getClaim(ctx, t, kube, "p-n1"); nc != nil {
		t.Errorf("the expired claim was not disrupted once the other command was over: phase %s", nc.Status.Phase)
	}
}

// TestReplacementMustFitUnderTheLimits (defect 3): pool p's limit is the
// 8 cpus of its two nodes, so no replacement can run beside either. A
// consolidation replacement is no candidate; a drifted node waits, with
// an Event naming the limits; an expired node is drained anyway, with an
// Event.
func TestReplacementMustFitUnderTheLimits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	withLimit := func(p *v1alpha1.NodePool) *v1alpha1.NodePool {
		p.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("8")}
		return p
	}
	capacity := func(objs []client.Object) []client.Object {
		for _, o := range objs {
			if nc, ok := o.(*v1alpha1.NodeClaim); ok {
				// Launched, as an Initialized claim is: the limits
				// ledger counts a claim's capacity by its instance.
				nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
				nc.Status.ProviderID = "fake:///zone-a/" + nc.Name
			}
		}
		return objs
	}
	cheaper := cpuType("c7.large", 2, "on-demand", 0.085)

	t.Run("consolidation", func(t *testing.T) {
		kube := testobj.Client(append(capacity(replacementFixture("on-demand", cheaper)), withLimit(replacementPool(v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized)))...)
		sched := newScheduler(ctx, t)
		rec := events.NewFakeRecorder(100)
		now := time.Now()
		clock := func() time.Time { return now }
		e := NewExecutor(kube, kube, kubefake.NewClientset(), rec, clock)
		e.SetReplacer(NewReplacer(kube, kube, sched, limits.NewLedger(kube, cloudfake.New())))
		k := NewConsolidation(e, kube, kube, sched, clock)
		k.Pause = 0
		for range 2 {
			if err := k.Round(ctx); err != nil {
				t.Fatal(err)
			}
			now = now.Add(31 * time.Second)
		}
		if reps := replacementsOf(ctx, t, kube, "p-n1"); len(reps) > 0 {
			t.Errorf("a replacement the limits refuse was chosen: %s", reps[0].Name)
		}
		if nodeTainted(ctx, t, kube, "n1") || nodeTainted(ctx, t, kube, "n2") {
			t.Error("a node was tainted for a replacement the limits refuse")
		}
		if evs := drain(rec); !strings.Contains(evs, "limits") {
			t.Errorf("no Event says the limits keep the node; events:\n%s", evs)
		}
	})
	for _, reason := range []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted, v1alpha1.DisruptionReasonExpired} {
		t.Run(string(reason), func(t *testing.T) {
			kube := testobj.Client(append(capacity(expiredFixture(cheaper)), withLimit(replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)))...)
			rec := events.NewFakeRecorder(100)
			e := NewExecutor(kube, kube, kubefake.NewClientset(), rec, time.Now)
			e.SetReplacer(NewReplacer(kube, kube, newScheduler(ctx, t), limits.NewLedger(kube, cloudfake.New())))
			var m Method = NewExpiration(time.Now)
			if reason == v1alpha1.DisruptionReasonDrifted {
				m = alwaysDrifted{}
			}
			c := New(e, m)
			if _, err := settle(c, ctx, getClaim(ctx, t, kube, "p-n1")); err != nil {
				t.Fatal(err)
			}
			reps := replacementsOf(ctx, t, kube, "p-n1")
			nc := getClaim(ctx, t, kube, "p-n1")
			evs := drain(rec)
			if len(reps) > 0 {
				t.Fatalf("a replacement the limits refuse was launched: %s", reps[0].Name)
			}
			if !strings.Contains(evs, "limits") {
				t.Errorf("no Event names the limits; events:\n%s", evs)
			}
			if reason == v1alpha1.DisruptionReasonDrifted {
				if nc == nil || nc.Status.Phase != v1alpha1.NodeClaimInitialized || nodeTainted(ctx, t, kube, "n1") {
					t.Errorf("a drifted node with no room for its replacement did not wait, untainted: %+v", nc)
				}
				return
			}
			if nc != nil {
				t.Errorf("an expired node with no room for its replacement was not drained: phase %s", nc.Status.Phase)
			}
		})
	}
}

// alwaysDrifted is a drift method that finds every claim drifted.
type alwaysDrifted struct{}

func (alwaysDrifted) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonDrifted }
func (alwaysDrifted) Candidate(context.Context, *v1alpha1.NodeClaim, *v1alpha1.NodePool) (Verdict, error) {
	return Verdict{Disrupt: true, Why: "drifted: test"}, nil
}
func (alwaysDrifted) StillCandidate(context.Context, *v1alpha1.NodeClaim) (bool, error) {
	return true, nil
}

// TestRepairSetsTheDrainDeadlineToNow (defect 4): a repaired claim's
// drain ends at the moment repair decided, so that its pods are deleted
// rather than evicted past PDBs that count them healthy.
func TestRepairSetsTheDrainDeadlineToNow(t *testing.T) {
	ctx := context.Background()
	f := &consolidationFixture{}
	f.node("n1")
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Finalizers = []string{v1alpha1.FinalizerTermination}
		}
	}
	kube := testobj.Client(append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	now := time.Now().Truncate(time.Second)
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, func() time.Time { return now })
	cmd := &Command{Reason: Unhealthy, Why: "unhealthy: test", Budgeted: true, DrainWithoutReplacement: true,
		Targets: []Target{{Claim: getClaim(ctx, t, kube, "p-n1"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}}}
	if ok, err := e.Run(ctx, cmd); !ok || err != nil {
		t.Fatalf("repair not run: %v %v", ok, err)
	}
	nc := getClaim(ctx, t, kube, "p-n1")
	if nc == nil || nc.DeletionTimestamp.IsZero() {
		t.Fatalf("the repaired claim is not being deleted: %+v", nc)
	}
	if got := nc.Annotations[v1alpha1.AnnotationDrainDeadline]; got != now.UTC().Format(time.RFC3339) {
		t.Errorf("drain deadline %q, want now (%s)", got, now.UTC().Format(time.RFC3339))
	}
}

// TestTransientErrorsAreTheOnesWorthRetrying: the API server busy,
// failing, timing out or not answering at all is tried again; its answer
// about the object itself is not.
func TestTransientErrorsAreTheOnesWorthRetrying(t *testing.T) {
	gr := v1alpha1.SchemeGroupVersion.WithResource("nodeclaims").GroupResource()
	for err, want := range map[error]bool{
		apierrors.NewConflict(gr, "c", errors.New("changed")):                                         true,
		apierrors.NewTooManyRequests("busy", 1):                                                       true,
		apierrors.NewInternalError(errors.New("webhook timed out")):                                   true,
		apierrors.NewServerTimeout(gr, "update", 1):                                                   true,
		errors.New("stream error: stream ID 7; INTERNAL_ERROR"):                                       true,
		apierrors.NewNotFound(gr, "c"):                                                                false,
		apierrors.NewForbidden(gr, "c", errors.New("denied")):                                         false,
		apierrors.NewInvalid(v1alpha1.SchemeGroupVersion.WithKind("NodeClaim").GroupKind(), "c", nil): false,
		context.Canceled: false,
	} {
		if got := transient(err); got != want {
			t.Errorf("transient(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestSubmitRunsInTheBackgroundOnceStarted: once the executor leads
// (Start), Submit reserves and returns at once, the command running on;
// once its context is over, Submit takes nothing more.
func TestSubmitRunsInTheBackgroundOnceStarted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube := testobj.Client(append(expiredFixture(), replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, time.Now)
	stopped := make(chan struct{})
	go func() {
		_ = e.Start(ctx)
		close(stopped)
	}()
	for {
		e.mu.Lock()
		started := e.started
		e.mu.Unlock()
		if started {
			break
		}
		time.Sleep(time.Millisecond)
	}
	release := make(chan struct{})
	cmd := &Command{Reason: v1alpha1.DisruptionReasonExpired, Why: "expired: test", Budgeted: true,
		Targets: []Target{{Claim: getClaim(ctx, t, kube, "p-n1"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}},
		Check:   func(context.Context) (string, error) { <-release; return "", nil }}
	if res, err := e.Submit(ctx, cmd); err != nil || !res.IsZero() {
		t.Fatalf("Submit = %+v, %v; want it taken", res, err)
	}
	if !e.Busy("uid-n1") {
		t.Error("the submitted command's claim is not Busy while it runs")
	}
	close(release)
	e.Wait()
	if nc := getClaim(ctx, t, kube, "p-n1"); nc != nil {
		t.Errorf("the submitted command did not remove its claim: %+v", nc.Status.Phase)
	}
	cancel()
	<-stopped
	second := &Command{Reason: v1alpha1.DisruptionReasonExpired, Budgeted: true,
		Targets: []Target{{Claim: getClaim(ctx, t, kube, "p-n2"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}}}
	if res, err := e.Submit(context.Background(), second); err != nil || res.RequeueAfter <= 0 || e.Busy("uid-n2") {
		t.Errorf("Submit after the executor stopped = %+v, %v; want it refused, to be asked again", res, err)
	}
}
