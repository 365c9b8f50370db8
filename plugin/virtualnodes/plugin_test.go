package virtualnodes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/plugin/refusenodes"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func TestDecodeArgs(t *testing.T) {
	got, err := DecodeArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxInstanceTypes != 60 || got.MaxClaimsTried != 16 || got.WriteInterval.Duration != 200*time.Millisecond {
		t.Errorf("defaults: %+v", got)
	}
	for raw, want := range map[string]string{
		`{"maxInstanceTypes": 1000}`:  "maxInstanceTypes must be between 1 and 500, got 1000",
		`{"maxClaimsTried": -1}`:      "maxClaimsTried must be at least 1, got -1",
		`{"writeInterval": "1h"}`:     "writeInterval must be between 10ms and 10s, got 1h0m0s",
		`{"maxInstanceTypes": "six"}`: "decoding VirtualNodes args",
	} {
		_, err := DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("args %s: got %v, want an error containing %q", raw, err, want)
		}
	}
}

func testPod(name, cpu, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "t"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}},
	}
}

// TestRetriedPodKeepsItsNomination schedules the same pod twice, as the
// scheduler retries it while its claim is open: one claim, same name.
func TestRetriedPodKeepsItsNomination(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("a", "1", "1Gi")
	first, s := h.schedule(ctx, pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	second, s := h.schedule(ctx, pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	if first != second || h.plugin.book.count() != 1 || len(first.pods) != 1 {
		t.Errorf("retry: claims %s then %s, %d claims, %d pods on the first", first.name, second.name, h.plugin.book.count(), len(first.pods))
	}
}

// TestOptionsNarrowAsPodsArrive checks each nomination leaves only the
// instance types that hold every pod so far, cheapest first.
func TestOptionsNarrowAsPodsArrive(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	var c *claim
	for i, name := range []string{"a", "b", "c", "d"} {
		got, s := h.schedule(ctx, testPod(name, "1500m", "1Gi"))
		if !s.IsSuccess() {
			t.Fatal(s.Message())
		}
		if c != nil && got != c {
			t.Fatalf("pod %s went to a second claim %s", name, got.name)
		}
		c = got
		wantCPU := int64(1500 * (i + 1))
		for _, o := range c.options {
			if o.alloc.MilliCPU < wantCPU {
				t.Fatalf("after %d pods, option %s (%dm) cannot hold %dm", i+1, o.name, o.alloc.MilliCPU, wantCPU)
			}
		}
		for j := 1; j < len(c.options); j++ {
			if c.options[j].price < c.options[j-1].price {
				t.Fatalf("options not cheapest first: %s before %s", c.options[j-1].name, c.options[j].name)
			}
		}
		if len(c.options) > DefaultMaxInstanceTypes {
			t.Fatalf("%d options, more than %d", len(c.options), DefaultMaxInstanceTypes)
		}
	}
	if got := c.options[0].name; got != "t5" {
		t.Errorf("cheapest option for 6 cpu is %s, want t5 (6 vCPU)", got)
	}
}

// TestNoInstanceTypeSaysWhy checks the refusal names the resource, the
// request and the largest type.
func TestNoInstanceTypeSaysWhy(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	_, s := h.schedule(context.Background(), testPod("huge", "500", "1Gi"))
	if s.IsSuccess() {
		t.Fatal("a 500-cpu pod was nominated")
	}
	want := "pool bench: no instance type has 500 cpu; the largest has 400 (t399)"
	if !strings.Contains(s.Message(), want) {
		t.Errorf("message %q does not say %q", s.Message(), want)
	}
	if h.plugin.book.count() != 0 {
		t.Errorf("%d claims made for a pod nothing can hold", h.plugin.book.count())
	}
}

// TestNoInstanceTypeOffersTheResource asks for ephemeral storage of a pool
// none of whose types has any: the refusal says no type offers it, and
// what the pod asked.
func TestNoInstanceTypeOffersTheResource(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	pod := testPod("scratch", "1", "1Gi")
	pod.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("2Gi")
	_, s := h.schedule(context.Background(), pod)
	if s.IsSuccess() {
		t.Fatal("a pod asking for ephemeral storage no type has was nominated")
	}
	want := "pool bench: no instance type offers ephemeral-storage, which the pod requests (2Gi)"
	if !strings.Contains(s.Message(), want) {
		t.Errorf("message %q does not say %q", s.Message(), want)
	}
}

// TestPodOfLaunchingClaimKeepsIt closes a claim, as the provisioner does
// when it launches it, and retries its pod: same claim, no second one.
func TestPodOfLaunchingClaimKeepsIt(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("a", "1", "1Gi")
	c, s := h.schedule(ctx, pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	h.plugin.book.close(c)
	again, s := h.schedule(ctx, pod)
	if !s.IsSuccess() || again != c || h.plugin.book.count() != 1 {
		t.Fatalf("retry after launch: %v, claim %v, %d claims; want %s and one claim", s.Message(), again, h.plugin.book.count(), c.name)
	}
	other, s := h.schedule(ctx, testPod("b", "1", "1Gi"))
	if !s.IsSuccess() || other == c {
		t.Fatalf("a new pod joined the launching claim %s", c.name)
	}
}

// TestPoolNamedPlaceholderKeepsItsClaims: a pool rebuild replaces the
// placeholders and nothing else, even when a claim's name starts as a
// placeholder's does (claims are named after their pool).
func TestPoolNamedPlaceholderKeepsItsClaims(t *testing.T) {
	named := func() *pool {
		pl := benchPool(t)
		pl.np.Name = "placeholder"
		return pl
	}
	h := newHarness(t, []*pool{named()})
	ctx := context.Background()
	first, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() || first == nil {
		t.Fatalf("first pod: %v", s.Message())
	}
	if !strings.HasPrefix(first.name, "placeholder-") {
		t.Fatalf("claim %s: not named after its pool, the case this test is for", first.name)
	}
	// A NodePool event rebuilds every pool object.
	h.plugin.setPools([]*pool{named()})
	inView := func(name string) bool {
		return slices.ContainsFunc(h.plugin.lister.virtual, func(n fwk.NodeInfo) bool { return n.Node().Name == name })
	}
	if !inView(first.name) {
		t.Fatalf("claim %s left the plugin's view when its pool was rebuilt", first.name)
	}
	placeholders := 0
	for _, n := range h.plugin.lister.virtual {
		if n != fwk.NodeInfo(first.info) {
			placeholders++
		}
	}
	if want := len(h.plugin.pools["placeholder"].groups); placeholders != want {
		t.Errorf("%d placeholders in the view after a rebuild, want %d (one per group, the old ones gone)", placeholders, want)
	}
	// The claim still takes the pool's next pod.
	second, s := h.schedule(ctx, testPod("b", "1", "1Gi"))
	if !s.IsSuccess() || second != first {
		t.Errorf("second pod: %v, nominated to %v, want the open claim %s", s.Message(), second, first.name)
	}
}

// TestClosedClaimsCountAgainstLimits: a claim the provisioner has closed
// keeps counting against its pool's limit while it launches, also after
// the pool is rebuilt from a changed NodePool, and stops counting once it
// is deleted.
func TestClosedClaimsCountAgainstLimits(t *testing.T) {
	limited := func() *pool {
		pl := benchPool(t)
		// A memory limit far from reached too: the refusal names only
		// the limit the node would cross.
		pl.np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("1000Gi")}
		return pl
	}
	h := newHarness(t, []*pool{limited()})
	ctx := context.Background()
	first, s := h.schedule(ctx, testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	// The provisioner closes it: phase Launching, no capacity yet.
	closed := first.object()
	closed.Status.Phase = v1alpha1.NodeClaimLaunching
	h.plugin.claimChanged(closed)
	// A NodePool event rebuilds every pool object.
	h.plugin.setPools([]*pool{limited()})

	if _, s := h.schedule(ctx, testPod("b", "3", "1Gi")); !s.IsSuccess() {
		t.Fatalf("3 cpu beside a launching 1-cpu claim under a 4-cpu limit: %s", s.Message())
	}
	_, s = h.schedule(ctx, testPod("c", "1", "1Gi"))
	if s.IsSuccess() {
		t.Fatal("a fifth cpu was nominated under a 4-cpu limit: the launching claim was not counted")
	}
	if want := "limits reached: cpu 4 in use or launching + 1 for t0 > limit 4"; !strings.Contains(s.Message(), want) || strings.Contains(s.Message(), "memory") {
		t.Errorf("refusal %q does not say %q, or names the memory limit it is within", s.Message(), want)
	}

	// Launched at a larger type than its cheapest option: the launched
	// capacity counts.
	launched := closed.DeepCopy()
	launched.Status.Phase = v1alpha1.NodeClaimLaunched
	launched.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	h.plugin.claimChanged(launched)
	if used := h.plugin.book.poolUsage(h.plugin.pools["bench"], nil); used.Cpu().Cmp(resource.MustParse("5")) != 0 {
		t.Errorf("usage with a claim launched at 2 cpu and an open 3-cpu claim: %s cpu, want 5", used.Cpu())
	}

	h.plugin.claimDeleted(&v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: first.name}})
	if _, s := h.schedule(ctx, testPod("c", "1", "1Gi")); !s.IsSuccess() {
		t.Errorf("after the launching claim was deleted the pod still does not fit: %s", s.Message())
	}
}

// TestFixedSizePoolTakesNoPendingPod: a fixed-size pool (replicas) gets
// no claim for a pending pod; the pod is refused saying why, and no
// claim is made.
func TestFixedSizePoolTakesNoPendingPod(t *testing.T) {
	pl := benchPool(t)
	pl.np.Spec.Replicas = ptr.To[int64](3)
	h := newHarness(t, []*pool{pl})
	_, s := h.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if s.IsSuccess() {
		t.Fatal("a pod was nominated to a new claim of a fixed-size pool")
	}
	if want := "nodepool bench is fixed-size (spec.replicas 3): it launches no node for pending pods"; !strings.Contains(s.Message(), want) {
		t.Errorf("refusal %q does not say %q", s.Message(), want)
	}
	if n := h.plugin.book.count(); n != 0 {
		t.Errorf("%d claims made in a fixed-size pool, want none", n)
	}
}

// TestUnsyncedPluginRefusesForNow: a plugin that has not synced with the
// API server (it cannot list, say) gives the pod back to the scheduler,
// which retries it, instead of holding the scheduling loop.
func TestUnsyncedPluginRefusesForNow(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	h.plugin.synced = make(chan struct{}) // as if the first sync never ended
	_, s := h.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if s.Code() != fwk.Unschedulable || s.Message() != notSyncedMessage {
		t.Errorf("got %v %q, want Unschedulable %q", s.Code(), s.Message(), notSyncedMessage)
	}
	if h.plugin.book.count() != 0 {
		t.Errorf("an unsynced plugin made %d claims", h.plugin.book.count())
	}
}

// TestTakeoverRebuildsFromTheAPI: a standby scheduler started before the
// old leader nominated pod a to a claim; when it takes over (its first
// decision), it finds that claim and keeps the pod on it instead of
// making a second claim, and a new pod joins the same claim.
func TestTakeoverRebuildsFromTheAPI(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	oldClaim, nominated, api := oldLeaderWrote(t, nil)
	h.plugin.rebuildFrom = func(ctx context.Context) error {
		return h.plugin.rebuild(ctx, api, func(labels.Selector) ([]*corev1.Pod, error) { return []*corev1.Pod{nominated}, nil })
	}

	got, s := h.schedule(ctx, nominated)
	if !s.IsSuccess() || got == nil || got.name != oldClaim.name {
		t.Fatalf("pod a after takeover: %v on %v, want it kept on %s", s.Message(), got, oldClaim.name)
	}
	other, s := h.schedule(ctx, testPod("b", "1", "1Gi"))
	if !s.IsSuccess() || other != got || h.plugin.book.count() != 1 {
		t.Errorf("pod b after takeover went to %v (%d claims); want the restored claim %s", other, h.plugin.book.count(), got.name)
	}
}

// zoneAntiAffinePod refuses to share a zone with another app=t pod.
func zoneAntiAffinePod(name string) *corev1.Pod {
	p := testPod(name, "1", "1Gi")
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "t"}}, TopologyKey: corev1.LabelTopologyZone,
	}}}}
	return p
}

