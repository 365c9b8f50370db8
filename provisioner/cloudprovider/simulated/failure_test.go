package simulated

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// launchedNode launches l and registers its node, and names it.
func launchedNode(t *testing.T, c *Cloud, l cloudprovider.Launch) string {
	t.Helper()
	in, err := c.Create(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.register(context.Background()); err != nil {
		t.Fatal(err)
	}
	return "sim-" + in.ProviderID[len("simulated:///zone-a/"):]
}

// TestNodeFailureTakesTheLeaseAfterItsDelay: a NodeFailure fault naming
// the instance's zone fails its node once it has been registered for the
// fault's `after`, not before: the node's lease is taken from kwok (held
// by FailedHolder, renewed a last time at the failure, for years) and the instance is
// marked failed. A fault naming another zone fails nothing, and a failed
// node stays failed when the fault is removed.
func TestNodeFailureTakesTheLeaseAfterItsDelay(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	now := time.Now()
	c.now = func() time.Time { return now }
	node := launchedNode(t, c, l)
	renewed := metav1.NewMicroTime(now.Add(-time.Second).Truncate(time.Microsecond))
	kwokLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("kwok"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &renewed}}
	if err := c.kube.Create(ctx, kwokLease); err != nil {
		t.Fatal(err)
	}
	setFaults := func(f ...v1alpha1.SimulatedFault) {
		t.Helper()
		var class v1alpha1.SimulatedNodeClass
		if err := c.kube.Get(ctx, client.ObjectKey{Name: "default"}, &class); err != nil {
			t.Fatal(err)
		}
		class.Spec.Faults = f
		if err := c.kube.Update(ctx, &class); err != nil {
			t.Fatal(err)
		}
	}
	holder := func() string {
		t.Helper()
		var lease coordinationv1.Lease
		if err := c.kube.Get(ctx, client.ObjectKeyFromObject(kwokLease), &lease); err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h == "kwok" && !lease.Spec.RenewTime.Equal(&renewed) {
			t.Errorf("the lease of a node not failed was renewed at %s, not by kwok at %s", lease.Spec.RenewTime, renewed)
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "")
	}

	setFaults(v1alpha1.SimulatedFault{Kind: v1alpha1.FaultNodeFailure, Zones: []string{"zone-b"}})
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != "kwok" {
		t.Fatalf("a fault of zone-b failed a node of zone-a (lease held by %s)", h)
	}

	setFaults(v1alpha1.SimulatedFault{Kind: v1alpha1.FaultNodeFailure, Zones: []string{"zone-a"}, After: &metav1.Duration{Duration: time.Minute}})
	now = now.Add(59 * time.Second)
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != "kwok" {
		t.Fatalf("the node failed 59s after registering, before its fault's 1m (lease held by %s)", h)
	}
	now = now.Add(time.Second)
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != FailedHolder {
		t.Fatalf("the node did not fail 1m after registering: lease held by %s", h)
	}
	var lease coordinationv1.Lease
	if err := c.kube.Get(ctx, client.ObjectKeyFromObject(kwokLease), &lease); err != nil {
		t.Fatal(err)
	}
	// The taking is the last renewal, so that the node lifecycle
	// controller sees a renewal with the taking's resourceVersion (see
	// FailedHolder), and never one after it.
	if at := metav1.NewMicroTime(now.Truncate(time.Microsecond)); !lease.Spec.RenewTime.Equal(&at) {
		t.Errorf("the failed lease's renew time is %s, want the failure's %s", lease.Spec.RenewTime, at)
	}
	if d := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); d < 365*24*3600 {
		t.Errorf("the failed lease lasts %ds: kwok would take it back when it runs out", d)
	}
	failed, err := c.labelled(ctx, labelFailed, "true")
	if err != nil || len(failed) != 1 {
		t.Fatalf("instances marked failed: %d (err %v), want 1", len(failed), err)
	}

	setFaults()
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if h := holder(); h != FailedHolder {
		t.Errorf("the failed node came back when its fault was removed (lease held by %s)", h)
	}
	var again coordinationv1.Lease
	if err := c.kube.Get(ctx, client.ObjectKeyFromObject(kwokLease), &again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != lease.ResourceVersion {
		t.Errorf("the failed lease was written again (resourceVersion %s → %s): the node lifecycle controller would take its cache for stale", lease.ResourceVersion, again.ResourceVersion)
	}
}

// TestFailedNodesPodsAreMarked: the pods bound to a node the simulated
// cloud failed carry PodOfFailedNode (which the sandbox's kwok stages
// match no pod with), those bound before the failure at once and those
// bound after on a later round, also after the fault is removed and after
// a restart of the cloud; a pod of a healthy node is never marked, and a
// failed node gone with its pods is no error.
func TestFailedNodesPodsAreMarked(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	node := launchedNode(t, c, l)
	pod := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		if err := c.kube.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	marked := func(p *corev1.Pod) bool {
		t.Helper()
		var got corev1.Pod
		if err := c.kube.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		return got.Annotations[PodOfFailedNode] == "true"
	}
	before, elsewhere := pod("before", node), pod("elsewhere", "sim-healthy")
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if marked(before) {
		t.Fatal("a pod of a node that has not failed is marked")
	}

	var class v1alpha1.SimulatedNodeClass
	if err := c.kube.Get(ctx, client.ObjectKey{Name: "default"}, &class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Faults = []v1alpha1.SimulatedFault{{Kind: v1alpha1.FaultNodeFailure}}
	if err := c.kube.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if !marked(before) {
		t.Error("the pod of the failed node is not marked at its failure")
	}
	class.Spec.Faults = nil
	if err := c.kube.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}
	after := pod("after", node)
	if err := c.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if !marked(after) {
		t.Error("a pod bound to the failed node after its failure is not marked on the next round")
	}
	// A restarted cloud reads the failed nodes from its inventory.
	restarted := NewCloud(c.Catalog, c.kube, c.api, c.namespace)
	late := pod("late", node)
	if err := restarted.fail(ctx); err != nil {
		t.Fatal(err)
	}
	if !marked(late) {
		t.Error("after a restart, a pod bound to the failed node is not marked")
	}
	if marked(elsewhere) {
		t.Error("a pod of a healthy node is marked")
	}
	if err := c.kube.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	if err := c.kube.Delete(ctx, after); err != nil {
		t.Fatal(err)
	}
	if err := restarted.fail(ctx); err != nil {
		t.Errorf("a failed node that is gone, with its pods: %v", err)
	}
}
