package simulator

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// SnapshotOptions say how Snapshot counts what is not a pod bound to a
// node: the nodes still held for binding, the pods nominated to claims,
// and the claims that have no node yet. The provisioner's two
// simulations, disruption and packing before launch, differ only here.
type SnapshotOptions struct {
	// LiftTaint is taken off every node that has it: the taint that holds
	// a node while the provisioner binds its pods, which the bind gate
	// lifts too.
	LiftTaint string
	// ClaimNodes maps a claim to its node, for claims that have one: a
	// pod nominated to the claim counts on that node.
	ClaimNodes map[string]string
	// Launching are the nodes of claims that have none yet, each named
	// after its claim: a pod nominated to the claim counts on it. Packing
	// sets them, as the room a launching claim will take is taken for the
	// batch it packs; disruption does not, as it decides nothing while a
	// claim is launching (its pods' nodes are not known yet).
	Launching []*corev1.Node
	// Skip are claims whose nominated pods are not counted: packing
	// places the pods of its own batch anew.
	Skip map[string]bool
}

// CountsOn is the node pod counts on: the node it is bound to; else,
// for a nominated pod, its claim's node, or the node it is nominated to
// when isNode says there is one. "" when it does not count: finished,
// nominated to a skipped claim, or nominated nowhere known.
func (o *SnapshotOptions) CountsOn(p *corev1.Pod, isNode func(string) bool) string {
	if podutil.IsPodTerminal(p) {
		return ""
	}
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	nominated := p.Status.NominatedNodeName
	if nominated == "" || o.Skip[nominated] {
		return ""
	}
	if node := o.ClaimNodes[nominated]; node != "" {
		return node
	}
	if isNode(nominated) {
		return nominated
	}
	return ""
}

// Snapshot is the cluster as the provisioner's simulations count it: the
// nodes, LiftTaint lifted, with the Launching ones, and every pod that
// counts (CountsOn) where it counts; a pod counted on a node it is not
// bound to is a copy with spec.nodeName set. Pass the result to
// NewCluster.
func Snapshot(nodes []*corev1.Node, pods []*corev1.Pod, o SnapshotOptions) ([]*corev1.Node, []*corev1.Pod) {
	all := make([]*corev1.Node, 0, len(nodes)+len(o.Launching))
	names := make(map[string]bool, len(nodes)+len(o.Launching))
	held := func(t corev1.Taint) bool { return t.Key == o.LiftTaint }
	for _, n := range slices.Concat(nodes, o.Launching) {
		if o.LiftTaint != "" && slices.ContainsFunc(n.Spec.Taints, held) {
			n = n.DeepCopy()
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, held)
		}
		all = append(all, n)
		names[n.Name] = true
	}
	isNode := func(name string) bool { return names[name] }
	var out []*corev1.Pod
	for _, p := range pods {
		node := o.CountsOn(p, isNode)
		if node == "" {
			continue
		}
		if p.Spec.NodeName != node {
			p = p.DeepCopy()
			p.Spec.NodeName = node
		}
		out = append(out, p)
	}
	return all, out
}
