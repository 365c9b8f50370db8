package nodeclaim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestRegistrationTimeoutCountsAgainstTheClass: a launched claim whose node
// never registers is deleted without marking its offering unavailable (a
// node that does not join is the class's doing, and every other type would
// be launched and billed in turn); each timeout is an Event on the node
// class, and the third in a row makes its NodesRegistering condition False
// naming the claims.
func TestRegistrationTimeoutCountsAgainstTheClass(t *testing.T) {
	ctx := context.Background()
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	s := newSteps(t)
	// The steps' client, with the class's status a subresource as the API
	// server has it.
	s.kube = crfake.NewClientBuilder().WithScheme(s.kube.Scheme()).WithObjects(class).
		WithStatusSubresource(&v1alpha1.NodeClaim{}, &v1alpha1.SimulatedNodeClass{}).
		WithIndex(&corev1.Pod{}, indexNominated, func(client.Object) []string { return nil }).
		WithIndex(&corev1.Node{}, indexProviderID, func(o client.Object) []string { return []string{o.(*corev1.Node).Spec.ProviderID} }).
		Build()
	s.build()
	rec := s.recorder
	var names []string
	for i := range RegistrationTimeoutsInARow {
		nc := claim(v1alpha1.NodeClaimLaunched)
		nc.Name, nc.UID = fmt.Sprintf("pool-timeout-%d", i), types.UID(fmt.Sprintf("uid-timeout-%d", i))
		nc.Spec.NodeClassRef = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}
		nc.Status.ProviderID, nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType = "fake:///i-"+nc.Name, "small", "zone-a", "spot"
		nc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.NewTime(s.now)}}
		if err := s.kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		names = append(names, nc.Name)
		s.now = s.now.Add(2 * time.Minute) // past the RegistrationTTL of a minute
		if _, err := s.c.registrar.reconcile(ctx, s.get(t, nc)); err != nil {
			t.Fatal(err)
		}
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(nc), &v1alpha1.NodeClaim{}); err == nil {
			t.Fatalf("claim %s past its registration TTL was not deleted", nc.Name)
		}
		if gone, _ := s.unavailable.Unavailable("small", "zone-a", "spot"); gone {
			t.Fatalf("a registration timeout marked the offering small/zone-a/spot unavailable")
		}
		var got v1alpha1.SimulatedNodeClass
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(class), &got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionNodesRegistering)
		switch {
		case i+1 < RegistrationTimeoutsInARow && cond != nil:
			t.Errorf("after %d timeouts NodesRegistering = %+v, want none yet", i+1, cond)
		case i+1 == RegistrationTimeoutsInARow && (cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, strings.Join(names, ", "))):
			t.Errorf("after %d timeouts NodesRegistering = %+v, want False naming %v", i+1, cond, names)
		}
	}
	classEvents := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, v1alpha1.ReasonRegistrationTimeout) && strings.Contains(e, "in a row for this class") {
			classEvents++
		}
	}
	if classEvents != RegistrationTimeoutsInARow {
		t.Errorf("%d RegistrationTimeout Events on the class, want %d", classEvents, RegistrationTimeoutsInARow)
	}
}

// TestRegistrationTimeoutWhereTheClassJoinsMarksTheOffering: where a node
// of the same class is registered, the class's configuration joins nodes,
// so a timeout is the offering's (a zone's network, say): it is marked
// unavailable and the pods' next claim goes elsewhere.
func TestRegistrationTimeoutWhereTheClassJoinsMarksTheOffering(t *testing.T) {
	ctx := context.Background()
	ref := v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}
	s := newSteps(t)
	joined := claim(v1alpha1.NodeClaimInitialized)
	joined.Name, joined.UID, joined.Spec.NodeClassRef = "pool-joined", "uid-joined", ref
	if err := s.kube.Create(ctx, joined); err != nil {
		t.Fatal(err)
	}
	joined.Status.NodeName = "node-joined"
	if err := s.kube.Status().Update(ctx, joined); err != nil {
		t.Fatal(err)
	}
	nc := claim(v1alpha1.NodeClaimLaunched)
	nc.Spec.NodeClassRef = ref
	nc.Status.ProviderID, nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType = "fake:///i-late", "small", "zone-b", "spot"
	nc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.NewTime(s.now)}}
	if err := s.kube.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(2 * time.Minute)
	if _, err := s.c.registrar.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if gone, _ := s.unavailable.Unavailable("small", "zone-b", "spot"); !gone {
		t.Errorf("a registration timeout where the class's nodes join left the offering small/zone-b/spot available")
	}
}
