package simulator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestSnapshotCountsEachPodWhereItWillRun: bound pods stay put; a pod
// nominated to a claim counts on the claim's node, or on the claim's
// launching node; a pod nominated to a node counts there; pods nominated
// to a skipped claim or to nothing known, and finished pods, do not
// count; the binding taint is lifted and nothing given is changed.
func TestSnapshotCountsEachPodWhereItWillRun(t *testing.T) {
	const binding = "example.com/binding"
	held := gateNode("held", corev1.Taint{Key: binding, Effect: corev1.TaintEffectNoSchedule}, corev1.Taint{Key: "other", Effect: corev1.TaintEffectNoSchedule})
	open := gateNode("open")
	launching := gateNode("claim-l")
	pod := func(name, node, nominated string, phase corev1.PodPhase) *corev1.Pod {
		return testobj.Pod(name).Node(node).Nominated(nominated).Phase(phase).Obj()
	}
	pods := []*corev1.Pod{
		pod("bound", "open", "", corev1.PodRunning),
		pod("to-claim", "", "claim-a", corev1.PodPending),
		pod("to-launching", "", "claim-l", corev1.PodPending),
		pod("to-node", "", "held", corev1.PodPending),
		pod("to-batch", "", "claim-b", corev1.PodPending),
		pod("to-nothing", "", "claim-x", corev1.PodPending),
		pod("finished", "open", "", corev1.PodSucceeded),
	}
	nodes, counted := Snapshot([]*corev1.Node{held, open}, pods, SnapshotOptions{
		LiftTaint:  binding,
		ClaimNodes: map[string]string{"claim-a": "open", "claim-b": "held"},
		Launching:  []*corev1.Node{launching},
		Skip:       map[string]bool{"claim-b": true},
	})
	want := map[string]string{"bound": "open", "to-claim": "open", "to-launching": "claim-l", "to-node": "held"}
	got := map[string]string{}
	for _, p := range counted {
		got[p.Name] = p.Spec.NodeName
	}
	if len(got) != len(want) {
		t.Errorf("counted %v, want %v", got, want)
	}
	for name, node := range want {
		if got[name] != node {
			t.Errorf("pod %s counts on %q, want %q", name, got[name], node)
		}
	}
	if len(nodes) != 3 || nodes[2].Name != "claim-l" {
		t.Fatalf("nodes %d, want the two given and the launching one", len(nodes))
	}
	if ts := nodes[0].Spec.Taints; len(ts) != 1 || ts[0].Key != "other" {
		t.Errorf("held node's taints %v, want only the other one", ts)
	}
	if len(held.Spec.Taints) != 2 || pods[1].Spec.NodeName != "" {
		t.Error("Snapshot changed a node or pod it was given")
	}
}
