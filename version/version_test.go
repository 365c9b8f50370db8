package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestString names the program, the stamped version and the platform.
func TestString(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v1.2.3"
	got := String("nodeforge-provisioner")
	want := "nodeforge-provisioner v1.2.3 (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if !strings.HasPrefix(got, want) {
		t.Errorf("String = %q, want it to start %q", got, want)
	}
}

// TestBuildInfo: nodeforge_build_info is one series of value 1, labelled
// with the stamped version, Go's version and the Kubernetes libraries'
// version (this test links none: "unknown").
func TestBuildInfo(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v1.2.3"
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(BuildInfo())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "nodeforge_build_info" || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one nodeforge_build_info series", families)
	}
	m := families[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != "v1.2.3" || labels["goVersion"] != runtime.Version() || labels["kubernetesVersion"] != "unknown" {
		t.Errorf("labels %v: want version v1.2.3, goVersion %s, kubernetesVersion unknown", labels, runtime.Version())
	}
	if _, ok := labels["revision"]; !ok {
		t.Errorf("labels %v: want a revision label, empty when Go recorded no commit", labels)
	}
}

// TestKubernetesVersionOf reads k8s.io/kubernetes's version from the
// build's modules, replaced or not.
func TestKubernetesVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"linked", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}, {Path: "k8s.io/kubernetes", Version: "v1.37.2"}}}, "v1.37.2"},
		{"replaced", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/kubernetes", Version: "v1.37.0", Replace: &debug.Module{Path: "k8s.io/kubernetes", Version: "v1.37.1"}}}}, "v1.37.1"},
		{"not linked", &debug.BuildInfo{Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.37.2"}}}, "unknown"},
		{"no build info", nil, "unknown"},
	} {
		if got := kubernetesVersionOf(tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
