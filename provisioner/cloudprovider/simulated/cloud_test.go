package simulated

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func testCloud(t *testing.T, kube client.WithWatch, faults ...v1alpha1.SimulatedFault) (*Cloud, cloudprovider.Launch) {
	t.Helper()
	if kube == nil {
		class := &v1alpha1.SimulatedNodeClass{}
		class.Name = "default"
		class.Spec.Faults = faults
		kube = testobj.Client(class)
	}
	cat, err := NewCatalog("")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCloud(cat, kube, kube, "nodeforge")
	var offers []cloudprovider.Offer
	for _, it := range cat.types[:3] {
		offers = append(offers, cloudprovider.Offer{InstanceType: it, Zone: "zone-a", CapacityType: "spot", Price: 1})
	}
	return c, cloudprovider.Launch{NodeClaim: "c", ClaimUID: "uid-1", NodePool: "default", Template: nodeshape.Template{Labels: map[string]string{v1alpha1.LabelNodePool: "default"}},
		NodeClass: v1alpha1.NodeClassReference{Name: "default"}, Offers: offers}
}

// TestCreateIsIdempotentAcrossRestarts launches for a claim, "restarts" the
// provider (a new Cloud over the same cluster), and launches again: one
// instance.
func TestCreateIsIdempotentAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	first, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	restarted, _ := testCloud(t, c.kube.(client.WithWatch))
	second, err := restarted.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := restarted.List(ctx)
	if second.ProviderID != first.ProviderID || len(all) != 1 {
		t.Fatalf("second Create launched %s (first %s), %d instances", second.ProviderID, first.ProviderID, len(all))
	}
	if err := restarted.Delete(ctx, first.ProviderID); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Delete(ctx, first.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
}

// TestCapacityFaultsFallThrough refuses the cheapest offer and checks the
// next launches and the refused one is reported; all refused is a typed error.
func TestCapacityFaultsFallThrough(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil,
		v1alpha1.SimulatedFault{Kind: v1alpha1.FaultInsufficientCapacity, InstanceTypes: []string{"c7.12xlarge"}})
	if l.Offers[0].InstanceType.Name != "c7.12xlarge" {
		t.Fatalf("catalog order changed: first offer %s", l.Offers[0].InstanceType.Name)
	}
	in, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if in.InstanceType != l.Offers[1].InstanceType.Name || len(in.Refused) != 1 || in.Refused[0].InstanceType.Name != "c7.12xlarge" {
		t.Fatalf("launched %s, refused %v", in.InstanceType, in.Refused)
	}
	c2, l2 := testCloud(t, nil, v1alpha1.SimulatedFault{Kind: v1alpha1.FaultInsufficientCapacity, Zones: []string{"zone-a"}})
	if _, err := c2.Create(ctx, l2); !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("every offer refused: got %v, want an InsufficientCapacityError", err)
	}
}

