package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// karpenterCRDs are CustomResourceDefinitions with the group, kinds,
// plurals, categories and short names of Karpenter v1's NodePool,
// NodeClaim and EC2NodeClass (facts from Karpenter's published CRDs),
// written for this test: their schemas keep any field, since only the
// names matter for what the test checks.
var karpenterCRDs = strings.Join([]string{
	karpenterCRD("karpenter.sh", "NodePool", "nodepools", ""),
	karpenterCRD("karpenter.sh", "NodeClaim", "nodeclaims", ""),
	karpenterCRD("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses", "shortNames: [ec2nc, ec2ncs], "),
}, "---\n")

func karpenterCRD(group, kind, plural, shortNames string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[3]s.%[1]s}
spec:
  group: %[1]s
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[3]s, singular: %[4]s, %[5]scategories: [karpenter]}
  scope: Cluster
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`, group, kind, plural, strings.ToLower(kind), shortNames)
}

// karpenterObjects are a Karpenter pool, class and claim, and the claim's
// node is made by the test (karpenterNode). Their names are the ones
// Nodeforge's objects have too, so that a command reaching the wrong
// group answers with the wrong object rather than with nothing.
const karpenterObjects = `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata: {labels: {team: beside}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
      taints: [{key: karpenter.sh/dedicated, value: beside, effect: NoSchedule}]
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec: {role: KarpenterNodeRole, amiSelectorTerms: [{alias: al2023@latest}]}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-k4rp3
  labels: {karpenter.sh/nodepool: default}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
status: {providerID: "kwok://karpenter-default-k4rp3", nodeName: karpenter-default-k4rp3}
`

// karpenterNode is a node as Karpenter's would look: its pool's label and
// taint, Karpenter's bookkeeping labels and finalizer, and a kwok://
// provider ID; kwok runs it. It has room for the pods of the test, so only
// its taint keeps them off.
func karpenterNode() *corev1.Node {
	n := sandbox.KwokNode("karpenter-default-k4rp3", map[string]string{
		"team":                                "beside",
		"karpenter.sh/nodepool":               "default",
		"karpenter.sh/capacity-type":          "on-demand",
		"karpenter.sh/registered":             "true",
		"karpenter.sh/initialized":            "true",
		"karpenter.k8s.aws/ec2nodeclass":      "default",
		"karpenter.k8s.aws/instance-family":   "m5",
		"karpenter.k8s.aws/instance-category": "m",
		corev1.LabelInstanceTypeStable:        "m5.xlarge",
		corev1.LabelTopologyZone:              "zone-a",
		corev1.LabelArchStable:                "amd64",
		corev1.LabelOSStable:                  "linux",
	}, "4", "16Gi")
	n.Spec.ProviderID = "kwok://karpenter-default-k4rp3"
	n.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/dedicated", Value: "beside", Effect: corev1.TaintEffectNoSchedule}}
	n.Finalizers = []string{"karpenter.sh/termination"}
	return n
}

// TestBesideKarpenter runs Nodeforge in a cluster that also has
// Karpenter's CRDs (same plurals), objects and a Karpenter node, as a
// cluster moving from Karpenter does:
//   - a nodeforge-scheduler pod that selects Karpenter's capacity-type and
//     instance-category labels, and the Karpenter node's pool label, gets
//     a Nodeforge node carrying both, never the Karpenter node, which
//     only its Karpenter taint protects; one that tolerates the taint is
//     scheduled there, and no claim is made for it;
//   - Nodeforge's pool counts only its own node;
//   - once its own node is consolidated away (the evidence that its
//     disruption, which looks at every node, has run over the empty
//     Karpenter node too) and an orphan node of its pool is collected
//     (the same for garbage collection), the Karpenter node and its claim
//     are as they were: not adopted, disrupted, collected or tainted;
//   - every resource the docs' kubectl commands name, and the chart's
//     NOTES commands, resolve to Nodeforge's objects, while the bare
//     plural reaches Karpenter's (asserted: the docs say so).
func TestBesideKarpenter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated", Install: true,
		// Garbage collection looks at every node each second, so that the
		// test sees it pass over the Karpenter node (see orphan below).
		ProvisionerArgs: []string{"--garbage-collection-interval=1s", "--garbage-collection-grace=1s"}})
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", sb.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl(karpenterCRDs, "apply", "-f", "-")
	kubectl("", "wait", "--for=condition=Established", "crd/nodepools.karpenter.sh", "crd/nodeclaims.karpenter.sh", "crd/ec2nodeclasses.karpenter.k8s.aws", "--timeout=1m")
	// kubectl caches discovery for minutes: a new group is found by asking again.
	poll(t, "Karpenter's groups served", func() (bool, error) {
		out, err := exec.Command("kubectl", "--kubeconfig", sb.Kubeconfig, "api-resources", "--api-group=karpenter.sh", "-o", "name").Output()
		return err == nil && strings.Contains(string(out), "nodepools.karpenter.sh"), nil
	})
	kubectl(karpenterObjects, "apply", "-f", "-")
	knode, err := cs.CoreV1().Nodes().Create(ctx, karpenterNode(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the Karpenter node Ready", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, knode.Name, metav1.GetOptions{})
		return err == nil && nodeReady(n), err
	})
	kclaim := schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
	dyn := dynamicFor(t, sb.Kubeconfig)
	claimBefore, err := dyn.Resource(kclaim).Get(ctx, "default-k4rp3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	const pool = "beside"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: "0s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
	})
	pod := func(name string, edit func(*corev1.Pod)) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			// Karpenter's words, kept unedited by a workload that moves.
			NodeSelector: map[string]string{"team": pool, "karpenter.sh/capacity-type": "on-demand", "karpenter.k8s.aws/instance-category": "m"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}
		edit(p)
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("moved", func(*corev1.Pod) {})
	pod("tolerating", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "karpenter.sh/dedicated", Operator: corev1.TolerationOpExists}}
		p.Spec.NodeSelector[corev1.LabelHostname] = knode.Name
	})
	runningOn := func(name string) string {
		var node string
		poll(t, "pod "+name+" Running", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			node = p.Spec.NodeName
			return p.Status.Phase == corev1.PodRunning, nil
		})
		return node
	}
	ours := runningOn("moved")
	if ours == knode.Name {
		t.Fatalf("pod moved, which does not tolerate karpenter.sh/dedicated, runs on the Karpenter node %s", ours)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, ours, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[v1alpha1.LabelNodePool] != pool || n.Labels[v1alpha1.LabelKarpenterCapacityType] != "on-demand" || n.Labels[v1alpha1.LabelCapacityType] != "on-demand" ||
		n.Labels[v1alpha1.LabelInstanceCategory] != "m" || n.Labels[v1alpha1.KarpenterInstanceLabel(v1alpha1.LabelInstanceCategory)] != "m" {
		t.Fatalf("pod moved runs on %s, labelled %v: want a node of pool %s with both capacity-type labels on-demand and both instance-category labels m", ours, n.Labels, pool)
	}
	for k, v := range n.Labels {
		if strings.HasPrefix(k, "karpenter.") && k != v1alpha1.LabelKarpenterCapacityType && !slices.ContainsFunc(v1alpha1.InstanceLabels, func(l string) bool { return v1alpha1.KarpenterInstanceLabel(l) == k }) {
			t.Errorf("Nodeforge's node %s carries Karpenter's label %s, which Karpenter may count as its own", ours, k)
		}
		if name, ok := strings.CutPrefix(k, "karpenter.k8s.aws/"); ok && n.Labels[v1alpha1.Group+"/"+name] != v {
			t.Errorf("Nodeforge's node %s has %s=%s but %s/%s=%s", ours, k, v, v1alpha1.Group, name, n.Labels[v1alpha1.Group+"/"+name])
		}
	}
	if on := runningOn("tolerating"); on != knode.Name {
		t.Fatalf("pod tolerating runs on %s, not on the Karpenter node it selects and tolerates", on)
	}
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil || len(claims) != 1 {
		t.Fatalf("want one claim of pool %s (for pod moved only), got %d (err %v)", pool, len(claims), err)
	}
	var np v1alpha1.NodePool
	poll(t, "pool "+pool+" counting its node", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: pool}, &np)
		return err == nil && np.Status.Nodes == 1, err
	})
	if cpu := np.Status.Resources[corev1.ResourceCPU]; cpu.Cmp(claims[0].Status.Capacity[corev1.ResourceCPU]) != 0 {
		t.Errorf("pool %s counts %s cpu; its one node has %s (the Karpenter node's 4 must not count)", pool, cpu.String(), ptr.To(claims[0].Status.Capacity[corev1.ResourceCPU]).String())
	}

	// The docs' commands, beside Karpenter's objects of the same names.
	checkDocsResolveToNodeforge(t, kubectl)

	// Scale down: both pods go; Nodeforge's node is consolidated away.
	for _, name := range []string{"moved", "tolerating"} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "Nodeforge's empty node consolidated away", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, pool)
		if err != nil || len(claims) > 0 {
			return false, err
		}
		_, err = cs.CoreV1().Nodes().Get(ctx, ours, metav1.GetOptions{})
		return err != nil, client.IgnoreNotFound(err)
	})

	// A node of Nodeforge's pool whose instance never existed: garbage
	// collection deletes it, which shows that it ran over every node,
	// the Karpenter node included, after it was old enough to collect.
	orphan := sandbox.KwokNode("sim-orphan", map[string]string{v1alpha1.LabelNodePool: pool}, "2", "4Gi")
	orphan.Spec.ProviderID = "simulated:///zone-a/i-neverlaunched"
	if _, err := cs.CoreV1().Nodes().Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "garbage collection deleting a node of Nodeforge's pool whose instance is gone", func() (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(ctx, orphan.Name, metav1.GetOptions{})
		return err != nil, client.IgnoreNotFound(err)
	})

	after, err := cs.CoreV1().Nodes().Get(ctx, knode.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Karpenter node is gone: %v", err)
	}
	if after.DeletionTimestamp != nil {
		t.Errorf("the Karpenter node is being deleted")
	}
	// kube-controller-manager copies os and arch to their beta keys on
	// every node; nothing else may change.
	labels := maps.Clone(after.Labels)
	delete(labels, "beta.kubernetes.io/os")
	delete(labels, "beta.kubernetes.io/arch")
	if !maps.Equal(labels, knode.Labels) {
		t.Errorf("the Karpenter node's labels changed: %v, were %v", after.Labels, knode.Labels)
	}
	if !slices.Equal(after.Finalizers, knode.Finalizers) {
		t.Errorf("the Karpenter node's finalizers changed: %v, were %v", after.Finalizers, knode.Finalizers)
	}
	if len(after.Spec.Taints) != 1 || after.Spec.Taints[0].Key != "karpenter.sh/dedicated" {
		t.Errorf("the Karpenter node's taints changed: %v", after.Spec.Taints)
	}
	for k := range after.Annotations {
		if strings.Contains(k, v1alpha1.Group) {
			t.Errorf("the Karpenter node has Nodeforge's annotation %s", k)
		}
	}
	claimAfter, err := dyn.Resource(kclaim).Get(ctx, "default-k4rp3", metav1.GetOptions{})
	if err != nil || claimAfter.GetResourceVersion() != claimBefore.GetResourceVersion() {
		t.Errorf("Karpenter's NodeClaim was written or deleted (err %v)", err)
	}
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, nc := range all.Items {
		if nc.Status.NodeName == knode.Name || nc.Status.ProviderID == knode.Spec.ProviderID {
			t.Errorf("Nodeforge's claim %s names the Karpenter node", nc.Name)
		}
	}
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + knode.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.HasPrefix(e.ReportingController, "nodeforge") || strings.HasPrefix(e.DeprecatedSource.Component, "nodeforge") {
			t.Errorf("Nodeforge recorded an Event on the Karpenter node: %s %s", e.Reason, e.Note)
		}
	}
}

// checkDocsResolveToNodeforge runs `kubectl get RESOURCE -o name` for
// every resource the README, docs/ and the chart's NOTES name in a kubectl
// command qualified by Nodeforge's group, beside Karpenter's objects of the same names,
// and wants only Nodeforge's back; it runs the NOTES' commands as written.
// The bare plural is asked too, to show what qualification prevents.
func checkDocsResolveToNodeforge(t *testing.T, kubectl func(string, ...string) string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(source, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(source, "manifests", "templates", "NOTES.txt")
	files = append(files, filepath.Join(source, "README.md"), filepath.Join(source, "manifests", "README.md"), notes)
	resources := map[string]bool{}
	group := regexp.MustCompile(`^\.[a-z0-9-]+(\.[a-z0-9-]+)+$`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range unqualified.FindAllStringSubmatch(string(raw), -1) {
			// resource.group; the --api-version form is kubectl explain's.
			if group.MatchString(m[2]) && strings.HasSuffix(m[2], "."+v1alpha1.Group) {
				resources[m[1]+m[2]] = true
			}
		}
	}
	if len(resources) == 0 {
		t.Fatal("the docs name no group-qualified Nodeforge resource; the check reads nothing")
	}
	owner := regexp.MustCompile(`^[a-z0-9]+\.([a-z0-9.]+)/`)
	for _, r := range slices.Sorted(maps.Keys(resources)) {
		for _, line := range strings.Fields(kubectl("", "get", r, "-o", "name")) {
			if m := owner.FindStringSubmatch(line); m == nil || m[1] != v1alpha1.Group {
				t.Errorf("kubectl get %s answered %s, not a %s object", r, line, v1alpha1.Group)
			}
		}
	}
	// What qualification prevents (docs/install.md says so): the bare
	// plural reaches Karpenter's.
	bare := strings.TrimSpace(kubectl("", "get", "nodepools", "-o", "name"))
	if bare != "nodepool.karpenter.sh/default" {
		t.Errorf("kubectl get nodepools answered %q beside Karpenter, not Karpenter's pool as docs/install.md says", bare)
	}
	t.Logf("%d group-qualified resources from the docs resolve to %s; the bare plural reaches %s", len(resources), v1alpha1.Group, bare)

	raw, err := os.ReadFile(notes)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(strings.ReplaceAll(line, "{{ .Release.Namespace }}", "nodeforge"))
		if !strings.HasPrefix(line, "kubectl ") {
			continue
		}
		if strings.Contains(line, "{{") {
			t.Fatalf("NOTES.txt command %q has a template this test does not fill in", line)
		}
		kubectl("", strings.Fields(line)[1:]...)
		ran++
	}
	if ran == 0 {
		t.Fatal("no kubectl command found in the chart's NOTES.txt")
	}
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
