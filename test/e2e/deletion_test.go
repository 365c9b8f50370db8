package e2e

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestDeletedNodeAndDeletedPoolAreCleanedUp: a Node deleted by hand
// (kubectl delete node) takes its claim and instance with it, and its pod
// runs again on a new node; a NodePool deleted takes its claims, nodes
// and instances with it. Nothing hangs on a finalizer, and in the end
// every claim has exactly one instance, none without a claim.
func TestDeletedNodeAndDeletedPoolAreCleanedUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	for _, name := range []string{"by-node", "by-pool"} {
		poolFromDefault(t, kube, name, func(np *v1alpha1.NodePool) {
			np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(name)}
		})
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment(name, name, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "both pods Running", func() (bool, error) {
		a, err1 := runningPods(ctx, cs, "app=by-node")
		b, err2 := runningPods(ctx, cs, "app=by-pool")
		return a == 1 && b == 1, errors.Join(err1, err2)
	})
	claims, err := poolClaims(ctx, kube, "by-node")
	if err != nil || len(claims) != 1 {
		t.Fatalf("want one claim of pool by-node, got %v (err %v)", claimTypes(claims), err)
	}
	old := claims[0]
	if len(old.OwnerReferences) != 1 || old.OwnerReferences[0].Kind != "NodePool" || old.OwnerReferences[0].Name != "by-node" {
		t.Errorf("claim %s is not owned by its NodePool: %v", old.Name, old.OwnerReferences)
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, old.Status.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the deleted node's claim and node gone, its pod Running on a new node", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&old), &v1alpha1.NodeClaim{}); err == nil {
			return false, nil
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, old.Status.NodeName, metav1.GetOptions{}); err == nil {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=by-node"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		p := pods.Items[0]
		return p.Status.Phase == "Running" && p.Spec.NodeName != old.Status.NodeName, nil
	})

	byPool, err := poolClaims(ctx, kube, "by-pool")
	if err != nil || len(byPool) != 1 {
		t.Fatalf("want one claim of pool by-pool, got %v (err %v)", claimTypes(byPool), err)
	}
	if err := kube.Delete(ctx, &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "by-pool"}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the deleted pool's claims and nodes gone", func() (bool, error) {
		left, err := poolClaims(ctx, kube, "by-pool")
		if err != nil || len(left) > 0 {
			return false, err
		}
		_, err = cs.CoreV1().Nodes().Get(ctx, byPool[0].Status.NodeName, metav1.GetOptions{})
		return err != nil, nil
	})
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	oneInstancePerClaim(t, ctx, kube, all.Items)
}
