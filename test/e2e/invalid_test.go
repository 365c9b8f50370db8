package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestInvalidObjectsAreRefusedAndAPlainPodStillRuns applies, with kubectl
// as a user would, NodePools the controllers could not use: each is
// refused by the API server with a message naming the field, and none is
// left behind. Then a plain pod through nodeforge-scheduler still gets a
// node and runs.
func TestInvalidObjectsAreRefusedAndAPlainPodStillRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, _ := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	pool := func(name, spec string) string {
		return `apiVersion: nodeforge.dev/v1alpha1
kind: NodePool
metadata:
  name: ` + name + `
spec:
  template:
    spec:
      nodeClassRef: {group: nodeforge.dev, kind: SimulatedNodeClass, name: default}
` + spec
	}
	for _, tc := range []struct{ name, manifest, want string }{
		{"notin-without-values", pool("notin", "      requirements: [{key: node.kubernetes.io/instance-type, operator: NotIn}]\n"),
			"spec.template.spec.requirements[0]: Invalid value: operators 'In' and 'NotIn' need at least one value"},
		{"gt-overflowing-int64", pool("gt", "      requirements: [{key: example.com/generation, operator: Gt, values: ['99999999999999999999']}]\n"),
			"a whole number of at most 18 digits"},
		{"comma-separated-values", pool("commas", "      requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: ['m7.large,c7.large']}]\n"),
			"requirement values must be label values"},
		{"schedule-with-garbage", pool("garbage", "  disruption: {consolidateAfter: 30s, budgets: [{nodes: '1', schedule: '@dailyX', duration: 1h}]}\n"),
			`spec.disruption.budgets[0].schedule: Invalid value: "@dailyX"`},
		{"zero-duration-window", pool("zero", "  disruption: {consolidateAfter: 30s, budgets: [{nodes: '1', schedule: '@daily', duration: 0s}]}\n"),
			"a scheduled budget's duration must be more than 0s"},
		{"reserved-label", strings.Replace(pool("reserved", ""), "  template:\n", "  template:\n    metadata: {labels: {nodeforge.dev/nodepool: other}}\n", 1),
			`label domain "nodeforge.dev" is reserved for Nodeforge`},
	} {
		cmd := exec.Command("kubectl", "--kubeconfig", sb.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(tc.manifest)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s: kubectl apply accepted it:\n%s", tc.name, tc.manifest)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: kubectl apply said %q; want it to say %q", tc.name, strings.TrimSpace(string(out)), tc.want)
		}
	}
	out, err := exec.Command("kubectl", "--kubeconfig", sb.Kubeconfig, "get", "nodepools.nodeforge.dev", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodepools: %v\n%s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 1 || got[0] != "nodepool.nodeforge.dev/default" {
		t.Errorf("nodepools after the refusals: %v; want only the default", got)
	}
	d := deployment("plain", "plain", 1, func(s *corev1.PodSpec) { s.NodeSelector = nil })
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "a plain pod Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=plain")
		return n == 1, err
	})
}
