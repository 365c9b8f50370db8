package simulator

import (
	"cmp"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// BindOrder is the order pods nominated to one node are bound in, and the
// order a repack replays a batch in: the order the scheduler's queue takes
// pending pods (higher priority first, then older), ties broken by
// namespace and name so that which of two pods that cannot share a node
// is bound does not depend on a cache's order.
func BindOrder(a, b *corev1.Pod) int {
	return cmp.Or(
		cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)),
		a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name),
	)
}