// closedClaim nominates pod to a new claim and closes the claim in phase,
// as the provisioner does when it takes it on.
func (h *harness) closedClaim(t *testing.T, pod *corev1.Pod, phase v1alpha1.NodeClaimPhase) *claim {
	t.Helper()
	c, s := h.schedule(context.Background(), pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	closed := c.object()
	closed.Status.Phase = phase
	h.plugin.claimChanged(closed)
	return c
}

// TestClosedClaimPodsCountUntilSeenBound: four pods that refuse to share
// a zone, three zones. The first pod's claim is closed by the provisioner
// (launching) and its pod bound before the scheduler's snapshot shows it:
// through all of it, the pod counts in its zone, so the fourth pod is
// refused every time, and counted once the snapshot has it on the real
// node. The claim's node leaves the view then.
func TestClosedClaimPodsCountUntilSeenBound(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	first := h.closedClaim(t, zoneAntiAffinePod("p1"), v1alpha1.NodeClaimLaunching)
	zones := map[string]bool{first.group.zone: true}
	for _, name := range []string{"p2", "p3"} {
		c, s := h.schedule(ctx, zoneAntiAffinePod(name))
		if !s.IsSuccess() {
			t.Fatalf("%s: %s", name, s.Message())
		}
		if zones[c.group.zone] {
			t.Fatalf("%s nominated to zone %s, which already has a pod (the launching claim's pod was not counted)", name, c.group.zone)
		}
		zones[c.group.zone] = true
	}
	refused := func(when string) {
		t.Helper()
		c, s := h.schedule(ctx, zoneAntiAffinePod("p4"))
		if s.IsSuccess() {
			t.Fatalf("%s: the fourth pod was nominated to %s in zone %s, which has a pod already", when, c.name, c.group.zone)
		}
		if s.Code() != fwk.Unschedulable {
			t.Fatalf("%s: the fourth pod got %v %q, want Unschedulable", when, s.Code(), s.Message())
		}
	}
	refused("claim launching")

	// The provisioner binds p1 to the claim's real node; the scheduler's
	// snapshot does not show it yet.
	bound := zoneAntiAffinePod("p1")
	bound.Spec.NodeName = "real-1"
	h.plugin.podGone(bound, false)
	refused("p1 bound, not yet in the snapshot")
	if first.info == nil {
		t.Fatal("the claim's node left the view before the snapshot showed its pod")
	}

	// The snapshot catches up: p1 on real-1, in the claim's zone.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-1", Labels: map[string]string{corev1.LabelHostname: "real-1", corev1.LabelTopologyZone: first.group.zone}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	h.setReal([]*corev1.Pod{bound}, node)
	refused("p1 in the snapshot")
	if first.info != nil || len(first.pods) != 0 {
		t.Errorf("the claim's node is still in the view (%d pods) after its pod was seen on its real node", len(first.pods))
	}
	for _, n := range h.plugin.lister.virtual {
		if n.Node() != nil && n.Node().Name == first.name {
			t.Errorf("claim %s is still a virtual node", first.name)
		}
	}
}

// TestDeletedClosedClaimLeavesTheViewAtOnce: the pods of a closed claim
// that is deleted count nowhere and are decided again.
func TestDeletedClosedClaimLeavesTheViewAtOnce(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	first := h.closedClaim(t, zoneAntiAffinePod("p1"), v1alpha1.NodeClaimLaunched)
	h.plugin.claimDeleted(&v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: first.name}})
	if first.info != nil {
		t.Fatal("a deleted claim's node is still in the view")
	}
	c, s := h.schedule(ctx, zoneAntiAffinePod("p1"))
	if !s.IsSuccess() || c == first {
		t.Fatalf("the deleted claim's pod was not nominated to a new claim: %v", s.Message())
	}
}

