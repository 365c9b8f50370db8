package registry

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"

	"github.com/nodeforge/nodeforge/plugin/gatedpreemption"
	"github.com/nodeforge/nodeforge/plugin/refusenodes"
	"github.com/nodeforge/nodeforge/simulator"
)

func nothing(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return nil, nil }

func TestAllHasInTreeNodeforgesAndTheUsers(t *testing.T) {
	r, err := All(WithPlugin("Mine", nothing))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"NodeResourcesFit", "PodTopologySpread", "InterPodAffinity", "VolumeBinding", "DynamicResources", refusenodes.Name, gatedpreemption.Name, "Mine"} {
		if _, ok := r[name]; !ok {
			t.Errorf("registry lacks %s", name)
		}
	}
}

func TestOutOfTreeHasNoInTreePlugin(t *testing.T) {
	r, err := OutOfTree(WithPlugin("Mine", nothing))
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 3 {
		t.Errorf("out-of-tree registry %v, want RefuseNodes, GatedPreemption and Mine", keys(r))
	}
}

func TestAPluginNamedLikeAnotherIsRefused(t *testing.T) {
	for _, name := range []string{"NodeResourcesFit", refusenodes.Name, gatedpreemption.Name} {
		if _, err := All(WithPlugin(name, nothing)); err == nil {
			t.Errorf("a second %s was accepted", name)
		}
	}
	if _, err := All(WithPlugin("Mine", nothing), WithPlugin("Mine", nothing)); err == nil {
		t.Error("the same plugin added twice was accepted")
	}
}

func keys[M ~map[string]V, V any](m M) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// refuseZoneA is a user's own Filter plugin: it refuses every node in
// zone-a.
type refuseZoneA struct{}

func (refuseZoneA) Name() string { return "RefuseZoneA" }

func (refuseZoneA) Filter(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if ni.Node().Labels[corev1.LabelTopologyZone] == "zone-a" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "zone-a is refused")
	}
	return nil
}

// TestAUsersPluginCountsInTheBindGate: the provisioner's bind gate, built
// from All with the user's plugin and a profile that enables it, refuses
// to bind a pod where the plugin refuses it, and binds it elsewhere.
func TestAUsersPluginCountsInTheBindGate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := All(WithPlugin("RefuseZoneA", func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return refuseZoneA{}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	profile := &cfg.Profiles[0]
	profile.Plugins.Filter.Enabled = append(profile.Plugins.Filter.Enabled, config.Plugin{Name: "RefuseZoneA"})
	a, b := zoneNode("a", "zone-a"), zoneNode("b", "zone-b")
	gate, err := simulator.NewGate(ctx, reg, kubefake.NewClientset(a, b), profile, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if s, _ := gate.Check(ctx, pod, a, nil); s.IsSuccess() || s.Plugin() != "RefuseZoneA" {
		t.Errorf("the gate let the pod onto a zone-a node (%v, plugin %q); the user's plugin refuses it", s.Code(), s.Plugin())
	}
	if s, _ := gate.Check(ctx, pod, b, nil); !s.IsSuccess() {
		t.Errorf("the gate refused the pod on a zone-b node: %s %s", s.Plugin(), s.Message())
	}
}

func zoneNode(name, zone string) *corev1.Node {
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: zone}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}
