package sandbox

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/manifests"
)

// TestStartNamesTheComponentThatFails starts a sandbox whose etcd exits at
// once and checks the error names etcd and quotes the end of its log.
func TestStartNamesTheComponentThatFails(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "etcd")
	script := "#!/bin/sh\necho 'starting etcd'\necho 'listen tcp 127.0.0.1:2379: bind: address already in use' >&2\nexit 1\n"
	if err := os.WriteFile(broken, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{Dir: filepath.Join(dir, "sb"), Binaries: &Binaries{Etcd: broken}})
	if err == nil {
		t.Fatal("Start succeeded with an etcd that exits")
	}
	for _, want := range []string{"etcd exited", "logs/etcd.log", "bind: address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}

// TestFreePortsAreDistinct checks that the ports handed out do not repeat,
// in one call or across sandboxes running at once, that they lie below
// the kernel's ephemeral range, and that a stopped sandbox's ports can be
// handed out again.
func TestFreePortsAreDistinct(t *testing.T) {
	a, b := &Sandbox{}, &Sandbox{}
	defer a.Stop()
	defer b.Stop()
	seen := map[int]bool{}
	for _, s := range []*Sandbox{a, b, a} {
		ports, err := s.freePorts(50)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			if _, high := portRange(); p > high {
				t.Errorf("port %d is above %d, in the kernel's ephemeral range", p, high)
			}
			seen[p] = true
		}
	}
	held := a.ports[0].port
	if h, err := holdPort(held); err != nil || h != nil {
		t.Fatalf("port %d, held by a running sandbox, could be held again (err %v)", held, err)
	}
	a.Stop()
	h, err := holdPort(held)
	if err != nil || h == nil {
		t.Fatalf("port %d of a stopped sandbox could not be held again (err %v)", held, err)
	}
	h.lock.Close()
}

// TestStartRefusesAnUnknownCloudProvider: a provider the provisioner does
// not know stops Start before anything runs, instead of falling back to
// the simulated cloud.
func TestStartRefusesAnUnknownCloudProvider(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sb")
	_, err := Start(context.Background(), Options{Dir: dir, CloudProvider: "gce"})
	if err == nil || !strings.Contains(err.Error(), `cloud provider "gce": choose simulated or aws`) {
		t.Errorf("Start with cloud provider gce = %v, want a refusal naming the choices", err)
	}
	if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
		t.Errorf("Start made %s before refusing: %v", dir, statErr)
	}
}

// TestTimersReachBothPrograms: the leader election timers that are set
// become the provisioner's flags and the scheduler configuration's
// leaderElection fields, the configuration's other fields kept; unset
// timers change nothing.
func TestTimersReachBothPrograms(t *testing.T) {
	shipped, err := manifests.FS.ReadFile("scheduler/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := (Timers{NodeLeaseDuration: time.Second}).schedulerConfig(shipped); err != nil || string(got) != string(shipped) {
		t.Errorf("no leader election timer set, yet the configuration changed (err %v)", err)
	}
	timers := Timers{LeaseDuration: 8 * time.Second, RetryPeriod: time.Second, NodeMonitorGracePeriod: 16 * time.Second}
	if got, want := timers.provisionerArgs(), []string{"--leader-elect-lease-duration=8s", "--leader-elect-retry-period=1s", "--node-monitor-grace-period=16s"}; !slices.Equal(got, want) {
		t.Errorf("provisioner flags %v, want %v", got, want)
	}
	raw, err := timers.schedulerConfig(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		LeaderElection map[string]any `json:"leaderElection"`
		Profiles       []any          `json:"profiles"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"leaderElect": true, "resourceNamespace": "nodeforge", "resourceName": "nodeforge-scheduler", "leaseDuration": "8s", "retryPeriod": "1s"}
	if !maps.Equal(cfg.LeaderElection, want) {
		t.Errorf("leaderElection %v, want %v", cfg.LeaderElection, want)
	}
	if len(cfg.Profiles) != 1 {
		t.Errorf("the profiles were not kept: %v", cfg.Profiles)
	}
}
