package integration

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/controllers/disruption"
	"github.com/nodeforge/nodeforge/simulator"
)

// TestConsolidationAgainstAnIndependentScheduler is a randomized
// differential test of consolidation, against a real API server. For each
// seed: a random fleet (4- and 8-cpu nodes in three zones, one NodeClaim
// each) runs random workloads (plain, required hostname anti-affinity,
// zone spread with maxSkew 1 DoNotSchedule, preferred anti-affinity),
// placed by a scheduler; about half the pods are then deleted, as a
// scale-down leaves a fleet. Consolidation rounds run (disruption's own
// Round, deleting claims through the API server) until one decides
// nothing. After every round, the judge, a separate scheduling framework
// built from kube-scheduler's default profile with no VirtualNodes and
// over state read fresh from the API server, must place every pod of the
// nodes consolidation removed on the nodes left; the test then carries the
// drain out itself (no kubelet or scheduler runs here): the pods go where
// the judge put them, the nodes go, and empty nodes go as emptiness would
// remove them. At the end no node may be left whose pods the judge could
// all move to the other nodes: a single-node deletion consolidation missed.
func TestConsolidationAgainstAnIndependentScheduler(t *testing.T) {
	total := 0
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			total += differential(t, seed)
		})
	}
	if total == 0 {
		t.Error("no seed consolidated a single node: the test checked nothing")
	}
}

// newJudge is a scheduler of kube-scheduler's default profile reading
// the package's API server.
func newJudge(ctx context.Context, t *testing.T, cs kubernetes.Interface) *simulator.Scheduler {
	t.Helper()
	s, err := simulator.DefaultScheduler(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fleet is the seed's nodes and pods as the API server has them now.
type fleet struct {
	nodes map[string]*corev1.Node
	pods  map[string][]*corev1.Pod // node → its pods
}

func readFleet(ctx context.Context, t *testing.T, tag string) *fleet {
	t.Helper()
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes, client.MatchingLabels{tag: "true"}); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := kube.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{tag: "true"}); err != nil {
		t.Fatal(err)
	}
	f := &fleet{nodes: map[string]*corev1.Node{}, pods: map[string][]*corev1.Pod{}}
	for i := range nodes.Items {
		f.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil {
			f.pods[p.Spec.NodeName] = append(f.pods[p.Spec.NodeName], p)
		}
	}
	return f
}

