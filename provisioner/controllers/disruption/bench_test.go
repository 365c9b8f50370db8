package disruption

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// benchPrice is the hourly price of the benchmark's one instance type
// (16 cpu, 64 GiB): the simulated catalog's m7.4xlarge on demand.
const benchPrice = 0.8064

// benchCluster is 1,000 nodes of 16 cpu and 64 GiB in three zones
// running 10,000 pods of mixed shapes in apps of ten: a tenth of the apps
// with hostname anti-affinity, a tenth spread across zones (maxSkew 1,
// DoNotSchedule), the rest plain; pods dealt round-robin, so every
// constraint holds; then 40% of the pods deleted at random (seeded), as a
// scale-down leaves a fleet.
func benchCluster(b *testing.B) []client.Object {
	rng := rand.New(rand.NewPCG(1, 2))
	alloc := []string{"cpu", "16", "memory", "64Gi", "pods", "110"}
	var objs []client.Object
	const nodes, pods = 1000, 10000
	zones := []string{"zone-a", "zone-b", "zone-c"}
	for i := range nodes {
		name := fmt.Sprintf("n%04d", i)
		zone := zones[i%3]
		objs = append(objs,
			testobj.Node(name).Label(corev1.LabelHostname, name).Label(corev1.LabelTopologyZone, zone).Capacity(alloc...).Ready().Obj(),
			testobj.Claim("p-"+name).UID("uid-"+name).Label(v1alpha1.LabelNodePool, "p").Pool("p").
				Phase(v1alpha1.NodeClaimInitialized).NodeName(name).Launched("m7.4xlarge", zone, "on-demand").Obj())
	}
	cpus := []string{"250m", "500m", "1", "2"}
	mems := []string{"512Mi", "1Gi", "2Gi", "4Gi"}
	for i := range pods {
		app := fmt.Sprintf("app%04d", i/10)
		p := pod(fmt.Sprintf("p%05d", i), fmt.Sprintf("n%04d", i%nodes))
		p.Labels = map[string]string{"app": app}
		shape := (i / 10) % 4
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpus[shape]), corev1.ResourceMemory: resource.MustParse(mems[(shape+i/40)%4])}
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
		switch (i / 10) % 10 {
		case 0:
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelHostname}}}}
		case 1:
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel}}
		}
		if rng.Float64() < 0.4 {
			continue
		}
		objs = append(objs, p)
	}
	m7 := testobj.InstanceType("m7.4xlarge").Capacity(alloc...)
	for _, zone := range zones {
		m7.Offering(zone, v1alpha1.CapacityTypeOnDemand, fmt.Sprint(benchPrice))
	}
	objs = append(objs, testobj.Catalog("p", m7.Obj()))
	return objs
}

// BenchmarkConsolidate times one consolidation decision over the
// benchmark cluster (reading the cache, choosing candidates, the search
// and the full simulation of the nodes chosen), and then runs decisions,
// applying each (its nodes removed, their pods where the simulation put
// them), until none is found, to report the fleet's $/h before and after
// against a lower bound: the pods' cpu and memory requests at the
// catalog's one price per 16 cpu and 64 GiB.
func BenchmarkConsolidate(b *testing.B) {
	klog.SetLogger(klog.Background().V(10)) // the decisions' log lines are not the benchmark
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := benchCluster(b)
	pool := testobj.Pool("p").ConsolidationPolicy(v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized).ConsolidateAfter("0s").Budget("10%").Obj()
	kube := testobj.Client(append(objs, pool)...)
	sched := newScheduler(ctx, b)
	k := NewConsolidation(NewExecutor(kube, kube, kubefake.NewClientset(), nil, time.Now), kube, kube, sched, time.Now)
	k.Timeout = time.Minute

	b.ResetTimer()
	var d *decision
	var err error
	for b.Loop() {
		if d, err = k.nextDecision(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if d == nil {
		b.Fatal("no decision over a fleet at 40% less than it was built for")
	}
	b.ReportMetric(float64(len(d.nodes)), "nodes/decision")

	var cpu, mem float64
	var pods corev1.PodList
	if err := kube.List(ctx, &pods); err != nil {
		b.Fatal(err)
	}
	for _, p := range pods.Items {
		cpu += p.Spec.Containers[0].Resources.Requests.Cpu().AsApproximateFloat64()
		mem += p.Spec.Containers[0].Resources.Requests.Memory().AsApproximateFloat64()
	}
	bound := math.Ceil(max(cpu/16, mem/(64<<30))) * benchPrice
	before := fleet(ctx, b, kube)
	rounds := 0
	for ; d != nil && rounds < 200; rounds++ {
		apply(ctx, b, kube, d)
		if d, err = k.nextDecision(ctx); err != nil {
			b.Fatal(err)
		}
	}
	after := fleet(ctx, b, kube)
	b.ReportMetric(before, "$/h-before")
	b.ReportMetric(after, "$/h-after")
	b.ReportMetric(bound, "$/h-lower-bound")
	b.ReportMetric(float64(rounds), "decisions")
}

// fleet is the $/h of the nodes left.
func fleet(ctx context.Context, b *testing.B, kube client.Client) float64 {
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes); err != nil {
		b.Fatal(err)
	}
	return float64(len(nodes.Items)) * benchPrice
}

// apply carries a decision out on the fake cluster at once: the nodes
// and claims go, their pods are where the simulation put them.
func apply(ctx context.Context, b *testing.B, kube client.Client, d *decision) {
	for _, c := range d.nodes {
		for _, p := range c.pods {
			moved := p.DeepCopy()
			if err := kube.Delete(ctx, moved); err != nil {
				b.Fatal(err)
			}
			moved.ResourceVersion = ""
			moved.Spec.NodeName = d.placed[p.UID]
			if moved.Spec.NodeName == "" {
				b.Fatalf("pod %s was not placed", p.Name)
			}
			if err := kube.Create(ctx, moved); err != nil {
				b.Fatal(err)
			}
		}
		if err := kube.Delete(ctx, c.claim); err != nil {
			b.Fatal(err)
		}
		if err := kube.Delete(ctx, c.node); err != nil {
			b.Fatal(err)
		}
	}
}
