package disruption

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// driftWorld is a pool, its node class, and one initialized claim with
// its node, stamped with the hashes they have now unless unstamped.
type driftWorld struct {
	kube  client.Client
	c     *Controller
	pool  *v1alpha1.NodePool
	class *v1alpha1.SimulatedNodeClass
	nc    *v1alpha1.NodeClaim
}

func newDriftWorld(t *testing.T, stamp func(nc *v1alpha1.NodeClaim, poolHash, classHash string)) *driftWorld {
	t.Helper()
	ref := v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: v1alpha1.SimulatedNodeClassSpec{Tags: map[string]string{"team": "web"}}}
	pool := testobj.Pool("p").NodeLabel("team", "web").Class(ref.Kind, ref.Name).Require(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "zone-a", "zone-b").Obj()
	classes := (&simulated.Cloud{}).NodeClasses()
	poolHash, err := nodeshape.PoolHash(pool)
	if err != nil {
		t.Fatal(err)
	}
	classHash, _, err := cloudprovider.NodeClassHash(context.Background(), testobj.Client(class.DeepCopy()), classes, ref)
	if err != nil {
		t.Fatal(err)
	}
	nc := testobj.Claim("p-abcde").UID("uid-1").Pool("p").Class(ref.Kind, ref.Name).NodeLabel("team", "web").
		Phase(v1alpha1.NodeClaimInitialized).NodeName("n1").Obj()
	stamp(nc, poolHash, classHash)
	node := testobj.Node("n1").Label("team", "web").Label(corev1.LabelTopologyZone, "zone-a").Label(v1alpha1.LabelNodePool, "p").Obj()
	kube := testobj.Client(pool, class, nc, node)
	c := New(NewExecutor(kube, kube, kubefake.NewClientset(), events.NewFakeRecorder(10), time.Now), NewDrift(kube, classes))
	return &driftWorld{kube: kube, c: c, pool: pool, class: class, nc: nc}
}

func stamped(nc *v1alpha1.NodeClaim, poolHash, classHash string) {
	nc.Annotations = map[string]string{
		v1alpha1.AnnotationNodePoolHash:        poolHash,
		v1alpha1.AnnotationNodePoolHashVersion: nodeshape.PoolHashVersion,
		v1alpha1.AnnotationNodeClassHash:       classHash,
	}
}

func unstamped(*v1alpha1.NodeClaim, string, string) {}

func (w *driftWorld) claim(t *testing.T) *v1alpha1.NodeClaim {
	t.Helper()
	var nc v1alpha1.NodeClaim
	if err := w.kube.Get(context.Background(), client.ObjectKeyFromObject(w.nc), &nc); err != nil {
		return nil
	}
	return &nc
}

// reconcile runs the controller on the claim as it is now, a few times
// (a condition is written in one pass, acted on in the next).
func (w *driftWorld) reconcile(t *testing.T, times int) {
	t.Helper()
	for range times {
		nc := w.claim(t)
		if nc == nil {
			return
		}
		if _, err := settle(w.c, context.Background(), nc); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *driftWorld) update(t *testing.T, o client.Object) {
	t.Helper()
	if err := w.kube.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// TestDriftedClaimSaysWhyAndIsDisrupted: each way a node drifts sets the
// claim's Drifted condition with its reason and a message saying what,
// and the claim is then disrupted; a claim whose pool and class are as
// they were is left alone and has no Drifted condition.
func TestDriftedClaimSaysWhyAndIsDisrupted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		change      func(t *testing.T, w *driftWorld)
		wantReason  string
		wantMessage string
	}{
		{name: "nothing changed", change: func(*testing.T, *driftWorld) {}},
		{name: "the pool's template labels changed", wantReason: v1alpha1.DriftedByNodePool, wantMessage: "NodePool p template changed",
			change: func(t *testing.T, w *driftWorld) {
				w.pool.Spec.Template.ObjectMeta.Labels["team"] = "api"
				w.update(t, w.pool)
			}},
		{name: "the pool's template annotations changed", wantReason: v1alpha1.DriftedByNodePool, wantMessage: "NodePool p template changed",
			change: func(t *testing.T, w *driftWorld) {
				w.pool.Spec.Template.ObjectMeta.Annotations = map[string]string{"example.com/owner": "bob"}
				w.update(t, w.pool)
			}},
		{name: "the node no longer satisfies a requirement", wantReason: v1alpha1.DriftedByRequirements, wantMessage: "node no longer satisfies requirement topology.kubernetes.io/zone In [zone-b]",
			change: func(t *testing.T, w *driftWorld) {
				w.pool.Spec.Template.Spec.Requirements[0].Values = []string{"zone-b"}
				w.update(t, w.pool)
			}},
		{name: "the node class's spec changed", wantReason: v1alpha1.DriftedByNodeClass, wantMessage: "SimulatedNodeClass default changed",
			change: func(t *testing.T, w *driftWorld) {
				w.class.Spec.RegistrationDelay = &metav1.Duration{Duration: time.Second}
				w.update(t, w.class)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newDriftWorld(t, stamped)
			tc.change(t, w)
			w.reconcile(t, 1)
			nc := w.claim(t)
			if nc == nil {
				t.Fatal("the claim was deleted before its Drifted condition was written")
			}
			cond := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionDrifted)
			if tc.wantReason == "" {
				if cond != nil {
					t.Fatalf("an undrifted claim has condition %+v", cond)
				}
				w.reconcile(t, 3)
				if w.claim(t) == nil {
					t.Fatal("an undrifted claim was disrupted")
				}
				return
			}
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != tc.wantReason || cond.Message != tc.wantMessage {
				t.Fatalf("Drifted condition %+v; want True, reason %s, message %q", cond, tc.wantReason, tc.wantMessage)
			}
			w.reconcile(t, 1)
			if nc := w.claim(t); nc != nil {
				t.Fatalf("a drifted claim was not disrupted: phase %s", nc.Status.Phase)
			}
		})
	}
}

