package nodeclaim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// These tests run each step of a claim's life on its own, against the
// in-memory cloud and a fake client; the real-apiserver suites
// (test/integration, test/e2e) run them together.

func instanceType(name, cpu, price string) v1alpha1.InstanceType {
	return testobj.InstanceType(name).Capacity("cpu", cpu, "memory", "4Gi", "pods", "29").Arch("amd64").
		Offering("zone-a", v1alpha1.CapacityTypeSpot, price).Obj()
}

type steps struct {
	c           *Controller
	kube        client.Client
	pods        kubernetes.Interface
	cloud       *cloudfake.Cloud
	unavailable *cloudprovider.UnavailableOfferings
	recorder    *events.FakeRecorder
	opts        Options
	now         time.Time
}

// build makes the controller of the steps' parts, reading the time from
// s.now; call it again after changing a part.
func (s *steps) build() {
	s.c = newController(s.kube, s.pods, s.cloud, s.unavailable, s.recorder, s.opts, func() time.Time { return s.now })
}

func newSteps(t *testing.T, objs ...client.Object) *steps {
	t.Helper()
	types := []v1alpha1.InstanceType{instanceType("small", "2", "0.02"), instanceType("large", "4", "0.04")}
	pool := testobj.Pool("pool").NodeLabel("team", "then").Obj()
	kube := testobj.Client(append([]client.Object{pool, testobj.Catalog("pool", types...)}, objs...)...)
	cloud := cloudfake.New(types...)
	s := &steps{kube: kube, pods: kubefake.NewClientset(), cloud: cloud, unavailable: cloudprovider.NewUnavailableOfferings(time.Minute),
		recorder: events.NewFakeRecorder(100), now: time.Now(), opts: Options{
			BatchIdle: time.Second, BatchMax: 10 * time.Second, RegistrationTTL: time.Minute, LaunchTTL: time.Minute, InitializationTTL: time.Minute,
		}}
	s.build()
	return s
}

// poolClaim is a claim of "pool" made from its template (the label
// team=then), open to both instance types.
func poolClaim() *testobj.ClaimWrapper {
	return testobj.Claim("pool-abcde").UID("uid-1").Created(time.Now()).Pool("pool").NodeLabel("team", "then").
		Require(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, "small", "large").
		Require(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "zone-a").
		Require(v1alpha1.LabelCapacityType, corev1.NodeSelectorOpIn, "spot")
}

// editPool changes "pool" as its claims were made from it, or as it was
// edited since.
func (s *steps) editPool(t *testing.T, edit func(*v1alpha1.NodePool)) {
	t.Helper()
	var pool v1alpha1.NodePool
	if err := s.kube.Get(context.Background(), client.ObjectKey{Name: "pool"}, &pool); err != nil {
		t.Fatal(err)
	}
	edit(&pool)
	if err := s.kube.Update(context.Background(), &pool); err != nil {
		t.Fatal(err)
	}
}

func nominated(name, claim string) *corev1.Pod {
	return testobj.Pod(name).UID("uid-pod-" + name).Nominated(claim).Obj()
}

func (s *steps) get(t *testing.T, nc *v1alpha1.NodeClaim) *v1alpha1.NodeClaim {
	t.Helper()
	var got v1alpha1.NodeClaim
	if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(nc), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// TestBatchClosesOnlyOnceTheWindowHasPassed: a claim nominated to just now
// stays open; once idle for BatchIdle it is closed (Launching) with the
// termination finalizer; a claim whose pods have all gone is deleted
// unlaunched.
func TestBatchClosesOnlyOnceTheWindowHasPassed(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimNominating).Obj()
	s := newSteps(t, nc, nominated("a", nc.Name))
	nc.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now}
	if err := s.kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	res, err := s.c.batcher.reconcile(ctx, s.get(t, nc))
	if err != nil || res.RequeueAfter <= 0 || s.get(t, nc).Status.Phase != v1alpha1.NodeClaimNominating {
		t.Fatalf("closed within the batch window: %v %v, phase %s", res, err, s.get(t, nc).Status.Phase)
	}
	s.now = s.now.Add(1100 * time.Millisecond)
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	got := s.get(t, nc)
	if got.Status.Phase != v1alpha1.NodeClaimLaunching || !controllerutil.ContainsFinalizer(got, v1alpha1.FinalizerTermination) {
		t.Fatalf("after the window: phase %s, finalizers %v; want Launching with the termination finalizer", got.Status.Phase, got.Finalizers)
	}

	empty := poolClaim().Phase(v1alpha1.NodeClaimNominating).Name("pool-empty").UID("uid-2").Obj()
	s = newSteps(t, empty)
	s.now = s.now.Add(time.Minute)
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, empty)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(empty), &v1alpha1.NodeClaim{}); err == nil {
		t.Error("a claim with no nominated pod left was not deleted")
	}
}

