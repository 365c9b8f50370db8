package skew

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-base/featuregate"
)

// server is a discovery fake serving the given resources of resource.k8s.io/v1.
func server(gitVersion string, resources ...string) *fakediscovery.FakeDiscovery {
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}, FakedServerVersion: &version.Info{GitVersion: gitVersion}}
	if len(resources) > 0 {
		list := &metav1.APIResourceList{GroupVersion: "resource.k8s.io/v1"}
		for _, r := range resources {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
		}
		d.Resources = []*metav1.APIResourceList{list}
	}
	return d
}

// gates are DynamicResourceAllocation locked on, DRADeviceTaintRules on
// but not locked and GenericWorkload off, as in kube-scheduler v1.37;
// CompositePodGroup is not registered, and counts as off.
func gates(t *testing.T) featuregate.MutableFeatureGate {
	g := featuregate.NewFeatureGate()
	if err := g.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		"DynamicResourceAllocation": {Default: true, PreRelease: featuregate.GA, LockToDefault: true},
		"DRADeviceTaintRules":       {Default: true, PreRelease: featuregate.GA},
		"GenericWorkload":           {Default: false, PreRelease: featuregate.Beta},
	}); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCheck: what Check decides for the API servers of each minor, as the
// scheduler and as the provisioner: the current one serves all; 1.34
// lacks devicetaintrules, whose feature is turned off; 1.33 serves no
// resource.k8s.io/v1, which a locked feature and the provisioner need,
// so both fail with the oldest version that serves it.
func TestCheck(t *testing.T) {
	all := []string{"resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules"}
	for _, tc := range []struct {
		name    string
		disco   *fakediscovery.FakeDiscovery
		apis    []API
		off     []featuregate.Feature
		wantErr string
	}{
		{"the current minor serves every API", server("v1.37.2", all...), SchedulerAPIs, nil, ""},
		{"1.34 lacks devicetaintrules: its feature is turned off", server("v1.34.4", all[:3]...), SchedulerAPIs, []featuregate.Feature{"DRADeviceTaintRules"}, ""},
		{"1.33 serves no resource.k8s.io/v1, which a locked feature needs", server("v1.33.13"), SchedulerAPIs, nil,
			"the API server (v1.33.13) does not serve resource.k8s.io/v1 resourceclaims, which it lists while its feature DynamicResourceAllocation is on, and that feature cannot be turned off in this version; prog needs Kubernetes 1.34 or newer"},
		{"the provisioner's own APIs on 1.33", server("v1.33.13"), ProvisionerAPIs, nil,
			"the API server (v1.33.13) does not serve resource.k8s.io/v1 resourceclaims, which it lists whatever its settings; prog needs Kubernetes 1.34 or newer"},
		{"the provisioner on 1.33: one message for one cause", server("v1.33.13"), slices.Concat(SchedulerAPIs, ProvisionerAPIs), nil,
			"the API server (v1.33.13) does not serve resource.k8s.io/v1 resourceclaims, which it lists while its feature DynamicResourceAllocation is on, and that feature cannot be turned off in this version; prog needs Kubernetes 1.34 or newer"},
		{"the provisioner on 1.34", server("v1.34.4", all[:3]...), slices.Concat(SchedulerAPIs, ProvisionerAPIs), []featuregate.Feature{"DRADeviceTaintRules"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, err := Check(context.Background(), tc.disco, gates(t), tc.apis, "prog", time.Minute)
			if tc.wantErr != "" {
				var u *UnservedError
				if err == nil || err.Error() != tc.wantErr || !errors.As(err, &u) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(off, tc.off) {
				t.Fatalf("turned off %v, want %v", off, tc.off)
			}
		})
	}
}

// TestCheckAsksNothingOfFeaturesThatAreOff: a feature already off needs
// no API, so a server that lacks it is fine.
func TestCheckAsksNothingOfFeaturesThatAreOff(t *testing.T) {
	g := gates(t)
	if err := g.SetFromMap(map[string]bool{"DRADeviceTaintRules": false}); err != nil {
		t.Fatal(err)
	}
	off, err := Check(context.Background(), server("v1.34.4", "resourceclaims", "resourceslices", "deviceclasses"), g, SchedulerAPIs, "prog", time.Minute)
	if err != nil || len(off) != 0 {
		t.Fatalf("turned off %v (err %v), want nothing", off, err)
	}
}

// TestCheckWaitsForTheServer: a server that fails discovery is asked
// again until it answers, and not past the timeout, whose error names the
// server's last answer.
func TestCheckWaitsForTheServer(t *testing.T) {
	d := server("v1.37.2", "resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules")
	failures := 2
	d.AddReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	if _, err := Check(context.Background(), d, gates(t), SchedulerAPIs, "prog", time.Minute); err != nil || failures != 0 {
		t.Fatalf("err %v, %d failures left", err, failures)
	}
	d2 := server("v1.37.2")
	d2.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := Check(context.Background(), d2, gates(t), SchedulerAPIs, "prog", 1500*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "asking the API server which APIs it serves") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v, want a timeout that names the last answer", err)
	}
}

