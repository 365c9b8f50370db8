package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/controllers/nodeclaim"
)

const agentNotReady = "example.com/agent-not-ready"

// gpuType is an instance type whose nodes promise one nvidia.com/gpu,
// which a device plugin registers after the node is Ready.
func gpuType() v1alpha1.InstanceType {
	it := instanceType("g1", 8)
	it.Capacity["nvidia.com/gpu"] = resource.MustParse("1")
	it.Allocatable["nvidia.com/gpu"] = resource.MustParse("1")
	return it
}

// nominatedPod makes a pending pod nominated to claim, as the scheduler
// leaves it after VirtualNodes' PostFilter.
func nominatedPod(t *testing.T, ctx context.Context, name, claim string, requests corev1.ResourceList, edits ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if err := kube.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		SchedulerName: "nodeforge-scheduler", AutomountServiceAccountToken: new(bool),
		Tolerations: []corev1.Toleration{{Key: agentNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64)}},
		Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests}}},
	}}
	// The toleration for zero seconds is what a pod gets evicted by: it
	// tolerates being scheduled onto the tainted node, not staying there.
	for _, edit := range edits {
		edit(pod)
	}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.NominatedNodeName = claim
	if err := kube.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	return pod
}

// registerNode plays the kubelet of the claim's instance: it registers a
// Node with the claim's providerID, the given taints and allocatable, and
// Ready as given.
func registerNode(t *testing.T, ctx context.Context, name string, nc *v1alpha1.NodeClaim, taints []corev1.Taint, allocatable corev1.ResourceList, ready bool) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: nc.Spec.NodePool}},
		Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID, Taints: taints}}
	if err := kube.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	deleteNodeAtEnd(t, node)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	setNode(t, ctx, node, func(n *corev1.Node) {
		n.Status.Capacity, n.Status.Allocatable = allocatable, allocatable
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if ready {
			// The node lifecycle controller's part: lift the not-ready
			// taint the API server put on the new node.
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		}
	})
	return node
}

// deleteNodeAtEnd removes the node, finalizers and all, when the test ends.
func deleteNodeAtEnd(t *testing.T, node *corev1.Node) {
	t.Cleanup(func() {
		ctx := context.Background()
		if kube.Get(ctx, client.ObjectKeyFromObject(node), node) == nil {
			node.Finalizers = nil
			_ = kube.Update(ctx, node)
		}
		_ = kube.Delete(ctx, node)
	})
}

// setNode edits the node (its spec, then its status) on the latest
// version: the provisioner writes it too when it adopts it.
func setNode(t *testing.T, ctx context.Context, node *corev1.Node, edit func(*corev1.Node)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		edit(node)
		if err := kube.Update(ctx, node); err != nil {
			return err
		}
		edit(node)
		return kube.Status().Update(ctx, node)
	}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func claimIn(name string, phase v1alpha1.NodeClaimPhase, into *v1alpha1.NodeClaim) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: name}, into)
		return err == nil && into.Status.Phase == phase, client.IgnoreNotFound(err)
	}
}

func gone(obj client.Object) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
}

func hasEvent(regarding, reason string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := kube.List(ctx, &evs); err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Regarding.Name == regarding && e.Reason == reason }), nil
	}
}

// stillWaiting checks, over a few reconciles, that the pod is neither
// bound nor sent back (its nomination cleared) and the claim not
// initialized: the node is not ready for it yet.
func stillWaiting(t *testing.T, ctx context.Context, pod *corev1.Pod, nc *v1alpha1.NodeClaim, why string) {
	t.Helper()
	for range 6 {
		time.Sleep(500 * time.Millisecond) // the controller looks again every 500 ms
		var p corev1.Pod
		if err := kube.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || p.Status.NominatedNodeName != nc.Name {
			t.Fatalf("%s: pod bound to %q, nominated to %q; want it to wait for the node, nominated to %s", why, p.Spec.NodeName, p.Status.NominatedNodeName, nc.Name)
		}
		var now v1alpha1.NodeClaim
		if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), &now); err != nil || now.Status.Phase != v1alpha1.NodeClaimRegistered {
			t.Fatalf("%s: claim phase %q (err %v), want Registered", why, now.Status.Phase, err)
		}
	}
}

