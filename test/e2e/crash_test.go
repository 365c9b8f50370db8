package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/sandbox"
)

// TestCrashes kills one component at a time mid-scale-up, then restarts
// it with the same command line, and checks that the scale-up finishes as
// if nothing happened: every pod Running and none of them replaced (no pod
// deleted), each claim with exactly one instance, no instance without a
// claim. The node class delays registration by 3s, so there is a window
// with claims launched and nodes not yet registered.
//
//   - nodeforge-provisioner, SIGKILLed while a claim is Launched and its
//     node has not registered;
//   - nodeforge-scheduler, SIGKILLed while a claim is still Nominating (its
//     nominations partly written);
//   - kube-apiserver, SIGKILLed and started again while a claim is Launched.
func TestCrashes(t *testing.T) {
	for _, tc := range []struct {
		component string
		when      string
		phase     v1alpha1.NodeClaimPhase
		// provisionerArgs widen the window the kill must fall in.
		provisionerArgs []string
	}{
		{"nodeforge-provisioner", "a nodeclaim Launched, its node not registered yet", v1alpha1.NodeClaimLaunched, nil},
		{"nodeforge-scheduler", "a nodeclaim still Nominating", v1alpha1.NodeClaimNominating, []string{"--batch-idle-duration=5s", "--batch-max-duration=10s"}},
		{"kube-apiserver", "a nodeclaim Launched, its node not registered yet", v1alpha1.NodeClaimLaunched, nil},
	} {
		t.Run(tc.component, func(t *testing.T) {
			crashMidScaleUp(t, tc.component, tc.when, tc.phase, tc.provisionerArgs)
		})
	}
}

func crashMidScaleUp(t *testing.T, component, when string, phase v1alpha1.NodeClaimPhase, provisionerArgs []string) {
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: t.TempDir(), Binaries: bins, ProvisionerArgs: provisionerArgs})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Stop()
	cs, err := kubernetes.NewForConfig(sb.Config)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := sb.Client()
	if err != nil {
		t.Fatal(err)
	}
	var class v1alpha1.SimulatedNodeClass
	if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &class); err != nil {
		t.Fatal(err)
	}
	class.Spec.RegistrationDelay = &metav1.Duration{Duration: 3 * time.Second}
	if err := kube.Update(ctx, &class); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "crash"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](8), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "spot"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "8 crash pods created", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
		return err == nil && len(pods.Items) == 8, err
	})
	poll(t, when, func() (bool, error) {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		for _, nc := range claims.Items {
			if nc.Status.Phase == phase {
				return true, nil
			}
		}
		return false, nil
	})
	before, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.KillAndRestart(ctx, component); err != nil {
		t.Fatal(err)
	}
	poll(t, "8 crash pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=crash")
		return n == 8, err
	})
	after, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	for _, p := range before.Items {
		uids[string(p.UID)] = true
	}
	for _, p := range after.Items {
		if !uids[string(p.UID)] {
			t.Errorf("pod %s was created after the crash: one of the pods was deleted", p.Name)
		}
	}
	// A claim written by a scheduler killed before its pods' nominations
	// were has no pods: it is deleted unlaunched after its batch window.
	var claims v1alpha1.NodeClaimList
	poll(t, "every nodeclaim launched or gone", func() (bool, error) {
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		for _, nc := range claims.Items {
			if nc.Status.ProviderID == "" {
				return false, nil
			}
		}
		return true, nil
	})
	raw, err := os.ReadFile(filepath.Join(sb.Dir, "simulated-cloud.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inventory map[string]struct {
		NodeClaim string `json:"NodeClaim"`
	}
	if err := json.Unmarshal(raw, &inventory); err != nil {
		t.Fatal(err)
	}
	perClaim := map[string]int{}
	for _, in := range inventory {
		perClaim[in.NodeClaim]++
	}
	for _, nc := range claims.Items {
		if perClaim[nc.Name] != 1 {
			t.Errorf("nodeclaim %s has %d instances, want 1", nc.Name, perClaim[nc.Name])
		}
		delete(perClaim, nc.Name)
	}
	if len(perClaim) > 0 {
		t.Errorf("instances without a claim: %v", perClaim)
	}
	t.Logf("%s killed: %d claims, %d instances, %d pods Running, none replaced", component, len(claims.Items), len(inventory), len(after.Items))
}
