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

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// replacementWatch polls, every 100ms until checked, whether a claim
// replacing old is Initialized and whether a pod of selector is still
// Running on old's node; it notes a moment when the pods had left that
// node while no replacement was Initialized yet.
type replacementWatch struct {
	ctx      context.Context
	kube     client.Client
	cs       kubernetes.Interface
	old      *v1alpha1.NodeClaim
	selector string

	mu               sync.Mutex
	repName, repNode string
	repSeen          bool
	early            string // when and how the pods left too soon
	stop             func()
}

func watchReplacement(ctx context.Context, kube client.Client, cs kubernetes.Interface, old *v1alpha1.NodeClaim, selector string) *replacementWatch {
	w := &replacementWatch{ctx: ctx, kube: kube, cs: cs, old: old, selector: selector}
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
			w.observe()
		}
	}()
	w.stop = sync.OnceFunc(func() { close(stop); <-watched })
	return w
}

// observe looks once: the replacement first, then the pods, so that a
// replacement Initialized by the time the pods are seen gone counts.
func (w *replacementWatch) observe() {
	var list v1alpha1.NodeClaimList
	if err := w.kube.List(w.ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: w.old.Spec.NodePool}); err != nil {
		return
	}
	w.mu.Lock()
	for _, nc := range list.Items {
		if nc.Annotations[v1alpha1.AnnotationReplaces] == w.old.Name && nc.Status.Phase == v1alpha1.NodeClaimInitialized && !w.repSeen {
			w.repSeen, w.repName, w.repNode = true, nc.Name, nc.Status.NodeName
		}
	}
	seen := w.repSeen
	w.mu.Unlock()
	pods, err := w.cs.CoreV1().Pods("default").List(w.ctx, metav1.ListOptions{LabelSelector: w.selector})
	if err != nil {
		return
	}
	onOld := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == w.old.Status.NodeName && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			onOld++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if onOld == 0 && !seen && w.early == "" {
		w.early = time.Now().Format(time.StampMilli)
	}
}

// check stops the watch, looks once more, and says whether a replacement
// was Initialized before the pods left old's node; it returns the
// replacement's claim and node names.
func (w *replacementWatch) check(t *testing.T) (string, string) {
	t.Helper()
	w.stop()
	w.observe()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.early != "":
		t.Errorf("at %s no pod was Running on node %s any more, and no replacement of nodeclaim %s was Initialized yet", w.early, w.old.Status.NodeName, w.old.Name)
	case !w.repSeen:
		t.Errorf("no replacement of nodeclaim %s was seen Initialized", w.old.Name)
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
