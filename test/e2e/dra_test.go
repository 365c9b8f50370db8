package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// setUpGPUs checks the sandbox ships the NVIDIA driver's DeviceClass, and
// creates ResourceClaimTemplates gpu-40 and gpu-100 for one GPU of at
// least that memory, and the pool "gpus".
func setUpGPUs(t *testing.T, cs kubernetes.Interface, kube client.Client) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.ResourceV1().DeviceClasses().Get(ctx, "gpu.nvidia.com", metav1.GetOptions{}); err != nil {
		t.Fatalf("the sandbox's DeviceClass gpu.nvidia.com: %v", err)
	}
	for _, tmpl := range []*resourcev1.ResourceClaimTemplate{gpuClaimTemplate("gpu-40", "40Gi"), gpuClaimTemplate("gpu-100", "100Gi")} {
		if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createZonalPool(t, kube, "gpus")
}

// gpuPod is a pod of the pool "gpus" with a claim from template.
func gpuPod(name, template string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "gpus"}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": "gpus"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Claims:   []corev1.ResourceClaim{{Name: "gpu"}}}}},
		}}
}

// gpuClaimTemplate is a ResourceClaimTemplate for one NVIDIA GPU of at
// least min memory, selected by CEL on the attributes the NVIDIA DRA
// driver publishes.
func gpuClaimTemplate(name, min string) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('" + min + "')) >= 0"}}}},
		}}}}}}
}

// TestDRAClaimsLaunchNodesWithTheirDevices: pods whose ResourceClaims ask
// for an NVIDIA GPU of at least 40Gi, which only the p5 family's H100s
// (published by the NVIDIA DRA driver, not as nvidia.com/gpu) have, are
// nominated to virtual nodes carrying the slices p5 nodes publish; the
// nodes launched are p5s with a GPU for each pod; each pod runs with its
// claim allocated by the scheduler on its own node, no two on one GPU.
// A pod asking for a 100Gi GPU, which no type has, gets no claim and an
// Event saying the scheduler refuses every node.
func TestDRAClaimsLaunchNodesWithTheirDevices(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	setUpGPUs(t, cs, kube)
	pod := gpuPod
	const n = 3
	for i := range n {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod(fmt.Sprintf("gpus-%d", i), "gpu-40"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := settled(t, cs, kube, "gpus", n)
	if len(p.pending) != 0 {
		t.Fatalf("%d pods pending; want all %d Running", len(p.pending), n)
	}
	gpus := 0
	for _, nc := range p.claims {
		it := nc.Status.InstanceType
		if !strings.HasPrefix(it, "p5.") {
			t.Errorf("nodeclaim %s launched %s: only p5 has a GPU of 40Gi", nc.Name, it)
		}
		var node corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Status.Allocatable[corev1.ResourceName(v1alpha1.ResourceNVIDIAGPU)]; ok {
			t.Errorf("node %s offers %s beside its DRA devices", node.Name, v1alpha1.ResourceNVIDIAGPU)
		}
	}
	claims, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=gpus"})
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		nodeOf[string(p.UID)] = p.Spec.NodeName
	}
	used := map[string]string{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) != 1 || len(c.Status.Allocation.Devices.Results) != 1 {
			t.Errorf("claim %s: allocation %v, reserved for %v; want one device, reserved for its pod", c.Name, c.Status.Allocation, c.Status.ReservedFor)
			continue
		}
		r := c.Status.Allocation.Devices.Results[0]
		node := nodeOf[string(c.Status.ReservedFor[0].UID)]
		if r.Driver != "gpu.nvidia.com" || r.Pool != node {
			t.Errorf("claim %s: device %s/%s/%s, want a gpu.nvidia.com device of its pod's node %s", c.Name, r.Driver, r.Pool, r.Device, node)
		}
		id := r.Pool + "/" + r.Device
		if other, ok := used[id]; ok {
			t.Errorf("claims %s and %s both hold %s", other, c.Name, id)
		}
		used[id] = c.Name
		gpus++
	}
	if gpus != n {
		t.Errorf("%d GPUs allocated, want %d", gpus, n)
	}
	var launched []string
	for _, nc := range p.claims {
		launched = append(launched, nc.Status.InstanceType)
	}
	t.Logf("%d pods on %v, devices %v", n, launched, used)
	before := len(p.claims)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("huge", "gpu-100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reasons := podEventsUntil(t, cs, "huge", v1alpha1.ReasonNoInstanceType)
	_, notes, err := podEvents(ctx, cs, "huge")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, "no instance type's devices satisfy claim default/huge-gpu-") && strings.Contains(n, "request gpu: 1 of gpu.nvidia.com") && !strings.Contains(n, "room")
	}) {
		t.Errorf("pod huge: events %v %q; want one naming its claim and request, saying no type's devices satisfy it", reasons, notes)
	}
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all, client.MatchingLabels{v1alpha1.LabelNodePool: "gpus"}); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != before {
		t.Errorf("%d nodeclaims after a pod no type can hold, want %d", len(all.Items), before)
	}
}

