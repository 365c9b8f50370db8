package disruption

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestScaleDownTakesTheEmptiestFirst: a fixed-size pool above its
// replicas gives up its emptiest initialized nodes, daemonset and
// finished pods not counted, and nothing when at its count.
func TestScaleDownTakesTheEmptiestFirst(t *testing.T) {
	claim := func(name, node string) client.Object {
		return testobj.Claim(name).UID(name).Pool("fixed").Label(v1alpha1.LabelNodePool, "fixed").Phase(v1alpha1.NodeClaimInitialized).NodeName(node).Obj()
	}
	objs := func(replicas int64) []client.Object {
		return []client.Object{
			testobj.Pool("fixed").Replicas(replicas).Obj(),
			claim("busy", "n-busy"), claim("idle", "n-idle"), claim("some", "n-some"),
			// Still launching: never chosen, but counted as standing.
			testobj.Claim("new").UID("new").Pool("fixed").Label(v1alpha1.LabelNodePool, "fixed").Phase(v1alpha1.NodeClaimLaunching).Obj(),
			testobj.Pod("a").Node("n-busy").OwnedBy("ReplicaSet", "web").Obj(),
			testobj.Pod("b").Node("n-busy").OwnedBy("ReplicaSet", "web").Obj(),
			testobj.Pod("c").Node("n-some").OwnedBy("ReplicaSet", "web").Obj(),
			testobj.Pod("ds").Node("n-idle").OwnedBy("DaemonSet", "agent").Obj(),
			testobj.Pod("done").Node("n-idle").Phase("Succeeded").Obj(),
		}
	}
	cases := []struct {
		name     string
		replicas int64
		held     bool // a do-not-disrupt pod on n-idle
		want     []string
	}{
		{"at its count, none is chosen", 4, false, nil},
		{"one above its count, the node with no pod but a daemonset's goes", 3, false, []string{"idle"}},
		{"two above its count, the node with one pod goes too", 2, false, []string{"idle", "some"}},
		{"a node do-not-disrupt holds is passed over for the next emptiest", 3, true, []string{"some"}},
	}
	held := func(replicas int64) []client.Object {
		return append(objs(replicas), testobj.Pod("keep").Node("n-idle").OwnedBy("ReplicaSet", "web").Annotation(v1alpha1.AnnotationDoNotDisrupt, "true").Obj())
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := objs(tc.replicas)
			if tc.held {
				o = held(tc.replicas)
			}
			kube := testobj.Client(o...)
			m := NewScaleDown(kube, kube)
			var pool v1alpha1.NodePool
			if err := kube.Get(context.Background(), client.ObjectKey{Name: "fixed"}, &pool); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, name := range []string{"busy", "idle", "some"} {
				var nc v1alpha1.NodeClaim
				if err := kube.Get(context.Background(), client.ObjectKey{Name: name}, &nc); err != nil {
					t.Fatal(err)
				}
				v, err := m.Candidate(context.Background(), &nc, &pool)
				if err != nil {
					t.Fatal(err)
				}
				still, err := m.StillCandidate(context.Background(), &nc)
				if err != nil {
					t.Fatal(err)
				}
				if v.Disrupt != still {
					t.Errorf("%s: Candidate says %v, StillCandidate %v", name, v.Disrupt, still)
				}
				if v.Disrupt {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claims chosen (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestAFixedPoolIsNeverEmptied: emptiness leaves a fixed-size pool's
// empty nodes alone.
func TestAFixedPoolIsNeverEmptied(t *testing.T) {
	pool := testobj.Pool("fixed").Replicas(1).ConsolidateAfter("0s").Obj()
	nc := testobj.Claim("idle").UID("idle").Pool("fixed").Phase(v1alpha1.NodeClaimInitialized).NodeName("n-idle").Obj()
	kube := testobj.Client(pool, nc)
	v, err := NewEmptiness(kube, nil, nil).Candidate(context.Background(), nc, pool)
	if err != nil || v.Disrupt {
		t.Errorf("emptiness on a fixed-size pool's empty node: %+v, %v; want it kept", v, err)
	}
}
