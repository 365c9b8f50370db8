package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// topologyRuns is how often each case repeats: the window it guards
// (a claim closed and launching, its pods not bound yet) is a race.
const topologyRuns = 20

// TestConstraintsThatCountPodsHoldWhileNodesLaunch repeats three cases
// whose constraints count pods, each on a pool of its own per run (three
// zones, on-demand, nothing consolidated), the three running side by side:
//
//   - four pods with required zone anti-affinity: three Running in three
//     zones, the fourth Pending with an Event, three claims;
//   - six pods spread over zones with maxSkew 1 and minDomains 3: two
//     Running in each zone;
//   - four pods with required hostname anti-affinity: four Running on four
//     nodes, four claims.
//
// A pod nominated while a claim launches must see that claim's pods where
// they will run, or the first case ends with two pods in one zone.
func TestConstraintsThatCountPodsHoldWhileNodesLaunch(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	cases := []struct {
		name string
		run  func(t *testing.T, pool string) string
	}{
		{"zone anti-affinity", func(t *testing.T, pool string) string { return zoneAntiAffinity(t, cs, kube, pool) }},
		{"zone spread with minDomains 3", func(t *testing.T, pool string) string { return zoneSpread(t, cs, kube, pool) }},
		{"hostname anti-affinity", func(t *testing.T, pool string) string { return hostnameAntiAffinity(t, cs, kube, pool) }},
	}
	// Every run has a pool of its own, so runs go side by side too, as many
	// as -parallel lets run at once: more launches in flight at a time.
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for run := range topologyRuns {
				t.Run(fmt.Sprintf("run %d", run+1), func(t *testing.T) {
					t.Parallel()
					pool := fmt.Sprintf("topo%d-%d", i, run)
					createZonalPool(t, kube, pool)
					t.Log(tc.run(t, pool))
				})
			}
		})
	}
}

// createZonalPool makes a pool in zones a, b and c, on demand, whose nodes
// carry the label pool=<name> and are never consolidated.
func createZonalPool(t *testing.T, kube client.Client, name string) {
	t.Helper()
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{
			ObjectMeta: v1alpha1.NodeClaimTemplateObjectMeta{Labels: map[string]v1alpha1.LabelValue{"pool": v1alpha1.LabelValue(name)}},
			Spec: v1alpha1.NodeClaimTemplateSpec{
				NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
				Requirements: []v1alpha1.NodeSelectorRequirementWithMinValues{
					{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a", "zone-b", "zone-c"}},
					{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
				},
			},
		},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"},
	}}
	if err := kube.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
}

// topologyPods creates n pods labelled app=<pool> that run only on pool's
// nodes, each shaped by edit.
func topologyPods(t *testing.T, cs kubernetes.Interface, pool string, n int, edit func(*corev1.PodSpec)) []string {
	t.Helper()
	var names []string
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Namespace: "default", Labels: map[string]string{"app": pool}},
			Spec: corev1.PodSpec{
				SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": pool},
				Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
			}}
		edit(&pod.Spec)
		if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, pod.Name)
	}
	return names
}

func antiAffinity(pool, key string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pool}}, TopologyKey: key,
		}}}}
	}
}

// placement is where the pods of one run are: pods Running per node, the
// zone of each such node, and the pods not scheduled.
type placement struct {
	perNode map[string][]string
	zoneOf  map[string]string
	pending []*corev1.Pod
	claims  []v1alpha1.NodeClaim
}

func (p placement) perZone() map[string]int {
	out := map[string]int{}
	for node, pods := range p.perNode {
		out[p.zoneOf[node]] += len(pods)
	}
	return out
}

func (p placement) running() int {
	n := 0
	for _, pods := range p.perNode {
		n += len(pods)
	}
	return n
}

// initialized says every claim of the run has bound its pods.
func (p placement) initialized() bool {
	for _, nc := range p.claims {
		if nc.Status.Phase != v1alpha1.NodeClaimInitialized {
			return false
		}
	}
	return true
}

func place(ctx context.Context, cs kubernetes.Interface, kube client.Client, pool string) (placement, error) {
	p := placement{perNode: map[string][]string{}, zoneOf: map[string]string{}}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + pool})
	if err != nil {
		return p, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName == "" {
			p.pending = append(p.pending, pod)
			continue
		}
		if pod.Status.Phase != corev1.PodRunning {
			continue
		}
		p.perNode[pod.Spec.NodeName] = append(p.perNode[pod.Spec.NodeName], pod.Name)
		if _, ok := p.zoneOf[pod.Spec.NodeName]; !ok {
			var node corev1.Node
			if err := kube.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
				return p, err
			}
			p.zoneOf[pod.Spec.NodeName] = node.Labels[corev1.LabelTopologyZone]
		}
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		return p, err
	}
	p.claims = claims.Items
	return p, nil
}

// settled waits until want pods run and every claim of the pool has bound
// its pods, then checks a few more times that nothing moves: no pod
// scheduled, no claim made. A pod nominated in the window under test would
// show as a claim more than expected.
func settled(t *testing.T, cs kubernetes.Interface, kube client.Client, pool string, want int) placement {
	t.Helper()
	ctx := context.Background()
	var p placement
	poll(t, fmt.Sprintf("%d pods of %s Running, its claims initialized", want, pool), func() (bool, error) {
		var err error
		p, err = place(ctx, cs, kube, pool)
		return err == nil && p.running() >= want && p.initialized(), err
	})
	// Stable over five more looks, one write interval and batch apart.
	for range 5 {
		again, err := place(ctx, cs, kube, pool)
		if err != nil {
			t.Fatal(err)
		}
		if again.running() != p.running() || len(again.claims) != len(p.claims) {
			poll(t, "pool "+pool+" settled", func() (bool, error) {
				p, err = place(ctx, cs, kube, pool)
				return err == nil && p.initialized(), err
			})
			return p
		}
		sleepBriefly()
	}
	return p
}

