package replicas

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/test/testobj"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// catalog: two types in one zone, the small one cheaper, and a third
// cheaper still in another zone but only on spot (the pool asks for
// on-demand).
func catalog() *v1alpha1.InstanceTypeCatalog {
	return testobj.Catalog("fixed",
		testobj.InstanceType("c7.large").Arch("amd64").Capacity("cpu", "2", "memory", "4Gi", "pods", "110").Allocatable("cpu", "2", "memory", "4Gi", "pods", "110").
			Offering("zone-a", v1alpha1.CapacityTypeOnDemand, "0.10").Obj(),
		testobj.InstanceType("c7.xlarge").Arch("amd64").Capacity("cpu", "4", "memory", "8Gi", "pods", "110").Allocatable("cpu", "4", "memory", "8Gi", "pods", "110").
			Offering("zone-a", v1alpha1.CapacityTypeOnDemand, "0.20").Obj(),
		testobj.InstanceType("c7.spot").Arch("amd64").Capacity("cpu", "2", "memory", "4Gi", "pods", "110").Allocatable("cpu", "2", "memory", "4Gi", "pods", "110").
			Offering("zone-b", v1alpha1.CapacityTypeSpot, "0.01").Obj(),
	)
}

func fixedPool(n int64) *testobj.PoolWrapper {
	return testobj.Pool("fixed").Replicas(n).Require(v1alpha1.LabelCapacityType, "In", "on-demand")
}

// reconcile runs the controller once over objs and returns the pool's
// claims (sorted by name) and its ReplicasReached condition.
func reconcileOnce(t *testing.T, c *Controller, kube client.Client) ([]v1alpha1.NodeClaim, *metav1.Condition) {
	t.Helper()
	if _, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "fixed"}}); err != nil {
		t.Fatal(err)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(context.Background(), &claims); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(claims.Items, func(a, b v1alpha1.NodeClaim) int { return strings.Compare(a.Name, b.Name) })
	var pool v1alpha1.NodePool
	if err := kube.Get(context.Background(), types.NamespacedName{Name: "fixed"}, &pool); err != nil {
		t.Fatal(err)
	}
	return claims.Items, meta.FindStatusCondition(pool.Status.Conditions, v1alpha1.ConditionReplicasReached)
}

func newController(kube client.Client) *Controller {
	return New(kube, limits.NewLedger(kube, cloudfake.New()), func() time.Time { return now })
}

func TestShort(t *testing.T) {
	cases := []struct {
		name       string
		want, have int64
		short      int64
	}{
		{"an empty pool lacks all its replicas", 3, 0, 3},
		{"a pool one short lacks one", 3, 2, 1},
		{"a full pool lacks none", 3, 3, 0},
		{"a pool with more than its replicas lacks none: scaling down is disruption's", 2, 3, 0},
		{"a pool of 0 replicas lacks none", 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Short(tc.want, tc.have); got != tc.short {
				t.Errorf("Short(%d, %d) = %d, want %d", tc.want, tc.have, got, tc.short)
			}
		})
	}
}

