package simulator

import (
	"slices"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
)

func TestProfileKeepsFiltersDropsPostFilterAndCaller(t *testing.T) {
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	p := &cfg.Profiles[0]
	p.Plugins.PostFilter.Enabled = append(p.Plugins.PostFilter.Enabled, config.Plugin{Name: "Caller"})
	p.Plugins.PodGroupPostFilter.Enabled = append(p.Plugins.PodGroupPostFilter.Enabled, config.Plugin{Name: "Caller"})
	p.Plugins.Filter.Enabled = append(p.Plugins.Filter.Enabled, config.Plugin{Name: "OutOfTreeFilter"})
	p.PluginConfig = append(p.PluginConfig, config.PluginConfig{Name: "Caller"})
	out := Profile(p, "sim", "Caller")
	if out.SchedulerName != p.SchedulerName+"-sim" {
		t.Errorf("name %q", out.SchedulerName)
	}
	if !slices.ContainsFunc(out.Plugins.Filter.Enabled, func(pl config.Plugin) bool { return pl.Name == "OutOfTreeFilter" }) {
		t.Error("the profile's out-of-tree Filter plugin was dropped")
	}
	if len(out.Plugins.PostFilter.Enabled) != 0 || len(out.Plugins.PostFilter.Disabled) != 1 || out.Plugins.PostFilter.Disabled[0].Name != "*" {
		t.Errorf("PostFilter plugins %+v, want all disabled", out.Plugins.PostFilter)
	}
	if len(out.Plugins.PodGroupPostFilter.Enabled) != 0 || len(out.Plugins.PodGroupPostFilter.Disabled) != 1 || out.Plugins.PodGroupPostFilter.Disabled[0].Name != "*" {
		t.Errorf("PodGroupPostFilter plugins %+v, want all disabled", out.Plugins.PodGroupPostFilter)
	}
	if slices.ContainsFunc(out.PluginConfig, func(pc config.PluginConfig) bool { return pc.Name == "Caller" }) {
		t.Error("the caller's own arguments were kept")
	}
	if !slices.ContainsFunc(p.Plugins.PostFilter.Enabled, func(pl config.Plugin) bool { return pl.Name == "Caller" }) {
		t.Error("Profile changed the profile it was given")
	}
}
