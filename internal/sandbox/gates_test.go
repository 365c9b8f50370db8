package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseFeatureGates: the form --feature-gates takes is read into a
// map, and a malformed one is refused with a message naming the pair.
func TestParseFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]bool
		wantErr  string
	}{
		{name: "nothing is no gate", in: "", want: map[string]bool{}},
		{name: "two gates on", in: "GenericWorkload=true,TopologyAwareWorkloadScheduling=true", want: map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}},
		{name: "blanks and a trailing comma are ignored", in: " GenericWorkload = true , DRADeviceTaintRules=false,", want: map[string]bool{"GenericWorkload": true, "DRADeviceTaintRules": false}},
		{name: "a pair without a value is refused", in: "GenericWorkload", wantErr: `feature gate "GenericWorkload": want name=true or name=false`},
		{name: "a value that is not a boolean is refused", in: "GenericWorkload=yes", wantErr: `feature gate "GenericWorkload=yes": value "yes", want true or false`},
		{name: "a name that is no gate's is refused", in: "generic-workload=true", wantErr: `"generic-workload" is not a feature gate's name`},
		{name: "a gate given twice is refused", in: "GenericWorkload=true,GenericWorkload=false", wantErr: "feature gate GenericWorkload is given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFeatureGates(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFeatureGates(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseFeatureGates(%q) (-want,+got):\n%s", tc.in, diff)
			}
		})
	}
}

// TestFeatureGatesReachEveryComponent: Options.FeatureGates become one
// --feature-gates, sorted, on kube-apiserver, kube-controller-manager's
// flags, every scheduler and the provisioner run as processes, and the
// chart's featureGates value when the chart is installed; kube-apiserver
// also serves the API group versions of the gates that are on. No gates,
// no flag.
func TestFeatureGatesReachEveryComponent(t *testing.T) {
	gates := map[string]bool{"TopologyAwareWorkloadScheduling": true, "GenericWorkload": true, "DRADeviceTaintRules": false}
	const flag = "--feature-gates=DRADeviceTaintRules=false,GenericWorkload=true,TopologyAwareWorkloadScheduling=true"

	if diff := cmp.Diff([]string{flag, "--runtime-config=scheduling.k8s.io/v1beta1=true"}, apiServerArgs(gates)); diff != "" {
		t.Errorf("kube-apiserver's flags (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{flag}, featureGateArgs(gates)); diff != "" {
		t.Errorf("kube-controller-manager's flags (-want,+got):\n%s", diff)
	}
	s := &Sandbox{Dir: "/sb", featureGates: gates}
	if args := s.schedulerArgs("nodeforge-scheduler", "/sb/config.yaml", "/sb/kubeconfig", 10259); !slices.Contains(args, flag) {
		t.Errorf("the scheduler's flags %v lack %s", args, flag)
	}
	st := &starter{s: s, o: Options{FeatureGates: gates}}
	if args, _ := st.provisionerCommand(); !slices.Contains(args, flag) {
		t.Errorf("the provisioner's flags %v lack %s", args, flag)
	}
	if diff := cmp.Diff(any(gates), s.chartValues(st.o)["featureGates"]); diff != "" {
		t.Errorf("the chart's featureGates (-want,+got):\n%s", diff)
	}

	if diff := cmp.Diff([]string{"--feature-gates=CompositePodGroup=true,GenericWorkload=true,TopologyAwareWorkloadScheduling=true", "--runtime-config=scheduling.k8s.io/v1alpha3=true,scheduling.k8s.io/v1beta1=true"},
		apiServerArgs(map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true, "CompositePodGroup": true})); diff != "" {
		t.Errorf("kube-apiserver's flags with CompositePodGroup (-want,+got):\n%s", diff)
	}
	if args := apiServerArgs(map[string]bool{"GenericWorkload": false}); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--runtime-config") }) {
		t.Errorf("GenericWorkload off, yet kube-apiserver serves its APIs: %v", args)
	}

	none := &Sandbox{Dir: "/sb"}
	noneSt := &starter{s: none}
	provArgs, _ := noneSt.provisionerCommand()
	for _, args := range [][]string{apiServerArgs(nil), none.schedulerArgs("s", "c", "k", 1), provArgs} {
		if slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "--feature-gates") || strings.HasPrefix(a, "--runtime-config")
		}) {
			t.Errorf("no feature gates, yet the flags %v set some", args)
		}
	}
	if _, ok := none.chartValues(Options{})["featureGates"]; ok {
		t.Error("no feature gates, yet the chart's values set featureGates")
	}
}

// TestStartRefusesAMalformedFeatureGate: a gate name the components would
// refuse stops Start before anything runs.
func TestStartRefusesAMalformedFeatureGate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sb")
	_, err := Start(context.Background(), Options{Dir: dir, FeatureGates: map[string]bool{"GenericWorkload=true": true}})
	if err == nil || !strings.Contains(err.Error(), `feature gate "GenericWorkload=true" is not a feature gate's name`) {
		t.Errorf("Start = %v, want a refusal naming the gate", err)
	}
	if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
		t.Errorf("Start made %s before refusing: %v", dir, statErr)
	}
}