// TestOutOfTreeFilterCountsInNomination enables the project's own
// out-of-tree Filter plugin, RefuseNodes, refusing zone-a: no pod is
// nominated there, though zone-a is where the cheapest spot capacity is.
func TestOutOfTreeFilterCountsInNomination(t *testing.T) {
	refuseZoneA := func(p *config.KubeSchedulerProfile) {
		p.Plugins.Filter.Enabled = append(p.Plugins.Filter.Enabled, config.Plugin{Name: refusenodes.Name})
		p.PluginConfig = append(p.PluginConfig, config.PluginConfig{Name: refusenodes.Name, Args: &runtime.Unknown{
			ContentType: runtime.ContentTypeJSON, Raw: []byte(`{"nodeSelector":{"matchLabels":{"topology.kubernetes.io/zone":"zone-a"}}}`)}})
	}
	without := newHarness(t, []*pool{benchPool(t)})
	c, s := without.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if !s.IsSuccess() || c.group.zone != "zone-a" {
		t.Fatalf("without RefuseNodes the pod went to %v (%s); the test expects zone-a to be the cheapest", c, s.Message())
	}
	h := newHarnessWith(t, []*pool{benchPool(t)}, refuseZoneA)
	for i := range 10 {
		c, s := h.schedule(context.Background(), zoneAntiAffinePod(fmt.Sprintf("p%d", i)))
		if s.IsSuccess() && c.group.zone == "zone-a" {
			t.Fatalf("pod p%d nominated to %s in zone-a, which RefuseNodes refuses", i, c.name)
		}
		if i >= 2 && s.IsSuccess() {
			t.Fatalf("pod p%d nominated to %s in %s: with zone-a refused only two zones are left for pods that refuse to share one", i, c.name, c.group.zone)
		}
	}
}

