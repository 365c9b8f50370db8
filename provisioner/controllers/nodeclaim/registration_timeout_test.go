package nodeclaim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	s := newSteps(t, class)
	rec := s.recorder
	var names []string
	for i := range RegistrationTimeoutsInARow {
		name := fmt.Sprintf("pool-timeout-%d", i)
		nc := poolClaim().Name(name).UID(fmt.Sprintf("uid-timeout-%d", i)).Class("SimulatedNodeClass", "default").
			Phase(v1alpha1.NodeClaimLaunched).ProviderID("fake:///i-"+name).Launched("small", "zone-a", "spot").
			ConditionAt(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched", s.now).Obj()
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
	joined := poolClaim().Name("pool-joined").UID("uid-joined").Class(ref.Kind, ref.Name).Phase(v1alpha1.NodeClaimInitialized).Obj()
	if err := s.kube.Create(ctx, joined); err != nil {
		t.Fatal(err)
	}
	joined.Status.NodeName = "node-joined"
	if err := s.kube.Status().Update(ctx, joined); err != nil {
		t.Fatal(err)
	}
	nc := poolClaim().Class(ref.Kind, ref.Name).Phase(v1alpha1.NodeClaimLaunched).ProviderID("fake:///i-late").Launched("small", "zone-b", "spot").
		ConditionAt(v1alpha1.ConditionLaunched, metav1.ConditionTrue, "Launched", s.now).Obj()
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
