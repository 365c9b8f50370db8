package sandbox

import (
	"context"

	"k8s.io/client-go/rest"
)

// capacityBufferFiles are what the chart installs with
// capacityBuffers.enabled and installCRD.
var capacityBufferFiles = []string{"crd-optional/autoscaling.x-k8s.io_capacitybuffers.yaml", "capacitybuffers/rbac.yaml"}

// keepingCapacityBuffers turns VirtualNodes' capacityBuffers argument on
// in every profile of config that configures VirtualNodes, as the chart
// does.
func keepingCapacityBuffers(config []byte) ([]byte, error) {
	return withVirtualNodesArg(config, "capacityBuffers")
}

// waitCapacityBuffers waits until the API server serves CapacityBuffers.
func waitCapacityBuffers(ctx context.Context, cfg *rest.Config) error {
	return waitResources(ctx, cfg, "autoscaling.x-k8s.io/v1beta1", "capacitybuffers")
}