// TestHandedOffPodKeepsItsNodeWhileHeldThenIsDecidedAfresh: the
// provisioner hands a pod to the scheduler by nominating it to its claim's
// registered node. While that node still carries the binding taint, a
// retry keeps the pod nominated to the node (not back to the claim); once
// the node is open and still refuses the pod, the pod gets a new claim and
// leaves the old one.
func TestHandedOffPodKeepsItsNodeWhileHeldThenIsDecidedAfresh(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("p1", "1", "1Gi")
	first := h.closedClaim(t, pod, v1alpha1.NodeClaimRegistered)
	handed := pod.DeepCopy()
	handed.Status.NominatedNodeName = "real-1"
	node := func(cpu string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-1", Labels: map[string]string{corev1.LabelHostname: "real-1", corev1.LabelTopologyZone: first.group.zone}},
			Spec:   corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
	h.setReal(nil, node("8", corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}))
	res, s := h.plugin.PostFilter(ctx, framework.NewCycleState(), handed, nil)
	if !s.IsSuccess() || res.NominatedNodeName != "real-1" {
		t.Fatalf("pod handed to the scheduler, node held: nominated to %v (%s); want real-1", res, s.Message())
	}
	if _, ok := first.pods[pod.UID]; !ok {
		t.Fatal("the handed-off pod left its claim's node in the view while the node is held")
	}
	// The node opens with too little room left for the pod.
	h.setReal(nil, node("500m"))
	c, s := h.schedule(ctx, handed)
	if !s.IsSuccess() || c == nil || c == first {
		t.Fatalf("pod refused by its open node: nominated to %v (%s); want a new claim", c, s.Message())
	}
	if _, ok := first.pods[pod.UID]; ok {
		t.Error("the pod still counts on its old claim's node")
	}
}

// registeredClaim nominates pod to a claim whose node, node-1, has
// registered, and returns the claim and node-1 with the taints given:
// 500m of CPU, too little for a pod of 1.
func (h *harness) registeredClaim(t *testing.T, pod *corev1.Pod) (*claim, func(...corev1.Taint) *corev1.Node) {
	t.Helper()
	c := h.closedClaim(t, pod, v1alpha1.NodeClaimLaunched)
	registered := c.object()
	registered.Status.Phase, registered.Status.NodeName = v1alpha1.NodeClaimRegistered, "node-1"
	h.plugin.claimChanged(registered)
	return c, func(taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{corev1.LabelHostname: "node-1", corev1.LabelTopologyZone: c.group.zone}},
			Spec:   corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
}