// cluster is the simulator's cluster of the fleet without the named nodes.
func (f *fleet) cluster(without ...string) *simulator.View {
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for name, n := range f.nodes {
		if slices.Contains(without, name) {
			continue
		}
		nodes = append(nodes, n)
		pods = append(pods, f.pods[name]...)
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	return simulator.NewCluster(nodes, pods).Without()
}

func queueSorted(pods []*corev1.Pod) []*corev1.Pod {
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// differential runs one seed and returns how many nodes were consolidated.
func differential(t *testing.T, seed uint64) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("seed %d", seed)
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	judge := newJudge(ctx, t, cs)
	tag := fmt.Sprintf("differential-%d", seed)
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: tag}, Spec: v1alpha1.NodePoolSpec{
		Template:   v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}}},
		Disruption: v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: "0s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}}}
	if err := kube.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = kube.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("default"), client.MatchingLabels{tag: "true"}, client.GracePeriodSeconds(0))
		_ = kube.DeleteAllOf(ctx, &v1alpha1.NodeClaim{}, client.MatchingLabels{v1alpha1.LabelNodePool: tag})
		_ = kube.DeleteAllOf(ctx, &corev1.Node{}, client.MatchingLabels{tag: "true"})
		_ = kube.Delete(ctx, pool)
	})

	// The fleet.
	zones := []string{"zone-a", "zone-b", "zone-c"}
	nodes := 8 + rng.IntN(8)
	for i := range nodes {
		name := fmt.Sprintf("%s-n%02d", tag, i)
		zone := zones[i%len(zones)]
		cpus := []int{4, 8}[rng.IntN(2)]
		alloc := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(cpus), resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dGi", 4*cpus)), corev1.ResourcePods: resource.MustParse("110")}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			tag: "true", corev1.LabelHostname: name, corev1.LabelTopologyZone: zone, v1alpha1.LabelNodePool: tag}}}
		if err := kube.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		setNode(t, ctx, node, func(n *corev1.Node) {
			n.Status.Capacity, n.Status.Allocatable = alloc, alloc
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			n.Spec.Taints = nil // the not-ready taint the API server put on it
		})
		nc := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: tag}},
			Spec: v1alpha1.NodeClaimSpec{NodePool: tag, NodeClassRef: pool.Spec.Template.Spec.NodeClassRef}}
		if err := kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
		nc.Status = v1alpha1.NodeClaimStatus{Phase: v1alpha1.NodeClaimInitialized, NodeName: name, InstanceType: fmt.Sprintf("c-%d", cpus), Zone: zone, CapacityType: "on-demand"}
		if err := kube.Status().Update(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if err := kube.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The workloads, placed by the judge, then scaled down.
	f := readFleet(ctx, t, tag)
	view := f.cluster()
	created := 0
	for a := range 5 + rng.IntN(5) {
		app := fmt.Sprintf("%s-app%d", tag, a)
		kind := rng.IntN(4)
		cpu := []string{"250m", "500m", "1", "1500m"}[rng.IntN(4)]
		mem := []string{"512Mi", "1Gi", "2Gi"}[rng.IntN(3)]
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
		for r := range 2 + rng.IntN(7) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", app, r), Namespace: "default",
				Labels:          map[string]string{tag: "true", "app": app},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app, UID: types.UID(app), Controller: ptr.To(true)}}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{tag: "true"}, TerminationGracePeriodSeconds: ptr.To[int64](0), AutomountServiceAccountToken: new(bool),
					Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}}}}
			term := corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname}
			switch kind {
			case 1:
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
			case 2:
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
			case 3:
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}}}
			}
			node, st := judge.Place(ctx, view, p)
			if !st.IsSuccess() {
				continue // the fleet is full for it
			}
			if rng.IntN(2) == 0 {
				continue // scaled down: placed, then deleted
			}
			p.Spec.NodeName = node
			if err := kube.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			created++
		}
	}
	t.Logf("%d nodes, %d pods after the scale-down", nodes, created)

	sched := newJudge(ctx, t, cs)
	k := disruption.NewConsolidation(disruption.NewExecutor(kube, kube, cs, nil, time.Now), kube, kube, sched, time.Now)
	k.Pause = 0
	consolidated := 0
	for round := 1; ; round++ {
		if round > 3*nodes {
			t.Fatalf("still consolidating after %d rounds", round)
		}
		before := readFleet(ctx, t, tag)
		// Emptiness's part: empty nodes go (with their claims).
		var empty []string
		for name := range before.nodes {
			if len(before.pods[name]) == 0 {
				empty = append(empty, name)
			}
		}
		removeNodes(ctx, t, empty)
		if len(empty) > 0 {
			before = readFleet(ctx, t, tag)
		}
		if err := k.Round(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: tag}); err != nil {
			t.Fatal(err)
		}
		var gone []string
		for name := range before.nodes {
			if !slices.ContainsFunc(claims.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Name == name }) {
				gone = append(gone, name)
			}
		}
		if len(gone) == 0 {
			break
		}
		slices.Sort(gone)
		consolidated += len(gone)
		// The judge places every evicted pod on the nodes left.
		var evicted []*corev1.Pod
		for _, name := range gone {
			evicted = append(evicted, before.pods[name]...)
		}
		view := before.cluster(gone...)
		placed := map[string]string{}
		for _, p := range queueSorted(evicted) {
			node, st := judge.Place(ctx, view, p)
			if !st.IsSuccess() {
				t.Fatalf("seed %d round %d: consolidation removed %v, and pod %s on it fits none of the nodes left: %s", seed, round, gone, p.Name, strings.Join(st.Reasons(), "; "))
			}
			placed[p.Name] = node
		}
		// The drain, carried out: the pods where the judge put them.
		for _, p := range evicted {
			if err := kube.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
			moved := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, OwnerReferences: p.OwnerReferences}, Spec: *p.Spec.DeepCopy()}
			moved.Spec.NodeName = placed[p.Name]
			if err := kube.Create(ctx, moved); err != nil {
				t.Fatal(err)
			}
		}
		removeNodes(ctx, t, gone)
		t.Logf("round %d: removed %v, %d pods moved", round, gone, len(evicted))
	}

	// The fixpoint: no node whose pods all fit on the others.
	end := readFleet(ctx, t, tag)
	for name := range end.nodes {
		pods := end.pods[name]
		if len(pods) == 0 {
			continue
		}
		view := end.cluster(name)
		fits := true
		for _, p := range queueSorted(pods) {
			if _, st := judge.PlaceAny(ctx, view, p); !st.IsSuccess() {
				fits = false
				break
			}
		}
		if fits {
			t.Errorf("seed %d: node %s is left, and its %d pods all fit on the other nodes", seed, name, len(pods))
		}
	}
	t.Logf("consolidated %d of %d nodes; %d left", consolidated, nodes, len(end.nodes))
	return consolidated
}

// removeNodes deletes the nodes and their claims, as termination would
// once they are drained.
func removeNodes(ctx context.Context, t *testing.T, names []string) {
	t.Helper()
	for _, name := range names {
		if err := client.IgnoreNotFound(kube.Delete(ctx, &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}})); err != nil {
			t.Fatal(err)
		}
		if err := client.IgnoreNotFound(kube.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})); err != nil {
			t.Fatal(err)
		}
	}
}