// TestADeviceTemplateTeachesADriverNodeforgeDoesNotKnow: a DeviceTemplate
// says that nodes of the c7 family run an FPGA driver (fpga.example.com)
// publishing one device; the c7 types' catalog then carries its slice,
// the template says Ready with the count of types, and a pod claiming an
// FPGA of model x1 launches a c7 node and runs with its claim allocated
// there by the scheduler.
func TestADeviceTemplateTeachesADriverNodeforgeDoesNotKnow(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	const driver = "fpga.example.com"
	driverClass(t, cs, "fpga", driver)
	// The example the API guide shows, as it ships.
	raw, err := manifests.FS.ReadFile("examples/devicetemplate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dt := &v1alpha1.DeviceTemplate{}
	if err := yaml.UnmarshalStrict(raw, dt); err != nil {
		t.Fatal(err)
	}
	if err := kube.Create(ctx, dt); err != nil {
		t.Fatal(err)
	}
	createZonalPool(t, kube, "fpgas")
	poll(t, "DeviceTemplate fpga-on-c7 Ready on the c7 types", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(dt), dt)
		ready := slices.ContainsFunc(dt.Status.Conditions, func(c metav1.Condition) bool {
			return c.Type == v1alpha1.ConditionReady && c.Status == metav1.ConditionTrue
		})
		return err == nil && ready && dt.Status.InstanceTypes > 0, err
	})
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "fpga", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "fpga", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "fpga", Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: `device.attributes["` + driver + `"].model == "x1"`}}}},
		}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fpgas-0", Namespace: "default", Labels: map[string]string{"app": "fpgas"}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": "fpgas"},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "fpga", ResourceClaimName: ptr.To("fpga")}},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				Claims:   []corev1.ResourceClaim{{Name: "fpga"}}}}},
		}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := settled(t, cs, kube, "fpgas", 1)
	if len(p.pending) != 0 || len(p.claims) != 1 || !strings.HasPrefix(p.claims[0].Status.InstanceType, "c7.") {
		t.Fatalf("%d pods pending, claims %v; want the pod Running on one c7 node", len(p.pending), p.claims)
	}
	claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "fpga", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Driver != driver || a.Devices.Results[0].Pool != p.claims[0].Status.NodeName {
		t.Errorf("claim fpga: allocation %v; want %s's device on node %s", claim.Status.Allocation, driver, p.claims[0].Status.NodeName)
	}
	t.Logf("%s on %s; template on %d types", pod.Name, p.claims[0].Status.InstanceType, dt.Status.InstanceTypes)
}

