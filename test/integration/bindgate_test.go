package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/plugin/registry"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/controllers/nodeclaim"
	"github.com/nodeforge/nodeforge/simulator"
)

// failsForLabel is a Filter plugin that cannot judge a pod labelled
// gate=error: it returns an Error, as a plugin whose lister has not
// synced, or a webhook-backed plugin that timed out, would.
type failsForLabel struct{}

func (failsForLabel) Name() string { return "FailsForLabel" }

func (failsForLabel) Filter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ fwk.NodeInfo) *fwk.Status {
	if pod.Labels["gate"] == "error" {
		return fwk.AsStatus(errors.New("injected: cannot judge this pod"))
	}
	return nil
}

// TestABindGateErrorIsThePodsOwn (issue 31, defect 9): of two pods
// nominated to one claim, the gate cannot judge the first. The second is
// bound at once all the same; the first is tried again until the claim's
// initialization deadline, then sent back to the scheduler with an Event,
// and the claim is Initialized.
func TestABindGateErrorIsThePodsOwn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []v1alpha1.InstanceType{instanceType("e1", 8)}
	createLimitedPool(t, "gate-error", 100, types)
	reg, err := registry.All(registry.WithPlugin("FailsForLabel", func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return failsForLabel{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	profile := &defaults.Profiles[0]
	profile.Plugins.Filter.Enabled = append(profile.Plugins.Filter.Enabled, config.Plugin{Name: "FailsForLabel"})
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	gate, err := simulator.NewGate(ctx, reg, cs, profile, v1alpha1.TaintBinding)
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	const deadline = 4 * time.Second
	startLifecycle(t, ctx, cloudfake.New(), func(o *nodeclaim.Options) { o.Gate, o.InitializationTTL = gate, deadline })
	nc := launchingClaim("gate-error-1", "gate-error", types)
	if err := kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	// The pod the gate cannot judge is the older: the binding pass
	// meets it first.
	troubled := nominatedPod(t, ctx, "troubled", nc.Name, small, func(p *corev1.Pod) { p.Labels = map[string]string{"gate": "error"} })
	time.Sleep(10 * time.Millisecond)
	fine := nominatedPod(t, ctx, "fine", nc.Name, small)
	waitFor(t, ctx, "the claim launched", claimIn(nc.Name, v1alpha1.NodeClaimLaunched, nc))
	node := registerNode(t, ctx, "gate-error-node", nc, []corev1.Taint{{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}}, types[0].Allocatable, true)
	waitFor(t, ctx, "the pod the gate can judge bound", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		err := kube.Get(ctx, client.ObjectKeyFromObject(fine), &p)
		return err == nil && p.Spec.NodeName == node.Name, err
	})
	var now v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), &now); err != nil {
		t.Fatal(err)
	}
	registered := registeredAt(&now)
	if now.Status.Phase == v1alpha1.NodeClaimInitialized && time.Since(registered) < deadline {
		t.Errorf("the claim was Initialized %s after registering, before its deadline (%s), while a pod was still being tried", time.Since(registered).Round(time.Millisecond), deadline)
	}
	waitFor(t, ctx, "the claim initialized", claimIn(nc.Name, v1alpha1.NodeClaimInitialized, nc))
	var p corev1.Pod
	if err := kube.Get(ctx, client.ObjectKeyFromObject(troubled), &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Errorf("the pod the gate could not judge is bound to %q, nominated to %q; want it sent back to the scheduler", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
	waitFor(t, ctx, "a NominationCleared Event on the troubled pod", hasEvent(troubled.Name, v1alpha1.ReasonNominationCleared))
}

func registeredAt(nc *v1alpha1.NodeClaim) time.Time {
	for _, c := range nc.Status.Conditions {
		if c.Type == "Registered" {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
