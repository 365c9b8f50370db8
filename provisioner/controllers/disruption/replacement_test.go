package disruption

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// cpuType is an instance type of n cpus (4 GiB each) with one offering
// in zone-a.
func cpuType(name string, cpus int, capacityType string, price float64) v1alpha1.InstanceType {
	return testobj.InstanceType(name).Capacity("cpu", fmt.Sprint(cpus), "memory", fmt.Sprintf("%dGi", 4*cpus), "pods", "110").Arch("amd64").
		Offering("zone-a", v1alpha1.CapacityType(capacityType), fmt.Sprint(price)).Obj()
}

// replacementFixture: two 4-cpu nodes n1 and n2 of capacityType in pool p,
// each running one 1-cpu pod that refuses to share a node with the
// other (required anti-affinity), so neither pod fits elsewhere; the
// catalog lists the node's type at $0.17/h and the cheaper types given.
func replacementFixture(capacityType string, cheaper ...v1alpha1.InstanceType) []client.Object {
	f := &consolidationFixture{}
	f.node("n1")
	f.node("n2")
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Status.CapacityType = capacityType
			nc.Labels = map[string]string{v1alpha1.LabelNodePool: "p"}
		}
	}
	types := append([]v1alpha1.InstanceType{cpuType("c7.xlarge", 4, capacityType, 0.17)}, cheaper...)
	return append(f.objs, pod("a", "n1", antiAffinity(true)), pod("b", "n2", antiAffinity(true)), testobj.Catalog("p", types...))
}

func replacementPool(policy v1alpha1.ConsolidationPolicy) *v1alpha1.NodePool {
	return testobj.Pool("p").Class("SimulatedNodeClass", "default").ConsolidationPolicy(policy).ConsolidateAfter("30s").Budget("100%").Obj()
}

func drain(rec *events.FakeRecorder) string {
	var evs []string
	for len(rec.Events) > 0 {
		evs = append(evs, <-rec.Events)
	}
	return strings.Join(evs, "\n")
}

// replacementsOf returns the claims that replace old.
func replacementsOf(ctx context.Context, t *testing.T, kube client.Client, old string) []v1alpha1.NodeClaim {
	t.Helper()
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(claims.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Annotations[v1alpha1.AnnotationReplaces] != old })
}

func instanceTypesOf(nc *v1alpha1.NodeClaim) []string {
	for _, r := range nc.Spec.Requirements {
		if r.Key == corev1.LabelInstanceTypeStable {
			return r.Values
		}
	}
	return nil
}

// consolidateOnce runs two consolidation rounds consolidateAfter apart
// over objs, with replacement.
func consolidateOnce(ctx context.Context, t *testing.T, objs []client.Object) (client.Client, *events.FakeRecorder) {
	t.Helper()
	return consolidateOnceKeeping(ctx, t, objs, false)
}

// consolidateOnceKeeping is consolidateOnce with
// Consolidation.KeepBufferRoom set to keep.
func consolidateOnceKeeping(ctx context.Context, t *testing.T, objs []client.Object, keep bool) (client.Client, *events.FakeRecorder) {
	t.Helper()
	kube := testobj.Client(append(objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized))...)
	sched := newScheduler(ctx, t)
	rec := events.NewFakeRecorder(100)
	now := time.Now()
	clock := func() time.Time { return now }
	c := New(NewExecutor(kube, kube, kubefake.NewClientset(), rec, clock))
	c.Executor().SetReplacer(NewReplacer(kube, kube, sched, limits.NewLedger(kube, cloudfake.New())))
	k := NewConsolidation(c.Executor(), kube, kube, sched, clock)
	k.Pause, k.KeepBufferRoom = 0, keep
	for range 2 {
		if err := k.Round(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(31 * time.Second)
	}
	return kube, rec
}

