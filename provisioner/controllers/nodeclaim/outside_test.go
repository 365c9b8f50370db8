package nodeclaim

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// outsideCases are claims that ask for more than "pool" makes, each
// naming the field the refusal must name; nil edits are the claim as
// made, which must pass.
var outsideCases = []struct {
	name      string
	editClaim func(*v1alpha1.NodeClaim)
	editPool  func(*v1alpha1.NodePool)
	field     string
}{
	{name: "a claim made from its pool passes"},
	{name: "another node class than the pool's", field: "spec.nodeClassRef", editClaim: func(nc *v1alpha1.NodeClaim) {
		nc.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "privileged"}
	}},
	{name: "a label the pool's template does not have", field: "spec.labels", editClaim: func(nc *v1alpha1.NodeClaim) {
		nc.Spec.Labels["example.com/trusted"] = "true"
	}},
	{name: "an annotation the pool's template does not have", field: "spec.annotations", editClaim: func(nc *v1alpha1.NodeClaim) {
		nc.Spec.Annotations = map[string]string{"example.com/admin": "yes"}
	}},
	{name: "the pool's taint left out", field: "spec.taints", editPool: func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.Taints = []v1alpha1.Taint{{Key: "dedicated", Value: "pool", Effect: corev1.TaintEffectNoSchedule}}
	}},
	{name: "a startup taint the pool's template does not have", field: "spec.startupTaints", editClaim: func(nc *v1alpha1.NodeClaim) {
		nc.Spec.StartupTaints = []corev1.Taint{{Key: "example.com/held", Effect: corev1.TaintEffectNoExecute}}
	}},
	{name: "an instance type the pool's requirements exclude", field: "spec.requirements", editPool: func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"large"}}}
	}},
}

// refusedFor checks that the claim was refused for field: condType False
// with reason OutsideNodePool naming it, a Warning Event naming it, and
// the claim deleting.
func refusedFor(t *testing.T, s *steps, nc *v1alpha1.NodeClaim, condType, field string) {
	t.Helper()
	got := s.get(t, nc)
	cond := meta.FindStatusCondition(got.Status.Conditions, condType)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonOutsideNodePool || !strings.HasPrefix(cond.Message, field+" ") {
		t.Errorf("%s condition %+v; want False, reason %s, a message on %s", condType, cond, v1alpha1.ReasonOutsideNodePool, field)
	}
	if got.DeletionTimestamp.IsZero() {
		t.Error("the claim was not deleted")
	}
	rec := s.recorder
	found := false
	for len(rec.Events) > 0 {
		e := <-rec.Events
		found = found || strings.HasPrefix(e, "Warning "+v1alpha1.ReasonOutsideNodePool+" "+field+" ")
	}
	if !found {
		t.Errorf("no Warning %s Event naming %s", v1alpha1.ReasonOutsideNodePool, field)
	}
}

// TestAClaimOutsideItsPoolIsNotLaunched: a claim that asks for another
// node class, labels, annotations or taints than its pool's template, or
// requirements looser than the pool's, is not launched: nothing is
// created in the cloud, its Launched condition and an Event say which
// field, and it is deleted so that its pods get a claim of the pool.
func TestAClaimOutsideItsPoolIsNotLaunched(t *testing.T) {
	ctx := context.Background()
	for _, tc := range outsideCases {
		t.Run(tc.name, func(t *testing.T) {
			nc := poolClaim().Finalizer(v1alpha1.FinalizerTermination).Phase(v1alpha1.NodeClaimLaunching).Obj()
			if tc.editClaim != nil {
				tc.editClaim(nc)
			}
			s := newSteps(t, nc)
			if tc.editPool != nil {
				s.editPool(t, tc.editPool)
			}
			if _, err := s.c.launcher.reconcile(ctx, s.get(t, nc)); err != nil {
				t.Fatal(err)
			}
			if tc.field == "" {
				if got := s.get(t, nc); got.Status.Phase != v1alpha1.NodeClaimLaunched {
					t.Errorf("phase %s, want Launched", got.Status.Phase)
				}
				return
			}
			if n := s.cloud.Creates(); n != 0 {
				t.Errorf("%d launches made for it", n)
			}
			refusedFor(t, s, nc, "Launched", tc.field)
		})
	}
}

// TestAClaimOutsideItsPoolIsNotAdopted: a launched claim found outside
// its pool when its node registers (the claim re-made under its name, or
// the pool edited since) does not have its labels, annotations or the
// finalizer written on the node; its Registered condition and an Event
// say which field, and it is deleted, which terminates the instance.
func TestAClaimOutsideItsPoolIsNotAdopted(t *testing.T) {
	ctx := context.Background()
	for _, tc := range outsideCases {
		t.Run(tc.name, func(t *testing.T) {
			nc := poolClaim().Finalizer(v1alpha1.FinalizerTermination).Phase(v1alpha1.NodeClaimLaunched).ProviderID("fake:///zone-a/i-1").
				Launched("small", "zone-a", "spot").Condition(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched").Obj()
			if tc.editClaim != nil {
				tc.editClaim(nc)
			}
			node := testobj.Node("n1").ProviderID(nc.Status.ProviderID).Obj()
			s := newSteps(t, nc, node)
			if tc.editPool != nil {
				s.editPool(t, tc.editPool)
			}
			s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, InstanceType: "small", Zone: "zone-a", CapacityType: "spot", NodeClaim: nc.Name, NodePool: "pool"})
			if _, err := s.c.registrar.reconcile(ctx, s.get(t, nc)); err != nil {
				t.Fatal(err)
			}
			var n corev1.Node
			if err := s.kube.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
				t.Fatal(err)
			}
			if tc.field == "" {
				if got := s.get(t, nc); got.Status.Phase != v1alpha1.NodeClaimRegistered || n.Labels["team"] != "then" {
					t.Errorf("phase %s, node labels %v; want Registered, the pool's label team=then on the node", got.Status.Phase, n.Labels)
				}
				return
			}
			if len(n.Labels) > 0 || len(n.Annotations) > 0 || len(n.Finalizers) > 0 {
				t.Errorf("the node was adopted: labels %v, annotations %v, finalizers %v", n.Labels, n.Annotations, n.Finalizers)
			}
			if got := s.get(t, nc); got.Status.Phase != v1alpha1.NodeClaimLaunched {
				t.Errorf("phase %s, want Launched still", got.Status.Phase)
			}
			refusedFor(t, s, nc, "Registered", tc.field)
		})
	}
}