// TestLaunchFallsBackAndMarksWhatHadNoCapacity: the cheapest option has
// no capacity; the launch takes the next, records it in the claim's
// status and marks the cheapest unavailable, so the next launch skips it.
func TestLaunchFallsBackAndMarksWhatHadNoCapacity(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimLaunching).Obj()
	s := newSteps(t, nc)
	s.cloud.SetCapacity("small", false)
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	got := s.get(t, nc)
	if got.Status.Phase != v1alpha1.NodeClaimLaunched || got.Status.InstanceType != "large" || got.Status.ProviderID == "" {
		t.Fatalf("phase %s, instance type %q, providerID %q; want Launched on large", got.Status.Phase, got.Status.InstanceType, got.Status.ProviderID)
	}
	if gone, _ := s.unavailable.Unavailable("small", "zone-a", "spot"); !gone {
		t.Error("the offering with no capacity was not marked unavailable")
	}
	offers, err := s.c.launcher.offers(ctx, got)
	if err != nil || len(offers) != 1 || offers[0].InstanceType.Name != "large" {
		t.Errorf("offers after the mark: %v (err %v); want only large", offers, err)
	}
}

// TestLaunchWorkersTakeTheLaunches: with launch workers of their own, the
// lifecycle step leaves a Launching claim alone, and reconcileLaunch
// launches it; reconcileLaunch leaves every other phase alone.
func TestLaunchWorkersTakeTheLaunches(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimLaunching).Obj()
	s := newSteps(t, nc)
	s.opts.LaunchWorkers = 1
	s.build()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}
	if _, err := s.c.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := s.get(t, nc); got.Status.Phase != v1alpha1.NodeClaimLaunching || got.Status.ProviderID != "" {
		t.Fatalf("the lifecycle step moved a Launching claim to %s (%q)", got.Status.Phase, got.Status.ProviderID)
	}
	if _, err := s.c.reconcileLaunch(ctx, req); err != nil {
		t.Fatal(err)
	}
	launched := s.get(t, nc)
	if launched.Status.Phase != v1alpha1.NodeClaimLaunched || launched.Status.ProviderID == "" {
		t.Fatalf("reconcileLaunch left the claim %s (%q), want Launched", launched.Status.Phase, launched.Status.ProviderID)
	}
	if _, err := s.c.reconcileLaunch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if again := s.get(t, nc); again.Status.Phase != v1alpha1.NodeClaimLaunched || again.ResourceVersion != launched.ResourceVersion {
		t.Errorf("reconcileLaunch changed a Launched claim: %s", again.Status.Phase)
	}
}

// TestLaunchKeepsMinValues: a claim held to two instance types
// (minValues 2) one of which is marked unavailable is not launched on the
// other: it is deleted, with an Event naming minValues, and nothing is
// created in the cloud. With both available it launches.
func TestLaunchKeepsMinValues(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().MinValues(corev1.LabelInstanceTypeStable, 2).Phase(v1alpha1.NodeClaimLaunching).Obj()
	s := newSteps(t, nc)
	s.unavailable.Mark(cloudprovider.Offer{InstanceType: instanceType("small", "2", "0.02"), Zone: "zone-a", CapacityType: "spot"})
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a claim left with one option under minValues 2 was not deleted (err %v)", err)
	}
	if n := s.cloud.Creates(); n != 0 {
		t.Errorf("%d launches made for it", n)
	}
	rec := s.recorder
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "minValues") {
			found = true
		}
	}
	if !found {
		t.Error("no Event naming minValues")
	}

	nc = poolClaim().MinValues(corev1.LabelInstanceTypeStable, 2).Phase(v1alpha1.NodeClaimLaunching).Obj()
	s = newSteps(t, nc)
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if got := s.get(t, nc); got.Status.Phase != v1alpha1.NodeClaimLaunched {
		t.Errorf("with both options available: phase %s, want Launched", got.Status.Phase)
	}
}

