package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestDrainHonoursPDB deletes the NodeClaim under four pods guarded by a
// PodDisruptionBudget with maxUnavailable 1: the provisioner drains the node
// through the Eviction API, so at no sampled moment are fewer than three of
// the pods Running, and all four end up Running elsewhere.
func TestDrainHonoursPDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, kubeconfig := upSandbox(t, t.TempDir())
	cs := clientFor(t, kubeconfig)
	kube := nodeforgeClient(t, kubeconfig)
	labels := map[string]string{"app": "guarded"}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](4), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "spot"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// running also says which nodes the pods run on.
	running := func() (int, map[string]bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil {
			return 0, nil, err
		}
		n, nodes := 0, map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				n++
				nodes[p.Spec.NodeName] = true
			}
		}
		return n, nodes, nil
	}
	var first map[string]bool
	poll(t, "4 guarded pods Running", func() (bool, error) {
		n, nodes, err := running()
		first = nodes
		return n == 4, err
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	var victim *v1alpha1.NodeClaim
	for i := range claims.Items {
		if first[claims.Items[i].Status.NodeName] {
			victim = &claims.Items[i]
		}
	}
	if victim == nil {
		t.Fatal("no nodeclaim under the guarded pods")
	}

	// Sample availability while the node drains.
	stop := make(chan struct{})
	var mu sync.Mutex
	lowest := 4
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if n, _, err := running(); err == nil {
				mu.Lock()
				lowest = min(lowest, n)
				mu.Unlock()
			}
		}
	})
	if err := kube.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	poll(t, "nodeclaim "+victim.Name+" gone and 4 guarded pods Running off its node", func() (bool, error) {
		var nc v1alpha1.NodeClaim
		if err := kube.Get(ctx, client.ObjectKeyFromObject(victim), &nc); err == nil {
			return false, nil
		}
		n, nodes, err := running()
		return n == 4 && !nodes[victim.Status.NodeName], err
	})
	close(stop)
	wg.Wait()
	if lowest < 3 {
		t.Errorf("only %d of 4 guarded pods were Running at one point; the budget allows one to be unavailable", lowest)
	}
	t.Logf("lowest number of guarded pods Running during the drain: %d", lowest)
}