// TestDevicesPlannedBeforeASchedulerRestartStayTaken: a pod's GPU is
// planned on an open claim of one-GPU types; the scheduler is killed and
// started again while the claim is still open; a second such pod, decided
// after the restart, is not nominated to that claim (its one GPU is
// planned again from the restored claim) but to one of its own, and both
// run.
func TestDevicesPlannedBeforeASchedulerRestartStayTaken(t *testing.T) {
	t.Parallel()
	// A batch window long enough for the restart to fall in it.
	sb, cs, kube := startSandbox(t, sandbox.Options{ProvisionerArgs: []string{"--batch-idle-duration=20s", "--batch-max-duration=40s"}})
	ctx := context.Background()
	setUpGPUs(t, cs, kube)
	first, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("gpus-0", "gpu-40"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nc v1alpha1.NodeClaim
	poll(t, "gpus-0 nominated to a written nodeclaim", func() (bool, error) {
		first, err = cs.CoreV1().Pods("default").Get(ctx, "gpus-0", metav1.GetOptions{})
		if err != nil || first.Status.NominatedNodeName == "" {
			return false, err
		}
		err := kube.Get(ctx, client.ObjectKey{Name: first.Status.NominatedNodeName}, &nc)
		return err == nil && nc.Spec.NominatedPods == 1, client.IgnoreNotFound(err)
	})
	if err := sb.KillAndRestart(ctx, "nodeforge-scheduler"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("gpus-1", "gpu-40"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var second *corev1.Pod
	poll(t, "gpus-1 nominated or bound", func() (bool, error) {
		second, err = cs.CoreV1().Pods("default").Get(ctx, "gpus-1", metav1.GetOptions{})
		return err == nil && (second.Status.NominatedNodeName != "" || second.Spec.NodeName != ""), err
	})
	if second.Status.NominatedNodeName == first.Status.NominatedNodeName {
		t.Errorf("gpus-1 was nominated to %s, whose one GPU gpus-0's claim is planned on: the restart forgot the plan", nc.Name)
	}
	p := settled(t, cs, kube, "gpus", 2)
	if len(p.pending) != 0 {
		t.Errorf("%d pods pending, want both Running", len(p.pending))
	}
}

// TestDRAClaimsForTwoGPUsAndASharedClaim: a claim for two H100s (by
// productName) gets a node of a two-GPU type, never two one-GPU nodes,
// with both devices allocated there; a ResourceClaim four pods share is
// planned once and its four pods run on one node, sharing the device.
func TestDRAClaimsForTwoGPUsAndASharedClaim(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	setUpGPUs(t, cs, kube)
	pair := gpuClaimTemplate("two-h100", "40Gi")
	pair.Spec.Spec.Devices.Requests[0].Exactly.Count = 2
	pair.Spec.Spec.Devices.Requests[0].Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"`}}}
	if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, pair, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shared := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "default"}, Spec: gpuClaimTemplate("", "40Gi").Spec.Spec}
	if _, err := cs.ResourceV1().ResourceClaims("default").Create(ctx, shared, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("gpus-pair", "two-h100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		p := gpuPod(fmt.Sprintf("gpus-shared-%d", i), "")
		p.Spec.ResourceClaims[0] = corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := settled(t, cs, kube, "gpus", 5)
	if len(p.pending) != 0 {
		t.Fatalf("%d pods pending, want all 5 Running", len(p.pending))
	}
	typeOf := map[string]string{}
	for _, nc := range p.claims {
		typeOf[nc.Status.NodeName] = nc.Status.InstanceType
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=gpus"})
	if err != nil {
		t.Fatal(err)
	}
	sharedNodes := map[string]bool{}
	for _, pod := range pods.Items {
		switch {
		case pod.Name == "gpus-pair":
			if typeOf[pod.Spec.NodeName] != "p5.4xlarge" {
				t.Errorf("gpus-pair runs on %s (%s), want a p5.4xlarge, the type with two H100s", pod.Spec.NodeName, typeOf[pod.Spec.NodeName])
			}
			claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, ptr.Deref(pod.Status.ResourceClaimStatuses[0].ResourceClaimName, ""), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if a := claim.Status.Allocation; a == nil || len(a.Devices.Results) != 2 || a.Devices.Results[0].Pool != pod.Spec.NodeName || a.Devices.Results[1].Pool != pod.Spec.NodeName {
				t.Errorf("gpus-pair's claim: allocation %v, want two devices of node %s", claim.Status.Allocation, pod.Spec.NodeName)
			}
		case strings.HasPrefix(pod.Name, "gpus-shared-"):
			sharedNodes[pod.Spec.NodeName] = true
		}
	}
	if len(sharedNodes) != 1 {
		t.Errorf("the four pods sharing a claim run on %d nodes, want one", len(sharedNodes))
	}
	claim, err := cs.ResourceV1().ResourceClaims("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.ReservedFor) != 4 {
		t.Errorf("claim shared: allocation %v, reserved for %d pods; want allocated, reserved for the four", claim.Status.Allocation, len(claim.Status.ReservedFor))
	}
	t.Logf("nodes %v; shared claim on %v", typeOf, sharedNodes)
}

// withGPUClaim gives a pod spec a claim from the ResourceClaimTemplate
// template, for its container.
func withGPUClaim(template string) func(*corev1.PodSpec) {
	return func(spec *corev1.PodSpec) {
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
		spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
}

// TestConsolidationMovesGPUPodsWithTheirClaimsAllocatedAfresh: two
// p5.4xlarge nodes (two H100s each, through the DRA driver) each run one
// pod of a Deployment holding one GPU by a claim. Consolidation sees
// that one node's pod fits the other node's free GPU, and removes a node:
// the evicted pod's replacement runs on the node left, its new claim
// allocated there by the scheduler on the GPU the other pod does not
// hold, and no claim is left allocated on the node removed.
func TestConsolidationMovesGPUPodsWithTheirClaimsAllocatedAfresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	setUpGPUs(t, cs, kube)
	const pool = "gpushrink"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5.4xlarge"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
		}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized,
			ConsolidateAfter: "2s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
	})
	nodeOf := func(selector string) (string, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].DeletionTimestamp != nil {
			return "", err
		}
		return pods.Items[0].Spec.NodeName, nil
	}
	// a on a first node, whose second GPU a pod with no controller
	// holds while b is created, so that b gets a node of its own.
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("a", pool, 1, withGPUClaim("gpu-40")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first string
	poll(t, "a Running", func() (bool, error) {
		n, err := nodeOf("app=a")
		first = n
		return n != "", err
	})
	hold := gpuPod("hold", "gpu-40")
	hold.Spec.NodeSelector = map[string]string{"team": pool}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, hold, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "hold Running on a's node", func() (bool, error) {
		n, err := nodeOf("app=gpus")
		return n == first, err
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("b", pool, 1, withGPUClaim("gpu-40")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var second string
	poll(t, "b Running", func() (bool, error) {
		n, err := nodeOf("app=b")
		second = n
		return n != "", err
	})
	if second == first {
		t.Fatalf("b runs on a's node %s, whose two GPUs a and hold hold", first)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "hold", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var left string
	pollFor(t, 3*time.Minute, "a and b Running on one node, the pool's only one", func() (bool, error) {
		n, err := poolNodes(ctx, cs, pool)
		if err != nil || n != 1 {
			return false, err
		}
		na, err := nodeOf("app=a")
		if err != nil {
			return false, err
		}
		nb, err := nodeOf("app=b")
		left = na
		return na != "" && na == nb, err
	})
	t.Logf("nodes %s and %s consolidated onto %s in %s", first, second, left, time.Since(deleted).Round(time.Second))
	gone := first
	if left == first {
		gone = second
	}
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonDisrupting})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Action == string(v1alpha1.DisruptionReasonUnderutilized) }) {
		t.Errorf("no %s Event with action %s: consolidation did not remove the node", v1alpha1.ReasonDisrupting, v1alpha1.DisruptionReasonUnderutilized)
	}
	poll(t, "the claims of a and b allocated on "+left+", on two GPUs, none left on "+gone, func() (bool, error) {
		claims, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		devices := map[string]bool{}
		for _, c := range claims.Items {
			if c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Pool == gone {
					return false, fmt.Errorf("claim %s still allocated %s on %s, which was removed", c.Name, r.Device, gone)
				}
				if r.Pool != left {
					return false, fmt.Errorf("claim %s allocated %s/%s, want a device of %s", c.Name, r.Pool, r.Device, left)
				}
				devices[r.Device] = true
			}
		}
		if len(devices) != 2 {
			return false, fmt.Errorf("devices %v allocated, want two of %s", devices, left)
		}
		return true, nil
	})
}