// TestRegistrationAdoptsOnlyTheNodeOfItsOwnInstance: a node whose
// providerID the claim names is adopted (the claim's labels and the
// finalizer) only when the cloud says the instance was launched for this
// claim.
func TestRegistrationAdoptsOnlyTheNodeOfItsOwnInstance(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		launchFor string
		fleetOf   []string
		adopted   bool
	}{
		{"its own instance", "pool-abcde", nil, true},
		{"another claim's instance", "pool-other", nil, false},
		{"an instance of a fleet launched for it and another claim", "", []string{"pool-abcde", "pool-other"}, true},
		{"an instance of a fleet launched for other claims", "", []string{"pool-other", "pool-third"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := poolClaim().Phase(v1alpha1.NodeClaimLaunched).ProviderID("fake:///zone-a/i-1").Launched("small", "zone-a", "spot").
				Condition(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched").Obj()
			node := testobj.Node("n1").ProviderID(nc.Status.ProviderID).Obj()
			s := newSteps(t, nc, node)
			s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, InstanceType: "small", Zone: "zone-a", CapacityType: "spot", NodeClaim: tc.launchFor, NodeClaims: tc.fleetOf, NodePool: "pool"})
			if _, err := s.c.registrar.reconcile(ctx, s.get(t, nc)); err != nil {
				t.Fatal(err)
			}
			var n corev1.Node
			if err := s.kube.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
				t.Fatal(err)
			}
			got := s.get(t, nc)
			if adopted := got.Status.Phase == v1alpha1.NodeClaimRegistered; adopted != tc.adopted {
				t.Fatalf("registered = %v, want %v", adopted, tc.adopted)
			}
			if !tc.adopted {
				if controllerutil.ContainsFinalizer(&n, v1alpha1.FinalizerTermination) || len(n.Labels) > 0 {
					t.Errorf("a node not ours was changed: %v %v", n.Labels, n.Finalizers)
				}
				return
			}
			want := map[string]string{"team": "then", v1alpha1.LabelNodePool: "pool", corev1.LabelInstanceTypeStable: "small", corev1.LabelTopologyZone: "zone-a", v1alpha1.LabelCapacityType: "spot"}
			for k, v := range want {
				if n.Labels[k] != v {
					t.Errorf("node label %s = %q, want %q", k, n.Labels[k], v)
				}
			}
			if !controllerutil.ContainsFinalizer(&n, v1alpha1.FinalizerTermination) || got.Status.NodeName != "n1" {
				t.Errorf("finalizers %v, claim's node %q", n.Finalizers, got.Status.NodeName)
			}
		})
	}
}

