package repack

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
)

func newScheduler(t testing.TB) *simulator.Scheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := simulator.DefaultScheduler(ctx, kubefake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testCatalog has three families (2, 4 and 8 GiB per vCPU) in five sizes,
// larger sizes a little cheaper per resource, in one zone and capacity
// type: one group, as a batch is.
func testCatalog() []*Option {
	var out []*Option
	for _, f := range []struct {
		name  string
		gib   int
		price float64
	}{{"c", 2, 0.034}, {"m", 4, 0.048}, {"r", 8, 0.063}} {
		for i, cpu := range []int{1, 2, 4, 8, 16} {
			name := fmt.Sprintf("%s.%d", f.name, cpu)
			alloc := corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(cpu*1000-80), resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(cpu*f.gib)<<30-(256<<20), resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(int64(8+8*cpu), resource.DecimalSI),
			}
			price := f.price * float64(cpu) * (1 - 0.01*float64(i))
			out = append(out, &Option{Name: name, Price: price, Node: func(node string) *corev1.Node {
				return &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{
						corev1.LabelHostname: node, corev1.LabelTopologyZone: "zone-a", corev1.LabelInstanceTypeStable: name, "family": f.name,
					}},
					Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
				}
			}})
		}
	}
	slices.SortStableFunc(out, func(a, b *Option) int { return cmp.Compare(a.Price, b.Price) })
	return out
}

// randomPods are n pods of a few apps: plain, hostname anti-affinity,
// hostname spread (maxSkew 1 or 2), zone spread, and some that ask for a
// family by node selector.
func randomPods(rng *rand.Rand, n, batch int) []*corev1.Pod {
	cpus := []string{"100m", "250m", "500m", "1", "1500m", "3"}
	mems := []string{"128Mi", "512Mi", "1Gi", "2Gi", "4Gi", "6Gi"}
	var pods []*corev1.Pod
	for i := range n {
		app := fmt.Sprintf("app-%d", rng.IntN(5))
		labels := map[string]string{"app": app}
		sel := &metav1.LabelSelector{MatchLabels: labels}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b%d-p%d", batch, i), Namespace: "default", UID: types.UID(fmt.Sprintf("b%d-uid-%d", batch, i)), Labels: labels,
				CreationTimestamp: metav1.Unix(int64(1000+i), 0)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpus[rng.IntN(len(cpus))]), corev1.ResourceMemory: resource.MustParse(mems[rng.IntN(len(mems))]),
			}}}}},
		}
		switch app {
		case "app-1":
			pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
		case "app-2":
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: int32(1 + rng.IntN(2)), TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		case "app-3":
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		case "app-4":
			if rng.IntN(2) == 0 {
				pod.Spec.NodeSelector = map[string]string{"family": []string{"c", "m", "r"}[rng.IntN(3)]}
			}
		}
		pods = append(pods, pod)
	}
	return pods
}

