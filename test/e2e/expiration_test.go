package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestExpiredNodeIsReplaced: a claim's expireAfter (its pool's 1h,
// shortened to 45s on the claim) disrupts its node once the claim is that
// old, though the node is busy. The pod fits
// on no other node of the pool, so a replacement claim is launched first,
// and the pod is evicted only once the replacement is Initialized (polled
// throughout); it ends Running on the replacement's node, and the claim
// says why it went (Event Disrupting: Expired).
func TestExpiredNodeIsReplaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	var def v1alpha1.NodePool
	poll(t, "the sandbox's default NodePool", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "expiring"}, Spec: *def.Spec.DeepCopy()}
	np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": "expiring"}
	np.Spec.Template.Spec.ExpireAfter = "1h"
	np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	if err := kube.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "expiring"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "expiring", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector: map[string]string{"team": "expiring"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningOn := func() (string, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=expiring"})
		if err != nil {
			return "", err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return p.Spec.NodeName, nil
			}
		}
		return "", nil
	}
	var first string
	poll(t, "the pod Running", func() (bool, error) {
		var err error
		first, err = runningOn()
		return first != "", err
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: "expiring"}); err != nil || len(claims.Items) != 1 {
		t.Fatalf("want one nodeclaim of pool expiring, got %d (err %v)", len(claims.Items), err)
	}
	old := claims.Items[0]
	if old.Spec.ExpireAfter != "1h" {
		t.Fatalf("the claim's expireAfter is %q, not the pool's", old.Spec.ExpireAfter)
	}
	shortenClaim(t, kube, &old, "45s", 0)
	// Watch, from now, when the replacement is up and when the pod left.
	w := watchReplacement(ctx, kube, cs, &old, "app=expiring")
	defer w.stop()
	poll(t, "the expired node gone and the pod Running on another", func() (bool, error) {
		var nc v1alpha1.NodeClaim
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&old), &nc); err == nil {
			return false, nil
		}
		now, err := runningOn()
		return now != "" && now != first, err
	})
	repName, repNode := w.check(t)
	if now, err := runningOn(); err != nil || (repNode != "" && now != repNode) {
		t.Errorf("the pod runs on node %s (err %v), not on the replacement's node %s", now, err, repNode)
	}
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + old.Name})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		if e.Reason == v1alpha1.ReasonDisrupting && e.Action == string(v1alpha1.DisruptionReasonExpired) {
			found = true
		}
	}
	if !found {
		t.Errorf("no Disrupting Event with action Expired on nodeclaim %s (%d events)", old.Name, len(evs.Items))
	}
	replacing := false
	for _, e := range evs.Items {
		if e.Reason == v1alpha1.ReasonReplacing && e.Action == string(v1alpha1.DisruptionReasonExpired) && strings.Contains(e.Note, repName) {
			replacing = true
		}
	}
	if !replacing {
		t.Errorf("no Replacing Event naming the replacement %s on nodeclaim %s", repName, old.Name)
	}
}

// TestCrashAfterNamingAReplacement: the provisioner is SIGKILLed right
// after an expired claim names its replacement, before the replacement
// is created, and started again. The name leads nowhere: the claim gives
// the replacement up (Event DisruptionBlocked), its node keeps its pod
// meanwhile, and the next try replaces it. In the end the pod runs on
// the replacement's node, the expired claim and its node are gone, and
// every claim has exactly one instance, none without a claim.
func TestCrashAfterNamingAReplacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	marker := dir + "/crashed"
	sb, cs, kube := startSandbox(t, sandbox.Options{Dir: dir, CloudProvider: "simulated",
		ProvisionerEnv: []string{"NODEFORGE_CRASH_POINT=" + crashpoint.AfterReplacementNamed, "NODEFORGE_CRASH_MARKER=" + marker}})
	const pool = "crash-replacing"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Template.Spec.ExpireAfter = "1h"
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment(pool, pool, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the pod Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+pool)
		return n == 1, err
	})
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil || len(claims) != 1 {
		t.Fatalf("want one claim of pool %s, got %v (err %v)", pool, claimTypes(claims), err)
	}
	old := claims[0]
	shortenClaim(t, kube, &old, "30s", 0)
	poll(t, "the provisioner crashed after naming a replacement", func() (bool, error) {
		_, err := os.Stat(marker)
		return err == nil, nil
	})
	if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
		t.Fatal(err)
	}
	// Until the replacement is up the pod stays where it is.
	if n, err := runningPods(ctx, cs, "app="+pool); err != nil || n != 1 {
		t.Errorf("%d pods Running right after the crash (err %v), want the one on the expired node", n, err)
	}
	poll(t, "the expired claim gone and the pod Running on its replacement", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&old), &v1alpha1.NodeClaim{}); err == nil {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, err
		}
		claims, err := poolClaims(ctx, kube, pool)
		return err == nil && len(claims) == 1 && claims[0].Status.NodeName == pods.Items[0].Spec.NodeName &&
			claims[0].Annotations[v1alpha1.AnnotationReplaces] == old.Name, err
	})
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + old.Name})
	if err != nil {
		t.Fatal(err)
	}
	gaveUp := false
	for _, e := range evs.Items {
		if e.Reason == v1alpha1.ReasonDisruptionBlocked && strings.Contains(e.Note, "could not be launched") {
			gaveUp = true
		}
	}
	if !gaveUp {
		t.Errorf("no DisruptionBlocked Event on %s for the replacement named before the crash", old.Name)
	}
	var all v1alpha1.NodeClaimList
	poll(t, "every nodeclaim launched", func() (bool, error) {
		if err := kube.List(ctx, &all); err != nil {
			return false, err
		}
		return !slices.ContainsFunc(all.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Status.ProviderID == "" }), nil
	})
	oneInstancePerClaim(t, ctx, kube, all.Items)
}