// TestTerminationTerminatesTheInstanceThenLetsTheClaimGo: a deleted claim
// whose node has no pod left terminates its instance, deletes its node
// and drops its finalizer.
func TestTerminationTerminatesTheInstanceThenLetsTheClaimGo(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Finalizer(v1alpha1.FinalizerTermination).Phase(v1alpha1.NodeClaimInitialized).ProviderID("fake:///zone-a/i-1").NodeName("n1").Obj()
	node := testobj.Node("n1").Finalizer(v1alpha1.FinalizerTermination).ProviderID(nc.Status.ProviderID).Obj()
	s := newSteps(t, nc, node)
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
	if err := s.kube.Delete(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cloud.Get(ctx, nc.Status.ProviderID); err == nil {
		t.Error("the instance was not terminated")
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{}); err == nil {
		t.Error("the node was not deleted")
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{}); err == nil {
		t.Error("the claim kept its finalizer")
	}
}

// TestNodeIsReadyForPodsOnlyWhenNothingIsPending: pods are bound only to a
// node that is Ready, free of the not-ready taint and of the claim's
// startup taints, and that has every extended resource its pods request.
func TestNodeIsReadyForPodsOnlyWhenNothingIsPending(t *testing.T) {
	nc := poolClaim().Phase(v1alpha1.NodeClaimRegistered).StartupTaint("cni", corev1.TaintEffectNoSchedule).Obj()
	nc.Spec.Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	nc.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")}
	readyNode := func(edit func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")},
		}}
		if edit != nil {
			edit(n)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"ready", readyNode(nil), ""},
		{"not Ready", readyNode(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }), "condition Ready"},
		{"not-ready taint still on", readyNode(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
		}), "lifecycle controller"},
		{"startup taint still on", readyNode(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "cni", Effect: corev1.TaintEffectNoSchedule}}
		}), "startup taint cni"},
		{"device plugin not registered yet", readyNode(func(n *corev1.Node) { delete(n.Status.Allocatable, "nvidia.com/gpu") }), "nvidia.com/gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notReadyForPods(tc.node, nc)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("notReadyForPods = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRegistrationPutsTheClaimsAnnotationsOnTheNode: the annotations the
// claim was made with (its pool's template's) are set on the node it
// adopts; one the node already has keeps the node's value.
func TestRegistrationPutsTheClaimsAnnotationsOnTheNode(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimLaunched).ProviderID("fake:///zone-a/i-1").Launched("small", "zone-a", "spot").
		Condition(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched").Obj()
	nc.Spec.Annotations = map[string]string{"example.com/owner": "then", "example.com/set-at-boot": "claim"}
	node := testobj.Node("n1").Annotation("example.com/set-at-boot", "node").ProviderID(nc.Status.ProviderID).Obj()
	s := newSteps(t, nc, node)
	s.editPool(t, func(np *v1alpha1.NodePool) { np.Spec.Template.ObjectMeta.Annotations = nc.Spec.Annotations })
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, InstanceType: "small", Zone: "zone-a", CapacityType: "spot", NodeClaim: nc.Name, NodePool: "pool"})
	if _, err := s.c.registrar.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	var n corev1.Node
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"example.com/owner": "then", "example.com/set-at-boot": "node"}
	for k, v := range want {
		if n.Annotations[k] != v {
			t.Errorf("node annotation %s = %q, want %q (all: %v)", k, n.Annotations[k], v, n.Annotations)
		}
	}
}

// TestLaunchStampsTheNodeClassHash: a launched claim carries the hash of
// the node class it was launched from, as the provider hashes it.
func TestLaunchStampsTheNodeClassHash(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimLaunching).Class("SimulatedNodeClass", "default").Obj()
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.SimulatedNodeClassSpec{Tags: map[string]string{"team": "web"}}}
	s := newSteps(t, nc, class)
	s.editPool(t, func(np *v1alpha1.NodePool) { np.Spec.Template.Spec.NodeClassRef = nc.Spec.NodeClassRef })
	if _, err := s.c.launcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	got := s.get(t, nc)
	want, err := cloudprovider.SpecHash(class.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.NodeClaimLaunched || got.Annotations[v1alpha1.AnnotationNodeClassHash] != want {
		t.Errorf("phase %s, node class hash %q; want Launched, %q", got.Status.Phase, got.Annotations[v1alpha1.AnnotationNodeClassHash], want)
	}
}

