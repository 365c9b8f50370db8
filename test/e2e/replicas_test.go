package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestFixedPoolKeepsItsReplicas: a pool with replicas 3 and no pod
// reaches 3 initialized nodes, and keeps them though its consolidation
// settings are the default (consolidateAfter 0s): nothing empties or
// consolidates them. A node deleted as a user deletes one (kubectl delete
// node) is replaced: 3 again, none of them the deleted one's claim. A
// change of the template's labels drifts all three, which are replaced
// one at a time (a budget of one node) and end as 3 nodes with the new
// label, 3 initialized nodes not being disrupted throughout (each
// replacement is up before its node goes). Two pods then run on two of the nodes, and replicas is lowered
// to 2: the node without a pod goes, and the pods keep running where
// they were.
func TestFixedPoolKeepsItsReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	const pool = "fixed"
	np := poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Replicas = ptr.To[int64](3)
		np.Spec.Weight = nil
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"generation": "1"}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7.large"}},
		}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidateAfter: "0s", Budgets: []v1alpha1.Budget{{Nodes: "1"}}}
	})
	// initialized returns the pool's Initialized claims, by name, and
	// how many of its claims there are in all.
	initialized := func() ([]string, int, error) {
		claims, err := poolClaims(ctx, kube, pool)
		var names []string
		for _, nc := range claims {
			if nc.Status.Phase == v1alpha1.NodeClaimInitialized && nc.DeletionTimestamp == nil {
				names = append(names, nc.Name)
			}
		}
		slices.Sort(names)
		return names, len(claims), err
	}
	steady := func(what string, n int, ok func(names []string) bool) []string {
		t.Helper()
		var names []string
		pollFor(t, 3*time.Minute, what, func() (bool, error) {
			var all int
			var err error
			names, all, err = initialized()
			return err == nil && len(names) == n && all == n && (ok == nil || ok(names)), err
		})
		return names
	}

	first := steady("3 initialized claims and no other", 3, nil)
	var got v1alpha1.NodePool
	poll(t, "ReplicasReached True", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: pool}, &got)
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReplicasReached)
		return err == nil && c != nil && c.Status == metav1.ConditionTrue, err
	})

	// A node deleted by hand is replaced.
	var gone v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKey{Name: first[0]}, &gone); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, gone.Status.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	afterDelete := steady("3 initialized claims again, the deleted node's gone", 3, func(names []string) bool {
		return !slices.Contains(names, gone.Name)
	})

	// A drift replaces all three, each replacement initialized before
	// its node goes: a poller sees 3 initialized claims not being
	// disrupted throughout.
	fewest := 3
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			claims, err := poolClaims(ctx, kube, pool)
			if err != nil {
				continue
			}
			n := 0
			for _, nc := range claims {
				if nc.Status.Phase == v1alpha1.NodeClaimInitialized && nc.DeletionTimestamp == nil {
					n++
				}
			}
			fewest = min(fewest, n)
		}
	}()
	update(t, kube, np, func() { np.Spec.Template.ObjectMeta.Labels["generation"] = "2" })
	steady("3 initialized claims, none from before the drift", 3, func(names []string) bool {
		return !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(afterDelete, n) })
	})
	close(stop)
	<-watched
	if fewest < 3 {
		t.Errorf("during the drift only %d of the pool's claims were initialized and not disrupting at one point, want 3 throughout", fewest)
	}
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Labels["generation"] != "2" && n.DeletionTimestamp == nil {
			t.Errorf("node %s has generation %q after the drift, want 2", n.Name, n.Labels["generation"])
		}
	}
	for _, name := range slices.Concat(first, afterDelete) {
		for _, r := range []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonEmpty, v1alpha1.DisruptionReasonUnderutilized} {
			if note := disruptionEvent(t, cs, name, r); note != "" {
				t.Errorf("claim %s of the fixed-size pool was disrupted as %s: %s", name, r, note)
			}
		}
	}

	// Two pods on two of the nodes; scaled to 2, the third goes.
	driftWorkload(t, cs, pool, 2)
	poll(t, "2 pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+pool)
		return n == 2, err
	})
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	busy := map[string]string{}
	for _, p := range pods.Items {
		busy[p.Spec.NodeName] = p.Name
	}
	update(t, kube, np, func() { np.Spec.Replicas = ptr.To[int64](2) })
	steady("2 initialized claims, both with a pod", 2, func(names []string) bool {
		for _, name := range names {
			var nc v1alpha1.NodeClaim
			if kube.Get(ctx, client.ObjectKey{Name: name}, &nc) != nil || busy[nc.Status.NodeName] == "" {
				return false
			}
		}
		return true
	})
	after, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after.Items {
		if busy[p.Spec.NodeName] != p.Name {
			t.Errorf("pod %s is on node %s after the scale-down; want it left where it ran (%v)", p.Name, p.Spec.NodeName, busy)
		}
	}
}
