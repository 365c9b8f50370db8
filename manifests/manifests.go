// Package manifests embeds the YAML that installs Nodeforge: the chart
// (this directory), and in it the CRDs, the scheduler's and provisioner's
// identities and permissions and the scheduler configuration; the
// namespace and the examples; the Grafana dashboard and Prometheus
// alerts (monitoring/). The sandbox installs these
// very files, so what is tested is what a cluster gets.
package manifests

import "embed"

// FS holds every manifest, by path relative to this directory.
//
//go:embed namespace.yaml crd/*.yaml crd-optional/*.yaml scheduler/*.yaml provisioner/*.yaml provisioningrequests/*.yaml capacitybuffers/*.yaml examples/*.yaml
//go:embed Chart.yaml values.yaml README.md .helmignore templates/* monitoring/*
var FS embed.FS

// Install lists, in the order to apply them, the manifests a cluster needs
// before Nodeforge's programs start.
var Install = []string{
	"crd/nodeforge.dev_nodepools.yaml",
	"crd/nodeforge.dev_nodeclaims.yaml",
	"crd/nodeforge.dev_simulatednodeclasses.yaml",
	"crd/nodeforge.dev_instancetypecatalogs.yaml",
	"crd/nodeforge.dev_ec2nodeclasses.yaml",
	"crd/nodeforge.dev_devicetemplates.yaml",
	"crd/nodeforge.dev_nodeoverlays.yaml",
	"namespace.yaml",
	"scheduler/rbac.yaml",
	"provisioner/rbac.yaml",
}