// TestPodNominatedLateToAnOpenNodeIsDecidedAfresh: a pod whose nomination
// to a claim was written after the provisioner read the claim's pods (the
// API server was down in between, seen in TestCrashes) is never bound by
// the provisioner. While the claim's node is held for binding the pod
// keeps its nomination; once the node is open and the scheduler still
// refuses the pod there, the pod gets a new claim.
func TestPodNominatedLateToAnOpenNodeIsDecidedAfresh(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("late", "1", "1Gi")
	first, node := h.registeredClaim(t, pod)
	nominated := pod.DeepCopy()
	nominated.Status.NominatedNodeName = first.name
	h.setReal(nil, node(corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}))
	c, s := h.schedule(ctx, nominated)
	if !s.IsSuccess() || c != first {
		t.Fatalf("pod of a claim whose node is held for binding: nominated to %v (%s); want its claim %s", c, s.Message(), first.name)
	}
	h.setReal(nil, node())
	c, s = h.schedule(ctx, nominated)
	if !s.IsSuccess() || c == nil || c == first {
		t.Fatalf("pod refused by its claim's open node: nominated to %v (%s); want a new claim", c, s.Message())
	}
	if _, ok := first.pods[pod.UID]; ok {
		t.Error("the pod still counts on its old claim's node")
	}
}

// TestPodBoundMeanwhileIsNotDecidedAfresh: the provisioner binds a pod
// to its claim's node after the scheduler took the pod from its queue;
// the cycle's copy is not bound, the open node refuses it, and PostFilter
// runs. The informer has the pod bound: no new claim is made, and the
// pod stays on its claim until the bind's event takes it off. A pod the
// informer does not have bound is decided afresh as before.
func TestPodBoundMeanwhileIsNotDecidedAfresh(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("p", "1", "1Gi")
	first, node := h.registeredClaim(t, pod)
	h.setReal(nil, node())
	queued := pod.DeepCopy()
	queued.Status.NominatedNodeName = first.name
	informer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	h.plugin.decider.pods = corelisters.NewPodLister(informer)
	bound := queued.DeepCopy()
	bound.Spec.NodeName = "node-1"
	if err := informer.Add(bound); err != nil {
		t.Fatal(err)
	}
	claims := h.plugin.book.count()
	res, s := h.plugin.PostFilter(ctx, framework.NewCycleState(), queued, nil)
	if s.IsSuccess() || res != nil {
		t.Fatalf("pod bound meanwhile: %v (%s); want no nomination", res, s.Message())
	}
	if n := h.plugin.book.count(); n != claims {
		t.Errorf("%d claims after the pod bound meanwhile was tried, want %d (no new one)", n, claims)
	}
	if _, ok := first.pods[pod.UID]; !ok {
		t.Error("the pod left its claim before the bind's event")
	}

	// Not bound in the informer either: decided afresh.
	if err := informer.Update(queued); err != nil {
		t.Fatal(err)
	}
	c, s := h.schedule(ctx, queued)
	if !s.IsSuccess() || c == nil || c == first {
		t.Fatalf("pod refused by its claim's open node, not bound: nominated to %v (%s); want a new claim", c, s.Message())
	}
}

// TestNominatedPodWaitsForItsClaimsNode: a pod nominated to a claim passes
// no real node but the claim's own once it has registered; a pod not
// nominated passes, and so does one whose claim was deleted.
func TestNominatedPodWaitsForItsClaimsNode(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	pod := testPod("p1", "1", "1Gi")
	c := h.closedClaim(t, pod, v1alpha1.NodeClaimLaunched)
	nodeInfo := func(name string) fwk.NodeInfo {
		ni := framework.NewNodeInfo()
		ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		return ni
	}
	if s := h.plugin.Filter(ctx, nil, pod, nodeInfo("other")); s.IsSuccess() {
		t.Fatal("a pod nominated to a launching claim passed another node")
	}
	registered := c.object()
	registered.Status.Phase, registered.Status.NodeName = v1alpha1.NodeClaimRegistered, "claim-node"
	h.plugin.claimChanged(registered)
	if s := h.plugin.Filter(ctx, nil, pod, nodeInfo("claim-node")); !s.IsSuccess() {
		t.Fatalf("the pod did not pass its claim's node: %s", s.Message())
	}
	if s := h.plugin.Filter(ctx, nil, pod, nodeInfo("other")); s.IsSuccess() || !strings.Contains(s.Message(), c.name) {
		t.Fatalf("the pod passed another node once its claim's registered (%v %q)", s.Code(), s.Message())
	}
	if s := h.plugin.Filter(ctx, nil, testPod("free", "1", "1Gi"), nodeInfo("other")); !s.IsSuccess() {
		t.Fatalf("a pod not nominated was refused: %s", s.Message())
	}
	h.plugin.claimDeleted(&v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.name}})
	if s := h.plugin.Filter(ctx, nil, pod, nodeInfo("other")); !s.IsSuccess() {
		t.Fatalf("a pod whose claim was deleted still waits for it: %s", s.Message())
	}
}

