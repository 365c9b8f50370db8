package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestPodsWaitForTheCloudControllerManager: the nodes of a node class whose
// cloud controller manager takes 4s register with the cloud provider's
// uninitialised taint, as on EKS, for longer than the bind gate waits
// before it sends a refused pod back (2s). The pods nominated to them wait
// for the taint to go and are bound to the node they were nominated to:
// no pod is refused or nominated again, no claim gets a second instance,
// and each claim is initialised only once the taint is lifted.
func TestPodsWaitForTheCloudControllerManager(t *testing.T) {
	t.Parallel()
	const delay = 4 * time.Second
	// At --v=2 the provisioner logs what the bind gate waits for.
	sb, cs, kube := startSandbox(t, sandbox.Options{ProvisionerArgs: []string{"--v=2"}})
	ctx := context.Background()
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "slow-ccm"},
		Spec: v1alpha1.SimulatedNodeClassSpec{CloudControllerDelay: &metav1.Duration{Duration: delay}}}
	if err := kube.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
		t.Fatal(err)
	}
	if class.Spec.CloudControllerDelay == nil || class.Spec.CloudControllerDelay.Duration != delay {
		t.Fatalf("SimulatedNodeClass spec.cloudControllerDelay read back as %v, want %s: is the CRD in manifests/crd generated from apis/v1alpha1?", class.Spec.CloudControllerDelay, delay)
	}
	poolFromDefault(t, kube, "uninitialized", func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"pool": "uninitialized"}
		np.Spec.Template.Spec.NodeClassRef.Name = class.Name
		np.Spec.Disruption.ConsolidateAfter = "Never"
	})

	// Every taint each node of the pool is seen with, from its
	// registration on.
	seen := map[string][]string{}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := cs.CoreV1().Nodes().Watch(watchCtx, metav1.ListOptions{LabelSelector: "pool=uninitialized"})
	if err != nil {
		t.Fatal(err)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				for _, taint := range n.Spec.Taints {
					if !slices.Contains(seen[n.Name], taint.Key) {
						seen[n.Name] = append(seen[n.Name], taint.Key)
					}
				}
			}
		}
	}()

	start := time.Now()
	names := topologyPods(t, cs, "uninitialized", 3, func(*corev1.PodSpec) {})
	first := map[string]string{} // pod → the claim it was first nominated to
	poll(t, "the pods nominated", func() (bool, error) {
		for _, name := range names {
			if first[name] != "" {
				continue
			}
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.NominatedNodeName == "" && p.Spec.NodeName == "" {
				return false, nil
			}
			if p.Status.NominatedNodeName == "" {
				t.Fatalf("pod %s bound to %s before the test saw its nomination", name, p.Spec.NodeName)
			}
			first[name] = p.Status.NominatedNodeName
		}
		return true, nil
	})
	p := settled(t, cs, kube, "uninitialized", len(names))
	elapsed := time.Since(start)
	stop()
	<-watched
	t.Logf("%d pods Running on %d nodes %.1fs after they were created", p.running(), len(p.perNode), elapsed.Seconds())

	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: "uninitialized"}); err != nil {
		t.Fatal(err)
	}
	nominatedTo := map[string]bool{}
	for _, claim := range first {
		nominatedTo[claim] = true
	}
	if len(claims.Items) != len(nominatedTo) {
		t.Errorf("pool uninitialized has %d nodeclaims (%v), want only the %d its pods were first nominated to: a second node was launched for them", len(claims.Items), claimNames(claims.Items), len(nominatedTo))
	}
	nodeOf := map[string]string{}
	for _, nc := range claims.Items {
		nodeOf[nc.Name] = nc.Status.NodeName
		if !slices.Contains(seen[nc.Status.NodeName], cloudproviderapi.TaintExternalCloudProvider) {
			t.Errorf("node %s of nodeclaim %s was never seen with the uninitialised taint (taints seen: %v); the test proves nothing", nc.Status.NodeName, nc.Name, seen[nc.Status.NodeName])
		}
		// The taint is lifted 4s after the node is created, and both
		// times below keep whole seconds: 4s apart reads at least 3s.
		var node corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		if initialized := findCondition(nc.Status.Conditions, "Initialized"); initialized == nil {
			t.Errorf("nodeclaim %s: conditions %v, want Initialized", nc.Name, nc.Status.Conditions)
		} else if gap := initialized.LastTransitionTime.Sub(node.CreationTimestamp.Time); gap < delay-time.Second {
			t.Errorf("nodeclaim %s was initialised %s after its node registered, before the cloud controller manager lifted the taint (%s)", nc.Name, gap, delay)
		}
	}
	oneInstancePerClaim(t, ctx, kube, claims.Items)
	for _, name := range names {
		pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := nodeOf[first[name]]; pod.Spec.NodeName != want {
			t.Errorf("pod %s runs on node %q; want %q, the node of nodeclaim %s it was first nominated to", name, pod.Spec.NodeName, want, first[name])
		}
		reasons, notes, err := podEvents(ctx, cs, name)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(reasons, v1alpha1.ReasonNominationCleared) {
			t.Errorf("pod %s had its nomination cleared: %q", name, notes)
		}
		for _, note := range notes {
			if strings.Contains(note, "nominated to nodeclaim ") && !strings.Contains(note, "nominated to nodeclaim "+first[name]) {
				t.Errorf("pod %s was nominated again after %s: %q", name, first[name], note)
			}
		}
	}
	// The wait is in the provisioner's log, named with who lifts the taint.
	raw, err := os.ReadFile(sb.Log("nodeforge-provisioner"))
	if err != nil {
		t.Fatal(err)
	}
	if log := string(raw); !strings.Contains(log, "Waiting for the node before binding") || !strings.Contains(log, "to be lifted by the cloud controller manager") {
		t.Error("the provisioner's log has no line of the bind gate waiting for the cloud controller manager")
	}
}

// claimNames are the names of claims.
func claimNames(claims []v1alpha1.NodeClaim) []string {
	out := make([]string, 0, len(claims))
	for _, nc := range claims {
		out = append(out, nc.Name)
	}
	return out
}