// TestDrainDeletesPodsAPDBHoldsOnlyAsTerminationGracePeriodRunsOut: pods
// whose eviction a PDB refuses stay while the claim's
// terminationGracePeriod (60s) has time left; each is deleted (not
// evicted) once the deadline is no further off than its own grace period
// (so a pod asking 40s goes at 20s, one asking 0s at 60s), with Events on
// the pod and the claim; at the deadline the instance is terminated.
// Without a terminationGracePeriod, the drain waits on the PDB.
func TestDrainDeletesPodsAPDBHoldsOnlyAsTerminationGracePeriodRunsOut(t *testing.T) {
	for _, tgp := range []*metav1.Duration{{Duration: time.Minute}, nil} {
		name := "terminationGracePeriod 60s"
		if tgp == nil {
			name = "no terminationGracePeriod"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			nc := poolClaim().Finalizer(v1alpha1.FinalizerTermination).Phase(v1alpha1.NodeClaimInitialized).ProviderID("fake:///zone-a/i-1").NodeName("n1").Obj()
			nc.Spec.TerminationGracePeriod = tgp
			node := testobj.Node("n1").Finalizer(v1alpha1.FinalizerTermination).ProviderID(nc.Status.ProviderID).Obj()
			bound := func(name string, grace int64) *corev1.Pod {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
					Spec: corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: &grace}}
			}
			quick, slow := bound("quick", 0), bound("slow", 40)
			s := newSteps(t, nc, node, quick, slow)
			live := kubefake.NewClientset(quick.DeepCopy(), slow.DeepCopy())
			live.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
			})
			s.pods = live
			recorder := events.NewFakeRecorder(20)
			s.recorder = recorder
			s.build()
			s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
			if err := s.kube.Delete(ctx, nc); err != nil {
				t.Fatal(err)
			}
			deleted := s.get(t, nc).DeletionTimestamp.Time
			deletes := func() map[string]int64 {
				out := map[string]int64{}
				for _, a := range live.Actions() {
					if d, ok := a.(clienttesting.DeleteActionImpl); ok && d.GetResource().Resource == "pods" {
						out[d.GetName()] = *d.GetDeleteOptions().GracePeriodSeconds
					}
				}
				return out
			}
			terminated := func() bool {
				_, err := s.cloud.Get(ctx, nc.Status.ProviderID)
				return err != nil
			}
			step := func(after time.Duration) {
				t.Helper()
				s.now = deleted.Add(after)
				if _, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil {
					t.Fatal(err)
				}
			}
			step(10 * time.Second)
			if got := deletes(); len(got) > 0 || terminated() {
				t.Fatalf("10s into a 60s terminationGracePeriod: deleted %v, instance terminated %v", got, terminated())
			}
			if tgp == nil {
				step(time.Hour)
				if got := deletes(); len(got) > 0 || terminated() {
					t.Errorf("without a terminationGracePeriod, an hour on: deleted %v, instance terminated %v; want the PDB to hold", got, terminated())
				}
				return
			}
			step(25 * time.Second)
			if got := deletes(); len(got) != 1 || got["slow"] != 35 {
				t.Fatalf("25s in: deleted %v; want only slow, with the 35s left as its grace", got)
			}
			if terminated() {
				t.Fatal("the instance was terminated before the terminationGracePeriod passed")
			}
			step(60 * time.Second)
			if got := deletes(); len(got) != 2 || got["quick"] != 0 {
				t.Fatalf("60s in: deleted %v; want quick too, with its own grace of 0", got)
			}
			if !terminated() {
				t.Error("the instance was not terminated once the terminationGracePeriod passed")
			}
			var onPod, onClaim int
			for len(recorder.Events) > 0 {
				e := <-recorder.Events
				switch {
				case !strings.Contains(e, v1alpha1.ReasonTerminationGracePeriodPassed):
				case strings.Contains(e, "deleting the pod"):
					onPod++
				case strings.Contains(e, "deleted pod default/"):
					onClaim++
				}
			}
			if onPod != 2 || onClaim != 2 {
				t.Errorf("%s Events: %d on pods, %d on the claim; want 2 and 2", v1alpha1.ReasonTerminationGracePeriodPassed, onPod, onClaim)
			}
		})
	}
}