// TestTakeoverKeepsPodsWaitingForTheirClaimsNode: a scheduler that takes
// over while a claim's node has registered restores the claim's node
// name, so its pod still passes no other real node.
func TestTakeoverKeepsPodsWaitingForTheirClaimsNode(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	_, nominated, api := oldLeaderWrote(t, func(nc *v1alpha1.NodeClaim) {
		nc.Status.Phase, nc.Status.NodeName = v1alpha1.NodeClaimRegistered, "claim-node"
	})
	h.plugin.mu.Lock()
	err := h.plugin.rebuild(ctx, api, func(labels.Selector) ([]*corev1.Pod, error) { return []*corev1.Pod{nominated}, nil })
	h.plugin.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	ni := func(name string) fwk.NodeInfo {
		n := framework.NewNodeInfo()
		n.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		return n
	}
	if s := h.plugin.Filter(ctx, nil, nominated, ni("other")); s.IsSuccess() {
		t.Error("after a takeover the pod passed a node other than its claim's")
	}
	if s := h.plugin.Filter(ctx, nil, nominated, ni("claim-node")); !s.IsSuccess() {
		t.Errorf("after a takeover the pod did not pass its claim's node: %s", s.Message())
	}
}

// oldLeaderWrote is what a scheduler that was leader left in the API
// server: a claim for pod a (edited by edit, as the provisioner moved it
// on), then the pod's nomination to it.
func oldLeaderWrote(t *testing.T, edit func(*v1alpha1.NodeClaim)) (*claim, *corev1.Pod, client.Reader) {
	t.Helper()
	old := newHarness(t, []*pool{benchPool(t)})
	oldClaim, s := old.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	written := oldClaim.object()
	written.CreationTimestamp = metav1.Now()
	if edit != nil {
		edit(written)
	}
	nominated := testPod("a", "1", "1Gi")
	nominated.Status.NominatedNodeName = oldClaim.name
	return oldClaim, nominated, testobj.Client(written)
}

// TestJudgedNodeIsTheClaimsNode: the node a claim's pods were judged on is
// nodeshape's node for the NodeClaim the plugin writes (its labels, taints
// and requirements) at the claim's largest open option, in every field a
// Filter plugin reads, so the provisioner, which launches from that
// NodeClaim through nodeshape, launches the node the scheduler accepted.
func TestJudgedNodeIsTheClaimsNode(t *testing.T) {
	pl := benchPool(t)
	pl.np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": "a"}
	pl.np.Spec.Template.Spec.Taints = []v1alpha1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}}
	pl, err := newPool(pl.np, &v1alpha1.InstanceTypeCatalog{Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: benchCatalog()}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, []*pool{pl})
	ctx := context.Background()
	pod := testPod("a", "3", "1Gi")
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	c, s := h.schedule(ctx, pod)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	nc := c.object()
	offers, err := nodeshape.Offers(nodeshape.ForClaim(nc), benchCatalog(), nc.Spec.Requirements)
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != len(c.options) {
		t.Fatalf("the NodeClaim's requirements admit %d offers; the claim has %d options", len(offers), len(c.options))
	}
	judged := c.info.Node()
	big := largest(c.options)
	want := nodeshape.ForClaim(nc).Node(c.name, big.it, c.group.zone, c.group.capacityType)
	if diff := cmp.Diff(want.Labels, judged.Labels); diff != "" {
		t.Errorf("labels (-claim's node,+judged):\n%s", diff)
	}
	if diff := cmp.Diff(want.Spec.Taints, judged.Spec.Taints); diff != "" {
		t.Errorf("taints (-claim's node,+judged):\n%s", diff)
	}
	for _, f := range []struct {
		what         string
		want, judged corev1.ResourceList
	}{{"allocatable", want.Status.Allocatable, judged.Status.Allocatable}, {"capacity", want.Status.Capacity, judged.Status.Capacity}} {
		if !equality.Semantic.DeepEqual(f.want, f.judged) {
			t.Errorf("%s: claim's node %v, judged %v", f.what, f.want, f.judged)
		}
	}
	if judged.Labels["team"] != "a" || len(judged.Spec.Taints) != 1 {
		t.Errorf("the judged node lacks the pool's label or taint: %v %v", judged.Labels, judged.Spec.Taints)
	}
}

