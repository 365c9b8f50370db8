package virtualnodes

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Args configure VirtualNodes. Every field is optional; see README.md.
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// MaxInstanceTypes is how many instance types, cheapest first, a new
	// claim keeps open. Default 60, the most one EC2 CreateFleet call takes.
	MaxInstanceTypes int `json:"maxInstanceTypes,omitempty"`
	// MaxClaimsTried bounds how many open claims a pod is tried on before a
	// new one is made, so a cycle costs the same with 10 or 10,000 open
	// claims. Default 16.
	MaxClaimsTried int `json:"maxClaimsTried,omitempty"`
	// WriteInterval is how often nominations are written to the API server,
	// coalesced: many pods nominated to one claim within it cost one write.
	// Default 200ms.
	WriteInterval metav1.Duration `json:"writeInterval,omitempty"`
	// ProvisioningRequests serves ProvisioningRequests
	// (autoscaling.x-k8s.io/v1) of the classes check-capacity and
	// best-effort-atomic-scale-up (provreq.go). Their CRD must be
	// installed. Default false: Cluster Autoscaler may serve them.
	ProvisioningRequests bool `json:"provisioningRequests,omitempty"`
	// CapacityBuffers keeps room for the chunks of CapacityBuffers
	// (autoscaling.x-k8s.io/v1beta1) of the strategy
	// buffer.x-k8s.io/active-capacity whose status the provisioner has
	// resolved (buffers.go). Their CRD must be installed. Default false.
	CapacityBuffers bool `json:"capacityBuffers,omitempty"`
}

// Defaults of Args.
const (
	DefaultMaxInstanceTypes = 60
	DefaultMaxClaimsTried   = 16
	DefaultWriteInterval    = 200 * time.Millisecond
)

// DecodeArgs decodes, defaults and validates the plugin's arguments.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	if args.MaxInstanceTypes == 0 {
		args.MaxInstanceTypes = DefaultMaxInstanceTypes
	}
	if args.MaxClaimsTried == 0 {
		args.MaxClaimsTried = DefaultMaxClaimsTried
	}
	if args.WriteInterval.Duration == 0 {
		args.WriteInterval.Duration = DefaultWriteInterval
	}
	switch {
	case args.MaxInstanceTypes < 1 || args.MaxInstanceTypes > 500:
		return nil, fmt.Errorf("%s args: maxInstanceTypes must be between 1 and 500, got %d", Name, args.MaxInstanceTypes)
	case args.MaxClaimsTried < 1:
		return nil, fmt.Errorf("%s args: maxClaimsTried must be at least 1, got %d", Name, args.MaxClaimsTried)
	case args.WriteInterval.Duration < 10*time.Millisecond || args.WriteInterval.Duration > 10*time.Second:
		return nil, fmt.Errorf("%s args: writeInterval must be between 10ms and 10s, got %s", Name, args.WriteInterval.Duration)
	}
	return args, nil
}
