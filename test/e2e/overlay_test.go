package e2e

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// familyPool creates an on-demand pool named name of the given families,
// whose nodes are labelled pool=<name>.
func familyPool(t *testing.T, kube client.Client, name string, families ...string) {
	t.Helper()
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{
			ObjectMeta: v1alpha1.NodeClaimTemplateObjectMeta{Labels: map[string]v1alpha1.LabelValue{"pool": v1alpha1.LabelValue(name)}},
			Spec: v1alpha1.NodeClaimTemplateSpec{
				NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
				Requirements: []v1alpha1.NodeSelectorRequirementWithMinValues{
					{Key: v1alpha1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: families},
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

// poolPod creates a pod that runs only on pool's nodes, requesting
// requests.
func poolPod(t *testing.T, cs kubernetes.Interface, pool string, requests corev1.ResourceList) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pool + "-0", Namespace: "default", Labels: map[string]string{"app": pool}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": pool},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: requests, Limits: requests}}},
		}}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeOverlaysChangeWhatIsLaunched applies the NodeOverlays the API
// guide shows, as they ship (manifests/examples/nodeoverlay.yaml), to one
// sandbox whose pools' catalogs are already published, and checks each
// once its overlay is Ready:
//   - halved price: in a pool of the c7 and m7 families, where c7.large
//     ($0.085/h) is the cheapest type for a small pod, the savings plan
//     halves m7.large's $0.1008/h; the catalog says $0.0504 and names the
//     overlay, and the pod's claim launches m7.large at that price.
//   - added FPGA: in a c7 pool, a pod requesting example.com/fpga, which
//     the provider lists on no type, launches a c7 node, whose simulated
//     device plugin reports the FPGA, and runs there.
func TestNodeOverlaysChangeWhatIsLaunched(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	// The pools' catalogs are published first, so that applying the
	// overlays is what publishes them again.
	familyPool(t, kube, "prices", "c7", "m7")
	familyPool(t, kube, "fpgas", "c7")
	for _, pool := range []string{"prices", "fpgas"} {
		poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	}
	raw, err := manifests.FS.ReadFile("examples/nodeoverlay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var overlays []*v1alpha1.NodeOverlay
	for {
		o := &v1alpha1.NodeOverlay{}
		if err := dec.Decode(o); err != nil {
			break
		}
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		overlays = append(overlays, o)
	}
	if len(overlays) != 2 {
		t.Fatalf("the example holds %d overlays, want the savings plan and the FPGA", len(overlays))
	}
	for _, o := range overlays {
		poll(t, "NodeOverlay "+o.Name+" Ready", func() (bool, error) {
			err := kube.Get(ctx, client.ObjectKeyFromObject(o), o)
			return err == nil && meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.ConditionReady) && o.Status.InstanceTypeCount > 0, err
		})
	}

	t.Run("halved price", func(t *testing.T) {
		t.Parallel()
		var prices map[string]string
		poll(t, "pool prices' catalog with the savings plan", func() (bool, error) {
			types, err := cluster.InstanceTypesOf(ctx, kube, "prices")
			prices = map[string]string{}
			for _, it := range types {
				if it.Name == "c7.large" || (it.Name == "m7.large" && strings.Join(it.Overlays, ",") == "m7-savings-plan") {
					prices[it.Name] = it.Offerings[0].Price
				}
			}
			return err == nil && len(prices) == 2, err
		})
		if prices["c7.large"] != "0.085" || prices["m7.large"] != "0.0504" {
			t.Fatalf("catalog prices %v, want c7.large at 0.085 and m7.large halved to 0.0504", prices)
		}
		poolPod(t, cs, "prices", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")})
		p := settled(t, cs, kube, "prices", 1)
		if len(p.claims) != 1 || p.claims[0].Status.InstanceType != "m7.large" || p.claims[0].Status.Price != "0.0504" {
			t.Fatalf("claims %v; want one m7.large launched at $0.0504/h", claimTypes(p.claims))
		}
	})

	t.Run("added FPGA", func(t *testing.T) {
		t.Parallel()
		poll(t, "pool fpgas' catalog with the FPGA", func() (bool, error) {
			types, err := cluster.InstanceTypesOf(ctx, kube, "fpgas")
			for _, it := range types {
				if q := it.Allocatable["example.com/fpga"]; it.Name == "c7.large" && q.Value() == 1 && slices.Contains(it.Overlays, "fpga-on-c7") {
					return true, nil
				}
			}
			return false, err
		})
		poolPod(t, cs, "fpgas", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
			"example.com/fpga": resource.MustParse("1")})
		p := settled(t, cs, kube, "fpgas", 1)
		if len(p.pending) != 0 || len(p.claims) != 1 || !strings.HasPrefix(p.claims[0].Status.InstanceType, "c7.") {
			t.Fatalf("%d pods pending, claims %v; want the pod Running on one c7 node", len(p.pending), claimTypes(p.claims))
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, p.claims[0].Status.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q := node.Status.Allocatable["example.com/fpga"]; q.Value() != 1 {
			t.Errorf("node %s reports example.com/fpga %s in allocatable, want 1", node.Name, q.String())
		}
	})
}
