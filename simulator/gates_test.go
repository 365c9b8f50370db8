package simulator

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubefake "k8s.io/client-go/kubernetes/fake"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/utils/ptr"
)

// TestSimulatorsBuildWithGangScheduling: with GenericWorkload and
// TopologyAwareWorkloadScheduling on, the default profile (whose
// DefaultPreemption reads, when built, the mutable snapshot and PodGroup
// manager only kube-scheduler has) builds the disruption simulator and
// the bind gate, which place and judge a pod: both programs crashed at
// start with the gates on before preemption was left out of simulations.
func TestSimulatorsBuildWithGangScheduling(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true})
	s := newTestScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if node, st := s.Place(ctx, NewCluster([]*corev1.Node{gateNode("a")}, nil).Without(), gatePod("p", 0)); !st.IsSuccess() || node != "a" {
		t.Errorf("placed on %q (%v), want a", node, st)
	}
	startGate(ctx, t, kubefake.NewClientset(), "")
}

// TestAPodGroupsClaimIsTheGroups, with GenericWorkload and
// DRAWorkloadResourceClaims on: the pods of PodGroup train share the
// group's ResourceClaim (two GPUs). DynamicResources reads each pod's
// group to tell the claim is the group's; the bind gate accepts a pod of
// it on a node with the GPUs and hands it to the scheduler, and the
// disruption simulator places the second pod where the claim was planned
// for the first, and refuses it on the other node (as repack's check of
// a packing that splits the group would). Both refused every such pod
// while the simulation's PodGroups were an empty snapshot's, which finds
// no group.
func TestAPodGroupsClaimIsTheGroups(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.DRAWorkloadResourceClaims: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slice := func(node string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	}
	group := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", UID: "uid-train"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
		ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("train-gpus")}}}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "train-gpus", Namespace: "default", UID: "uid-claim"}, Spec: resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2}}}}}}
	cs := kubefake.NewClientset(group, claim, slice("a"), slice("b"), gateNode("a"), gateNode("b"),
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}})
	member := func(name string) *corev1.Pod {
		p := gatePod(name, 0)
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train")}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("train-gpus")}}
		return p
	}
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(ctx, plugins.NewInTreeRegistry(), cs, &cfg.Profiles[0], "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.Scheduler(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The ResourceSlice tracker publishes what its informer synced a
	// moment later.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		slices, err := g.shared.DRA.ResourceSlices().ListWithDeviceTaintRules()
		return len(slices) == 2, err
	}); err != nil {
		t.Fatalf("the two ResourceSlices never listed: %v", err)
	}
	if st, handOff := g.Check(ctx, member("w0"), gateNode("a"), nil); !st.IsSuccess() || !strings.Contains(handOff, "DynamicResources") || !strings.Contains(handOff, "PodGroup default/train") {
		t.Errorf("the gate on a pod of the group on a node with two GPUs: %v, hand-off %q; want accepted and handed to the scheduler (DynamicResources, its PodGroup)", st, handOff)
	}
	view := NewCluster([]*corev1.Node{gateNode("a"), gateNode("b")}, nil).Without()
	first, st := s.Place(ctx, view, member("w0"))
	if !st.IsSuccess() {
		t.Fatalf("placing the group's first pod: %v", st)
	}
	// Repack's verdict on a packing (PlaceAmong on the node it chose):
	// the group's pods split over two nodes is refused.
	other := map[string]string{"a": "b", "b": "a"}[first]
	if node, st := s.PlaceAmong(ctx, view, member("w1"), []string{other}); st.IsSuccess() {
		t.Errorf("the group's second pod placed on %s, away from its claim's devices on %s", node, first)
	}
	second, st := s.Place(ctx, view, member("w1"))
	if !st.IsSuccess() || second != first {
		t.Errorf("the group's second pod placed on %q (%v), want %s, where the group's claim was planned for the first", second, st, first)
	}
}
