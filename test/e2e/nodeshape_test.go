package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// TestTheNodeThatRegistersIsTheNodeJudged: on the simulated and the AWS
// paths, the Node that registers for each claim equals, in every field a
// Filter plugin reads (labels, taints, allocatable, capacity), the node the
// plugin judged its pods on: nodeshape's node for the NodeClaim it wrote, at
// the instance type, zone and capacity type launched. (That the plugin
// judges nodeshape's node for the claim it writes is pinned by
// plugin/virtualnodes TestJudgedNodeIsTheClaimsNode.) Several pools with
// their own labels and taints, several instance types and both capacity
// types are covered.
func TestTheNodeThatRegistersIsTheNodeJudged(t *testing.T) {
	t.Parallel()
	for _, cloud := range []string{"simulated", "aws"} {
		t.Run(cloud, func(t *testing.T) {
			t.Parallel()
			opts := sandbox.Options{CloudProvider: cloud}
			if cloud == "aws" {
				opts.AWSRegistrationDelay = time.Second
			}
			_, _, kube := startSandbox(t, opts)
			checkNodesAreTheNodesJudged(t, kube)
		})
	}
}

func checkNodesAreTheNodesJudged(t *testing.T, kube client.Client) {
	ctx := context.Background()
	var def v1alpha1.NodePool
	poll(t, "the sandbox's default NodePool", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	shapes := []struct {
		pool, team, capacityType string
		cpus                     []string
	}{
		{pool: "shape-spot", team: "a", capacityType: v1alpha1.CapacityTypeSpot, cpus: []string{"500m", "3"}},
		{pool: "shape-od", team: "b", capacityType: v1alpha1.CapacityTypeOnDemand, cpus: []string{"1", "6"}},
	}
	var pods []*corev1.Pod
	for _, s := range shapes {
		np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: s.pool}, Spec: *def.Spec.DeepCopy()}
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(s.team)}
		np.Spec.Template.Spec.Taints = []v1alpha1.Taint{{Key: "dedicated", Value: s.team, Effect: corev1.TaintEffectNoSchedule}}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{s.capacityType}},
			{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			// Types chosen by attribute, as Karpenter users write pools.
			{Key: v1alpha1.LabelInstanceCategory, Operator: corev1.NodeSelectorOpIn, Values: []string{"c", "m", "r"}},
			{Key: v1alpha1.LabelInstanceGeneration, Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}},
		}
		if err := kube.Create(ctx, np); err != nil {
			t.Fatal(err)
		}
		for i, cpu := range s.cpus {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", s.pool, i), Namespace: "default"},
				Spec: corev1.PodSpec{
					SchedulerName: "nodeforge-scheduler",
					NodeSelector:  map[string]string{"team": s.team},
					Tolerations:   []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: s.team, Effect: corev1.TaintEffectNoSchedule}},
					// One pod a node, so each size gets its own type.
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"shape": "one-a-node"}},
					}}}},
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
				},
			}
			pod.Labels = map[string]string{"shape": "one-a-node"}
			if s.capacityType == v1alpha1.CapacityTypeOnDemand && i == 0 {
				// A pod that chooses its node by attribute, Gt included:
				// its 1 CPU alone would take a 2-vCPU type.
				pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: v1alpha1.LabelInstanceCPU, Operator: corev1.NodeSelectorOpGt, Values: []string{"2"}},
					}}},
				}}
				pod.Labels["cpu"] = "more-than-2"
			}
			if err := kube.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod)
		}
	}
	// Every pod runs on a node of its pool.
	for _, p := range pods {
		poll(t, "pod "+p.Name+" running", func() (bool, error) {
			var got corev1.Pod
			if err := kube.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
				return false, err
			}
			return got.Spec.NodeName != "" && got.Status.Phase == corev1.PodRunning, nil
		})
	}
	for _, p := range pods {
		if p.Labels["cpu"] != "more-than-2" {
			continue
		}
		var got corev1.Pod
		var node corev1.Node
		if err := kube.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		if err := kube.Get(ctx, client.ObjectKey{Name: got.Spec.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		if cpus, _ := strconv.Atoi(node.Labels[v1alpha1.LabelInstanceCPU]); cpus <= 2 {
			t.Errorf("pod %s asks for nodeforge.dev/instance-cpu Gt 2 and runs on node %s with instance-cpu %q", p.Name, node.Name, node.Labels[v1alpha1.LabelInstanceCPU])
		}
	}
	seen := map[string]bool{}
	for _, s := range shapes {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: s.pool}); err != nil {
			t.Fatal(err)
		}
		if len(claims.Items) != len(s.cpus) {
			t.Fatalf("pool %s: %d nodeclaims, want %d (one a pod)", s.pool, len(claims.Items), len(s.cpus))
		}
		types := poolInstanceTypes(t, kube, s.pool)
		for i := range claims.Items {
			nc := &claims.Items[i]
			var node corev1.Node
			poll(t, "nodeclaim "+nc.Name+" initialized", func() (bool, error) {
				if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), nc); err != nil {
					return false, err
				}
				if nc.Status.Phase != v1alpha1.NodeClaimInitialized {
					return false, nil
				}
				return true, kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &node)
			})
			it, ok := types[nc.Status.InstanceType]
			if !ok {
				t.Fatalf("nodeclaim %s launched %s, which pool %s's catalog does not list", nc.Name, nc.Status.InstanceType, s.pool)
			}
			seen[nc.Status.InstanceType+"/"+nc.Status.CapacityType] = true
			// The node says what it is, as the pool's requirements read it.
			family, size, _ := strings.Cut(nc.Status.InstanceType, ".")
			l := node.Labels
			generation, _ := strconv.Atoi(l[v1alpha1.LabelInstanceGeneration])
			if l[v1alpha1.LabelInstanceFamily] != family || l[v1alpha1.LabelInstanceSize] != size || l[v1alpha1.LabelInstanceCPU] != node.Status.Capacity.Cpu().String() ||
				!slices.Contains([]string{"c", "m", "r"}, l[v1alpha1.LabelInstanceCategory]) || generation <= 4 || l[v1alpha1.LabelInstanceMemory] == "" {
				t.Errorf("nodeclaim %s, node %s (%s): instance labels family %q, size %q, cpu %q, category %q, generation %q, memory %q; want the type's, category c, m or r, generation above 4",
					nc.Name, node.Name, nc.Status.InstanceType, l[v1alpha1.LabelInstanceFamily], l[v1alpha1.LabelInstanceSize], l[v1alpha1.LabelInstanceCPU],
					l[v1alpha1.LabelInstanceCategory], l[v1alpha1.LabelInstanceGeneration], l[v1alpha1.LabelInstanceMemory])
			}
			judged := nodeshape.ForClaim(nc).Node(node.Name, &it, nc.Status.Zone, nc.Status.CapacityType)
			if diff := cmp.Diff(judged.Labels, node.Labels); diff != "" {
				t.Errorf("nodeclaim %s, node %s: labels differ from the node judged (-judged,+registered):\n%s", nc.Name, node.Name, diff)
			}
			if diff := cmp.Diff(judged.Spec.Taints, node.Spec.Taints); diff != "" {
				t.Errorf("nodeclaim %s, node %s: taints differ from the node judged (-judged,+registered):\n%s", nc.Name, node.Name, diff)
			}
			if !equality.Semantic.DeepEqual(judged.Status.Allocatable, node.Status.Allocatable) {
				t.Errorf("nodeclaim %s, node %s: allocatable %v, judged %v", nc.Name, node.Name, node.Status.Allocatable, judged.Status.Allocatable)
			}
			if !equality.Semantic.DeepEqual(judged.Status.Capacity, node.Status.Capacity) {
				t.Errorf("nodeclaim %s, node %s: capacity %v, judged %v", nc.Name, node.Name, node.Status.Capacity, judged.Status.Capacity)
			}
		}
	}
	if len(seen) < 3 {
		t.Errorf("only %d instance type/capacity type pairs launched (%v); the check wants several", len(seen), seen)
	}
}

// poolInstanceTypes are the instance types of a pool's published catalog,
// by name.
func poolInstanceTypes(t *testing.T, kube client.Client, pool string) map[string]v1alpha1.InstanceType {
	t.Helper()
	var cats v1alpha1.InstanceTypeCatalogList
	if err := kube.List(context.Background(), &cats, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		t.Fatal(err)
	}
	out := map[string]v1alpha1.InstanceType{}
	if cat := v1alpha1.ByPool(cats.Items)[pool]; cat != nil {
		for _, it := range cat.Spec.InstanceTypes {
			out[it.Name] = it
		}
	}
	return out
}