// TestBindWaitsUntilTheNodeIsReadyForPods registers a GPU node Ready but
// with a NoExecute startup taint its CNI agent lifts later and without the
// GPU its device plugin registers later. The nominated GPU pod is bound
// only once both happened: not before the taint is gone (the taint manager
// would evict it), and not sent back for lack of a GPU (a second node
// would be launched).
func TestBindWaitsUntilTheNodeIsReadyForPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []v1alpha1.InstanceType{gpuType()}
	createLimitedPool(t, "ready-gate", 100, types, func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.StartupTaints = []v1alpha1.Taint{{Key: agentNotReady, Effect: corev1.TaintEffectNoExecute}}
	})
	startLifecycle(t, ctx, cloudfake.New())
	nc := launchingClaim("ready-gate-1", "ready-gate", types)
	nc.Spec.StartupTaints = []corev1.Taint{{Key: agentNotReady, Effect: corev1.TaintEffectNoExecute}}
	// What VirtualNodes writes for the pod nominated below: the GPU is
	// waited for because the pod requests it.
	nc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}
	if err := kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	pod := nominatedPod(t, ctx, "gpu-pod", nc.Name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")})

	waitFor(t, ctx, "the claim launched", claimIn(nc.Name, v1alpha1.NodeClaimLaunched, nc))
	noGPU := instanceType("g1", 8).Allocatable
	node := registerNode(t, ctx, "ready-gate-node", nc, []corev1.Taint{
		{Key: agentNotReady, Effect: corev1.TaintEffectNoExecute},
		{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule},
	}, noGPU, true)
	waitFor(t, ctx, "the claim registered", claimIn(nc.Name, v1alpha1.NodeClaimRegistered, nc))
	stillWaiting(t, ctx, pod, nc, "startup taint on, no GPU")

	// The CNI agent is up: it lifts its taint.
	setNode(t, ctx, node, func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == agentNotReady })
	})
	stillWaiting(t, ctx, pod, nc, "taint lifted, no GPU yet")

	// The device plugin registers the GPU.
	setNode(t, ctx, node, func(n *corev1.Node) {
		n.Status.Allocatable, n.Status.Capacity = gpuType().Allocatable, gpuType().Capacity
	})
	waitFor(t, ctx, "the pod bound to the node", func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		return err == nil && pod.Spec.NodeName == node.Name, err
	})
	waitFor(t, ctx, "the claim initialized, the binding taint lifted", func(ctx context.Context) (bool, error) {
		if ok, err := claimIn(nc.Name, v1alpha1.NodeClaimInitialized, nc)(ctx); !ok || err != nil {
			return false, err
		}
		err := kube.Get(ctx, client.ObjectKeyFromObject(node), node)
		return err == nil && !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding }), err
	})
}

