package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
)

// TestForeignProviderIDIsNotAdopted: a claim whose status names an
// instance launched for another claim (anyone who may write
// nodeclaims/status can write one) does not get that instance's node
// adopted; a claim naming its own instance does.
func TestForeignProviderIDIsNotAdopted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The claims' pool: a claim is adopted only if it is what its pool makes.
	createLimitedPool(t, "adoption", 100, []v1alpha1.InstanceType{instanceType("l2", 2)})
	cloud := cloudfake.New()
	cloud.Add(&cloudprovider.Instance{ProviderID: "fake:///zone-a/i-theirs", NodeClaim: "someone-else", Launched: time.Now()})
	cloud.Add(&cloudprovider.Instance{ProviderID: "fake:///zone-a/i-ours", NodeClaim: "adopt-own", Launched: time.Now()})
	for _, id := range []string{"i-theirs", "i-ours"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adoption-" + id}, Spec: corev1.NodeSpec{ProviderID: "fake:///zone-a/" + id}}
		if err := kube.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		deleteNodeAtEnd(t, node)
	}
	for name, id := range map[string]string{"adopt-foreign": "i-theirs", "adopt-own": "i-ours"} {
		nc := launchingClaim(name, "adoption", []v1alpha1.InstanceType{instanceType("l2", 2)})
		nc.Finalizers = nil
		if err := kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		nc.Status.Phase, nc.Status.ProviderID = v1alpha1.NodeClaimLaunched, "fake:///zone-a/"+id
		nc.Status.Conditions = []metav1.Condition{{Type: "Launched", Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.Now()}}
		if err := kube.Status().Update(ctx, nc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	}
	startLifecycle(t, ctx, cloud)

	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := kube.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "adopt-foreign" && e.Reason == v1alpha1.ReasonProviderIDMismatch
		}), nil
	}); err != nil {
		t.Fatal("no ProviderIDMismatch event on the claim naming another claim's instance")
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var own v1alpha1.NodeClaim
		err := kube.Get(ctx, client.ObjectKey{Name: "adopt-own"}, &own)
		return err == nil && own.Status.Phase == v1alpha1.NodeClaimRegistered, err
	}); err != nil {
		t.Fatal("the claim naming its own instance was not registered")
	}
	var foreign v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKey{Name: "adopt-foreign"}, &foreign); err != nil {
		t.Fatal(err)
	}
	var theirs corev1.Node
	if err := kube.Get(ctx, client.ObjectKey{Name: "adoption-i-theirs"}, &theirs); err != nil {
		t.Fatal(err)
	}
	if foreign.Status.Phase != v1alpha1.NodeClaimLaunched || slices.Contains(theirs.Finalizers, v1alpha1.FinalizerTermination) {
		t.Errorf("foreign node adopted: claim phase %s, node finalizers %v", foreign.Status.Phase, theirs.Finalizers)
	}
}
