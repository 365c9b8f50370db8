package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// replacementWatch polls, every 100ms until stopped, for the first claim
// replacing old seen Initialized, and for the moment no pod of selector
// is Running on old's node any more.
type replacementWatch struct {
	old                  *v1alpha1.NodeClaim
	mu                   sync.Mutex
	repInitialized, left time.Time
	repName, repNode     string
	stop                 func()
}

func watchReplacement(ctx context.Context, kube client.Client, cs kubernetes.Interface, old *v1alpha1.NodeClaim, selector string) *replacementWatch {
	w := &replacementWatch{old: old}
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var list v1alpha1.NodeClaimList
			err1 := kube.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: old.Spec.NodePool})
			pods, err2 := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err1 != nil || err2 != nil {
				continue
			}
			w.mu.Lock()
			for _, nc := range list.Items {
				if nc.Annotations[v1alpha1.AnnotationReplaces] == old.Name && nc.Status.Phase == v1alpha1.NodeClaimInitialized && w.repInitialized.IsZero() {
					w.repInitialized, w.repName, w.repNode = time.Now(), nc.Name, nc.Status.NodeName
				}
			}
			onOld := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName == old.Status.NodeName && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					onOld++
				}
			}
			if onOld == 0 && w.left.IsZero() {
				w.left = time.Now()
			}
			w.mu.Unlock()
		}
	}()
	w.stop = sync.OnceFunc(func() { close(stop); <-watched })
	return w
}

// check stops the watch and says whether the replacement was Initialized
// before the pods left old's node; it returns the replacement's claim and
// node names.
func (w *replacementWatch) check(t *testing.T) (string, string) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.repInitialized.IsZero():
		t.Errorf("no replacement of nodeclaim %s was seen Initialized", w.old.Name)
	case w.left.Before(w.repInitialized):
		t.Errorf("the pods left node %s at %s, before replacement %s was Initialized at %s", w.old.Status.NodeName, w.left.Format(time.StampMilli), w.repName, w.repInitialized.Format(time.StampMilli))
	}
	return w.repName, w.repNode
}

// oneInstancePerClaim checks the simulated cloud's inventory: every claim
// has exactly one instance, and no instance is without a claim.
func oneInstancePerClaim(t *testing.T, ctx context.Context, kube client.Client, claims []v1alpha1.NodeClaim) int {
	t.Helper()
	inventory, err := simulated.Inventory(ctx, kube, "nodeforge")
	if err != nil {
		t.Fatal(err)
	}
	perClaim := map[string]int{}
	for _, in := range inventory {
		perClaim[in.NodeClaim]++
	}
	for _, nc := range claims {
		if perClaim[nc.Name] != 1 {
			t.Errorf("nodeclaim %s has %d instances, want 1", nc.Name, perClaim[nc.Name])
		}
		delete(perClaim, nc.Name)
	}
	if len(perClaim) > 0 {
		t.Errorf("instances without a claim: %v", perClaim)
	}
	return len(inventory)
}
