// Package version is the version of Nodeforge's programs, stamped at build
// time: go build -ldflags "-X github.com/nodeforge/nodeforge/version.Version=v0.1.0";
// and nodeforge_build_info, the metric that reports it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version of Nodeforge; "dev" when not stamped.
var Version = "dev"

// String is "<program> <version> (<go version> <os>/<arch>[, commit
// <revision>])", what --version prints; the commit is the one Go recorded,
// when it did.
func String(program string) string {
	rev := ""
	if r := revision(); r != "" {
		rev = ", commit " + r
	}
	return fmt.Sprintf("%s %s (%s %s/%s%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, rev)
}

// BuildInfo returns a new nodeforge_build_info gauge, 1, labelled with
// Version, the commit Go recorded ("" when it recorded none), the Go
// version, and the version of the Kubernetes libraries (the module
// k8s.io/kubernetes) the program is built on. Each program registers it
// with the registry its /metrics serves: dashboards join on it to show
// which build runs, and a rollout shows as two series.
func BuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodeforge_build_info",
		Help: "1, labelled with Nodeforge's version, the commit it was built from, the Go version and the Kubernetes libraries' version (k8s.io/kubernetes) it was built with.",
		ConstLabels: prometheus.Labels{
			"version":           Version,
			"revision":          revision(),
			"goVersion":         runtime.Version(),
			"kubernetesVersion": kubernetesVersion(),
		},
	})
	g.Set(1)
	return g
}

// revision is the VCS commit Go recorded at build time, or "".
func revision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// kubernetesVersion is the version of the module k8s.io/kubernetes linked
// in (both programs run its scheduler framework), or "unknown". It is the
// figure the Makefile stamps into component-base's version, read where Go
// recorded it, so an unstamped build reports it too.
func kubernetesVersion() string {
	info, _ := debug.ReadBuildInfo()
	return kubernetesVersionOf(info)
}

func kubernetesVersionOf(info *debug.BuildInfo) string {
	if info != nil {
		for _, d := range info.Deps {
			if d.Path == "k8s.io/kubernetes" {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}
