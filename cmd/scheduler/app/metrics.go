package app

import (
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/nodeforge/nodeforge/version"
)

// nodeforge_build_info goes on the scheduler's /metrics, which serves
// component-base's legacy registry, beside kubernetes_build_info (which
// reports the Kubernetes libraries, not Nodeforge). Registered when the
// package loads, as component-base registers that one.
func init() {
	legacyregistry.Registerer().MustRegister(version.BuildInfo())
}
