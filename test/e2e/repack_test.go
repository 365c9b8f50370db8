package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestRepackMergesTheClaimsOfABatch: two pods of 800m that one
// c7g.large holds are nominated to two claims, because the second keeps
// off (hostname anti-affinity) a third pod on the first claim; that pod
// is deleted before the claims close. The claims close together (a 10s
// idle window) and are repacked before launch: one claim takes both pods
// and one node is launched, half the price; the other claim is deleted
// unlaunched, and the scheduler makes no claim for the pod that moved.
// Then the same with the provisioner killed after the pod's move, before
// the emptied claim is deleted: the restarted provisioner finishes the
// plan, and still one node is launched.
func TestRepackMergesTheClaimsOfABatch(t *testing.T) {
	t.Parallel()
	t.Run("as planned", func(t *testing.T) { t.Parallel(); repackBatch(t, "") })
	t.Run("provisioner killed mid-repack", func(t *testing.T) { t.Parallel(); repackBatch(t, crashpoint.MidRepack) })
}

func repackBatch(t *testing.T, point string) {
	ctx := context.Background()
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	opts := sandbox.Options{Dir: dir, ProvisionerArgs: []string{"--batch-idle-duration=10s", "--batch-max-duration=60s"}}
	if point != "" {
		opts.ProvisionerEnv = []string{"NODEFORGE_CRASH_POINT=" + point, "NODEFORGE_CRASH_MARKER=" + marker}
	}
	sb, cs, kube := startSandbox(t, opts)
	const pool = "repack"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7g.large", "c7g.xlarge"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}},
		}
	})
	create := func(name string, labels map[string]string, affinity *corev1.Affinity) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector: map[string]string{"team": pool}, Affinity: affinity,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("800m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nominatedTo := func(name string) string { t.Helper(); return waitNominated(t, cs, name) }
	create("blocker", map[string]string{"role": "blocker"}, nil)
	x := nominatedTo("blocker")
	create("p1", map[string]string{"app": "repack"}, nil)
	if got := nominatedTo("p1"); got != x {
		t.Fatalf("p1 nominated to %s, want the blocker's claim %s (it has room)", got, x)
	}
	create("p2", map[string]string{"app": "repack"}, &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "blocker"}}, TopologyKey: corev1.LabelHostname}}}})
	y := nominatedTo("p2")
	if y == x {
		t.Fatalf("p2 nominated to the blocker's claim %s", x)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "blocker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if point != "" {
		poll(t, "provisioner crashed at "+point, func() (bool, error) {
			_, err := os.Stat(marker)
			return err == nil, nil
		})
		if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[string]bool{}
	for _, name := range []string{"p1", "p2"} {
		poll(t, "pod "+name+" Running", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning {
				nodes[p.Spec.NodeName] = true
			}
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
	}
	if len(nodes) != 1 {
		t.Errorf("p1 and p2 run on %d nodes, want one (the batch repacked)", len(nodes))
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 || !slices.Contains([]string{x, y}, claims.Items[0].Name) {
		t.Fatalf("pool %s has %d nodeclaims (%v), want one of %s and %s", pool, len(claims.Items), claimTypes(claims.Items), x, y)
	}
	kept := claims.Items[0]
	if kept.Status.InstanceType != "c7g.large" {
		t.Errorf("the kept claim launched %s, want c7g.large", kept.Status.InstanceType)
	}
	cond := findCondition(kept.Status.Conditions, "Packed")
	if cond == nil || cond.Reason != "Repacked" {
		t.Errorf("the kept claim's Packed condition is %+v, want reason Repacked", cond)
	}
	reasons, notes, err := claimEvents(ctx, cs, kept.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reasons, v1alpha1.ReasonRepacked) {
		t.Errorf("no Repacked Event on %s: %v %v", kept.Name, reasons, notes)
	}
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	if n := oneInstancePerClaim(t, ctx, kube, all.Items); n != 1 {
		t.Errorf("%d instances in the cloud, want 1", n)
	}
}

// waitNominated waits for pod default/name to be nominated, and returns
// the claim (or node) it is nominated to.
func waitNominated(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var claim string
	poll(t, "pod "+name+" nominated", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		claim = p.Status.NominatedNodeName
		return claim != "", nil
	})
	return claim
}