// TestRegistersEachBootedInstanceOnce registers a booted instance's Node,
// with the launch's labels and the instance's provider ID, exactly once;
// an instance that never registers stays unregistered, and a terminated
// one leaves the inventory every replica reads.
func TestRegistersEachBootedInstanceOnce(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	l.Template.Labels["team"] = "a"
	in, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var nodes corev1.NodeList
	if err := c.kube.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Spec.ProviderID != in.ProviderID || nodes.Items[0].Labels["team"] != "a" {
		t.Fatalf("registered nodes %+v, want one with providerID %s and label team=a", nodes.Items, in.ProviderID)
	}
	var pending corev1.ConfigMapList
	if err := c.kube.List(ctx, &pending, client.MatchingLabels{labelRegistered: "false"}); err != nil || len(pending.Items) != 0 {
		t.Fatalf("instances still waiting to register: %d (err %v)", len(pending.Items), err)
	}
	if err := c.Delete(ctx, in.ProviderID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, in.ProviderID); !errors.Is(err, cloudprovider.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	inv, err := Inventory(ctx, c.api, "nodeforge")
	if err != nil || len(inv) != 0 {
		t.Fatalf("inventory after Delete: %v (err %v)", inv, err)
	}
	if _, err := c.Get(ctx, "aws:///zone-a/i-1"); !errors.Is(err, cloudprovider.ErrNotFound) {
		t.Fatalf("Get of a foreign provider ID: %v, want ErrNotFound", err)
	}
}

// TestInventoryReadWhenAnInstanceIsDue: a launch asks Run to read the
// inventory when its instance boots, a read before then registers
// nothing and names that time as the next, and once it has registered
// nothing more is due (Run then reads only every inventoryReread).
func TestInventoryReadWhenAnInstanceIsDue(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	class := &v1alpha1.SimulatedNodeClass{}
	if err := c.kube.Get(ctx, client.ObjectKey{Name: "default"}, class); err != nil {
		t.Fatal(err)
	}
	class.Spec.RegistrationDelay = &metav1.Duration{Duration: time.Minute}
	if err := c.kube.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	if _, err := c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	if want := now.Add(time.Minute); !c.due.Equal(want) {
		t.Fatalf("after the launch Run is due at %v, want %v (its boot)", c.due, want)
	}
	next, err := c.register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := c.kube.List(ctx, &nodes); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("registered %d nodes before the boot (err %v)", len(nodes.Items), err)
	}
	if want := now.Add(time.Minute); !next.Equal(want) {
		t.Fatalf("read before the boot names %v as next, want %v", next, want)
	}
	now = now.Add(time.Minute)
	if next, err = c.register(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.kube.List(ctx, &nodes); err != nil || len(nodes.Items) != 1 {
		t.Fatalf("registered %d nodes at the boot, want 1 (err %v)", len(nodes.Items), err)
	}
	if want := now.Add(defaultCloudControllerDelay); !next.Equal(want) {
		t.Fatalf("after the only instance registered, next read is due at %v, want %v (the cloud controller manager's)", next, want)
	}
	now = now.Add(defaultCloudControllerDelay)
	if next, err = c.register(ctx); err != nil {
		t.Fatal(err)
	}
	if !next.IsZero() {
		t.Fatalf("after the only node was initialised, next read is due at %v, want none", next)
	}
}

// TestNodeRegistersUninitialisedUntilTheCloudControllerDelay: a node
// registers with the cloud provider's uninitialised taint beside the
// launch's own, which is lifted once the node class's
// cloudControllerDelay has passed since it registered (1s unset; counted
// from the registration, here 10s late, as after a provisioner restart),
// leaving the others; with a delay of zero the node registers without it.
func TestNodeRegistersUninitialisedUntilTheCloudControllerDelay(t *testing.T) {
	binding := corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name  string
		delay *metav1.Duration
		lift  time.Duration // 0: never tainted
	}{
		{"unset", nil, defaultCloudControllerDelay},
		{"three seconds", &metav1.Duration{Duration: 3 * time.Second}, 3 * time.Second},
		{"zero", &metav1.Duration{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, l := testCloud(t, nil)
			l.Template.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
			class := &v1alpha1.SimulatedNodeClass{}
			if err := c.kube.Get(ctx, client.ObjectKey{Name: "default"}, class); err != nil {
				t.Fatal(err)
			}
			class.Spec.CloudControllerDelay = tc.delay
			if err := c.kube.Update(ctx, class); err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			c.now = func() time.Time { return now }
			in, err := c.Create(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(10 * time.Second)
			taints := func() []string {
				t.Helper()
				if _, err := c.register(ctx); err != nil {
					t.Fatal(err)
				}
				var node corev1.Node
				name, _ := objectName(in.ProviderID)
				if err := c.kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
					t.Fatal(err)
				}
				var keys []string
				for _, t := range node.Spec.Taints {
					keys = append(keys, t.Key+":"+string(t.Effect))
				}
				return keys
			}
			kept := []string{"dedicated:NoSchedule", binding.Key + ":NoSchedule"}
			uninitialized := append(slices.Clone(kept), "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule")
			if tc.lift == 0 {
				if got := taints(); !slices.Equal(got, kept) {
					t.Fatalf("node registered with taints %v, want %v", got, kept)
				}
				return
			}
			if got := taints(); !slices.Equal(got, uninitialized) {
				t.Fatalf("node registered with taints %v, want %v", got, uninitialized)
			}
			now = now.Add(tc.lift - time.Millisecond)
			if got := taints(); !slices.Equal(got, uninitialized) {
				t.Fatalf("just before the delay the node has taints %v, want %v", got, uninitialized)
			}
			now = now.Add(time.Millisecond)
			if got := taints(); !slices.Equal(got, kept) {
				t.Fatalf("after the delay the node has taints %v, want %v", got, kept)
			}
		})
	}
}

// laggingCache is a client whose reads of nodes come from a cache that
// has not seen them yet (NotFound), as the manager's cache is behind a
// node just created while its watches start again after the API server
// restarted; everything else is the underlying client's.
type laggingCache struct{ client.WithWatch }

