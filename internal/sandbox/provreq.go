package sandbox

import (
	"context"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// provisioningRequestFiles are what the chart installs with
// provisioningRequests.enabled and installCRD.
var provisioningRequestFiles = []string{"crd-optional/autoscaling.x-k8s.io_provisioningrequests.yaml", "provisioningrequests/rbac.yaml"}

// servingProvisioningRequests turns VirtualNodes' provisioningRequests
// argument on in every profile of config that configures VirtualNodes, as
// the chart does.
func servingProvisioningRequests(config []byte) ([]byte, error) {
	return withVirtualNodesArg(config, "provisioningRequests")
}

// withVirtualNodesArg sets the boolean argument arg of VirtualNodes to
// true in every profile of config that configures VirtualNodes.
func withVirtualNodesArg(config []byte, arg string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return nil, err
	}
	profiles, _ := cfg["profiles"].([]any)
	for _, p := range profiles {
		pm, _ := p.(map[string]any)
		pcs, _ := pm["pluginConfig"].([]any)
		for _, pc := range pcs {
			m, _ := pc.(map[string]any)
			if m["name"] != "VirtualNodes" {
				continue
			}
			args, _ := m["args"].(map[string]any)
			if args == nil {
				args = map[string]any{}
			}
			args[arg] = true
			m["args"] = args
		}
	}
	return yaml.Marshal(cfg)
}

// waitProvisioningRequests waits until the API server serves
// ProvisioningRequests.
func waitProvisioningRequests(ctx context.Context, cfg *rest.Config) error {
	return waitResources(ctx, cfg, "autoscaling.x-k8s.io/v1", "provisioningrequests")
}
