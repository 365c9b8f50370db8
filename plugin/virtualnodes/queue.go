package virtualnodes

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// What keeps a nominated pod out of the scheduler's queue.
//
// A pod VirtualNodes nominated to a claim can go nowhere but that claim's
// node (Filter), and the provisioner binds it there itself. Tried again
// before then, it only makes the same nomination again, with a status
// PATCH and an Event, on a machine whose API server is the bottleneck of
// a scale-up. And it would be tried again often: NodeResourcesFit's
// queueing hint sees room on every node that registers or loses a taint,
// and a plugin without hints of its own counts as interested in every
// event.
//
// So the pod waits outside the queue, gated by PreEnqueue, until its
// claim's node is open (its binding taint lifted: the provisioner has
// bound what it could and hands the rest, pods with volumes to provision,
// say, to the scheduler) or until it is nominated nowhere: its claim
// deleted, its nomination cleared. Every way out of a claim already sends
// the pod back through activate (forget, nominationCleared); the node
// opening is seen through the queueing hint below, and through
// claimChanged when the claim's node is learned after it opened.
//
// Locking: the scheduling queue calls PreEnqueue and the queueing hints
// under its own lock, and VirtualNodes calls activate, which takes that
// lock, while holding p.mu. Both therefore read only the book (whose lock
// is a leaf: the book calls nothing) and the node informer's store, never
// p.mu.

var (
	_ fwk.PreEnqueuePlugin  = &VirtualNodes{}
	_ fwk.EnqueueExtensions = &VirtualNodes{}
)

// PreEnqueue keeps a pod nominated to a claim out of the active queue
// until the claim's node is open.
func (p *VirtualNodes) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	n := p.nominationOf(pod)
	if n == nil || p.nodeOpen(n.node) || p.nodeOpen(pod.Status.NominatedNodeName) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "waiting for the node of nodeclaim "+n.claim+", which the pod is nominated to")
}

// EventsToRegister: a node added or with its taints changed may be the
// open node of a gated pod's claim. Nothing else this plugin refuses a pod
// for is changed by an event the scheduler sees; the plugin sends those
// pods back itself (activate).
func (p *VirtualNodes) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{{
		Event:          fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeTaint},
		QueueingHintFn: p.claimNodeOpened,
	}}, nil
}

// claimNodeOpened says Queue when node is open and is the node of the
// claim pod is nominated to, or when the pod is nominated to no claim any
// more.
func (p *VirtualNodes) claimNodeOpened(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	node, ok := newObj.(*corev1.Node)
	if !ok {
		return fwk.Queue, nil
	}
	n := p.nominationOf(pod)
	if n == nil {
		return fwk.Queue, nil
	}
	if (node.Name == n.node || node.Name == pod.Status.NominatedNodeName) && !bindingTainted(node) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// nodeOpen says whether the node named name is registered without the
// binding taint.
func (p *VirtualNodes) nodeOpen(name string) bool {
	if name == "" || p.nodes == nil {
		return false
	}
	node, err := p.nodes.Get(name)
	return err == nil && !bindingTainted(node)
}

func bindingTainted(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding })
}
