package simulated

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UserAgent is the user agent of the simulated cloud's requests to the
// API server. The simulated cloud runs in the provisioner with its
// service account, so the audit log's user is the provisioner's; its
// requests play the cloud's API, the kubelets and the cloud controller
// manager, which a provisioner on a real cloud never makes, and the user
// agent is what tells them apart (test/e2e's scale benchmarks count them
// so).
const UserAgent = "nodeforge-simulated-cloud"

// NewClients returns the clients NewCloud takes, made from a copy of cfg
// that sends UserAgent and is otherwise the same (identity, rate):
// kube reads from cache (the manager's, shared with the provisioner, so
// its reads are no requests) and writes to the API server; api reads
// from the API server.
func NewClients(cfg *rest.Config, cache client.Reader, scheme *runtime.Scheme, mapper meta.RESTMapper) (kube client.Client, api client.Reader, err error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = UserAgent
	// The user agent is set by the HTTP client's transport: the manager's
	// HTTP client cannot be shared.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("the simulated cloud's HTTP client: %w", err)
	}
	kube, err = client.New(cfg, client.Options{HTTPClient: hc, Scheme: scheme, Mapper: mapper, Cache: &client.CacheOptions{Reader: cache}})
	if err != nil {
		return nil, nil, fmt.Errorf("the simulated cloud's client: %w", err)
	}
	api, err = client.New(cfg, client.Options{HTTPClient: hc, Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, nil, fmt.Errorf("the simulated cloud's API reader: %w", err)
	}
	return kube, api, nil
}