func zoneAntiAffinity(t *testing.T, cs kubernetes.Interface, kube client.Client, pool string) string {
	topologyPods(t, cs, pool, 4, antiAffinity(pool, corev1.LabelTopologyZone))
	p := settled(t, cs, kube, pool, 3)
	zones := p.perZone()
	if p.running() != 3 || len(zones) != 3 || slices.Max(slices.Collect(maps.Values(zones))) != 1 {
		t.Errorf("pods Running per zone %v, want one in each of three zones", zones)
	}
	if len(p.claims) != 3 {
		t.Errorf("%d claims launched for three zones", len(p.claims))
	}
	if len(p.pending) != 1 {
		t.Fatalf("%d pods pending, want 1", len(p.pending))
	}
	reasons := podEventsUntil(t, cs, p.pending[0].Name, v1alpha1.ReasonNoInstanceType, "FailedScheduling")
	return fmt.Sprintf("pods per zone %v, %d claims, %s pending (%v)", zones, len(p.claims), p.pending[0].Name, reasons)
}

func zoneSpread(t *testing.T, cs kubernetes.Interface, kube client.Client, pool string) string {
	topologyPods(t, cs, pool, 6, func(s *corev1.PodSpec) {
		s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, MinDomains: ptr.To[int32](3),
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pool}},
		}}
	})
	p := settled(t, cs, kube, pool, 6)
	zones := p.perZone()
	if len(zones) != 3 || slices.Min(slices.Collect(maps.Values(zones))) != 2 || slices.Max(slices.Collect(maps.Values(zones))) != 2 {
		t.Errorf("pods Running per zone %v, want two in each of three zones", zones)
	}
	return fmt.Sprintf("pods per zone %v, %d claims", zones, len(p.claims))
}

func hostnameAntiAffinity(t *testing.T, cs kubernetes.Interface, kube client.Client, pool string) string {
	topologyPods(t, cs, pool, 4, antiAffinity(pool, corev1.LabelHostname))
	p := settled(t, cs, kube, pool, 4)
	for node, pods := range p.perNode {
		if len(pods) > 1 {
			t.Errorf("node %s runs %v, which refuse to share a node", node, pods)
		}
	}
	if len(p.claims) != 4 {
		t.Errorf("%d claims launched for four pods that each need a node", len(p.claims))
	}
	return fmt.Sprintf("%d nodes, %d claims", len(p.perNode), len(p.claims))
}

// podEventsUntil waits for an Event with one of reasons on the pod and
// returns the reasons it has.
func podEventsUntil(t *testing.T, cs kubernetes.Interface, pod string, reasons ...string) []string {
	t.Helper()
	var got []string
	poll(t, "an Event saying why "+pod+" is Pending", func() (bool, error) {
		var err error
		got, err = podEventReasons(context.Background(), cs, "default", pod)
		return slices.ContainsFunc(got, func(r string) bool { return slices.Contains(reasons, r) }), err
	})
	return got
}

// sleepBriefly spaces the looks of settled: a claim is written every
// 200 ms and launched after a 1 s quiet batch.
func sleepBriefly() { time.Sleep(600 * time.Millisecond) }

// TestOutOfTreeFilterPlugin runs a second nodeforge-scheduler whose
// profile enables the project's out-of-tree Filter plugin RefuseNodes,
// refusing zone-b: the binary starts with it, VirtualNodes' simulation runs
// it, so no claim is made in zone-b and no pod bound there (the provisioner
// binds what was nominated), and of three pods that refuse to share a zone
// two run, in zone-a and zone-c.
func TestOutOfTreeFilterPlugin(t *testing.T) {
	t.Parallel()
	sb, cs, kube := startSandbox(t, sandbox.Options{})
	config := []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: refusing-scheduler
  plugins:
    filter:
      enabled:
      - name: RefuseNodes
    postFilter:
      enabled:
      - name: VirtualNodes
  pluginConfig:
  - name: RefuseNodes
    args:
      nodeSelector:
        matchLabels:
          topology.kubernetes.io/zone: zone-b
`)
	stop, err := sb.StartScheduler(context.Background(), "refusing-scheduler", filepath.Join(binDir, "nodeforge-scheduler"), config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	createZonalPool(t, kube, "refusing")
	topologyPods(t, cs, "refusing", 3, func(s *corev1.PodSpec) {
		antiAffinity("refusing", corev1.LabelTopologyZone)(s)
		s.SchedulerName = "refusing-scheduler"
	})
	p := settled(t, cs, kube, "refusing", 2)
	zones := p.perZone()
	if p.running() != 2 || zones["zone-a"] != 1 || zones["zone-c"] != 1 {
		t.Errorf("pods Running per zone %v, want one in zone-a and one in zone-c", zones)
	}
	for _, nc := range p.claims {
		if nc.Status.Zone == "zone-b" {
			t.Errorf("nodeclaim %s launched in zone-b, which RefuseNodes refuses", nc.Name)
		}
	}
	if len(p.pending) != 1 {
		t.Fatalf("%d pods pending, want 1", len(p.pending))
	}
	podEventsUntil(t, cs, p.pending[0].Name, "FailedScheduling", v1alpha1.ReasonNoInstanceType)
}
