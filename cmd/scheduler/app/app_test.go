package app

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/legacyregistry"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/nodeforge/nodeforge/plugin/gatedpreemption"
	"github.com/nodeforge/nodeforge/plugin/virtualnodes"
	"github.com/nodeforge/nodeforge/simulator"
)

// postFilterStub stands in for VirtualNodes: this test is about the order
// the shipped configuration gives the PostFilter plugins.
type postFilterStub struct{}

func (postFilterStub) Name() string { return virtualnodes.Name }
func (postFilterStub) PostFilter(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	return nil, nil
}
func (postFilterStub) Filter(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (postFilterStub) PreFilter(context.Context, fwk.CycleState, *corev1.Pod, []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return nil, nil
}
func (postFilterStub) PodGroupPostFilter(context.Context, fwk.PodGroupCycleState, fwk.PodGroupInfo, fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	return nil, nil
}
func (postFilterStub) PreFilterExtensions() fwk.PreFilterExtensions        { return nil }
func (postFilterStub) PreEnqueue(context.Context, *corev1.Pod) *fwk.Status { return nil }

// TestShippedConfigRunsPreemptionBeforeVirtualNodes loads
// manifests/scheduler/config.yaml as the scheduler does and checks the
// profile runs preemption (GatedPreemption, in DefaultPreemption's place)
// before VirtualNodes, VirtualNodes last.
func TestShippedConfigRunsPreemptionBeforeVirtualNodes(t *testing.T) {
	schedmetrics.Register()
	cfg, err := schedulerConfig([]string{"--v=2", "--config", filepath.Join("..", "..", "..", "manifests", "scheduler", "config.yaml"), "--leader-elect=false"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "nodeforge-scheduler" {
		t.Fatalf("profiles: %+v", cfg.Profiles)
	}
	registry := plugins.NewInTreeRegistry()
	if err := registry.Register(gatedpreemption.Name, gatedpreemption.New); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(virtualnodes.Name, func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return postFilterStub{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	cs := kubefake.NewClientset()
	fw, err := frameworkruntime.NewFramework(context.Background(), registry, &cfg.Profiles[0],
		frameworkruntime.WithClientSet(cs), frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(cs, 0)),
		frameworkruntime.WithSnapshotSharedLister(cache.NewEmptySnapshot()))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range fw.ListPlugins().PostFilter.Enabled {
		got = append(got, p.Name)
	}
	// The default set has other PostFilter plugins too (DynamicResources);
	// what matters is that preemption comes first and VirtualNodes last.
	pre, vn := slices.Index(got, gatedpreemption.Name), slices.Index(got, virtualnodes.Name)
	if pre < 0 || vn != len(got)-1 || pre > vn {
		t.Errorf("PostFilter plugins %v: want %s before %s, and %s last", got, gatedpreemption.Name, virtualnodes.Name, virtualnodes.Name)
	}
	// Preemption runs once: the gate wraps DefaultPreemption, which
	// must not run again behind it.
	if slices.Contains(got, "DefaultPreemption") {
		t.Errorf("PostFilter plugins %v: DefaultPreemption runs beside %s", got, gatedpreemption.Name)
	}
	// And its Filter, which keeps nominated pods for their claim's node.
	if !slices.ContainsFunc(fw.ListPlugins().Filter.Enabled, func(p config.Plugin) bool { return p.Name == virtualnodes.Name }) {
		t.Errorf("Filter plugins %v: want %s among them", fw.ListPlugins().Filter.Enabled, virtualnodes.Name)
	}
	// And its PreEnqueue, which keeps nominated pods out of the queue
	// until their claim's node is open.
	if !slices.ContainsFunc(fw.ListPlugins().PreEnqueue.Enabled, func(p config.Plugin) bool { return p.Name == virtualnodes.Name }) {
		t.Errorf("PreEnqueue plugins %v: want %s among them", fw.ListPlugins().PreEnqueue.Enabled, virtualnodes.Name)
	}
	// And its PodGroupPostFilter, which kube-scheduler runs for the pods
	// of a PodGroup in PostFilter's place, after the group's preemption.
	var groups []string
	for _, p := range fw.ListPlugins().PodGroupPostFilter.Enabled {
		groups = append(groups, p.Name)
	}
	// The default set has DynamicResources there too.
	if pre, vn := slices.Index(groups, gatedpreemption.Name), slices.Index(groups, virtualnodes.Name); pre < 0 || vn != len(groups)-1 || slices.Contains(groups, "DefaultPreemption") {
		t.Errorf("PodGroupPostFilter plugins %v: want %s, %s last, and no DefaultPreemption (whose Unresolvable answer would stop the plugins after it)", groups, gatedpreemption.Name, virtualnodes.Name)
	}
	// Simulations leave preemption out, GatedPreemption by its name.
	sim := simulator.Profile(&cfg.Profiles[0], "test")
	for _, set := range []config.PluginSet{sim.Plugins.MultiPoint, sim.Plugins.PostFilter, sim.Plugins.PreEnqueue, sim.Plugins.PodGroupPostFilter} {
		if slices.ContainsFunc(set.Enabled, func(p config.Plugin) bool { return p.Name == gatedpreemption.Name || p.Name == "DefaultPreemption" }) {
			t.Errorf("the simulation's profile enables %v: preemption is never simulated", set.Enabled)
		}
	}
	// And its PreFilter, which lets pods it has not nominated skip that Filter.
	if !slices.ContainsFunc(fw.ListPlugins().PreFilter.Enabled, func(p config.Plugin) bool { return p.Name == virtualnodes.Name }) {
		t.Errorf("PreFilter plugins %v: want %s among them", fw.ListPlugins().PreFilter.Enabled, virtualnodes.Name)
	}
}

// TestSchedulerExportsBuildInfo: the registry the scheduler's /metrics
// serves holds nodeforge_build_info, 1. (Its labels are version's tests';
// a test binary records no module versions, so the e2e test checks the
// Kubernetes version a built scheduler reports.)
func TestSchedulerExportsBuildInfo(t *testing.T) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "nodeforge_build_info" {
			continue
		}
		if m := f.GetMetric(); len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("nodeforge_build_info %v, want one series of value 1", m)
		}
		return
	}
	t.Error("nodeforge_build_info is not in the scheduler's registry")
}

// TestTheSimulationsRegistryWaitsForTheGates: building the command builds
// only the out-of-tree registry kube-scheduler is given; the simulation's
// whole registry, whose in-tree plugins read the feature gates as it is
// built, is built when VirtualNodes is, after the command has set the
// gates (--feature-gates, then those the API server cannot serve off).
func TestTheSimulationsRegistryWaitsForTheGates(t *testing.T) {
	builds := 0
	count := func(frameworkruntime.Registry) error { builds++; return nil }
	if _, err := NewSchedulerCommand([]string{"--config", filepath.Join("..", "..", "..", "manifests", "scheduler", "config.yaml")}, count); err != nil {
		t.Fatal(err)
	}
	if builds != 1 {
		t.Errorf("building the command built %d registries, want 1 (kube-scheduler's out-of-tree plugins): the simulation's would read the gates before they are set", builds)
	}
}