// TestPoolsAreBuiltFromEveryCatalogObjectOfTheirPool: the provisioner
// publishes a pool's catalog as one object per instance-type family; the
// plugin decides over all of them, keyed by spec.nodePool, whatever the
// objects are named.
func TestPoolsAreBuiltFromEveryCatalogObjectOfTheirPool(t *testing.T) {
	h := newHarness(t, nil)
	family := func(name, pool string, types ...v1alpha1.InstanceType) *v1alpha1.InstanceTypeCatalog {
		return &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: pool}},
			Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: pool, InstanceTypeCount: int32(len(types)), InstanceTypes: types}}
	}
	typ := func(name, arch string) v1alpha1.InstanceType {
		rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("29")}
		return v1alpha1.InstanceType{Name: name, Labels: map[string]string{corev1.LabelArchStable: arch}, Capacity: rl, Allocatable: rl,
			Offerings: []v1alpha1.Offering{{Zone: "zone-a", CapacityType: v1alpha1.CapacityTypeOnDemand, Price: "0.1", Available: true}}}
	}
	reader := testobj.Client(
		&v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		family("default.m5", "default", typ("m5.large", "amd64")),
		family("default.c7g", "default", typ("c7g.large", "arm64")),
		family("default.r5", "other", typ("r5.large", "amd64")), // another pool's, despite its name
	)
	h.plugin.resyncPools(context.Background(), reader)

	pl := h.plugin.pools["default"]
	if pl == nil {
		t.Fatal("pool default was not built")
	}
	var got []string
	for name := range pl.capacity {
		got = append(got, name)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"c7g.large", "m5.large"}, got); diff != "" {
		t.Errorf("instance types of pool default (-want,+got):\n%s", diff)
	}
	pod := testPod("arm", "1", "1Gi")
	pod.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: "arm64"}
	c, s := h.schedule(context.Background(), pod)
	if !s.IsSuccess() {
		t.Fatalf("an arm64 pod, which only the c7g object's type holds: %s", s.Message())
	}
	if c.options[0].name != "c7g.large" {
		t.Errorf("the arm64 pod's claim opens with %s, want c7g.large", c.options[0].name)
	}
}

// TestClaimCarriesItsPoolsHashAndAnnotations: a new claim is stamped with
// the hash of the pool's template it was made from (and the hash's
// version) and carries the template's annotations for the node; a pool
// edited afterwards does not change the stamp of a claim restored from
// the API server, nor its node class (which the API server would refuse
// to change), nor drop annotations others wrote on it.
func TestClaimCarriesItsPoolsHashAndAnnotations(t *testing.T) {
	pl := benchPool(t)
	pl.np.Spec.Template.ObjectMeta.Annotations = map[string]string{"example.com/owner": "alice"}
	pl, err := newPool(pl.np, &v1alpha1.InstanceTypeCatalog{Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: benchCatalog()}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := nodeshape.PoolHash(pl.np)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, []*pool{pl})
	c, s := h.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	nc := c.object()
	if got := nc.Annotations[v1alpha1.AnnotationNodePoolHash]; got != want {
		t.Errorf("pool hash stamp %q, want %q", got, want)
	}
	if got := nc.Annotations[v1alpha1.AnnotationNodePoolHashVersion]; got != nodeshape.PoolHashVersion {
		t.Errorf("hash version %q, want %q", got, nodeshape.PoolHashVersion)
	}
	if diff := cmp.Diff(map[string]string{"example.com/owner": "alice"}, nc.Spec.Annotations); diff != "" {
		t.Errorf("spec.annotations (-want,+got):\n%s", diff)
	}

	// Restored from the API server with a stamp of an older template and
	// an annotation of someone else's: both are written back as they were.
	nc.Annotations[v1alpha1.AnnotationNodePoolHash] = "older"
	nc.Annotations[v1alpha1.AnnotationDoNotDisrupt] = "true"
	made := v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "before-the-edit"}
	nc.Spec.NodeClassRef = made
	restored := h.plugin.restore(nc, nil)
	if restored == nil {
		t.Fatal("the claim was not restored")
	}
	again := restored.object()
	if got := again.Annotations[v1alpha1.AnnotationNodePoolHash]; got != "older" {
		t.Errorf("a restored claim's stamp became %q, want it kept", got)
	}
	if again.Annotations[v1alpha1.AnnotationDoNotDisrupt] != "true" {
		t.Errorf("a restored claim lost an annotation others wrote: %v", again.Annotations)
	}
	if again.Spec.NodeClassRef != made {
		t.Errorf("a restored claim is written with node class %v, want %v, the one it was made with", again.Spec.NodeClassRef, made)
	}
}

// TestClaimsDoNotGrowOntoTypesTheirPodsCannotFill nominates 300 pods of
// 500m onto a family shaped like the sandbox's catalog (2 GiB per vCPU,
// price linear in vCPU, at most 110 pods a node). Grown pod by pod, a
// claim would end on the 64-cpu type, whose pod cap leaves 9 of its cpu
// idle (110 pods of 500m); a claim stops at the 48-cpu type instead,
// which its pods fill, and the fleet stays within 3% of the requested
// cpu at the family's price (it was 1.17× before).
func TestClaimsDoNotGrowOntoTypesTheirPodsCannotFill(t *testing.T) {
	const perCPU = 0.04
	var types []v1alpha1.InstanceType
	for _, cpu := range []int{2, 4, 8, 16, 32, 48, 64} {
		pods := 110
		if cpu <= 4 {
			pods = 29 * cpu / 2
		}
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(cpu), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(2*cpu)<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
		}
		types = append(types, v1alpha1.InstanceType{
			Name: fmt.Sprintf("c.%dcpu", cpu), Labels: map[string]string{corev1.LabelArchStable: "amd64"}, Capacity: alloc, Allocatable: alloc,
			Offerings: []v1alpha1.Offering{{Zone: "zone-a", CapacityType: "on-demand", Price: fmt.Sprintf("%.4f", perCPU*float64(cpu)), Available: true}},
		})
	}
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "capped"}}
	pl, err := newPool(np, &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Spec: v1alpha1.InstanceTypeCatalogSpec{InstanceTypes: types}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, []*pool{pl})
	ctx := context.Background()
	const n = 300
	for i := range n {
		if _, s := h.schedule(ctx, testPod(fmt.Sprint("p-", i), "500m", "512Mi")); !s.IsSuccess() {
			t.Fatalf("pod %d: %s", i, s.Message())
		}
	}
	fleet, pods := 0.0, 0
	for _, c := range h.plugin.book.claims {
		fleet += c.options[0].price
		pods += len(c.pods)
		if c.options[0].name == "c.64cpu" {
			t.Errorf("claim %s holds %d pods on c.64cpu, whose pod cap leaves cpu idle", c.name, len(c.pods))
		}
	}
	bound := perCPU * n * 0.5
	if pods != n || fleet > 1.03*bound {
		t.Errorf("%d pods on %d claims at %.2f $/h, %.3f× the %.2f $/h their cpu costs at the family's price; want all %d pods, at most 1.03×", pods, h.plugin.book.count(), fleet, fleet/bound, bound, n)
	}
}

