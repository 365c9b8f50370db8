package sandbox

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// gateName is a Kubernetes feature gate's name: letters and digits,
// starting with a capital (GenericWorkload, DRAWorkloadResourceClaims).
var gateName = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// ParseFeatureGates reads feature gates in the form kube-apiserver's
// --feature-gates takes them: name=true|false pairs separated by commas
// ("GenericWorkload=true,TopologyAwareWorkloadScheduling=true"); blanks
// around a pair are ignored and "" is no gate. A malformed pair, or a
// gate given twice, is an error that names it. Whether a component knows
// a gate is for that component to say: the sandbox prints its log when it
// refuses one.
func ParseFeatureGates(s string) (map[string]bool, error) {
	gates := map[string]bool{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok {
			return nil, fmt.Errorf("feature gate %q: want name=true or name=false", pair)
		}
		if !gateName.MatchString(name) {
			return nil, fmt.Errorf("feature gate %q: %q is not a feature gate's name (letters and digits, starting with a capital)", pair, name)
		}
		on, err := strconv.ParseBool(value)
		if err != nil {
			return nil, fmt.Errorf("feature gate %q: value %q, want true or false", pair, value)
		}
		if _, twice := gates[name]; twice {
			return nil, fmt.Errorf("feature gate %s is given twice", name)
		}
		gates[name] = on
	}
	return gates, nil
}

// validateFeatureGates checks the names of Options.FeatureGates, which
// reach every component's command line.
func validateFeatureGates(gates map[string]bool) error {
	for name := range gates {
		if !gateName.MatchString(name) {
			return fmt.Errorf("feature gate %q is not a feature gate's name (letters and digits, starting with a capital)", name)
		}
	}
	return nil
}

// featureGateArgs is the --feature-gates flag of every component for
// gates, sorted by name; none when there are none.
func featureGateArgs(gates map[string]bool) []string {
	if len(gates) == 0 {
		return nil
	}
	pairs := make([]string, 0, len(gates))
	for name, on := range gates {
		pairs = append(pairs, name+"="+strconv.FormatBool(on))
	}
	slices.Sort(pairs)
	return []string{"--feature-gates=" + strings.Join(pairs, ",")}
}

// gateAPIs are the API group versions in which kube-apiserver v1.37
// serves a feature's resources, each turned off by default (a beta or
// alpha version), so that the gate alone serves nothing: GenericWorkload's
// workloads and podgroups in scheduling.k8s.io/v1beta1 (and v1alpha3,
// which nothing here reads), CompositePodGroup's compositepodgroups in
// scheduling.k8s.io/v1alpha3 only (pkg/registry/scheduling/rest and
// pkg/controlplane/instance.go in k8s.io/kubernetes v1.37.2).
// TopologyAwareWorkloadScheduling and DRAWorkloadResourceClaims add
// fields to PodGroup (spec.schedulingConstraints, spec.resourceClaims),
// which the API server accepts while the gate is on, and no resource.
var gateAPIs = map[string][]string{
	"GenericWorkload":   {"scheduling.k8s.io/v1beta1"},
	"CompositePodGroup": {"scheduling.k8s.io/v1alpha3"},
}

// apiServerArgs are kube-apiserver's flags for gates: the gates, and
// --runtime-config serving the APIs of those that are on (gateAPIs).
func apiServerArgs(gates map[string]bool) []string {
	args := featureGateArgs(gates)
	var versions []string
	for name, on := range gates {
		if on {
			versions = append(versions, gateAPIs[name]...)
		}
	}
	if len(versions) == 0 {
		return args
	}
	slices.Sort(versions)
	versions = slices.Compact(versions)
	for i, v := range versions {
		versions[i] = v + "=true"
	}
	return append(args, "--runtime-config="+strings.Join(versions, ","))
}
