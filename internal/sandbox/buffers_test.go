package sandbox

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/manifests"
)

// TestCapacityBuffersReachBothPrograms: Options.CapacityBuffers gives the
// provisioner --capacity-buffers, VirtualNodes its capacityBuffers
// argument in the shipped configuration, and the chart its
// capacityBuffers values (enabled, with the CRD); the files applied
// without the chart are the chart's. Off, none of them.
func TestCapacityBuffersReachBothPrograms(t *testing.T) {
	s := &Sandbox{Dir: "/sb"}
	on := &starter{s: s, o: Options{CapacityBuffers: true}}
	if args, _ := on.provisionerCommand(); !slices.Contains(args, "--capacity-buffers") {
		t.Errorf("the provisioner's flags %v lack --capacity-buffers", args)
	}
	off := &starter{s: s}
	if args, _ := off.provisionerCommand(); slices.Contains(args, "--capacity-buffers") {
		t.Errorf("the provisioner keeps buffers unasked: %v", args)
	}
	want := map[string]any{"enabled": true, "installCRD": true}
	if diff := cmp.Diff(any(want), s.chartValues(on.o)["capacityBuffers"]); diff != "" {
		t.Errorf("the chart's capacityBuffers (-want,+got):\n%s", diff)
	}
	if _, ok := s.chartValues(off.o)["capacityBuffers"]; ok {
		t.Error("the chart keeps buffers unasked")
	}
	shipped, err := manifests.FS.ReadFile("scheduler/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := keepingCapacityBuffers(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Profiles []struct {
			PluginConfig []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == "VirtualNodes" {
			found = true
			if pc.Args["capacityBuffers"] != true {
				t.Errorf("VirtualNodes args %v, want capacityBuffers: true", pc.Args)
			}
		}
	}
	if !found {
		t.Error("no VirtualNodes pluginConfig in the shipped configuration")
	}
	for _, f := range capacityBufferFiles {
		if _, err := manifests.FS.ReadFile(f); err != nil {
			t.Errorf("%s is not embedded: %v", f, err)
		}
	}
}