// TestUnstampedClaimIsStampedNotDrifted: a claim made before drift was
// detected (no hashes on it), or stamped under another hash version, is
// stamped with the hashes its pool and class have now and left alone; a
// change after that drifts it.
func TestUnstampedClaimIsStampedNotDrifted(t *testing.T) {
	for name, stamp := range map[string]func(*v1alpha1.NodeClaim, string, string){
		"no stamp": unstamped,
		"another hash version": func(nc *v1alpha1.NodeClaim, _, classHash string) {
			stamped(nc, "0123456789abcdef", classHash)
			nc.Annotations[v1alpha1.AnnotationNodePoolHashVersion] = "v0"
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := newDriftWorld(t, stamp)
			w.reconcile(t, 2)
			nc := w.claim(t)
			if nc == nil {
				t.Fatal("an unstamped claim was disrupted")
			}
			if cond := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionDrifted); cond != nil {
				t.Fatalf("an unstamped claim has condition %+v", cond)
			}
			want, _ := nodeshape.PoolHash(w.pool)
			if got := nc.Annotations[v1alpha1.AnnotationNodePoolHash]; got != want {
				t.Errorf("pool hash stamp %q, want the pool's %q", got, want)
			}
			if got := nc.Annotations[v1alpha1.AnnotationNodePoolHashVersion]; got != nodeshape.PoolHashVersion {
				t.Errorf("hash version stamp %q, want %q", got, nodeshape.PoolHashVersion)
			}
			if nc.Annotations[v1alpha1.AnnotationNodeClassHash] == "" {
				t.Error("no node class hash stamped")
			}
			w.class.Spec.Tags["team"] = "api"
			w.update(t, w.class)
			w.reconcile(t, 1)
			cond := meta.FindStatusCondition(w.claim(t).Status.Conditions, v1alpha1.ConditionDrifted)
			if cond == nil || cond.Reason != v1alpha1.DriftedByNodeClass {
				t.Fatalf("after its class changed the stamped claim has Drifted %+v", cond)
			}
		})
	}
}

// TestDriftWhySaysWhat: the Why of a drift disruption (the log line and
// the Disrupting Event) carries the condition's message.
func TestDriftWhySaysWhat(t *testing.T) {
	w := newDriftWorld(t, stamped)
	w.pool.Spec.Template.Spec.Taints = []v1alpha1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
	w.update(t, w.pool)
	w.reconcile(t, 1)
	v, err := NewDrift(w.kube, (&simulated.Cloud{}).NodeClasses()).Candidate(context.Background(), w.claim(t), w.pool)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Disrupt || !strings.Contains(v.Why, "NodePool p template changed") {
		t.Errorf("verdict %+v; want disrupt, why saying the template changed", v)
	}
}
