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

// TestProvisionerKilledMidLaunch kills the provisioner (SIGKILL) while its
// claims are launching (instances created, nodes not yet registered: the
// node class delays registration by 3s), restarts it, and checks that
// every pod runs, each claim has exactly one instance and no instance is
// left without a claim.
func TestProvisionerKilledMidLaunch(t *testing.T) {
	ctx := context.Background()
	bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: t.TempDir(), Binaries: bins})
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
	poll(t, "a nodeclaim Launched, its node not registered yet", func() (bool, error) {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		for _, nc := range claims.Items {
			if nc.Status.Phase == v1alpha1.NodeClaimLaunched {
				return true, nil
			}
		}
		return false, nil
	})
	if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
		t.Fatal(err)
	}
	poll(t, "8 crash pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=crash")
		return n == 8, err
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
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
	t.Logf("%d claims, %d instances after the crash", len(claims.Items), len(inventory))
}