func (l laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Node); ok {
		return apierrors.NewNotFound(corev1.Resource("nodes"), key.Name)
	}
	return l.WithWatch.Get(ctx, key, obj, opts...)
}

// TestACacheBehindTheNodeDoesNotLeaveItUninitialised: when the cache has
// not seen a registered node by the time the cloud controller's delay has
// passed, the taint is still lifted (the API server says the node is
// there), and the instance is not marked initialised while its node keeps
// the taint.
func TestACacheBehindTheNodeDoesNotLeaveItUninitialised(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	api := c.kube.(client.WithWatch)
	c.kube = laggingCache{api}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	in, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := objectName(in.ProviderID)
	for _, step := range []time.Duration{10 * time.Second, defaultCloudControllerDelay} {
		now = now.Add(step)
		if _, err := c.register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var node corev1.Node
	if err := api.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		t.Fatal(err)
	}
	for _, taint := range node.Spec.Taints {
		if isUninitialized(taint) {
			t.Errorf("node %s keeps %s after the cloud controller's delay, its cache being behind", name, taint.Key)
		}
	}
	var cm corev1.ConfigMap
	if err := api.Get(ctx, client.ObjectKey{Namespace: "nodeforge", Name: name}, &cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Labels[labelCloudController]; got != "initialized" {
		t.Errorf("instance's cloud controller label = %q, want initialized", got)
	}
}

// TestADRAGPUNodePublishesItsSlice: a type of a family whose GPUs the
// NVIDIA DRA driver offers has no nvidia.com/gpu but a template of the
// driver's slice, and its node, once registered, publishes that slice on
// itself (in a pool named after it, owned by it), each GPU with the
// attributes of the template and those a real node adds (uuid, driver
// version, PCI bus ID).
func TestADRAGPUNodePublishesItsSlice(t *testing.T) {
	ctx := context.Background()
	c, l := testCloud(t, nil)
	var p5 *v1alpha1.InstanceType
	for i := range c.types {
		if c.types[i].Name == "p5.4xlarge" {
			p5 = &c.types[i]
		}
	}
	if p5 == nil {
		t.Fatal("the built-in catalog has no p5.4xlarge")
	}
	if _, ok := p5.Capacity[ResourceGPU]; ok {
		t.Errorf("p5.4xlarge offers %s beside its DRA devices: the GPUs would count twice", ResourceGPU)
	}
	if len(p5.ResourceSlices) != 1 || p5.ResourceSlices[0].Driver != "gpu.nvidia.com" || len(p5.ResourceSlices[0].Devices) != 2 {
		t.Fatalf("p5.4xlarge slice templates %+v, want one of gpu.nvidia.com with 2 GPUs", p5.ResourceSlices)
	}
	l.Offers = []cloudprovider.Offer{{InstanceType: *p5, Zone: "zone-a", CapacityType: "on-demand", Price: 1}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	in, err := c.Create(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	if _, err := c.register(ctx); err != nil {
		t.Fatal(err)
	}
	name, _ := objectName(in.ProviderID)
	var slices resourcev1.ResourceSliceList
	if err := c.kube.List(ctx, &slices); err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 {
		t.Fatalf("%d ResourceSlices after registering %s, want 1", len(slices.Items), name)
	}
	s := slices.Items[0]
	if s.Spec.Driver != "gpu.nvidia.com" || ptr.Deref(s.Spec.NodeName, "") != name || s.Spec.Pool.Name != name || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Name != name {
		t.Errorf("slice %s: driver %s, node %v, pool %s, owners %v; want gpu.nvidia.com on %s, in pool %s, owned by it", s.Name, s.Spec.Driver, s.Spec.NodeName, s.Spec.Pool.Name, s.OwnerReferences, name, name)
	}
	for _, d := range s.Spec.Devices {
		for _, attr := range []resourcev1.QualifiedName{"productName", "uuid", "driverVersion", "resource.kubernetes.io/pciBusID"} {
			if _, ok := d.Attributes[attr]; !ok {
				t.Errorf("device %s lacks %s: %v", d.Name, attr, d.Attributes)
			}
		}
		if m := d.Capacity["memory"].Value; m.Cmp(resource.MustParse("81152Mi")) != 0 {
			t.Errorf("device %s memory %s, want the 81152Mi NVML reports of an H100 80GB HBM3", d.Name, m.String())
		}
	}
}
