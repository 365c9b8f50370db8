// Package registry is the one list of scheduler plugins Nodeforge runs:
// kube-scheduler's in-tree plugins, Nodeforge's own out-of-tree ones
// (RefuseNodes, GatedPreemption), and any a user adds with WithPlugin. nodeforge-scheduler
// registers every out-of-tree plugin of it, and the simulators
// (VirtualNodes' nomination, the provisioner's bind gate and disruption
// scheduler) are built from the whole of it, so a profile that enables a
// plugin is judged the same by all three. The simulator takes a registry
// and imports no plugin; this package is where the list is made.
//
// A user builds both programs with a plugin of their own by passing the
// same option to each (see docs/plugins.md):
//
//	os.Exit(schedulerapp.Main(registry.WithPlugin(myplugin.Name, myplugin.New)))
//	os.Exit(provisionerapp.Main(registry.WithPlugin(myplugin.Name, myplugin.New)))
package registry

import (
	"fmt"

	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/nodeforge/nodeforge/plugin/gatedpreemption"
	"github.com/nodeforge/nodeforge/plugin/refusenodes"
)

// Option adds plugins to a registry.
type Option func(frameworkruntime.Registry) error

// WithPlugin adds the out-of-tree plugin name, built by factory. A name
// that is already registered (in-tree, Nodeforge's, or an earlier
// WithPlugin) is an error, returned by OutOfTree and All.
func WithPlugin(name string, factory frameworkruntime.PluginFactory) Option {
	return func(r frameworkruntime.Registry) error {
		return r.Register(name, factory)
	}
}

// OutOfTree is Nodeforge's out-of-tree plugins and those opts add: what
// nodeforge-scheduler registers beside the in-tree ones. (VirtualNodes
// is registered apart: it is the PostFilter that runs the simulator, not
// a plugin the simulator runs.)
func OutOfTree(opts ...Option) (frameworkruntime.Registry, error) {
	r := frameworkruntime.Registry{
		refusenodes.Name:     refusenodes.New,
		gatedpreemption.Name: gatedpreemption.New,
	}
	for _, opt := range opts {
		if err := opt(r); err != nil {
			return nil, fmt.Errorf("registering a scheduler plugin: %w", err)
		}
	}
	return r, nil
}

// All is the scheduler's whole registry: in-tree plus OutOfTree(opts...).
// The simulators are built from it.
func All(opts ...Option) (frameworkruntime.Registry, error) {
	out, err := OutOfTree(opts...)
	if err != nil {
		return nil, err
	}
	r := plugins.NewInTreeRegistry()
	if err := r.Merge(out); err != nil {
		return nil, fmt.Errorf("registering a scheduler plugin: %w", err)
	}
	return r, nil
}