// TestConsolidationReplacesANodeWithACheaperOne: a node whose pod fits on
// no other node is replaced by a cheaper node that holds it. The old
// claim names the replacement and is not deleted yet; the replacement
// carries only cheaper instance types, of the same capacity type, and the
// Event says what replaces what and what it saves.
func TestConsolidationReplacesANodeWithACheaperOne(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kube, rec := consolidateOnce(ctx, t, replacementFixture("on-demand", cpuType("c7.large", 2, "on-demand", 0.085), cpuType("c7.large", 2, "spot", 0.03)))
	evs := drain(rec)
	var old v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKey{Name: "p-n1"}, &old); err != nil {
		t.Fatalf("the old claim is gone before its replacement is up: %v\n%s", err, evs)
	}
	reps := replacementsOf(ctx, t, kube, "p-n1")
	if len(reps) != 1 {
		t.Fatalf("%d replacements of p-n1, want 1; events:\n%s", len(reps), evs)
	}
	rep := reps[0]
	if old.Annotations[v1alpha1.AnnotationReplacement] != rep.Name {
		t.Errorf("old claim names replacement %q, want %q", old.Annotations[v1alpha1.AnnotationReplacement], rep.Name)
	}
	if got := instanceTypesOf(&rep); !slices.Equal(got, []string{"c7.large"}) {
		t.Errorf("replacement may launch as %v, want only the cheaper c7.large", got)
	}
	for _, r := range rep.Spec.Requirements {
		if r.Key == v1alpha1.LabelCapacityType && !slices.Equal(r.Values, []string{"on-demand"}) {
			t.Errorf("replacement capacity types %v, want on-demand as the node it replaces", r.Values)
		}
	}
	if rep.Annotations[v1alpha1.AnnotationNodePoolHash] == "" {
		t.Error("replacement is not stamped with its pool's hash: it would look drifted")
	}
	want := "replacing c7.xlarge on-demand in zone-a ($0.1700/h) with c7.large on-demand in zone-a ($0.0850/h), saves $0.0850/h; launching nodeclaim " + rep.Name + " (1 instance type option)"
	if !strings.Contains(evs, want) {
		t.Errorf("no Event saying %q; events:\n%s", want, evs)
	}
	if n := len(replacementsOf(ctx, t, kube, "p-n2")); n != 0 {
		t.Errorf("p-n2 replaced too, in the same round: %d replacements", n)
	}
}

// TestConsolidationKeepsASpotNodeWithFewCheaperOptions: a spot node is
// replaced only by one of at least MinSpotOptions cheaper spot types.
func TestConsolidationKeepsASpotNodeWithFewCheaperOptions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var few, many []v1alpha1.InstanceType
	for i := range MinSpotOptions {
		it := cpuType(fmt.Sprintf("s%02d.large", i), 2, "spot", 0.05+float64(i)*0.001)
		many = append(many, it)
		if i < MinSpotOptions-1 {
			few = append(few, it)
		}
	}
	kube, rec := consolidateOnce(ctx, t, replacementFixture("spot", few...))
	evs := drain(rec)
	if n := len(replacementsOf(ctx, t, kube, "p-n1")); n != 0 {
		t.Errorf("spot node replaced with only %d cheaper options", len(few))
	}
	if want := fmt.Sprintf("only %d instance types cheaper than this node, fewer than %d", len(few), MinSpotOptions); !strings.Contains(evs, want) {
		t.Errorf("no Event saying %q; events:\n%s", want, evs)
	}

	kube, rec = consolidateOnce(ctx, t, replacementFixture("spot", many...))
	evs = drain(rec)
	reps := replacementsOf(ctx, t, kube, "p-n1")
	if len(reps) != 1 {
		t.Fatalf("spot node with %d cheaper options: %d replacements, want 1; events:\n%s", len(many), len(reps), evs)
	}
	if got := instanceTypesOf(&reps[0]); len(got) != MinSpotOptions {
		t.Errorf("spot replacement carries %d options, want all %d cheaper ones", len(got), MinSpotOptions)
	}
}

