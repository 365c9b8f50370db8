package simulator

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// gpuClaim is a ResourceClaim for one device of class gpu, at least min
// of memory.
func gpuClaim(name, min string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1, Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: "device.capacity['gpu.example.com'].memory.compareTo(quantity('" + min + "')) >= 0"}}}},
		}}}}}
}

func podWithClaims(name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: c})
	}
	return p
}

// TestDevicesOnAVirtualNodeAreAllocatedOnceAndPlanned runs the scheduler's
// own DynamicResources plugin on a node no real slice names: with the
// virtual node's slice (one 80Gi GPU) it accepts a pod whose claim asks
// for at least 40Gi and refuses one asking for 100Gi; once the first pod's
// allocation is planned, a second pod with a claim of its own finds the
// GPU taken, while a pod sharing the first pod's claim is accepted on that
// node and keeps the plan while it stays; forgetting both frees the GPU.
func TestDevicesOnAVirtualNodeAreAllocatedOnceAndPlanned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubefake.NewClientset(
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		gpuClaim("a", "40Gi"), gpuClaim("b", "40Gi"), gpuClaim("huge", "100Gi"),
	)
	inf := informers.NewSharedInformerFactory(cs, 0)
	base, err := newDRAManager(ctx, cs, inf)
	if err != nil {
		t.Fatal(err)
	}
	template := v1alpha1.ResourceSliceTemplate{Driver: "gpu.example.com", Devices: []resourcev1.Device{{Name: "gpu-0",
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}}}}
	devices := NewDevices(base, func() []*resourcev1.ResourceSlice {
		return nodeshape.ResourceSlices("virtual-1", []v1alpha1.ResourceSliceTemplate{template})
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "virtual-1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}}}
	lister := &viewLister{}
	lister.set(NewCluster([]*corev1.Node{node}, nil).Without())
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	fw, err := New(ctx, devices.Registry(plugins.NewInTreeRegistry()), &cfg.Profiles[0],
		frameworkruntime.WithClientSet(cs), frameworkruntime.WithInformerFactory(inf),
		frameworkruntime.WithSharedDRAManager(devices), frameworkruntime.WithSnapshotSharedLister(lister))
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	// The claims reach the assume cache through its event handler, which
	// may run after the informer says it has synced.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		claims, err := devices.ResourceClaims().List()
		return err == nil && len(claims) == 3, nil
	}); err != nil {
		t.Fatalf("the three claims never reached the DRA manager: %v", err)
	}

	fits := func(pod *corev1.Pod) (fwk.CycleState, *fwk.Status) {
		t.Helper()
		state := framework.NewCycleState()
		nodes, err := lister.NodeInfos().List()
		if err != nil {
			t.Fatal(err)
		}
		if _, s, _ := fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() {
			return state, s
		}
		return state, fw.RunFilterPlugins(ctx, state, pod, nodes[0])
	}
	a := podWithClaims("pa", "a")
	state, s := fits(a)
	if !s.IsSuccess() {
		t.Fatalf("a pod asking for a 40Gi GPU on a virtual node with an 80Gi one: %v", s)
	}
	if s := devices.Plan(ctx, state, a, "virtual-1"); !s.IsSuccess() || devices.Planned() != 1 {
		t.Fatalf("planning pa's claim: %v, %d planned, want 1", s, devices.Planned())
	}
	if _, s := fits(podWithClaims("phuge", "huge")); s.IsSuccess() {
		t.Error("a pod asking for a 100Gi GPU fits a node whose one GPU has 80Gi")
	}
	if _, s := fits(podWithClaims("pb", "b")); s.IsSuccess() {
		t.Error("a second pod with a claim of its own fits the virtual node whose one GPU pa plans to use")
	}
	a2 := podWithClaims("pa2", "a")
	state2, s := fits(a2)
	if !s.IsSuccess() {
		t.Errorf("a pod sharing pa's claim does not fit the node the claim is planned on: %v", s)
	}
	if s := devices.Plan(ctx, state2, a2, "virtual-1"); !s.IsSuccess() || devices.Planned() != 1 {
		t.Errorf("planning pa2, which shares pa's claim: %v, %d planned, want the one claim", s, devices.Planned())
	}
	if claim, err := devices.ResourceClaims().Get("default", "a"); err != nil || claim.Status.Allocation == nil || len(claim.Status.ReservedFor) != 2 {
		t.Errorf("claim a as the simulation reads it: %v (err %v), want planned and reserved for pa and pa2", claim, err)
	}
	if real, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "a", metav1.GetOptions{}); err != nil || real.Status.Allocation != nil {
		t.Errorf("claim a in the API: %v (err %v), want it left unallocated", real.Status, err)
	}
	devices.Forget(a.UID)
	if _, s := fits(podWithClaims("pb", "b")); s.IsSuccess() {
		t.Error("pa left, but pa2 still shares the claim: pb fits the GPU it plans on")
	}
	devices.Forget(a2.UID)
	if _, s := fits(podWithClaims("pb", "b")); !s.IsSuccess() {
		t.Errorf("once pa's and pa2's plans are forgotten, pb does not fit: %v", s)
	}
}