// TestRepackedPodsCountWhereTheyMoved: the provisioner repacks a batch
// of two closed claims, moving p1 from A to B and deleting A with
// AnnotationRepackedInto. Whichever event the plugin sees first (the pod
// update naming B, or A's deletion), p1 counts on B from then on, is not
// decided again, and keeps B when the scheduler retries it, even with an
// object that still names A; A leaves the view.
func TestRepackedPodsCountWhereTheyMoved(t *testing.T) {
	for _, deletedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("deletedFirst=%v", deletedFirst), func(t *testing.T) {
			h := newHarness(t, []*pool{benchPool(t)})
			ctx := context.Background()
			p1, p2 := testPod("p1", "1", "1Gi"), testPod("p2", "1", "1Gi")
			a := h.closedClaim(t, p1, v1alpha1.NodeClaimLaunching)
			b := h.closedClaim(t, p2, v1alpha1.NodeClaimLaunching)
			if a == b {
				t.Fatal("both pods on one claim; the test needs two")
			}
			moved := p1.DeepCopy()
			moved.Status.NominatedNodeName = b.name
			deleted := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: a.name, Annotations: map[string]string{
				v1alpha1.AnnotationRepackedInto: fmt.Sprintf(`{%q:%q}`, p1.UID, b.name)}}}
			if deletedFirst {
				h.plugin.claimDeleted(deleted)
				h.plugin.nominationMoved(moved)
			} else {
				h.plugin.nominationMoved(moved)
				h.plugin.claimDeleted(deleted)
			}
			if got := h.plugin.book.nominatedTo(p1.UID); got != b {
				t.Fatalf("p1 counts on %v, want claim %s", got, b.name)
			}
			if _, ok := h.plugin.refused[p1.UID]; ok {
				t.Error("p1 is to be decided again")
			}
			if a.info != nil || h.plugin.book.claim(a.name) != nil {
				t.Error("claim A is still in the view")
			}
			if b.info == nil || len(b.pods) != 2 || len(b.info.Pods)-len(b.dsPods) != 2 {
				t.Fatalf("claim B's node does not hold both pods")
			}
			stale := p1.DeepCopy()
			stale.Status.NominatedNodeName = a.name
			for _, pod := range []*corev1.Pod{stale, moved} {
				c, s := h.schedule(ctx, pod)
				if !s.IsSuccess() || c != b {
					t.Errorf("p1 retried naming %s: nominated to %v (%v), want B %s", pod.Status.NominatedNodeName, c, s.Message(), b.name)
				}
			}
			if h.plugin.book.count() != 1 {
				t.Errorf("%d claims, want B alone", h.plugin.book.count())
			}
		})
	}
}

// TestRepackMoveSeenBeforeTheClaimsClose: the pod update moving p1 from
// A to B arrives before the plugin has seen either claim closed (the pod
// and claim informers are not ordered). The plugin closes both (only the
// provisioner moves pods, and only between claims it has closed), counts
// p1 on B, and a retry of p1 keeps B.
func TestRepackMoveSeenBeforeTheClaimsClose(t *testing.T) {
	h := newHarness(t, []*pool{benchPool(t)})
	ctx := context.Background()
	p1, p2 := zoneAntiAffinePod("p1"), zoneAntiAffinePod("p2")
	a, s := h.schedule(ctx, p1)
	if !s.IsSuccess() {
		t.Fatal(s.Message())
	}
	b, s := h.schedule(ctx, p2)
	if !s.IsSuccess() || a == b || !a.open || !b.open {
		t.Fatalf("want two open claims: %v", s.Message())
	}
	moved := p1.DeepCopy()
	moved.Status.NominatedNodeName = b.name
	h.plugin.nominationMoved(moved)
	if a.open || b.open {
		t.Errorf("claims open after the move: A %v, B %v", a.open, b.open)
	}
	if h.plugin.book.nominatedTo(p1.UID) != b || b.info == nil || len(b.pods) != 2 || a.info != nil {
		t.Fatalf("p1 not counted on B alone")
	}
	if c, s := h.schedule(ctx, moved); !s.IsSuccess() || c != b {
		t.Errorf("p1 retried: nominated to %v (%v), want B", c, s.Message())
	}
}