// naiveBatch nominates pods the way a careless first fit would: each pod
// onto a random open claim that the simulator accepts it on, else a new
// claim of a random type that holds it; claims then take the cheapest
// options that hold what they got. The batch is valid (the simulator
// accepted every pod) and usually dearer than it needs to be.
func naiveBatch(t *testing.T, ctx context.Context, rng *rand.Rand, s *simulator.Scheduler, catalog []*Option, nodes []*corev1.Node, bound []*corev1.Pod, pods []*corev1.Pod) []Bin {
	t.Helper()
	view := simulator.NewCluster(nodes, bound).Without()
	type claim struct {
		name string
		opt  *Option
		pods []*corev1.Pod
		used *framework.Resource
	}
	var claims []*claim
	for _, pod := range pods {
		req := framework.NewResource(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
		order := rng.Perm(len(claims))
		var names []string
		for _, i := range order {
			c := claims[i]
			if nodeshape.FitsBeside(framework.NewResource(c.opt.Node("x").Status.Allocatable), c.used, req, len(c.pods)+1) {
				names = append(names, c.name)
			}
		}
		at, _ := s.PlaceAmong(ctx, view, pod, names)
		if at == "" {
			var opts []*Option
			for _, o := range catalog {
				if nodeshape.Fits(framework.NewResource(o.Node("x").Status.Allocatable), req, 1) {
					opts = append(opts, o)
				}
			}
			for _, i := range rng.Perm(len(opts)) {
				c := &claim{name: fmt.Sprintf("claim-%d", len(claims)), opt: opts[i], used: &framework.Resource{}}
				view.Add(c.opt.Node(c.name))
				if at, _ = s.PlaceAmong(ctx, view, pod, []string{c.name}); at != "" {
					claims = append(claims, c)
					break
				}
			}
			if at == "" {
				continue // nothing holds it; it is not in the batch
			}
		}
		for _, c := range claims {
			if c.name == at {
				c.pods = append(c.pods, pod)
				addTo(c.used, req)
			}
		}
	}
	var batch []Bin
	for _, c := range claims {
		// The claim's options: the types that hold its pods, of the
		// family it was made as when a pod asked for one.
		b := Bin{Name: c.name, Pods: c.pods}
		for _, o := range catalog {
			n := o.Node(c.name)
			ok := nodeshape.Fits(framework.NewResource(n.Status.Allocatable), c.used, len(c.pods))
			for _, pod := range c.pods {
				if sel := pod.Spec.NodeSelector["family"]; sel != "" && n.Labels["family"] != sel {
					ok = false
				}
			}
			if ok && o.Price <= c.opt.Price {
				b.Options = append(b.Options, o)
			}
		}
		if len(b.Options) == 0 {
			b.Options = []*Option{c.opt}
		}
		batch = append(batch, b)
	}
	return batch
}

// TestRepackNeverRefusedNeverDearer: over many random batches, nominated
// around a cluster of real nodes with pods, a repack's plan (1) holds
// every pod of the batch exactly once, (2) is accepted by the simulator
// when replayed here, each pod on its node with every node at its
// cheapest option, and (3) never costs more than the batch; a batch it
// keeps comes back as it was. Some plans must change the batch, or the
// test would prove nothing.
func TestRepackNeverRefusedNeverDearer(t *testing.T) {
	ctx := context.Background()
	s := newScheduler(t)
	catalog := testCatalog()
	changed, saved, total := 0, 0.0, 0.0
	const batches = 40
	for i := range batches {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		// The rest of the cluster: two real nodes with some of the same
		// apps running, so that spread and anti-affinity count them.
		real := []*corev1.Node{catalog[len(catalog)-1].Node(fmt.Sprintf("real-%d-a", i)), catalog[len(catalog)-2].Node(fmt.Sprintf("real-%d-b", i))}
		var bound []*corev1.Pod
		for j, pod := range randomPods(rng, 6, 1000+i) {
			if pod.Spec.NodeSelector == nil {
				p := pod.DeepCopy()
				p.Spec.NodeName = real[j%2].Name
				bound = append(bound, p)
			}
		}
		pods := randomPods(rng, 10+rng.IntN(50), i)
		batch := naiveBatch(t, ctx, rng, s, catalog, real, bound, pods)
		fresh := 0
		plan, err := Repack(ctx, Problem{Scheduler: s, Nodes: real, Pods: bound, Catalog: catalog, Batch: batch,
			NewName: func() string { fresh++; return fmt.Sprintf("new-%d", fresh) }})
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		before := 0.0
		for _, b := range batch {
			before += b.Price()
		}
		if plan.Before != before {
			t.Errorf("batch %d: plan says it was %.4f/h, it was %.4f/h", i, plan.Before, before)
		}
		after := 0.0
		for _, b := range plan.Bins {
			after += b.Price()
		}
		if after > before+1e-9 || plan.After != after {
			t.Errorf("batch %d: plan costs %.4f/h (says %.4f/h), the batch %.4f/h", i, after, plan.After, before)
		}
		if !plan.Changed {
			t.Logf("batch %d (%d claims, %d pods): kept: %s", i, len(batch), len(pods), plan.Why)
			if !slices.EqualFunc(plan.Bins, batch, func(a, b Bin) bool { return a.Name == b.Name && slices.Equal(a.Pods, b.Pods) }) {
				t.Errorf("batch %d: kept (%s) but not returned as it was", i, plan.Why)
			}
			continue
		}
		changed++
		saved += before - after
		total += before
		checkPlan(t, ctx, s, fmt.Sprint("batch ", i), real, bound, batch, plan)
	}
	t.Logf("%d of %d batches repacked, saving %.4f/h of their %.4f/h", changed, batches, saved, total)
	if changed == 0 {
		t.Fatal("no batch was repacked: the test proves nothing")
	}
}

// checkPlan replays plan here, with the simulator alone: every pod of the
// batch on exactly one node of the plan, each node at its cheapest option
// and added when its first pod (in creation order) is placed, and the
// simulator accepting each pod on its node.
func checkPlan(t *testing.T, ctx context.Context, s *simulator.Scheduler, what string, nodes []*corev1.Node, bound []*corev1.Pod, batch []Bin, plan Plan) {
	t.Helper()
	want := map[types.UID]bool{}
	for _, b := range batch {
		for _, pod := range b.Pods {
			want[pod.UID] = true
		}
	}
	of := map[types.UID]string{}
	var pods []*corev1.Pod
	node := map[string]*corev1.Node{}
	for _, b := range plan.Bins {
		if len(b.Options) == 0 {
			t.Fatalf("%s: node %s has no option", what, b.Name)
		}
		if node[b.Name] != nil {
			t.Fatalf("%s: two nodes named %s", what, b.Name)
		}
		node[b.Name] = b.Options[0].Node(b.Name)
		for _, pod := range b.Pods {
			if !want[pod.UID] {
				t.Fatalf("%s: pod %s is not of the batch, or twice in the plan", what, pod.Name)
			}
			delete(want, pod.UID)
			of[pod.UID] = b.Name
			pods = append(pods, pod)
		}
	}
	if len(want) > 0 {
		t.Fatalf("%s: %d pods of the batch are in no node of the plan", what, len(want))
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	view := simulator.NewCluster(nodes, bound).Without()
	added := map[string]bool{}
	for _, pod := range pods {
		name := of[pod.UID]
		if !added[name] {
			added[name] = true
			view.Add(node[name])
		}
		if _, st := s.PlaceAmong(ctx, view, pod, []string{name}); !st.IsSuccess() {
			t.Errorf("%s: the simulator refuses pod %s on %s (%s): %s", what, pod.Name, name, node[name].Labels[corev1.LabelInstanceTypeStable], st.Message())
		}
	}
}

// TestRepackUniformBatchOnTheTypeItFillsBest: three claims grown to the
// largest type, 110 pods each (the pod cap every type has), leave 9 of
// its 64 cpu idle; the same 330 pods on smaller nodes, which the cap does
// not bind, cost only the cpu they ask: 165, on whole nodes of an even
// count of cpu, 166. Repack finds that, every pod where the simulator
// accepts it.
func TestRepackUniformBatchOnTheTypeItFillsBest(t *testing.T) {
	ctx := context.Background()
	s := newScheduler(t)
	var catalog []*Option
	for _, cpu := range []int{2, 4, 8, 16, 32, 64} {
		name := fmt.Sprintf("g.%d", cpu)
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(cpu), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(4*cpu)<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}
		catalog = append(catalog, &Option{Name: name, Price: 0.04 * float64(cpu), Node: func(node string) *corev1.Node {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node, corev1.LabelInstanceTypeStable: name}},
				Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
		}})
	}
	var batch []Bin
	for c := range 3 {
		b := Bin{Name: fmt.Sprintf("claim-%d", c), Options: []*Option{catalog[5]}}
		for i := range 110 {
			b.Pods = append(b.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d-%d", c, i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d-%d", c, i)), CreationTimestamp: metav1.Unix(int64(c*1000+i), 0)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi"),
				}}}}},
			})
		}
		batch = append(batch, b)
	}
	fresh := 0
	plan, err := Repack(ctx, Problem{Scheduler: s, Catalog: catalog, Batch: batch, NewName: func() string { fresh++; return fmt.Sprintf("new-%d", fresh) }})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Changed {
		t.Fatalf("kept the batch: %s", plan.Why)
	}
	if want := 0.04 * 166; plan.After > want+1e-9 {
		var types []string
		for _, b := range plan.Bins {
			types = append(types, fmt.Sprintf("%s:%d", b.Options[0].Name, len(b.Pods)))
		}
		t.Errorf("plan (%s) costs %.4f/h on %v, want %.4f/h", plan.How, plan.After, types, want)
	}
	checkPlan(t, ctx, s, "uniform batch", nil, nil, batch, plan)
}

