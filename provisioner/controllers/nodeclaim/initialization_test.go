package nodeclaim

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// readyNodeWith is a Ready node named n1 with allocatable and taints.
func readyNodeWith(allocatable corev1.ResourceList, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       corev1.NodeSpec{ProviderID: "fake:///zone-a/i-1", Taints: taints},
		Status: corev1.NodeStatus{
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: allocatable,
		},
	}
}

var uninitialized = corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// TestNodeIsNotReadyForPodsUntilEveryStartupTaintIsLifted: the cloud
// provider's uninitialised taint is waited for as the not-ready taint and
// the claim's startup taints are, each named with who lifts it; a taint
// that only prefers pods elsewhere, or one the claim does not list, is not.
func TestNodeIsNotReadyForPodsUntilEveryStartupTaintIsLifted(t *testing.T) {
	nc := poolClaim().Phase(v1alpha1.NodeClaimRegistered).StartupTaint("example.com/agent-not-ready", corev1.TaintEffectNoExecute).Obj()
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		want   string
	}{
		{"no taint left", nil, ""},
		{"the cloud controller manager has not initialised the node", []corev1.Taint{uninitialized},
			"taint node.cloudprovider.kubernetes.io/uninitialized:NoSchedule to be lifted by the cloud controller manager"},
		{"the uninitialised taint with another effect is waited for too",
			[]corev1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Effect: corev1.TaintEffectNoExecute}}, "cloud controller manager"},
		{"the uninitialised taint only preferring pods elsewhere holds nothing",
			[]corev1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Effect: corev1.TaintEffectPreferNoSchedule}}, ""},
		{"the not-ready taint beside it is waited for too",
			[]corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}, uninitialized}, "to be lifted by the"},
		{"the pool's startup taint", []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}},
			"startup taint example.com/agent-not-ready:NoExecute to be removed"},
		{"a startup taint's key with another effect is not the claim's",
			[]corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}}, ""},
		{"the binding taint is Nodeforge's own and lifted after binding",
			[]corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notReadyForPods(readyNodeWith(nil, tc.taints...), nc)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("notReadyForPods = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNodeWaitsOnlyForTheExtendedResourcesItsPodsRequest: the node's
// type promises a GPU and pod ENIs, but pod ENIs appear only where the
// cluster enables them: a claim whose pods request only the GPU is ready
// once the GPU is in allocatable, as many as they request.
func TestNodeWaitsOnlyForTheExtendedResourcesItsPodsRequest(t *testing.T) {
	const gpu, podENI = corev1.ResourceName("nvidia.com/gpu"), corev1.ResourceName("vpc.amazonaws.com/pod-eni")
	q := resource.MustParse
	for _, tc := range []struct {
		name        string
		requests    corev1.ResourceList
		allocatable corev1.ResourceList
		want        string
	}{
		{"a resource promised but not requested is not waited for",
			corev1.ResourceList{corev1.ResourceCPU: q("1"), gpu: q("1")}, corev1.ResourceList{corev1.ResourceCPU: q("2"), gpu: q("1")}, ""},
		{"a requested resource not yet registered is waited for",
			corev1.ResourceList{gpu: q("1")}, corev1.ResourceList{corev1.ResourceCPU: q("2")}, "1 nvidia.com/gpu in allocatable"},
		{"fewer than requested registered is waited on",
			corev1.ResourceList{gpu: q("2")}, corev1.ResourceList{gpu: q("1")}, "2 nvidia.com/gpu in allocatable"},
		{"a requested pod ENI is waited for like any device",
			corev1.ResourceList{podENI: q("1")}, corev1.ResourceList{gpu: q("1")}, "1 vpc.amazonaws.com/pod-eni in allocatable"},
		{"a zero request is no request", corev1.ResourceList{gpu: q("0")}, nil, ""},
		{"cpu, memory and pods are the kubelet's from registration, not waited for",
			corev1.ResourceList{corev1.ResourceCPU: q("3"), corev1.ResourceMemory: q("1Gi")}, corev1.ResourceList{corev1.ResourceCPU: q("2")}, ""},
		{"no requests", nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := poolClaim().Phase(v1alpha1.NodeClaimRegistered).Obj()
			nc.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: q("2"), gpu: q("1"), podENI: q("9")}
			nc.Spec.Resources.Requests = tc.requests
			got := notReadyForPods(readyNodeWith(tc.allocatable), nc)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("notReadyForPods = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUninitialisedNodeHoldsItsPodsUntilTheDeadline: while the cloud
// controller manager has not initialised the node, initialization binds
// nothing and leaves the pods nominated (the bind gate would refuse them
// all, and the refusals would send them to a second node); past the
// initialization deadline the claim is given up.
func TestUninitialisedNodeHoldsItsPodsUntilTheDeadline(t *testing.T) {
	ctx := context.Background()
	nc := poolClaim().Phase(v1alpha1.NodeClaimRegistered).ProviderID("fake:///zone-a/i-1").NodeName("n1").Obj()
	registered := metav1.NewTime(time.Now())
	nc.Status.Conditions = []metav1.Condition{{Type: "Registered", Status: metav1.ConditionTrue, Reason: "Registered", LastTransitionTime: registered}}
	node := readyNodeWith(nil, uninitialized, corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule})
	pod := nominated("p", nc.Name)
	s := newSteps(t, nc, node, pod)
	s.now = registered.Add(30 * time.Second)

	res, err := s.c.initializer.reconcile(ctx, s.get(t, nc))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter == 0 {
		t.Errorf("initialize of an uninitialised node: %+v, want it to look again soon", res)
	}
	var got corev1.Pod
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.NominatedNodeName != nc.Name || got.Spec.NodeName != "" {
		t.Errorf("pod nominated to %q, bound to %q; want it still nominated to %s, unbound", got.Status.NominatedNodeName, got.Spec.NodeName, nc.Name)
	}
	if c := s.get(t, nc); c.Status.Phase != v1alpha1.NodeClaimRegistered {
		t.Errorf("claim in phase %s, want it still Registered", c.Status.Phase)
	}

	s.now = registered.Add(time.Minute + time.Second) // InitializationTTL is a minute
	if _, err := s.c.initializer.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{}); err == nil {
		t.Error("the claim of a node never initialised outlived its initialization deadline")
	}
}
