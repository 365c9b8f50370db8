package simulator

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubefake "k8s.io/client-go/kubernetes/fake"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
)

// TestSimulatorsBuildWithGangScheduling: with GenericWorkload and
// TopologyAwareWorkloadScheduling on, the default profile (whose
// DefaultPreemption reads, when built, the mutable snapshot and PodGroup
// manager only kube-scheduler has) builds the disruption simulator and
// the bind gate, which place and judge a pod: both programs crashed at
// start with the gates on before preemption was left out of simulations.
func TestSimulatorsBuildWithGangScheduling(t *testing.T) {
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.GenericWorkload: true, features.TopologyAwareWorkloadScheduling: true})
	s := newTestScheduler(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if node, st := s.Place(ctx, NewCluster([]*corev1.Node{gateNode("a")}, nil).Without(), gatePod("p", 0)); !st.IsSuccess() || node != "a" {
		t.Errorf("placed on %q (%v), want a", node, st)
	}
	startGate(ctx, t, kubefake.NewClientset(), "")
}