// TestDeadlines: a claim whose launches keep failing, and one whose node
// registers but never becomes Ready, are each deleted after their
// deadline, with Events on the claim and its pod saying why; the second's
// instance is terminated and its node gone.
func TestDeadlines(t *testing.T) {
	types := []v1alpha1.InstanceType{instanceType("d1", 2)}
	createLimitedPool(t, "deadlines", 100, types)
	short := func(o *nodeclaim.Options) { o.LaunchTTL, o.InitializationTTL = 3*time.Second, 3*time.Second }

	t.Run("launches keep failing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cloud := cloudfake.New()
		cloud.FailLaunches(errors.New("fake: the launch failed"))
		startLifecycle(t, ctx, cloud, short)
		nc := launchingClaim("deadlines-launch", "deadlines", types)
		if err := kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		nominatedPod(t, ctx, "launch-fails", nc.Name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
		waitFor(t, ctx, "the claim deleted", gone(nc))
		waitFor(t, ctx, "a LaunchTimeout event on the claim", hasEvent(nc.Name, v1alpha1.ReasonLaunchTimeout))
		waitFor(t, ctx, "a LaunchTimeout event on the pod", hasEvent("launch-fails", v1alpha1.ReasonLaunchTimeout))
	})

	t.Run("node never Ready", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cloud := cloudfake.New()
		startLifecycle(t, ctx, cloud, short)
		nc := launchingClaim("deadlines-init", "deadlines", types)
		if err := kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		nominatedPod(t, ctx, "never-ready", nc.Name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
		waitFor(t, ctx, "the claim launched", claimIn(nc.Name, v1alpha1.NodeClaimLaunched, nc))
		node := registerNode(t, ctx, "deadlines-node", nc, []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}, types[0].Allocatable, false)
		providerID := nc.Status.ProviderID
		waitFor(t, ctx, "the claim deleted", gone(nc))
		waitFor(t, ctx, "an InitializationTimeout event on the claim", hasEvent(nc.Name, v1alpha1.ReasonInitializationTimeout))
		waitFor(t, ctx, "an InitializationTimeout event on the pod", hasEvent("never-ready", v1alpha1.ReasonInitializationTimeout))
		waitFor(t, ctx, "the node deleted", gone(node))
		if _, err := cloud.Get(ctx, providerID); !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Errorf("instance %s still runs (err %v)", providerID, err)
		}
	})
}

// TestBindGateIsTheSchedulers registers a ready node for a claim with
// three nominated pods: two that both want host port 80, and one whose
// node affinity the node does not meet. The first port-80 pod is bound;
// the second is refused by NodePorts, counting the pod just bound, and the
// third by NodeAffinity: both go back to the scheduler with an Event
// naming the plugin, as kube-scheduler itself would refuse them there.
func TestBindGateIsTheSchedulers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []v1alpha1.InstanceType{instanceType("b1", 8)}
	createLimitedPool(t, "bind-gate", 100, types)
	startLifecycle(t, ctx, cloudfake.New())
	nc := launchingClaim("bind-gate-1", "bind-gate", types)
	if err := kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	withPort := func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: corev1.ProtocolTCP}}
	}
	first := nominatedPod(t, ctx, "port-1", nc.Name, small, withPort)
	second := nominatedPod(t, ctx, "port-2", nc.Name, small, withPort)
	picky := nominatedPod(t, ctx, "picky", nc.Name, small, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "team", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}}},
		}}}
	})
	waitFor(t, ctx, "the claim launched", claimIn(nc.Name, v1alpha1.NodeClaimLaunched, nc))
	node := registerNode(t, ctx, "bind-gate-node", nc, []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}, types[0].Allocatable, true)
	waitFor(t, ctx, "the claim initialized", claimIn(nc.Name, v1alpha1.NodeClaimInitialized, nc))
	for _, want := range []struct {
		pod    *corev1.Pod
		bound  bool
		plugin string
	}{{first, true, ""}, {second, false, "NodePorts"}, {picky, false, "NodeAffinity"}} {
		var p corev1.Pod
		if err := kube.Get(ctx, client.ObjectKeyFromObject(want.pod), &p); err != nil {
			t.Fatal(err)
		}
		if (p.Spec.NodeName == node.Name) != want.bound {
			t.Errorf("pod %s bound to %q; want bound=%v", p.Name, p.Spec.NodeName, want.bound)
		}
		if want.bound {
			continue
		}
		if p.Status.NominatedNodeName != "" {
			t.Errorf("pod %s is still nominated to %s", p.Name, p.Status.NominatedNodeName)
		}
		waitFor(t, ctx, "a NominationCleared event naming "+want.plugin+" on "+p.Name, func(ctx context.Context) (bool, error) {
			var evs eventsv1.EventList
			if err := kube.List(ctx, &evs); err != nil {
				return false, err
			}
			return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == p.Name && e.Reason == v1alpha1.ReasonNominationCleared && strings.Contains(e.Note, "scheduler plugin "+want.plugin)
			}), nil
		})
	}
}
