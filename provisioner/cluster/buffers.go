package cluster

import (
	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
)

// ServesBuffer says whether Nodeforge keeps b: its strategy is unset or
// buffer.x-k8s.io/active-capacity. Buffers of any other strategy are
// someone else's, and left alone entirely.
func ServesBuffer(b *bufferv1beta1.CapacityBuffer) bool {
	s := b.Spec.ProvisioningStrategy
	return s == nil || *s == bufferv1beta1.StrategyActiveCapacity
}