// gpusOf is how many devices of gpu.nvidia.com the pool's catalog says
// a node of instanceType has.
func gpusOf(ctx context.Context, kube client.Client, pool, instanceType string) (int, error) {
	types, err := cluster.InstanceTypesOf(ctx, kube, pool)
	if err != nil {
		return 0, err
	}
	for _, it := range types {
		if it.Name != instanceType {
			continue
		}
		for _, s := range it.ResourceSlices {
			if s.Driver == cloudprovider.DriverNVIDIAGPU {
				return len(s.Devices), nil
			}
		}
	}
	return 0, nil
}

// TestANodeCorrectsAWrongDeviceTemplate: a DeviceTemplate says that a
// p5.2xlarge has two H100s (it has one). A pod claiming two GPUs is
// nominated to a p5.2xlarge, the cheapest type said to have them; its
// node's driver publishes one GPU; the bind gate refuses the pod there and
// its nomination is cleared; the pool's catalog takes the node's one GPU
// for p5.2xlarge and says so in an Event; the pod, decided afresh, runs on
// a p5.4xlarge with its claim allocated two GPUs there.
func TestANodeCorrectsAWrongDeviceTemplate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	setUpGPUs(t, cs, kube)
	two, err := cloudprovider.NVIDIAGPUSlice("h100", 2)
	if err != nil {
		t.Fatal(err)
	}
	wrong := &v1alpha1.DeviceTemplate{ObjectMeta: metav1.ObjectMeta{Name: "p5-2xlarge-two-gpus"}, Spec: v1alpha1.DeviceTemplateSpec{
		Requirements:   []corev1.NodeSelectorRequirement{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5.2xlarge"}}},
		ResourceSlices: []v1alpha1.ResourceSliceTemplate{two},
	}}
	if err := kube.Create(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	poll(t, "the catalog saying p5.2xlarge has two GPUs", func() (bool, error) {
		n, err := gpusOf(ctx, kube, "gpus", "p5.2xlarge")
		return n == 2, err
	})
	pair := gpuClaimTemplate("gpu-pair", "40Gi")
	pair.Spec.Spec.Devices.Requests[0].Exactly.Count = 2
	pair.Spec.Spec.Devices.Requests[0].Exactly.AllocationMode = resourcev1.DeviceAllocationModeExactCount
	if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, pair, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("pair", "gpu-pair"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var node corev1.Node
	pollFor(t, 3*time.Minute, "pod pair Running", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "pair", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, err
		}
		return true, kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node)
	})
	t.Logf("pod pair Running on %s (%s) %s after it was made", node.Name, node.Labels[corev1.LabelInstanceTypeStable], time.Since(start).Round(time.Second))
	if it := node.Labels[corev1.LabelInstanceTypeStable]; it != "p5.4xlarge" {
		t.Errorf("pod pair runs on a %s, want a p5.4xlarge: the only type with two GPUs", it)
	}
	if n, err := gpusOf(ctx, kube, "gpus", "p5.2xlarge"); err != nil || n != 1 {
		t.Errorf("the catalog says p5.2xlarge has %d GPUs (err %v), want the 1 its node publishes", n, err)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: "gpus"}); err != nil {
		t.Fatal(err)
	}
	var launched []string
	for _, nc := range claims.Items {
		launched = append(launched, nc.Status.InstanceType)
	}
	if !slices.Contains(launched, "p5.2xlarge") {
		t.Errorf("nodeclaims of %v: the pod was never nominated to the p5.2xlarge its template promised, so nothing was corrected", launched)
	}
	_, notes, err := podEvents(ctx, cs, "pair")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "refused by scheduler plugin DynamicResources") }) {
		t.Errorf("pod pair's events %q: none says DynamicResources refused it on the p5.2xlarge", notes)
	}
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonDevicesCorrected})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind == "NodePool" && e.Regarding.Name == "gpus" && strings.Contains(e.Note, "of type p5.2xlarge publishes 1 device (gpu-0) of DRA driver gpu.nvidia.com where the template said 2 devices (gpu-0, gpu-1)")
	}) {
		t.Errorf("no %s Event on pool gpus naming p5.2xlarge's one GPU against the template's two; have %d", v1alpha1.ReasonDevicesCorrected, len(evs.Items))
	}
	c, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range c.Items {
		if rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 2 || rc.Status.Allocation.Devices.Results[0].Pool != node.Name {
			t.Errorf("claim %s allocation %v, want two GPUs of %s", rc.Name, rc.Status.Allocation, node.Name)
		}
	}
}

