package simulator

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/utils/ptr"
)

// gpuSlice is the slice of a node with GPUs gpu-0 … of 80Gi each.
func gpuSlice(node string, gpus int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.example.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "gpu-" + string(rune('0'+i)),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}})
	}
	return s
}

// allocated is claim allocated device of node, reserved for pods.
func allocated(c *resourcev1.ResourceClaim, node, device string, pods ...*corev1.Pod) *resourcev1.ResourceClaim {
	c.Status.Allocation = &resourcev1.AllocationResult{
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: node, Device: device}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// TestPodsOfADrainedNodeHaveTheirDevicesAllocatedAfresh: nodes n1 and n2
// have two GPUs each, one in use on each (pods a and b). Draining n1, a's
// claim is freed with it and allocated afresh on n2's free GPU, which the
// next pod then finds taken; the claim in the API is not touched. A pod
// whose claim it shares with a pod that stays (c on n1 with d on n2) can
// go only where its devices are, so draining n1 finds it no node.
func TestPodsOfADrainedNodeHaveTheirDevicesAllocatedAfresh(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := bound(podWithClaims("a", "ca"), "n1"), bound(podWithClaims("b", "cb"), "n2")
	objs := []*resourcev1.ResourceClaim{
		allocated(gpuClaim("ca", "40Gi"), "n1", "gpu-0", a),
		allocated(gpuClaim("cb", "40Gi"), "n2", "gpu-0", b),
		gpuClaim("cnew", "40Gi"),
	}
	cs := kubefake.NewClientset(
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		gpuSlice("n1", 2), gpuSlice("n2", 2), objs[0], objs[1], objs[2],
	)
	s := schedulerOn(ctx, t, cs, 3, 2)
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
	cluster := NewCluster([]*corev1.Node{node("n1"), node("n2")}, []*corev1.Pod{a, b})

	view := cluster.Draining(corev1.Taint{Key: "drained", Effect: corev1.TaintEffectNoSchedule}, "n1")
	if got, st := s.Place(ctx, view, a); !st.IsSuccess() || got != "n2" {
		t.Fatalf("a, its node drained, placed on %q (%v); want n2, whose gpu-1 is free", got, st)
	}
	if got, st := s.Place(ctx, view, podWithClaims("new", "cnew")); st.IsSuccess() {
		t.Errorf("a new pod placed on %s after a took n2's last free GPU", got)
	} else if st.Plugin() != "DynamicResources" {
		t.Errorf("the new pod refused by %q (%s), want DynamicResources", st.Plugin(), st.Message())
	}
	if real, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "ca", metav1.GetOptions{}); err != nil || real.Status.Allocation.Devices.Results[0].Pool != "n1" {
		t.Errorf("claim ca in the API after the simulation: %v (%v); want it allocated on n1 still", real.Status, err)
	}
	// A view of its own plans nothing of another's: n2's free GPU is
	// free again.
	if got, st := s.Place(ctx, cluster.Draining(corev1.Taint{Key: "drained", Effect: corev1.TaintEffectNoSchedule}, "n1"), podWithClaims("new", "cnew")); !st.IsSuccess() || got != "n2" {
		t.Errorf("a new pod in a fresh view placed on %q (%v), want n2", got, st)
	}
}

// TestAClaimSharedWithAPodThatStaysIsNotMoved: c on n1 shares its claim
// with d on n2; draining n1 leaves the claim allocated on n1, so c has
// nowhere to go though n3 has a free GPU. Draining n1 and n2, the claim
// is allocated afresh, on n3.
func TestAClaimSharedWithAPodThatStaysIsNotMoved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, d := bound(podWithClaims("c", "shared"), "n1"), bound(podWithClaims("d", "shared"), "n2")
	cs := kubefake.NewClientset(
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		gpuSlice("n1", 1), gpuSlice("n2", 1), gpuSlice("n3", 1), allocated(gpuClaim("shared", "40Gi"), "n1", "gpu-0", c, d),
	)
	s := schedulerOn(ctx, t, cs, 1, 3)
	n := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	}
	cluster := NewCluster([]*corev1.Node{n("n1"), n("n2"), n("n3")}, []*corev1.Pod{c, d})
	if got, st := s.Place(ctx, cluster.Draining(corev1.Taint{Key: "drained", Effect: corev1.TaintEffectNoSchedule}, "n1"), c); st.IsSuccess() {
		t.Errorf("c placed on %s; its claim stays allocated on n1 for d", got)
	} else if st.Plugin() != "DynamicResources" {
		t.Errorf("c refused by %q (%s), want DynamicResources", st.Plugin(), st.Message())
	}
	view := cluster.Draining(corev1.Taint{Key: "drained", Effect: corev1.TaintEffectNoSchedule}, "n1", "n2")
	for _, p := range []*corev1.Pod{c, d} {
		if got, st := s.Place(ctx, view, p); !st.IsSuccess() || got != "n3" {
			t.Errorf("%s, both the claim's pods drained: %q (%v); want n3, its claim allocated afresh there", p.Name, got, st)
		}
	}
}

// schedulerOn is a default-profile Scheduler reading cs, once claims
// claims and slices slices have reached its DRA manager (through event
// handlers, which may run after the informers say they have synced).
func schedulerOn(ctx context.Context, t *testing.T, cs *kubefake.Clientset, claims, slices int) *Scheduler {
	t.Helper()
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	inf := informers.NewSharedInformerFactory(cs, 0)
	shared, err := SharedState(ctx, cs, inf)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewScheduler(ctx, plugins.NewInTreeRegistry(), &cfg.Profiles[0], cfg.PercentageOfNodesToScore, shared)
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		all, err := shared.DRA.ResourceClaims().List()
		sl, err2 := shared.DRA.ResourceSlices().ListWithDeviceTaintRules()
		return err == nil && err2 == nil && len(all) == claims && len(sl) == slices, nil
	}); err != nil {
		t.Fatalf("the claims and slices never reached the DRA manager: %v", err)
	}
	return s
}
