package version

import (
	"runtime"
	"strings"
	"testing"
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
