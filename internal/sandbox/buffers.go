package sandbox

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
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
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		list, err := cs.Discovery().ServerResourcesForGroupVersion("autoscaling.x-k8s.io/v1beta1")
		if err == nil {
			for _, r := range list.APIResources {
				if r.Name == "capacitybuffers" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server does not serve capacitybuffers.autoscaling.x-k8s.io: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
