package virtualnodes

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// retry is what the decision chose for a pod the scheduler tried again
// while it is nominated to a claim.
type retry uint8

const (
	// retryAfresh: the pod leaves its claim and is placed again.
	retryAfresh retry = iota
	// retryKeep: the pod keeps its claim.
	retryKeep
	// retryFollow: the pod follows to the claim its nomination names, which
	// the provisioner moved it to (book.follow).
	retryFollow
	// retryHandOff: the pod keeps its nomination to its claim's node.
	retryHandOff
	// retryBound: the pod was bound meanwhile; there is nothing to decide.
	retryBound
)

// retried chooses for pod, which the scheduler tried again while it is
// nominated to claim c. It reads the book, the view and the pod informer,
// and changes nothing: the caller applies the choice.
func (d *decider) retried(ctx context.Context, pod *corev1.Pod, c *claim) retry {
	logger := klog.FromContext(ctx)
	node := pod.Status.NominatedNodeName
	// The provisioner moved it to another claim of its batch (a repack),
	// and the scheduler saw that before this plugin did.
	if node != "" && node != c.name && d.book.moves(pod, node) {
		return retryFollow
	}
	switch {
	case (c.open || node == "" || node == c.name) && !d.openAndRefusing(c):
		// A pod retried while its claim is open, or launching, keeps it:
		// its node is coming, and a second claim would launch a second
		// node.
		logger.V(4).Info("Pod keeps its nomination", "pod", klog.KObj(pod), "nodeClaim", c.name, "open", c.open)
		return retryKeep
	case d.boundMeanwhile(pod):
		// The provisioner bound the pod after the scheduler took it from
		// its queue: the cycle's copy is older than the informer's, and
		// the open node refused a pod that is already on it. Nothing to
		// decide (a new claim would stay empty); the bind's event takes
		// the pod off its claim (podGone). kube-scheduler reads its
		// informer so too before it queues a failed pod again.
		logger.V(4).Info("Pod was bound meanwhile; not deciding it afresh", "pod", klog.KObj(pod), "nodeClaim", c.name)
		return retryBound
	case c.open || node == "" || node == c.name:
		// The claim's node is up and open, its binding done, and the
		// scheduler's filters refused the pod on it (PostFilter runs only
		// then): the pod came to the claim after the provisioner read the
		// claim's pods, in a nomination written late (an API server down
		// meanwhile), and nothing will bind it there.
		logger.Info("Pod nominated to a claim whose node is open and does not fit it; deciding it afresh", "pod", klog.KObj(pod), "nodeClaim", c.name, "node", c.nodeName)
		return retryAfresh
	case d.book.wasRepacked(node):
		// The pod's object still names the claim it was moved from.
		return retryKeep
	case d.heldForBinding(node):
		// The provisioner handed the pod to the scheduler, nominated to
		// its claim's node, for a binding cycle (volumes to provision,
		// devices to allocate). While the node is held for binding it
		// keeps that nomination; once the node is open and still refuses
		// the pod, the pod is decided afresh.
		logger.V(4).Info("Pod keeps its nomination to its claim's node until the node is open", "pod", klog.KObj(pod), "nodeClaim", c.name, "node", node)
		return retryHandOff
	default:
		logger.Info("Pod handed to the scheduler does not fit its claim's node; deciding it afresh", "pod", klog.KObj(pod), "nodeClaim", c.name, "node", node)
		return retryAfresh
	}
}

// openAndRefusing reports whether claim c is closed and its node is in
// the scheduler's snapshot without the binding taint: a pod nominated to
// c that reaches PostFilter was refused by that node.
func (d *decider) openAndRefusing(c *claim) bool {
	if c.open || c.nodeName == "" || d.view.real == nil {
		return false
	}
	if ni, err := d.view.real.Get(c.nodeName); err != nil || ni.Node() == nil {
		return false
	}
	return !d.heldForBinding(c.nodeName)
}

// boundMeanwhile says whether the scheduler's pod informer has pod bound
// to a node, though the scheduling cycle's copy is not.
func (d *decider) boundMeanwhile(pod *corev1.Pod) bool {
	if d.pods == nil || pod.Spec.NodeName != "" {
		return false
	}
	cached, err := d.pods.Pods(pod.Namespace).Get(pod.Name)
	return err == nil && cached.UID == pod.UID && cached.Spec.NodeName != ""
}

// heldForBinding: the real node still carries the provisioner's binding
// taint in the scheduler's snapshot (or the snapshot is not known yet).
func (d *decider) heldForBinding(name string) bool {
	if d.view.real == nil {
		return true
	}
	ni, err := d.view.real.Get(name)
	if err != nil || ni.Node() == nil {
		return false
	}
	return slices.ContainsFunc(ni.Node().Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding })
}