// TestExpiredNodeIsReplacedBeforeItIsDrained: an expired node whose pod
// fits nowhere else gets a replacement first; it is deleted only once the
// replacement is Initialized. A replacement still gone replacementGrace
// after it was named calls the disruption off and lifts the node's taint.
func TestExpiredNodeIsReplacedBeforeItIsDrained(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := replacementFixture("on-demand", cpuType("c7.large", 2, "on-demand", 0.085))
	for _, o := range objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Spec.ExpireAfter = "1h"
			nc.CreationTimestamp = metav1.NewTime(time.Now().Add(-2 * time.Hour))
			nc.Finalizers = []string{v1alpha1.FinalizerTermination}
		}
	}
	kube := testobj.Client(append(objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmpty))...)
	rec := events.NewFakeRecorder(100)
	now := time.Now()
	clock := func() time.Time { return now }
	c := New(NewExecutor(kube, kube, kubefake.NewClientset(), rec, clock), NewExpiration(clock))
	c.Executor().SetReplacer(NewReplacer(kube, kube, newScheduler(ctx, t), limits.NewLedger(kube, cloudfake.New())))
	reconcileClaim := func(name string) reconcile.Result {
		t.Helper()
		var nc v1alpha1.NodeClaim
		if err := kube.Get(ctx, client.ObjectKey{Name: name}, &nc); err != nil {
			t.Fatal(err)
		}
		res, err := settle(c, ctx, &nc)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	get := func(name string) (*v1alpha1.NodeClaim, error) {
		var nc v1alpha1.NodeClaim
		err := kube.Get(ctx, client.ObjectKey{Name: name}, &nc)
		return &nc, err
	}
	tainted := func(node string) bool {
		var n corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(n.Spec.Taints, isDisruptedTaint)
	}

	reconcileClaim("p-n1")
	reps := replacementsOf(ctx, t, kube, "p-n1")
	if len(reps) != 1 {
		t.Fatalf("%d replacements of the expired p-n1, want 1; events:\n%s", len(reps), drain(rec))
	}
	if !tainted("n1") {
		t.Error("node n1 not tainted while its replacement launches: pods could land on it")
	}
	reconcileClaim("p-n1")
	if old, err := get("p-n1"); err != nil || !old.DeletionTimestamp.IsZero() || old.Status.Phase == v1alpha1.NodeClaimDisrupting {
		t.Fatalf("p-n1 disrupted before its replacement is Initialized (err %v)", err)
	}
	// The replacement's node is up: the old node goes.
	rep := &reps[0]
	rep.Status.Phase, rep.Status.NodeName = v1alpha1.NodeClaimInitialized, "n3"
	if err := kube.Status().Update(ctx, rep); err != nil {
		t.Fatal(err)
	}
	reconcileClaim("p-n1")
	if old, err := get("p-n1"); err == nil && old.DeletionTimestamp.IsZero() {
		t.Fatalf("p-n1 not deleted once its replacement is Initialized; phase %s; events:\n%s", old.Status.Phase, drain(rec))
	}
	if evs := drain(rec); !strings.Contains(evs, "replaced by node n3 ("+rep.Name+")") {
		t.Errorf("no Disrupting Event naming the replacement; events:\n%s", evs)
	}

	// p-n2's replacement is gone before it came up: n2 keeps running.
	reconcileClaim("p-n2")
	reps = replacementsOf(ctx, t, kube, "p-n2")
	if len(reps) != 1 {
		t.Fatalf("%d replacements of the expired p-n2, want 1", len(reps))
	}
	if err := kube.Delete(ctx, &reps[0]); err != nil {
		t.Fatal(err)
	}
	// Not found just after it was named: perhaps not created yet.
	if reconcileClaim("p-n2"); !tainted("n2") {
		t.Fatal("disruption of n2 called off at once: a replacement just named may not be created yet")
	}
	now = now.Add(DefaultTimers.ReplacementGrace)
	res := reconcileClaim("p-n2")
	old, err := get("p-n2")
	if err != nil || !old.DeletionTimestamp.IsZero() {
		t.Fatalf("p-n2 deleted though its replacement failed (err %v)", err)
	}
	if old.Annotations[v1alpha1.AnnotationReplacement] != "" || tainted("n2") {
		t.Errorf("disruption of n2 not called off: replacement %q, tainted %v", old.Annotations[v1alpha1.AnnotationReplacement], tainted("n2"))
	}
	if res.RequeueAfter < DefaultTimers.ReplacementRetry {
		t.Errorf("expired p-n2 asked about again after %s, want a retry after %s", res.RequeueAfter, DefaultTimers.ReplacementRetry)
	}
	if evs := drain(rec); !strings.Contains(evs, "could not be launched") {
		t.Errorf("no Event saying the replacement could not be launched; events:\n%s", evs)
	}
}

