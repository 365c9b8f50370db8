package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestKubernetesMinors installs the chart on the oldest Kubernetes minor
// its kubeVersion accepts (kube-apiserver and kube-controller-manager
// built from hack/tools/kube-oldest) and on the current one, and runs one
// scale-up and scale-down on each: three pods get a node nominated,
// launched and bound, then the node is consolidated away once they go.
// On the oldest minor the programs turn off, with a log line, the
// scheduler feature whose API it does not serve (DRADeviceTaintRules);
// on the current one they turn nothing off. The time from the
// Deployment's creation to its pods Running is logged for both, not
// asserted (docs/benchmarks.md).
func TestKubernetesMinors(t *testing.T) {
	t.Parallel()
	for _, minor := range []struct {
		name   string
		oldest bool
	}{{"oldest", true}, {"current", false}} {
		t.Run(minor.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			bins, err := sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: source, BinDir: binDir, Oldest: minor.oldest})
			if err != nil {
				t.Fatal(err)
			}
			sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated", Install: true, Binaries: bins})
			server, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if server.GitVersion != bins.KubernetesVersion {
				t.Fatalf("the API server is %s, want %s", server.GitVersion, bins.KubernetesVersion)
			}
			const pool = "minor"
			poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
				np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
				np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: "0s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
			})
			start := time.Now()
			if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment(pool, pool, 3), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			poll(t, "3 pods Running", func() (bool, error) {
				n, err := runningPods(ctx, cs, "app="+pool)
				return n == 3, err
			})
			toRunning := time.Since(start)
			claims, err := poolClaims(ctx, kube, pool)
			if err != nil || len(claims) == 0 {
				t.Fatalf("the pods run, but pool %s has no claim (err %v)", pool, err)
			}
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{}); err != nil || n.Labels[v1alpha1.LabelNodePool] != pool {
					t.Fatalf("pod %s runs on %s, not on a node of pool %s (err %v)", p.Name, p.Spec.NodeName, pool, err)
				}
			}
			scaleTo(t, cs, pool, 0)
			poll(t, "pool "+pool+"'s nodes consolidated away", func() (bool, error) {
				claims, err := poolClaims(ctx, kube, pool)
				if err != nil || len(claims) > 0 {
					return false, err
				}
				nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodePool + "=" + pool})
				return err == nil && len(nodes.Items) == 0, err
			})
			t.Logf("Kubernetes %s: 3 pods from Deployment to Running in %s on %d node(s); scaled down to none", server.GitVersion, toRunning.Round(10*time.Millisecond), len(claims))

			for _, program := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
				logs := kubectlLogs(t, sb, program)
				turnedOff := false
				for _, line := range strings.Split(logs, "\n") {
					turnedOff = turnedOff || strings.Contains(line, `"Turning a feature off: the API server does not serve its API"`) && strings.Contains(line, `feature="DRADeviceTaintRules"`)
				}
				if turnedOff != minor.oldest {
					t.Errorf("%s on %s: turned DRADeviceTaintRules off: %v, want %v", program, server.GitVersion, turnedOff, minor.oldest)
				}
			}
		})
	}
}