// TestDRAClaimLaunchesAGPUInstanceOnAWS: on the aws provider, with a class
// whose nodes run the NVIDIA GPU DRA driver, a pod whose claim asks for
// one NVIDIA GPU of at least 14Gi is nominated to a virtual node carrying
// the template of an NVIDIA type; the fleet launches such an instance,
// its node (the EKS fakes' kubelet, labelled for the driver) joins
// without nvidia.com/gpu and publishes the driver's slice, and the pod
// runs with its claim allocated from that slice by the scheduler.
func TestDRAClaimLaunchesAGPUInstanceOnAWS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "aws", AWSRegistrationDelay: time.Second})
	// What the NVIDIA DRA driver's chart installs beside its DaemonSet.
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"`}}}}}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ResourceV1().ResourceClaimTemplates("default").Create(ctx, gpuClaimTemplate("gpu-14", "14Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var def v1alpha1.EC2NodeClass
	poll(t, "the sandbox's default EC2NodeClass", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	nodeClass := &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}, Spec: *def.Spec.DeepCopy()}
	nodeClass.Spec.DRADrivers = []string{"gpu.nvidia.com"}
	if err := kube.Create(ctx, nodeClass); err != nil {
		t.Fatal(err)
	}
	poolFromDefault(t, kube, "gpus", func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"pool": "gpus"}
		np.Spec.Template.Spec.NodeClassRef.Name = "gpus"
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: v1alpha1.LabelInstanceGPUManufacturer, Operator: corev1.NodeSelectorOpIn, Values: []string{"nvidia"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{v1alpha1.CapacityTypeOnDemand}},
		}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("gpu-0", "gpu-14"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	poll(t, "pod gpu-0 Running", func() (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods("default").Get(ctx, "gpu-0", metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, err
	})
	node, err := cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Status.Allocatable[corev1.ResourceName(v1alpha1.ResourceNVIDIAGPU)]; ok {
		t.Errorf("node %s offers %s beside its DRA devices", node.Name, v1alpha1.ResourceNVIDIAGPU)
	}
	if node.Labels[v1alpha1.LabelDRADriver("gpu.nvidia.com")] != "true" || node.Labels[v1alpha1.LabelInstanceGPUManufacturer] != "nvidia" {
		t.Errorf("node %s (%s) labels %v: want the driver's label and an NVIDIA type", node.Name, node.Labels[corev1.LabelInstanceTypeStable], node.Labels)
	}
	published, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(published.Items) != 1 || published.Items[0].Spec.Driver != "gpu.nvidia.com" || len(published.Items[0].OwnerReferences) != 1 ||
		published.Items[0].OwnerReferences[0].UID != node.UID {
		t.Fatalf("node %s's ResourceSlices %+v: want one of gpu.nvidia.com, owned by the node", node.Name, published.Items)
	}
	claims, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 || claims.Items[0].Status.Allocation == nil || len(claims.Items[0].Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claims %+v: want one, allocated one device", claims.Items)
	}
	r := claims.Items[0].Status.Allocation.Devices.Results[0]
	if r.Driver != "gpu.nvidia.com" || r.Pool != node.Name {
		t.Errorf("claim %s: device %s/%s/%s, want a gpu.nvidia.com device of node %s", claims.Items[0].Name, r.Driver, r.Pool, r.Device, node.Name)
	}
	t.Logf("pod gpu-0 on %s (%s), device %s/%s", node.Name, node.Labels[corev1.LabelInstanceTypeStable], r.Pool, r.Device)
}

// TestADriftedGPUNodeIsReplacedWithItsDevices: a Deployment's pod holds
// an H100 by a claim on a p5.2xlarge; its pool's template changes, which
// drifts the node. The replacement is decided on a virtual node carrying
// the slices a p5 publishes, launched, and initialized only once its
// driver has published them; then the old node is drained, and the pod's
// successor runs on the replacement with its new claim allocated there.
// The replacement may launch only p5.2xlarge: a p5.4xlarge publishes
// other devices than those its pod was placed on.
func TestADriftedGPUNodeIsReplacedWithItsDevices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	setUpGPUs(t, cs, kube)
	const pool = "gpudrift"
	np := poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool, "generation": "1"}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: v1alpha1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
		}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1", Reasons: []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonDrifted}}}
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment("drifty", pool, 1, withGPUClaim("gpu-40")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func() (*corev1.Pod, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drifty"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].DeletionTimestamp != nil {
			return nil, err
		}
		return &pods.Items[0], nil
	}
	var before *corev1.Pod
	poll(t, "drifty Running", func() (bool, error) {
		p, err := running()
		before = p
		return p != nil, err
	})
	update(t, kube, np, func() { np.Spec.Template.ObjectMeta.Labels["generation"] = "2" })
	changed := time.Now()
	var after *corev1.Pod
	var node corev1.Node
	pollFor(t, 3*time.Minute, "drifty's successor Running on a node of generation 2", func() (bool, error) {
		p, err := running()
		if err != nil || p == nil || p.UID == before.UID {
			return false, err
		}
		if err := kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			return false, err
		}
		after = p
		return node.Labels["generation"] == "2", nil
	})
	t.Logf("drifty moved from %s to %s (%s) %s after the pool changed", before.Spec.NodeName, node.Name, node.Labels[corev1.LabelInstanceTypeStable], time.Since(changed).Round(time.Second))
	if !strings.HasPrefix(node.Labels[corev1.LabelInstanceTypeStable], "p5.") {
		t.Errorf("the replacement is a %s", node.Labels[corev1.LabelInstanceTypeStable])
	}
	// The drifted claim goes once its node is drained and its instance
	// terminated; no other claim is made for the pod.
	var claims []v1alpha1.NodeClaim
	poll(t, "the drifted nodeclaim gone, the replacement the pool's only one", func() (bool, error) {
		var err error
		claims, err = poolClaims(ctx, kube, pool)
		for _, nc := range claims {
			if nc.Status.NodeName != node.Name && nc.Status.NodeName != before.Spec.NodeName {
				return false, fmt.Errorf("nodeclaim %s on %q: a claim besides the drifted one and its replacement", nc.Name, nc.Status.NodeName)
			}
		}
		return err == nil && len(claims) == 1 && claims[0].Status.NodeName == node.Name, err
	})
	if k := slices.IndexFunc(claims[0].Spec.Requirements, func(r v1alpha1.NodeSelectorRequirementWithMinValues) bool {
		return r.Key == corev1.LabelInstanceTypeStable
	}); k < 0 || !slices.Equal(claims[0].Spec.Requirements[k].Values, []string{"p5.2xlarge"}) {
		t.Errorf("the replacement's requirements %v; want it to launch only p5.2xlarge, the one type whose node publishes the devices its pod's claim was planned on", claims[0].Spec.Requirements)
	}
	poll(t, "drifty's claim allocated on "+node.Name+" and nothing left on "+before.Spec.NodeName, func() (bool, error) {
		rcs, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range rcs.Items {
			if c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Pool != node.Name {
					return false, fmt.Errorf("claim %s holds %s/%s", c.Name, r.Pool, r.Device)
				}
			}
			if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].UID != after.UID {
				return false, fmt.Errorf("claim %s reserved for %v", c.Name, c.Status.ReservedFor)
			}
		}
		return len(rcs.Items) == 1 && rcs.Items[0].Status.Allocation != nil, nil
	})
}

