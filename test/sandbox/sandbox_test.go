package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

// TestFreePortsAreDistinct checks that the ports handed out in one call do
// not repeat.
func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := freePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice in %v", p, ports)
		}
		seen[p] = true
	}
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