func TestAFixedPoolGetsAClaimPerMissingReplica(t *testing.T) {
	kube := testobj.Client(fixedPool(4).Obj(), catalog(),
		// Standing: a; d, the replacement of c, which therefore does not
		// count; e, whose replacement is named but not seen yet (it is
		// on its way), so e still counts. Not standing: b, being
		// disrupted. Of another pool: other-a.
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-a").Obj(),
		testobj.Claim("fixed-b").UID("fixed-b").Pool("fixed").Phase(v1alpha1.NodeClaimDisrupting).ProviderID("p-b").Obj(),
		testobj.Claim("fixed-c").UID("fixed-c").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-c").Annotation(v1alpha1.AnnotationReplacement, "fixed-d").Obj(),
		testobj.Claim("fixed-d").UID("fixed-d").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-d").Annotation(v1alpha1.AnnotationReplaces, "fixed-c").Obj(),
		testobj.Claim("fixed-e").UID("fixed-e").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-e").Annotation(v1alpha1.AnnotationReplacement, "fixed-f").Obj(),
		testobj.Claim("other-a").UID("other-a").Pool("other").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-o").Obj(),
	)
	c := newController(kube)
	claims, cond := reconcileOnce(t, c, kube)
	var made []v1alpha1.NodeClaim
	for _, nc := range claims {
		if nc.Annotations[v1alpha1.AnnotationReplica] != "" {
			made = append(made, nc)
		}
	}
	if len(made) != 1 {
		t.Fatalf("made %d claims, want 1 (4 replicas, 3 standing)", len(made))
	}
	for _, nc := range made {
		if nc.Spec.NodePool != "fixed" || nc.Labels[v1alpha1.LabelNodePool] != "fixed" || nc.Spec.NominatedPods != 0 {
			t.Errorf("claim %s: pool %q, label %q, %d nominated pods; want pool fixed and no pod", nc.Name, nc.Spec.NodePool, nc.Labels[v1alpha1.LabelNodePool], nc.Spec.NominatedPods)
		}
		if diff := cmp.Diff([]string{"c7.large", "c7.xlarge"}, instanceTypes(&nc)); diff != "" {
			t.Errorf("claim %s's options, cheapest first, every on-demand type of zone-a (-want,+got):\n%s", nc.Name, diff)
		}
	}
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonReplicasLaunching {
		t.Errorf("ReplicasReached = %+v, want False ReplicasLaunching", cond)
	}

	// Reconciled again before the cache shows them: none made twice.
	c2 := newController(testobj.Client(fixedPool(3).Obj(), catalog(),
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-a").Obj()))
	c2.expect("fixed", "fixed-x1")
	c2.expect("fixed", "fixed-x2")
	claims, _ = reconcileOnce(t, c2, c2.kube)
	if len(claims) != 1 {
		t.Errorf("with 2 claims made but not in the cache yet, the pool has %d claims, want 1 (none made again)", len(claims))
	}
}

func TestAFixedPoolAtItsReplicasIsReached(t *testing.T) {
	kube := testobj.Client(fixedPool(2).Obj(), catalog(),
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-a").Obj(),
		testobj.Claim("fixed-b").UID("fixed-b").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-b").Obj(),
		testobj.Claim("fixed-c").UID("fixed-c").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-c").Obj(),
	)
	claims, cond := reconcileOnce(t, newController(kube), kube)
	if len(claims) != 3 {
		t.Errorf("a pool above its replicas has %d claims, want 3: scaling down is disruption's", len(claims))
	}
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonReplicasReached {
		t.Errorf("ReplicasReached = %+v, want True", cond)
	}
}

func TestAFixedPoolStopsAtItsLimits(t *testing.T) {
	// cpu 5: two running nodes of 2 cpu leave room for none of the
	// types (2 cpu more makes 6).
	pool := fixedPool(4).Limit("cpu", "5").Obj()
	kube := testobj.Client(pool, catalog(),
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-a").Capacity("cpu", "2").Obj(),
		testobj.Claim("fixed-b").UID("fixed-b").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-b").Capacity("cpu", "2").Obj(),
	)
	claims, cond := reconcileOnce(t, newController(kube), kube)
	if len(claims) != 2 {
		t.Errorf("the pool has %d claims, want 2: its limits leave room for no more", len(claims))
	}
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonReplicasLimited {
		t.Fatalf("ReplicasReached = %+v, want False LimitsReached", cond)
	}
	if want := "cpu 4 in use or launching + 2 for c7.large > limit 5"; !strings.Contains(cond.Message, want) {
		t.Errorf("message %q does not say %q", cond.Message, want)
	}

	// cpu 7: room for one more of 2 cpu, not two.
	pool = fixedPool(4).Limit("cpu", "7").Obj()
	kube = testobj.Client(pool, catalog(),
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-a").Capacity("cpu", "2").Obj(),
		testobj.Claim("fixed-b").UID("fixed-b").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).ProviderID("p-b").Capacity("cpu", "2").Obj(),
	)
	claims, cond = reconcileOnce(t, newController(kube), kube)
	if len(claims) != 3 {
		t.Errorf("the pool has %d claims, want 3: its limits leave room for one more", len(claims))
	}
	if cond == nil || cond.Reason != v1alpha1.ReasonReplicasLimited {
		t.Errorf("ReplicasReached = %+v, want False LimitsReached", cond)
	}
}

func TestAFixedPoolWaitsForItsLaunches(t *testing.T) {
	kube := testobj.Client(fixedPool(3).Obj(), catalog(),
		testobj.Claim("fixed-a").UID("fixed-a").Pool("fixed").Phase(v1alpha1.NodeClaimLaunching).Obj())
	claims, cond := reconcileOnce(t, newController(kube), kube)
	if len(claims) != 1 {
		t.Errorf("the pool has %d claims, want 1: more are made once the launch in flight has its instance", len(claims))
	}
	if cond == nil || cond.Reason != v1alpha1.ReasonReplicasLaunching {
		t.Errorf("ReplicasReached = %+v, want False ReplicasLaunching", cond)
	}
}

func TestAPoolWithoutReplicasIsLeftAlone(t *testing.T) {
	kube := testobj.Client(testobj.Pool("fixed").Obj(), catalog())
	claims, cond := reconcileOnce(t, newController(kube), kube)
	if len(claims) != 0 || cond != nil {
		t.Errorf("a pool without replicas got %d claims and condition %+v, want none", len(claims), cond)
	}
}

func instanceTypes(nc *v1alpha1.NodeClaim) []string {
	for _, r := range nc.Spec.Requirements {
		if r.Key == "node.kubernetes.io/instance-type" {
			return r.Values
		}
	}
	return nil
}
