package virtualnodes

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"

	"github.com/nodeforge/nodeforge/plugin/registry"
)

// refuseZoneA is a user's own Filter plugin, added as docs/plugins.md
// shows: it refuses every node in zone-a.
type refuseZoneA struct{}

const refuseZoneAName = "RefuseZoneA"

func (refuseZoneA) Name() string { return refuseZoneAName }

func (refuseZoneA) Filter(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if ni.Node().Labels[corev1.LabelTopologyZone] == "zone-a" {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "zone-a is refused")
	}
	return nil
}

func newRefuseZoneA(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return refuseZoneA{}, nil
}

// TestAUsersPluginCountsInNomination: a Filter plugin the user adds with
// registry.WithPlugin and enables in the profile is run by nomination, so
// no pod is nominated to zone-a, the cheapest zone.
func TestAUsersPluginCountsInNomination(t *testing.T) {
	without := newHarness(t, []*pool{benchPool(t)})
	c, s := without.schedule(context.Background(), testPod("a", "1", "1Gi"))
	if !s.IsSuccess() || c.group.zone != "zone-a" {
		t.Fatalf("without the user's plugin the pod went to %v (%s); the test expects zone-a to be the cheapest", c, s.Message())
	}
	reg, err := registry.All(registry.WithPlugin(refuseZoneAName, newRefuseZoneA))
	if err != nil {
		t.Fatal(err)
	}
	enable := func(p *config.KubeSchedulerProfile) {
		p.Plugins.Filter.Enabled = append(p.Plugins.Filter.Enabled, config.Plugin{Name: refuseZoneAName})
	}
	h := newHarnessFrom(t, reg, []*pool{benchPool(t)}, enable)
	for i := range 5 {
		c, s := h.schedule(context.Background(), testPod(fmt.Sprintf("p%d", i), "1", "1Gi"))
		if !s.IsSuccess() {
			t.Fatalf("pod p%d was not nominated: %s", i, s.Message())
		}
		if c.group.zone == "zone-a" {
			t.Fatalf("pod p%d nominated to %s in zone-a, which the user's plugin refuses", i, c.name)
		}
	}
}

// TestSavedStatesLeaveTheRegistryGiven: VirtualNodes wraps the spread and
// affinity plugins of its own copy of the registry. The registry it is
// given serves the scheduler's other profiles and the provisioner's
// simulators, which must run the plugins unwrapped: wrapped, they read
// states saved on VirtualNodes' view (seen as repack refusing every
// packing on topology spread in BenchmarkNominate).
func TestSavedStatesLeaveTheRegistryGiven(t *testing.T) {
	reg, err := registry.All()
	if err != nil {
		t.Fatal(err)
	}
	factory := func(name string) uintptr { return reflect.ValueOf(reg[name]).Pointer() }
	spread, affinity := factory("PodTopologySpread"), factory("InterPodAffinity")
	wrapped := withSavedStates(reg, &lister{})
	if factory("PodTopologySpread") != spread || factory("InterPodAffinity") != affinity {
		t.Error("the registry given was changed")
	}
	if reflect.ValueOf(wrapped["PodTopologySpread"]).Pointer() == spread {
		t.Error("the copy's PodTopologySpread is not wrapped")
	}
}