// TestDrainOfANodeThatIsNotReadyFinishes: on a node whose Ready
// condition is Unknown (its kubelet gone), a pod already terminating is
// deleted for good once its grace period is over, not before; a mirror
// pod is neither evicted nor waited for; once the pod is gone the drain
// is over though no terminationGracePeriod is set.
func TestDrainOfANodeThatIsNotReadyFinishes(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimInitialized).ProviderID("fake:///zone-a/i-1").NodeName("n1").Obj()
	node := testobj.Node("n1").ProviderID(nc.Status.ProviderID).Condition(corev1.NodeReady, corev1.ConditionUnknown).Obj()
	terminating := testobj.Pod("stuck").UID("uid-stuck").Finalizer("example.com/hold").Node("n1").Obj()
	mirror := testobj.Pod("static").Namespace("kube-system").UID("uid-static").Annotation(corev1.MirrorPodAnnotationKey, "x").Node("n1").Obj()
	s := newSteps(t, node, terminating, mirror)
	// The pod was deleted with a 30s grace 10s ago: 20s are left.
	if err := s.kube.Delete(ctx, terminating, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(terminating), &got); err != nil {
		t.Fatal(err)
	}
	live := kubefake.NewClientset(got.DeepCopy(), mirror.DeepCopy())
	s.pods = live
	s.build()
	forced := func() []string {
		var out []string
		for _, a := range live.Actions() {
			if d, ok := a.(clienttesting.DeleteActionImpl); ok && d.GetResource().Resource == "pods" && *d.GetDeleteOptions().GracePeriodSeconds == 0 {
				out = append(out, d.GetName())
			}
			if a.GetSubresource() == "eviction" {
				t.Errorf("evicted %v", a)
			}
		}
		return out
	}
	s.now = got.DeletionTimestamp.Add(-20 * time.Second)
	if res, err := s.c.terminator.drain(ctx, nc); err != nil || res.IsZero() {
		t.Fatalf("drain with a pod terminating: %v %v; want a requeue", res, err)
	}
	if f := forced(); len(f) > 0 {
		t.Fatalf("deleted %v for good before its grace period was over", f)
	}
	s.now = got.DeletionTimestamp.Add(time.Second)
	if _, err := s.c.terminator.drain(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if f := forced(); !slices.Equal(f, []string{"stuck"}) {
		t.Fatalf("deleted for good %v once its grace period was over; want the stuck pod only", f)
	}
	// The cache sees it gone: the drain is over, the mirror pod aside.
	got.Finalizers = nil
	if err := s.kube.Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if res, err := s.c.terminator.drain(ctx, nc); err != nil || !res.IsZero() {
		t.Errorf("drain with only a mirror pod left: %v %v; want it over", res, err)
	}
}

// TestDeletedNodeDeletesItsClaim: a user deletes a claim's Node (it waits
// on the finalizer); the claim is deleted, which drains the node and
// terminates its instance.
func TestDeletedNodeDeletesItsClaim(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimInitialized).ProviderID("fake:///zone-a/i-1").NodeName("n1").Obj()
	nc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "nodeforge.dev/v1alpha1", Kind: "NodePool", Name: "pool", UID: "uid-pool"}}
	node := testobj.Node("n1").Finalizer(v1alpha1.FinalizerTermination).ProviderID(nc.Status.ProviderID).Obj()
	s := newSteps(t, nc, node)
	if err := s.kube.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.step(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim of a deleted node not deleted (err %v)", err)
	}
}

// TestBatchWaitsForTheSchedulersLastWrite: past its idle window, a claim
// that more pods name than its spec counts stays open (the scheduler
// nominated them after its last write, and the spec the launch reads
// does not hold them yet) until the spec counts them, and no longer
// than the batch's longest window.
func TestBatchWaitsForTheSchedulersLastWrite(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimNominating).Obj()
	s := newSteps(t, nc, nominated("a", nc.Name), nominated("b", nc.Name))
	nc.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now}
	nc.Spec.NominatedPods = 1
	if err := s.kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(1100 * time.Millisecond)
	res, err := s.c.batcher.reconcile(ctx, s.get(t, nc))
	if err != nil || res.RequeueAfter <= 0 || s.get(t, nc).Status.Phase != v1alpha1.NodeClaimNominating {
		t.Fatalf("closed with 2 pods seen and 1 written: %v %v, phase %s", res, err, s.get(t, nc).Status.Phase)
	}
	got := s.get(t, nc)
	got.Spec.NominatedPods = 2
	if err := s.kube.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if phase := s.get(t, nc).Status.Phase; phase != v1alpha1.NodeClaimLaunching {
		t.Fatalf("once the spec counts both pods: phase %s, want Launching", phase)
	}

	late := poolClaim().Phase(v1alpha1.NodeClaimNominating).Name("pool-late").UID("uid-3").Obj()
	s = newSteps(t, late, nominated("c", late.Name), nominated("d", late.Name))
	late.Spec.NominatedPods = 1
	if err := s.kube.Update(ctx, late); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(time.Minute) // past the batch's longest window
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, late)); err != nil {
		t.Fatal(err)
	}
	if phase := s.get(t, late).Status.Phase; phase != v1alpha1.NodeClaimLaunching {
		t.Fatalf("past the longest window with the scheduler still behind: phase %s, want Launching", phase)
	}
}

