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
