package simulator

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
)

func gateNode(name string, taints ...v1.Taint) *v1.Node {
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}}, Spec: v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc, Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
}

func gatePod(name string, port int32) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: apitypes.UID("uid-" + name)}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c",
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}}}}
	if port > 0 {
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: v1.ProtocolTCP}}
	}
	return p
}

// TestGateJudgesAsTheScheduler: the binding taint is not held against a
// pod; other taints are; a pod just bound counts (its host port is taken).
func TestGateJudgesAsTheScheduler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const binding = "example.com/binding"
	cs := fake.NewClientset(
		gateNode("held", v1.Taint{Key: binding, Effect: v1.TaintEffectNoSchedule}),
		gateNode("tainted", v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule}),
	)
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(ctx, cs, &cfg.Profiles[0], binding)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	held := gateNode("held", v1.Taint{Key: binding, Effect: v1.TaintEffectNoSchedule})
	tainted := gateNode("tainted", v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoSchedule})
	if s := g.Check(ctx, gatePod("a", 80), held, nil); !s.IsSuccess() {
		t.Fatalf("pod refused on a node held only by the binding taint: %s %s", s.Plugin(), s.Message())
	}
	if s := g.Check(ctx, gatePod("a", 0), tainted, nil); s.IsSuccess() || s.Plugin() != "TaintToleration" {
		t.Fatalf("pod accepted on a node with an untolerated taint: %v %s", s.Code(), s.Plugin())
	}
	if s := g.Check(ctx, gatePod("b", 80), held, []*v1.Pod{gatePod("a", 80)}); s.IsSuccess() || s.Plugin() != "NodePorts" {
		t.Fatalf("second pod on host port 80 beside one just bound: %v %s %s", s.Code(), s.Plugin(), s.Message())
	}
	// A pod the gate's informer still shows on the node, which the caller
	// knows is gone, does not count there.
	stale := gatePod("stale", 80)
	stale.Spec.NodeName = "held"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := g.pods.Pods("default").Get("stale")
		return err == nil, nil
	}); err != nil {
		t.Fatal("the gate's informer never saw the pod")
	}
	if s := g.Check(ctx, gatePod("b", 80), held, nil); !s.IsSuccess() {
		t.Fatalf("pod refused for a pod the caller no longer sees on the node: %s %s", s.Plugin(), s.Message())
	}
	// The caller saw the taint lifted before the gate's informer did: the
	// caller's node is judged, not the stale copy.
	if s := g.Check(ctx, gatePod("a", 0), gateNode("tainted"), nil); !s.IsSuccess() {
		t.Fatalf("pod refused by the gate's stale copy of the node: %s %s", s.Plugin(), s.Message())
	}
}
