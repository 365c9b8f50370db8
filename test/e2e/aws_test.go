package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// TestAWSProvider runs the sandbox with the provisioner on the aws
// provider: it reaches the fake EC2 region through the real SDK, and the
// region's instances join as kwok nodes 3s after launch, with what their
// user data says.
func TestAWSProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{
		CloudProvider: "aws", AWSRegistrationDelay: 3 * time.Second,
		ProvisionerArgs: []string{"--registration-ttl=20s"},
	})

	t.Run("the default EC2NodeClass resolves and its pool is Ready", func(t *testing.T) {
		poll(t, "EC2NodeClass default Ready", func() (bool, error) {
			var class v1alpha1.EC2NodeClass
			if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &class); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(class.Status.Conditions, "Ready")
			return c != nil && c.Status == metav1.ConditionTrue && len(class.Status.Subnets) == 3, nil
		})
		poll(t, "NodePool default Ready", func() (bool, error) {
			var pool v1alpha1.NodePool
			if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, &pool); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(pool.Status.Conditions, "Ready")
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
	})

	t.Run("killed mid-launch and restarted: every pod runs, each claim has one instance, none is orphaned", func(t *testing.T) {
		labels := map[string]string{"app": "crash"}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](6), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "spot"},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}},
			}},
		}}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		claimInPhase(t, kube, v1alpha1.NodeClaimLaunched) // its node not registered yet
		if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
			t.Fatal(err)
		}
		poll(t, "6 crash pods Running", func() (bool, error) {
			n, err := runningPods(ctx, cs, "app=crash")
			return n == 6, err
		})
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			t.Fatal(err)
		}
		// An instance is a claim's by its claim tag; one of a fleet
		// launched for several claims, by the claim whose status names it
		// and which the instance names among the fleet's claims.
		perClaim := map[string]int{}
		for _, in := range sb.EC2.Instances() {
			if in.State == "terminated" || in.State == "shutting-down" {
				continue
			}
			owner := in.Tags[aws.TagNodeClaim]
			for _, nc := range claims.Items {
				if owner == "" && strings.HasSuffix(nc.Status.ProviderID, "/"+in.ID) && in.Tags[aws.TagFleetClaimPrefix+string(nc.UID)] == nc.Name {
					owner = nc.Name
				}
			}
			perClaim[owner]++
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
		// The nodes joined with what the user data says, and were adopted:
		// each opened to the scheduler once its pods were bound. The
		// binding taint is lifted just after the binds, so a pod may be
		// Running a moment before its node is open: wait for it.
		var nodes *corev1.NodeList
		poll(t, "every node of the pool without the binding taint", func() (bool, error) {
			var err error
			if nodes, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelNodePool + "=default"}); err != nil {
				return false, err
			}
			for _, n := range nodes.Items {
				if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding }) {
					return false, fmt.Errorf("node %s still has the binding taint", n.Name)
				}
			}
			return true, nil
		})
		for _, n := range nodes.Items {
			if !strings.HasPrefix(n.Spec.ProviderID, "aws:///us-west-2") || n.Labels[v1alpha1.LabelCapacityType] != "spot" || n.Labels[corev1.LabelInstanceTypeStable] == "" {
				t.Errorf("node %s: providerID %q, labels %v", n.Name, n.Spec.ProviderID, n.Labels)
			}
		}
		if err := cs.AppsV1().Deployments("default").Delete(ctx, "crash", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CreateFleet denied: the claim and the pod say AccessDenied, nothing is retried until the claim expires, then the pod runs", func(t *testing.T) {
		sb.EC2.Deny("CreateFleet", true)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "denied", Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "on-demand"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "event AccessDenied on pod denied", func() (bool, error) {
			reasons, err := podEventReasons(ctx, cs, "default", "denied")
			return contains(reasons, v1alpha1.ReasonAccessDenied), err
		})
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			t.Fatal(err)
		}
		var denied []string
		for _, nc := range claims.Items {
			if c := meta.FindStatusCondition(nc.Status.Conditions, "Launched"); c != nil && c.Reason == v1alpha1.ReasonAccessDenied && strings.Contains(c.Message, "UnauthorizedOperation") {
				denied = append(denied, nc.Name)
			}
		}
		if len(denied) != 1 {
			t.Fatalf("claims %v say AccessDenied with EC2's message, want 1", denied)
		}
		// The denied claim's launches only: the sandbox's other claims
		// (the last subtest's, still launching) may try CreateFleet
		// meanwhile, and be refused too. The class's launch check may
		// dry-run CreateFleet again after the denial (dryrun.go); that is
		// a permission probe, not a launch.
		before := launchesFor(sb.EC2, denied[0])
		if before == 0 {
			t.Fatalf("no CreateFleet names claim %s, whose launch was denied", denied[0])
		}
		time.Sleep(5 * time.Second) // several reconciles of the claim, none of which may launch
		if n := launchesFor(sb.EC2, denied[0]) - before; n != 0 {
			t.Errorf("CreateFleet retried %d times for claim %s after it was denied", n, denied[0])
		}
		sb.EC2.Deny("CreateFleet", false)
		poll(t, "pod denied Running once the policy is fixed and the claim expired", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "denied", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
	})

	t.Run("a class whose subnets match nothing: its pool is not Ready and says why, and its pods get an Event", func(t *testing.T) {
		class := &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: v1alpha1.EC2NodeClassSpec{
			InstanceProfile:            "p",
			SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "elsewhere"}}},
			SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
			AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
		}}
		if err := kube.Create(ctx, class); err != nil {
			t.Fatal(err)
		}
		pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{
			ObjectMeta: v1alpha1.NodeClaimTemplateObjectMeta{Labels: map[string]v1alpha1.LabelValue{"intent": "nowhere"}},
			Spec:       v1alpha1.NodeClaimTemplateSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "nowhere"}},
		}, Disruption: v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: "30s"}}}
		if err := kube.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		poll(t, "NodePool nowhere not Ready, naming the subnets", func() (bool, error) {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(pool.Status.Conditions, "Ready")
			return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "no subnet matches subnetSelectorTerms"), nil
		})
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"intent": "nowhere"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "event NoInstanceType on pod nowhere", func() (bool, error) {
			reasons, err := podEventReasons(ctx, cs, "default", "nowhere")
			return contains(reasons, v1alpha1.ReasonNoInstanceType), err
		})
	})

	t.Run("a converted Karpenter quick-start pool launches only the types it selects", func(t *testing.T) {
		quickstart := convertedQuickStartPool(t)
		if err := kube.Create(ctx, quickstart); err != nil {
			t.Fatal(err)
		}
		// One pod a node, of three sizes: the cheapest type for the
		// smallest is t3.medium, which the pool's category leaves out.
		var names []string
		for i, cpu := range []string{"500m", "3", "6"} {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quickstart-%d", i), Namespace: "default", Labels: map[string]string{"app": "quickstart"}}, Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelNodePool: "quickstart"},
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "quickstart"}},
				}}}},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
			}}
			if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, p.Name)
		}
		poll(t, "3 quickstart pods Running", func() (bool, error) {
			n, err := runningPods(ctx, cs, "app=quickstart")
			return n == 3, err
		})
		selected := func(instanceType string) bool {
			fam, _, _ := strings.Cut(instanceType, ".")
			labels := v1alpha1.InstanceNameLabels(instanceType)
			gen, err := strconv.Atoi(labels[v1alpha1.LabelInstanceGeneration])
			return fam != "" && err == nil && gen > 2 && slices.Contains([]string{"c", "m", "r"}, labels[v1alpha1.LabelInstanceCategory])
		}
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: "quickstart"}); err != nil {
			t.Fatal(err)
		}
		var launched []string
		for _, nc := range claims.Items {
			launched = append(launched, nc.Status.InstanceType)
			if !selected(nc.Status.InstanceType) {
				t.Errorf("nodeclaim %s launched %s, which is not category c, m or r of a generation above 2", nc.Name, nc.Status.InstanceType)
			}
		}
		// Every option offered to EC2 for the pool, not only the one it
		// took, is one the pool selects.
		var offered []string
		for _, r := range sb.EC2.Requests() {
			if r.Action != "CreateFleet" || !fleetForPool(r.Form, "quickstart") {
				continue
			}
			for k, v := range r.Form {
				if strings.HasPrefix(k, "LaunchTemplateConfigs.1.Overrides.") && strings.HasSuffix(k, ".InstanceType") {
					offered = append(offered, v[0])
					if !selected(v[0]) {
						t.Errorf("CreateFleet for pool quickstart offered %s, which the pool does not select", v[0])
					}
				}
			}
		}
		if len(claims.Items) != 3 || len(offered) == 0 {
			t.Errorf("pool quickstart: %d claims (want 3), %d fleet options", len(claims.Items), len(offered))
		}
		slices.Sort(offered)
		t.Logf("pool quickstart launched %v; fleet options offered %v", launched, slices.Compact(offered))
		for _, name := range names {
			if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("pods asking for NeuronCores, a pod ENI or EFA each get a node that has it, bound once the cloud provider initialised it", func(t *testing.T) {
		// The example's default pool offers categories c, m and r only:
		// Neuron types (inf, trn) come from a pool of their own, as on a
		// cluster that means to buy them.
		poolFromDefault(t, kube, "neuron", func(np *v1alpha1.NodePool) {
			np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
				{Key: v1alpha1.LabelInstanceCategory, Operator: corev1.NodeSelectorOpIn, Values: []string{"inf", "trn"}},
			}
		})
		asks := map[string]corev1.ResourceList{
			"neuron": {v1alpha1.ResourceNeuronCore: resource.MustParse("2")},
			"podeni": {v1alpha1.ResourcePodENI: resource.MustParse("1")},
			"efa":    {v1alpha1.ResourceEFA: resource.MustParse("1")},
		}
		pools := map[string]string{"neuron": "neuron", "podeni": "default", "efa": "default"}
		for name, extra := range asks {
			requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			maps.Copy(requests, extra)
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "device-" + name, Namespace: "default", Labels: map[string]string{"app": "devices"}}, Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "on-demand", v1alpha1.LabelNodePool: pools[name]},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: requests, Limits: extra}}},
			}}
			if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		poll(t, "3 device pods Running", func() (bool, error) {
			n, err := runningPods(ctx, cs, "app=devices")
			return n == 3, err
		})
		for name, extra := range asks {
			pod, err := cs.CoreV1().Pods("default").Get(ctx, "device-"+name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node, err := cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for resourceName, q := range extra {
				if has := node.Status.Allocatable[resourceName]; has.Cmp(q) < 0 {
					t.Errorf("pod %s runs on %s (%s), whose allocatable %s is %s", pod.Name, node.Name, node.Labels[corev1.LabelInstanceTypeStable], resourceName, has.String())
				}
			}
			// Bound only once initialised, and on the first node: no
			// refusal, no second instance.
			reasons, err := podEventReasons(ctx, cs, "default", pod.Name)
			if err != nil {
				t.Fatal(err)
			}
			if contains(reasons, v1alpha1.ReasonNominationCleared) || contains(reasons, v1alpha1.ReasonLaunchFailed) {
				t.Errorf("pod %s was refused on its node: events %v", pod.Name, reasons)
			}
			t.Logf("pod %s runs on %s", pod.Name, node.Labels[corev1.LabelInstanceTypeStable])
		}
		if err := cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=devices"}); err != nil {
			t.Fatal(err)
		}
	})
}