// TestConsolidationMergesNodesIntoOneCheaper: three 4-cpu nodes at
// $0.17/h each run one 3-cpu pod apiece, so no pod fits on another node
// and no single node has a cheaper replacement; one 16-cpu node at
// $0.30/h holds all three pods. The three are replaced by it together.
func TestConsolidationMergesNodesIntoOneCheaper(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &consolidationFixture{}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.node(n)
		f.objs = append(f.objs, pod("p-"+n, n, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		}))
	}
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Labels = map[string]string{v1alpha1.LabelNodePool: "p"}
		}
	}
	objs := append(f.objs, testobj.Catalog("p", cpuType("c7.xlarge", 4, "on-demand", 0.17), cpuType("c7.4xlarge", 16, "on-demand", 0.30)))
	kube, rec := consolidateOnce(ctx, t, objs)
	evs := drain(rec)
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var rep *v1alpha1.NodeClaim
	named := 0
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.Annotations[v1alpha1.AnnotationReplaces] != "" {
			rep = nc
		}
	}
	if rep == nil {
		t.Fatalf("no replacement; events:\n%s", evs)
	}
	for _, nc := range claims.Items {
		if nc.Annotations[v1alpha1.AnnotationReplacement] == rep.Name {
			named++
		}
	}
	if named != 3 || rep.Annotations[v1alpha1.AnnotationReplaces] != "p-n1,p-n2,p-n3" {
		t.Errorf("replacement %s replaces %q, named by %d claims; want all three", rep.Name, rep.Annotations[v1alpha1.AnnotationReplaces], named)
	}
	if got := instanceTypesOf(rep); !slices.Equal(got, []string{"c7.4xlarge"}) {
		t.Errorf("replacement may launch as %v, want c7.4xlarge", got)
	}
	if want := "replacing 3 nodes ($0.5100/h) with c7.4xlarge on-demand in zone-a ($0.3000/h), saves $0.2100/h"; !strings.Contains(evs, want) {
		t.Errorf("no Event saying %q; events:\n%s", want, evs)
	}
}

// TestAPartialMergeCreatesNoReplacement: three nodes are to be merged
// into one cheaper node, and naming the replacement on the second claim
// is refused. The replacement, sized for all three, is not created; the
// two claims that named it give it up and keep their nodes, untainted.
// Before, the full replacement was created for the two named.
func TestAPartialMergeCreatesNoReplacement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &consolidationFixture{}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.node(n)
		f.objs = append(f.objs, pod("p-"+n, n, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		}))
	}
	for _, o := range f.objs {
		if nc, ok := o.(*v1alpha1.NodeClaim); ok {
			nc.Labels = map[string]string{v1alpha1.LabelNodePool: "p"}
		}
	}
	objs := append(f.objs, replacementPool(v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized),
		testobj.Catalog("p", cpuType("c7.xlarge", 4, "on-demand", 0.17), cpuType("c7.4xlarge", 16, "on-demand", 0.30)))
	kube := refuseNaming{Client: testobj.Client(objs...), claim: "p-n2"}
	sched := newScheduler(ctx, t)
	now := time.Now()
	clock := func() time.Time { return now }
	e := NewExecutor(kube, kube, kubefake.NewClientset(), events.NewFakeRecorder(100), clock)
	e.SetReplacer(NewReplacer(kube, kube, sched, limits.NewLedger(kube, cloudfake.New())))
	k := NewConsolidation(e, kube, kube, sched, clock)
	k.Pause = 0
	for range 2 {
		_ = k.Round(ctx) // the refused naming is an error of the round
		now = now.Add(31 * time.Second)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims.Items {
		if nc.Annotations[v1alpha1.AnnotationReplaces] != "" {
			t.Errorf("replacement %s (replaces %s) created though not every claim could name it", nc.Name, nc.Annotations[v1alpha1.AnnotationReplaces])
		}
		if r := nc.Annotations[v1alpha1.AnnotationReplacement]; r != "" {
			t.Errorf("nodeclaim %s still waits for replacement %s", nc.Name, r)
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if nodeTainted(ctx, t, kube, n) {
			t.Errorf("node %s kept its taint", n)
		}
	}
}

// refuseNaming refuses updates of one claim that name a replacement.
type refuseNaming struct {
	client.Client
	claim string
}

func (c refuseNaming) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if nc, ok := obj.(*v1alpha1.NodeClaim); ok && nc.Name == c.claim && nc.Annotations[v1alpha1.AnnotationReplacement] != "" {
		return apierrors.NewForbidden(v1alpha1.SchemeGroupVersion.WithResource("nodeclaims").GroupResource(), nc.Name, errors.New("injected"))
	}
	return c.Client.Update(ctx, obj, opts...)
}
