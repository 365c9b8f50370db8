// Package version is the version of Nodeforge's programs, stamped at build
// time: go build -ldflags "-X github.com/nodeforge/nodeforge/version.Version=v0.1.0".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version of Nodeforge; "dev" when not stamped.
var Version = "dev"

// String is "<program> <version> (<go version> <os>/<arch>[, commit
// <revision>])", what --version prints; the commit is the one Go recorded,
// when it did.
func String(program string) string {
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				rev = ", commit " + s.Value
			}
		}
	}
	return fmt.Sprintf("%s %s (%s %s/%s%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, rev)
}