// workloadGates are kube-scheduler v1.37's gates of gang scheduling with
// their dependencies (pkg/features): GenericWorkload, and
// TopologyAwareWorkloadScheduling, DRAWorkloadResourceClaims and
// CompositePodGroup that need it (CompositePodGroup the topology gate
// too), with the given ones on.
func workloadGates(t *testing.T, on ...string) featuregate.MutableFeatureGate {
	g := gates(t)
	if err := g.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		"TopologyAwareWorkloadScheduling": {Default: false, PreRelease: featuregate.Alpha},
		"DRAWorkloadResourceClaims":       {Default: false, PreRelease: featuregate.Beta},
		"CompositePodGroup":               {Default: false, PreRelease: featuregate.Alpha},
	}); err != nil {
		t.Fatal(err)
	}
	if err := g.(interface {
		AddDependencies(map[featuregate.Feature][]featuregate.Feature) error
	}).AddDependencies(map[featuregate.Feature][]featuregate.Feature{
		"TopologyAwareWorkloadScheduling": {"GenericWorkload"},
		"DRAWorkloadResourceClaims":       {"DynamicResourceAllocation", "GenericWorkload"},
		"CompositePodGroup":               {"GenericWorkload", "TopologyAwareWorkloadScheduling"},
	}); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, f := range on {
		set[f] = true
	}
	if err := g.SetFromMap(set); err != nil {
		t.Fatal(err)
	}
	return g
}

// serving is a discovery fake of a v1.37 server serving DRA's resources
// and the given ones of scheduling.k8s.io/v1beta1 ("" serves none of it).
func serving(podgroups ...string) *fakediscovery.FakeDiscovery {
	d := server("v1.37.2", "resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules")
	if len(podgroups) > 0 {
		list := &metav1.APIResourceList{GroupVersion: "scheduling.k8s.io/v1beta1"}
		for _, r := range podgroups {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r})
		}
		d.Resources = append(d.Resources, list)
	}
	return d
}

// TestCheckTurnsOffWhatDependsOnAFeatureTurnedOff: gang scheduling's
// gates on against a server that serves no PodGroups (the gate or the
// runtime-config missing there) turn off GenericWorkload and every gate
// on that needs it, directly or through another, so that the gate takes
// the settings (it refuses a feature on whose dependency is off); against
// a server that serves them, nothing is turned off.
func TestCheckTurnsOffWhatDependsOnAFeatureTurnedOff(t *testing.T) {
	all := []string{"GenericWorkload", "TopologyAwareWorkloadScheduling", "DRAWorkloadResourceClaims", "CompositePodGroup"}
	for _, tc := range []struct {
		name  string
		disco *fakediscovery.FakeDiscovery
		on    []string
		off   []featuregate.Feature
	}{
		{"a server that serves podgroups", serving("workloads", "podgroups"), all[:2], nil},
		{"GenericWorkload alone, unserved", serving(), all[:1], []featuregate.Feature{"GenericWorkload"}},
		{"with the topology gate, unserved", serving(), all[:2], []featuregate.Feature{"GenericWorkload", "TopologyAwareWorkloadScheduling"}},
		{"every gang gate, unserved", serving(), all, []featuregate.Feature{"GenericWorkload", "CompositePodGroup", "DRAWorkloadResourceClaims", "TopologyAwareWorkloadScheduling"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := workloadGates(t, tc.on...)
			off, err := Check(context.Background(), tc.disco, g, SchedulerAPIs, "prog", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(off, tc.off) {
				t.Fatalf("turned off %v, want %v", off, tc.off)
			}
			if err := g.SetFromMap(Off(off)); err != nil {
				t.Fatalf("the gate refuses what Check turned off: %v", err)
			}
			for _, f := range all {
				if want := slices.Contains(tc.on, f) && !slices.Contains(off, featuregate.Feature(f)); g.Enabled(featuregate.Feature(f)) != want {
					t.Errorf("%s on: %v, want %v", f, g.Enabled(featuregate.Feature(f)), want)
				}
			}
		})
	}
}