// TestStableNamesNeverRepeatAName: a node takes the claim most of its
// pods come from; a node whose own claim's name another node took takes a
// batch claim no node took, and a new name only when there is none, never
// the same name twice.
func TestStableNamesNeverRepeatAName(t *testing.T) {
	pod := func(name string) *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	from := map[*corev1.Pod]string{}
	var x, y []*corev1.Pod
	for i := range 7 {
		p := pod(fmt.Sprint("x", i))
		from[p] = "claim-b"
		if i < 2 {
			from[p] = "claim-a"
		}
		x = append(x, p)
	}
	for i := range 3 {
		p := pod(fmt.Sprint("y", i))
		from[p] = "claim-b"
		y = append(y, p)
	}
	bins := []*packed{{name: "claim-a", pods: x}, {name: "claim-b", pods: y}, {name: "claim-c"}}
	newName := func() string { return "new-1" }
	// claim-b goes to the first node (5 of its pods); the second node's
	// own name is taken, and claim-a is free.
	if names, want := stableNames(bins, from, []string{"claim-a", "claim-b", "claim-c"}, newName), []string{"claim-b", "claim-a", ""}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	// With claim-b the batch's only claim, the second node is new.
	for _, p := range x {
		from[p] = "claim-b"
	}
	if names, want := stableNames(bins, from, []string{"claim-b"}, newName), []string{"claim-b", "new-1", ""}; !slices.Equal(names, want) {
		t.Errorf("one claim in the batch: names %v, want %v", names, want)
	}
}