// TestRepackMovesPodsBesideAGPUPod: a GPU pod (its claim for one H100)
// is nominated to a p5.2xlarge claim, and a CPU pod of the same batch to
// a claim of its own (it keeps off a blocker pod that shares the GPU
// pod's claim until it is deleted). The batch closes and is repacked with
// the GPU pod in it: its node carries the slices a p5.2xlarge publishes,
// so the GPU pod stays on a type with the devices planned for it, and the
// CPU pod moves into the room beside it (or both onto one of the two
// claims as a p5.2xlarge). One p5.2xlarge is launched, both pods run
// there, the claim allocated on it; the other claim is deleted
// unlaunched.
func TestRepackMovesPodsBesideAGPUPod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{ProvisionerArgs: []string{"--batch-idle-duration=10s", "--batch-max-duration=60s"}})
	setUpGPUs(t, cs, kube)
	const pool = "gpurepack"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": pool}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: v1alpha1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{"p5", "c7"}},
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
		}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	pod := func(name, role string, gpu bool, keepOff string) *corev1.Pod {
		p := gpuPod(name, "gpu-40")
		p.Labels = map[string]string{"role": role}
		p.Spec.NodeSelector = map[string]string{"team": pool}
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		if !gpu {
			p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Claims = nil, nil
		}
		if keepOff != "" {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": keepOff}}, TopologyKey: corev1.LabelHostname}}}}
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nominatedTo := func(name string) string { t.Helper(); return waitNominated(t, cs, name) }
	pod("gpu", "gpu", true, "")
	x := nominatedTo("gpu")
	pod("blocker", "blocker", false, "")
	if got := nominatedTo("blocker"); got != x {
		t.Fatalf("blocker nominated to %s, want the GPU pod's claim %s (it has room)", got, x)
	}
	pod("cpu", "cpu", false, "blocker")
	y := nominatedTo("cpu")
	if y == x {
		t.Fatalf("cpu nominated to the blocker's claim %s", x)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, "blocker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, name := range []string{"gpu", "cpu"} {
		pollFor(t, 3*time.Minute, "pod "+name+" Running", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == corev1.PodRunning {
				nodes[p.Spec.NodeName] = true
			}
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
	}
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || len(claims) != 1 {
		t.Fatalf("gpu and cpu run on %d nodes, pool %s has nodeclaims %v; want one node, one claim (the batch repacked)", len(nodes), pool, claimTypes(claims))
	}
	kept := claims[0]
	if !slices.Contains([]string{x, y}, kept.Name) || kept.Status.InstanceType != "p5.2xlarge" {
		t.Errorf("the kept claim is %s of %s, want %s or %s as a p5.2xlarge", kept.Name, kept.Status.InstanceType, x, y)
	}
	t.Logf("claims %s (gpu) and %s (cpu) repacked into %s", x, y, kept.Name)
	if cond := findCondition(kept.Status.Conditions, "Packed"); cond == nil || cond.Reason != "Repacked" {
		t.Errorf("the kept claim's Packed condition is %+v, want reason Repacked", cond)
	}
	rcs, err := cs.ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rcs.Items) != 1 || rcs.Items[0].Status.Allocation == nil || rcs.Items[0].Status.Allocation.Devices.Results[0].Pool != kept.Status.NodeName {
		t.Errorf("resource claims %v; want the GPU pod's allocated on %s", rcs.Items, kept.Status.NodeName)
	}
}
