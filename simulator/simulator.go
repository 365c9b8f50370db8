// Package simulator decides where a pod fits the way the scheduler does:
// a scheduling framework built from a profile of the scheduler's own
// KubeSchedulerConfiguration, with the scheduler's whole plugin registry
// as the caller passes it (plugin/registry: in-tree and every out-of-tree
// plugin nodeforge-scheduler registers; the simulator imports no plugin),
// the profile's PreFilter and Filter plugins with their arguments, and no
// PostFilter plugin (no preemption, and not the plugin that asks). The
// caller supplies the cluster view it runs on (WithSnapshotSharedLister):
// VirtualNodes' view of real and virtual nodes when it nominates.
package simulator

import (
	"context"
	"slices"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
)

// neverRun are the plugins a simulation has no use for and cannot build
// beside kube-scheduler's queue: preemption (a PostFilter, PreEnqueue and
// PodGroupPostFilter plugin) reads, once GenericWorkload is on, the
// mutable snapshot and PodGroup manager that only the scheduler has.
// GatedPreemption is plugin/gatedpreemption's, which wraps
// DefaultPreemption (cmd/scheduler/app's test holds the name).
var neverRun = []string{names.DefaultPreemption, "GatedPreemption"}

// Profile is p as the simulator runs it: named p's name plus "-"+suffix
// (plugins register informer indexers per profile, so the name must not
// clash with the scheduler's), without the plugins in exclude nor the
// preemption plugins (neverRun), and with every PostFilter and
// PodGroupPostFilter plugin disabled.
func Profile(p *config.KubeSchedulerProfile, suffix string, exclude ...string) *config.KubeSchedulerProfile {
	exclude = append(slices.Clone(exclude), neverRun...)
	out := p.DeepCopy()
	out.SchedulerName = p.SchedulerName + "-" + suffix
	if out.Plugins == nil {
		out.Plugins = &config.Plugins{}
	}
	drop := func(ps []config.Plugin) []config.Plugin {
		return slices.DeleteFunc(ps, func(pl config.Plugin) bool { return slices.Contains(exclude, pl.Name) })
	}
	for _, set := range []*config.PluginSet{&out.Plugins.MultiPoint, &out.Plugins.PreFilter, &out.Plugins.Filter, &out.Plugins.PostFilter, &out.Plugins.PreScore, &out.Plugins.Score, &out.Plugins.Reserve, &out.Plugins.Permit, &out.Plugins.PreBind, &out.Plugins.Bind, &out.Plugins.PostBind, &out.Plugins.PreEnqueue, &out.Plugins.QueueSort, &out.Plugins.PlacementGenerate, &out.Plugins.PlacementScore} {
		set.Enabled = drop(set.Enabled)
	}
	out.Plugins.PostFilter = config.PluginSet{Disabled: []config.Plugin{{Name: "*"}}}
	out.Plugins.PodGroupPostFilter = config.PluginSet{Disabled: []config.Plugin{{Name: "*"}}}
	out.PluginConfig = slices.DeleteFunc(out.PluginConfig, func(pc config.PluginConfig) bool { return slices.Contains(exclude, pc.Name) })
	return out
}

// New builds the simulation framework for profile (already passed through
// Profile) with registry, the scheduler's whole registry
// (plugin/registry.All), some of its plugins perhaps wrapped by the caller.
func New(ctx context.Context, registry frameworkruntime.Registry, profile *config.KubeSchedulerProfile, opts ...frameworkruntime.Option) (framework.Framework, error) {
	// The framework counts into the scheduler's metrics; kube-scheduler
	// registers them at start, and registering is done once per process.
	schedmetrics.Register()
	return frameworkruntime.NewFramework(ctx, registry, profile, opts...)
}