// TestBatchWaitsForNominationsWrittenAfterTheClaim: past its idle window,
// a claim whose spec counts pods none of which is seen naming it yet
// (the scheduler's claim write came before its pods' nominations, as
// with SchedulerAsyncAPICalls) is neither deleted nor closed; once a pod
// names it, it closes; a claim whose pods never come is deleted once it
// has been open the batch's longest window.
func TestBatchWaitsForNominationsWrittenAfterTheClaim(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimNominating).Obj()
	s := newSteps(t, nc)
	nc.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now}
	nc.Spec.NominatedPods = 2
	if err := s.kube.Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(1100 * time.Millisecond)
	res, err := s.c.batcher.reconcile(ctx, s.get(t, nc))
	if err != nil || res.RequeueAfter <= 0 || s.get(t, nc).Status.Phase != v1alpha1.NodeClaimNominating {
		t.Fatalf("counting 2 pods with none seen: %v %v, phase %s; want it left open", res, err, s.get(t, nc).Status.Phase)
	}
	if err := s.kube.Create(ctx, nominated("a", nc.Name)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if phase := s.get(t, nc).Status.Phase; phase != v1alpha1.NodeClaimLaunching {
		t.Fatalf("once a pod names it: phase %s, want Launching", phase)
	}

	gone := poolClaim().Phase(v1alpha1.NodeClaimNominating).Name("pool-gone").UID("uid-4").Obj()
	s = newSteps(t, gone)
	gone.Spec.LastNominationTime = &metav1.MicroTime{Time: s.now}
	gone.Spec.NominatedPods = 2
	if err := s.kube.Update(ctx, gone); err != nil {
		t.Fatal(err)
	}
	s.now = gone.CreationTimestamp.Add(s.opts.BatchMax)
	if _, err := s.c.batcher.reconcile(ctx, s.get(t, gone)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(gone), &v1alpha1.NodeClaim{}); err == nil {
		t.Error("a claim whose counted pods never came was not deleted after the longest window")
	}
}

// TestDeniedLaunchIsNotRetriedFromAStaleCache: the cloud denies a
// claim's launch; the claim says AccessDenied. A reconcile from a cache a
// write behind (the claim as it was before the refusal) does not call
// the cloud again; once the cache shows the refusal, the claim waits for
// its deletion as before, and still no launch is tried.
func TestDeniedLaunchIsNotRetriedFromAStaleCache(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimLaunching).Obj()
	s := newSteps(t, nc, nominated("a", nc.Name))
	s.cloud.FailLaunches(&cloudprovider.AccessDeniedError{Op: "CreateFleet", Err: errors.New("UnauthorizedOperation")})
	stale := s.get(t, nc)
	if _, err := s.c.launcher.reconcile(ctx, stale.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(s.get(t, nc).Status.Conditions, v1alpha1.ConditionLaunched); cond == nil || cond.Reason != v1alpha1.ReasonAccessDenied {
		t.Fatalf("Launched condition after the denial: %+v, want AccessDenied", cond)
	}
	tried := s.cloud.Attempts()
	if tried != 1 {
		t.Fatalf("%d launches tried, want 1", tried)
	}
	res, err := s.c.launcher.reconcile(ctx, stale.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if n := s.cloud.Attempts(); n != tried || res.RequeueAfter <= 0 {
		t.Errorf("from the stale copy: %d launches tried (want %d), requeue %v (want a requeue)", n, tried, res.RequeueAfter)
	}
	res, err = s.c.launcher.reconcile(ctx, s.get(t, nc))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.cloud.Attempts(); n != tried || res.RequeueAfter <= 0 {
		t.Errorf("once the cache has the refusal: %d launches tried (want %d), requeue %v (want the wait for deletion)", n, tried, res.RequeueAfter)
	}
}