// convertedQuickStartPool is the NodePool of Karpenter's getting-started
// guide, on-demand, converted by nodeforge-convert as a user would run it,
// under the name quickstart.
func convertedQuickStartPool(t *testing.T) *v1alpha1.NodePool {
	t.Helper()
	const karpenter = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: quickstart}
spec:
  template:
    spec:
      requirements:
      - {key: kubernetes.io/arch, operator: In, values: [amd64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
  limits: {cpu: 1000}
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}
`
	cmd := exec.Command(filepath.Join(binDir, "nodeforge-convert"))
	cmd.Stdin = strings.NewReader(karpenter)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nodeforge-convert: %v; it reported:\n%s", err, stderr.String())
	}
	var np v1alpha1.NodePool
	if err := yaml.UnmarshalStrict(out, &np); err != nil {
		t.Fatalf("reading the converted pool: %v\n%s", err, out)
	}
	return &np
}

// fleetForPool reports whether a CreateFleet request tags its instances
// with the pool.
func fleetForPool(form url.Values, pool string) bool {
	for k, v := range form {
		if strings.HasPrefix(k, "TagSpecification.1.Tag.") && strings.HasSuffix(k, ".Key") && v[0] == aws.TagNodePool {
			if form.Get(strings.TrimSuffix(k, ".Key")+".Value") == pool {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// launchesFor counts the CreateFleet requests, dry runs left out, that tag
// their instances with the claim's name.
func launchesFor(ec2 *ec2fake.Server, claim string) int {
	n := 0
	for _, r := range ec2.Requests() {
		if r.Action != "CreateFleet" || r.Form.Get("DryRun") == "true" {
			continue
		}
		for k, vs := range r.Form {
			if strings.HasPrefix(k, "TagSpecification.") && strings.HasSuffix(k, ".Value") && slices.Contains(vs, claim) {
				n++
				break
			}
		}
	}
	return n
}
