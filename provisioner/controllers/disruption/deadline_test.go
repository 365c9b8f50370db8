package disruption

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestAFailedDisruptingWriteLeavesNoDrainDeadline: repair writes the drain
// deadline, then marks the claim Disrupting. When that second write
// fails, the command is undone and the deadline goes with it: a later
// ordinary drain (drift, expiry, a user's delete) must not inherit it and
// delete every pod past its PDBs. It fails while the deadline stays.
func TestAFailedDisruptingWriteLeavesNoDrainDeadline(t *testing.T) {
	ctx := context.Background()
	f := &consolidationFixture{}
	f.node("n1")
	denied := apierrors.NewForbidden(v1alpha1.SchemeGroupVersion.WithResource("nodeclaims").GroupResource(), "p-n1", errors.New("injected"))
	kube := interceptor.NewClient(testobj.Client(append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...), interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if nc, ok := obj.(*v1alpha1.NodeClaim); ok && nc.Status.Phase == v1alpha1.NodeClaimDisrupting {
			return denied
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}})
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, time.Now)
	cmd := &Command{Reason: Unhealthy, Why: "unhealthy: test", Budgeted: true, DrainWithoutReplacement: true,
		Targets: []Target{{Claim: getClaim(ctx, t, kube, "p-n1"), Pool: replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty)}}}
	if _, err := e.Run(ctx, cmd); !errors.Is(err, denied) {
		t.Fatalf("Run = %v, want the refused Disrupting write", err)
	}
	nc := getClaim(ctx, t, kube, "p-n1")
	if nc == nil || !nc.DeletionTimestamp.IsZero() || nc.Status.Phase == v1alpha1.NodeClaimDisrupting {
		t.Fatalf("the claim went though its Disrupting write failed: %+v", nc)
	}
	if by := nc.Annotations[v1alpha1.AnnotationDrainDeadline]; by != "" {
		t.Errorf("the claim kept drain deadline %s after the repair was undone", by)
	}
	if nodeTainted(ctx, t, kube, "n1") {
		t.Error("the node kept its taint after the repair was undone")
	}
}

// TestAStaleDrainDeadlineIsRemovedBeforeAnyDecision: a claim in no
// disruption that carries a drain deadline (left by a process that
// stopped between repair's two writes) loses it on its next reconcile,
// before any method decides; a claim being removed keeps its own.
func TestAStaleDrainDeadlineIsRemovedBeforeAnyDecision(t *testing.T) {
	ctx := context.Background()
	stale := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	f := &consolidationFixture{}
	f.node("n1")
	f.node("n2")
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: stale}
			if nc.Name == "p-n2" {
				nc.Status.Phase = v1alpha1.NodeClaimDisrupting
				nc.Finalizers = []string{v1alpha1.FinalizerTermination}
				nc.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			}
		}
	}
	kube := testobj.Client(append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, time.Now)
	c := New(e, &changesMind{})
	for _, name := range []string{"p-n1", "p-n2"} {
		if _, err := settle(c, ctx, getClaim(ctx, t, kube, name)); err != nil {
			t.Fatal(err)
		}
	}
	if by := getClaim(ctx, t, kube, "p-n1").Annotations[v1alpha1.AnnotationDrainDeadline]; by != "" {
		t.Errorf("a claim in no disruption kept drain deadline %s", by)
	}
	if by := getClaim(ctx, t, kube, "p-n2").Annotations[v1alpha1.AnnotationDrainDeadline]; by != stale {
		t.Errorf("a claim being removed lost its drain deadline (now %q)", by)
	}
	// Removed only while it is the value read: another command's is not
	// touched.
	nc := getClaim(ctx, t, kube, "p-n1")
	nc.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: "2026-01-01T00:00:00Z"}
	if err := kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	read := nc.DeepCopy()
	read.Annotations[v1alpha1.AnnotationDrainDeadline] = stale
	if err := e.clearDrainDeadline(ctx, read); err != nil {
		t.Fatalf("clearing a deadline that changed meanwhile: %v, want nothing done", err)
	}
	if by := getClaim(ctx, t, kube, "p-n1").Annotations[v1alpha1.AnnotationDrainDeadline]; by != "2026-01-01T00:00:00Z" {
		t.Errorf("a drain deadline written since was removed (now %q)", by)
	}
}

// TestGivingUpAReplacementDoesNotEraseAnInterruption: a drifted claim
// waits for its replacement, which could not be launched; meanwhile an
// interruption made the wait its own (Interruption.annotate: reason
// Interrupted, a drain start). Giving the drift up, decided on the claim as
// read before, must not erase the interruption: its queue message is
// acknowledged, and the spot node would be reclaimed undrained. It
// fails while the give-up deletes the annotations it did not read.
func TestGivingUpAReplacementDoesNotEraseAnInterruption(t *testing.T) {
	ctx := context.Background()
	f := &consolidationFixture{}
	f.node("n1")
	now := time.Now().Truncate(time.Second)
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Annotations = map[string]string{
				v1alpha1.AnnotationReplacement:          "p-gone1",
				v1alpha1.AnnotationReplacementRequested: now.Add(-time.Minute).UTC().Format(time.RFC3339),
				v1alpha1.AnnotationDisruption:           "Drifted: NodePool p template changed",
			}
		}
	}
	kube := testobj.Client(append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	e := NewExecutor(kube, kube, kubefake.NewClientset(), nil, func() time.Time { return now })
	read := getClaim(ctx, t, kube, "p-n1") // what the give-up decides on
	interrupted := read.DeepCopy()
	drainStart := now.Add(90 * time.Second).UTC().Format(time.RFC3339)
	interrupted.Annotations[v1alpha1.AnnotationDisruption] = "Interrupted: spot interruption"
	interrupted.Annotations[v1alpha1.AnnotationDrainStart] = drainStart
	if err := kube.Update(ctx, interrupted); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Continue(ctx, read); err != nil {
		t.Fatal(err)
	}
	got := getClaim(ctx, t, kube, "p-n1")
	if got.Annotations[v1alpha1.AnnotationDisruption] != "Interrupted: spot interruption" || got.Annotations[v1alpha1.AnnotationDrainStart] != drainStart || got.Annotations[v1alpha1.AnnotationReplacement] != "p-gone1" {
		t.Errorf("the interruption was erased by a drift's give-up: annotations %v", got.Annotations)
	}
	// Read again, it is the interruption's: drained without its
	// replacement, as an interruption is.
	if _, _, err := e.Continue(ctx, got); err != nil {
		t.Fatal(err)
	}
	if nc := getClaim(ctx, t, kube, "p-n1"); nc != nil && nc.Status.Phase != v1alpha1.NodeClaimDisrupting {
		t.Errorf("the interrupted claim was not removed once read again: phase %s", nc.Status.Phase)
	}
}
