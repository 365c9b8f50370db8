package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/provisioner/controllers/nodeclaim"
	"github.com/nodeforge/nodeforge/simulator"
)

// limitRounds is how many bursts TestLimitsAreAHardCeiling fires.
const limitRounds = 50

// TestLimitsAreAHardCeiling runs the provisioner's NodeClaim controller
// (four workers, as shipped) against the real API server and a cloud whose
// launches take a while, and fires bursts of claims from many goroutines at
// three limited pools. In half the rounds the two cheapest instance types
// have no capacity, so launches fall back to larger ones. A sampler reads
// the cloud's inventory all along: the capacity running per pool must
// never pass the pool's limit, and the limit must actually bind (some
// claims launched, some refused) in every round.
func TestLimitsAreAHardCeiling(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []v1alpha1.InstanceType{instanceType("l2", 2), instanceType("l4", 4), instanceType("l8", 8)}
	cloud := cloudfake.New(types...)
	cloud.CreateDelay = 20 * time.Millisecond
	limits := map[string]int64{"ceiling-a": 8, "ceiling-b": 12, "ceiling-c": 14}
	for name := range limits {
		createLimitedPool(t, name, limits[name], types)
	}
	startLifecycle(t, ctx, cloud)

	var mu sync.Mutex
	peak := map[string]int64{}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			running := map[string]int64{}
			instances, _ := cloud.List(ctx)
			for _, in := range instances {
				running[in.NodePool] += in.Capacity.Cpu().Value()
			}
			mu.Lock()
			for pool, cpu := range running {
				peak[pool] = max(peak[pool], cpu)
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()

	for round := range limitRounds {
		fallback := round%2 == 1
		cloud.SetCapacity("l2", !fallback)
		var wg sync.WaitGroup
		var names sync.Map
		for pool := range limits {
			for g := range 3 {
				wg.Go(func() {
					for i := range 3 {
						name := fmt.Sprintf("%s-r%d-g%d-%d", pool, round, g, i)
						if err := kube.Create(ctx, launchingClaim(name, pool, types)); err != nil {
							t.Errorf("creating nodeclaim %s: %v", name, err)
							return
						}
						names.Store(name, pool)
					}
				})
			}
		}
		wg.Wait()
		launched, refused := map[string]int{}, map[string]int{}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			clear(launched)
			clear(refused)
			settled := true
			names.Range(func(k, v any) bool {
				var nc v1alpha1.NodeClaim
				err := kube.Get(ctx, client.ObjectKey{Name: k.(string)}, &nc)
				switch {
				case apierrors.IsNotFound(err):
					refused[v.(string)]++
				case err != nil:
					settled = false
				case nc.Status.ProviderID != "":
					launched[v.(string)]++
				case nc.DeletionTimestamp != nil:
					refused[v.(string)]++
				default:
					settled = false
				}
				return true
			})
			return settled, nil
		}); err != nil {
			var left v1alpha1.NodeClaimList
			_ = kube.List(context.Background(), &left)
			states := map[string]int{}
			for _, nc := range left.Items {
				states[fmt.Sprintf("%s phase=%q launched=%v deleting=%v", nc.Spec.NodePool, nc.Status.Phase, nc.Status.ProviderID != "", nc.DeletionTimestamp != nil)]++
			}
			t.Fatalf("round %d: claims did not all launch or get refused: %v", round, states)
		}
		for pool := range limits {
			if launched[pool] == 0 || refused[pool] == 0 {
				t.Errorf("round %d: pool %s launched %d and refused %d claims; the limit should bind and leave room", round, pool, launched[pool], refused[pool])
			}
		}
		// Clear the round: deleting a claim terminates its instance.
		if err := kube.DeleteAllOf(ctx, &v1alpha1.NodeClaim{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var left v1alpha1.NodeClaimList
			if err := kube.List(ctx, &left); err != nil {
				return false, err
			}
			instances, err := cloud.List(ctx)
			return len(left.Items) == 0 && len(instances) == 0, err
		}); err != nil {
			t.Fatalf("round %d: claims or instances left after deleting every claim", round)
		}
	}
	cancel()
	<-sampled
	mu.Lock()
	defer mu.Unlock()
	for pool, limit := range limits {
		if peak[pool] > limit {
			t.Errorf("pool %s limited to %d cpu ran %d cpu at its peak", pool, limit, peak[pool])
		}
		t.Logf("pool %s: limit %d cpu, peak %d cpu over %d rounds", pool, limit, peak[pool], limitRounds)
	}
	t.Logf("%d instances launched in all", cloud.Creates())
}

// TestLostLaunchAnswerStillCounts: a launch whose answer is lost (the
// instance runs, Create returned an error) keeps counting against its
// pool's limit until the retry finds the instance, so a second claim
// launched meanwhile cannot take the pool past it.
func TestLostLaunchAnswerStillCounts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types := []v1alpha1.InstanceType{instanceType("l4", 4)}
	cloud := cloudfake.New(types...)
	cloud.LoseAnswers(1)
	createLimitedPool(t, "lost-answer", 4, types)
	startLifecycle(t, ctx, cloud)
	first := launchingClaim("lost-answer-first", "lost-answer", types)
	if err := kube.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), first) })
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cloud.Creates() == 1, nil
	}); err != nil {
		t.Fatal("the first claim's instance was never launched")
	}
	second := launchingClaim("lost-answer-second", "lost-answer", types)
	if err := kube.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), second) })
	// The retry (5s later) finds the first instance; the second claim is
	// then refused at the limit and deleted.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var nc v1alpha1.NodeClaim
		err := kube.Get(ctx, client.ObjectKeyFromObject(second), &nc)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal("the second claim was neither refused nor deleted")
	}
	instances, _ := cloud.List(ctx)
	if len(instances) != 1 {
		t.Errorf("%d instances under a 4-cpu limit of 4-cpu types, want 1", len(instances))
	}
	var nc v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKeyFromObject(first), &nc); err != nil || nc.Status.ProviderID != instances[0].ProviderID {
		t.Errorf("the first claim does not name the instance launched for it: %v, %q", err, nc.Status.ProviderID)
	}
}

func instanceType(name string, cpu int64) v1alpha1.InstanceType {
	c := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(cpu*4<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}
	return v1alpha1.InstanceType{Name: name, Capacity: c, Allocatable: c.DeepCopy(), Offerings: []v1alpha1.Offering{
		{Zone: "zone-a", CapacityType: v1alpha1.CapacityTypeOnDemand, Price: fmt.Sprintf("%.3f", 0.05*float64(cpu)), Available: true},
	}}
}

// createLimitedPool makes a pool capped at cpu, with its catalog, each
// edit applied to the pool first.
func createLimitedPool(t *testing.T, name string, cpu int64, types []v1alpha1.InstanceType, edits ...func(*v1alpha1.NodePool)) {
	t.Helper()
	ctx := context.Background()
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{
			NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
		}},
		Limits:     v1alpha1.Limits{corev1.ResourceCPU: *resource.NewQuantity(cpu, resource.DecimalSI)},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"},
	}}
	for _, edit := range edits {
		edit(np)
	}
	cat := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: name}}, Spec: v1alpha1.InstanceTypeCatalogSpec{
		NodePool: name, Provider: "fake", InstanceTypeCount: int32(len(types)), InstanceTypes: types,
	}}
	for _, o := range []client.Object{np, cat} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = kube.Delete(context.Background(), cat)
		_ = kube.Delete(context.Background(), np)
	})
}

// launchingClaim is a claim as the scheduler writes it, with the
// provisioner's finalizer already on; the closer moves it to Launching.
func launchingClaim(name, pool string, types []v1alpha1.InstanceType) *v1alpha1.NodeClaim {
	var typeNames []string
	for _, it := range types {
		typeNames = append(typeNames, it.Name)
	}
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.FinalizerTermination}},
		Spec: v1alpha1.NodeClaimSpec{
			NodePool: pool,
			Requirements: []v1alpha1.NodeSelectorRequirementWithMinValues{
				{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: typeNames},
				{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}},
				{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{string(v1alpha1.CapacityTypeOnDemand)}},
			},
			NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
		},
	}
}

// startLifecycle runs the NodeClaim controller in-process against the
// package's API server, with cloud behind it. Claims skip the batch
// window: a small controller moves every new claim to Launching, the
// status the provisioner writes when it closes a claim.
func startLifecycle(t *testing.T, ctx context.Context, cloud cloudprovider.CloudProvider, edits ...func(*nodeclaim.Options)) {
	t.Helper()
	mgr := newManager(t)
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	// An offering without capacity is skipped for a while, as in production
	// (3m there): a claim whose only offer under the limit has no capacity
	// then sees the larger ones, is refused at the limit and deleted,
	// instead of retrying the empty offering forever.
	unavailable := cloudprovider.NewUnavailableOfferings(500 * time.Millisecond)
	// Binds are judged by the scheduler's default profile.
	defaults, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.All()
	if err != nil {
		t.Fatal(err)
	}
	gate, err := simulator.NewGate(ctx, reg, cs, &defaults.Profiles[0], v1alpha1.TaintBinding)
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	opts := nodeclaim.Options{
		// The closer below closes claims; the batch window never does.
		BatchIdle: time.Hour, BatchMax: time.Hour, RegistrationTTL: time.Hour, LaunchTTL: time.Hour, InitializationTTL: time.Hour, Workers: 4,
		Gate: gate,
	}
	for _, edit := range edits {
		edit(&opts)
	}
	c := nodeclaim.NewController(mgr.GetClient(), cs, cloud, unavailable, mgr.GetEventRecorder("nodeforge-provisioner"), opts)
	if err := c.SetupWithManager(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("test.close").For(&v1alpha1.NodeClaim{}).Complete(closer{mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
}

// closer closes new claims at once, as the provisioner's batch window
// would after a second.
type closer struct{ kube client.Client }

func (c closer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var nc v1alpha1.NodeClaim
	if err := c.kube.Get(ctx, req.NamespacedName, &nc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if (nc.Status.Phase != "" && nc.Status.Phase != v1alpha1.NodeClaimNominating) || nc.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	nc.Status.Phase = v1alpha1.NodeClaimLaunching
	if err := c.kube.Status().Update(ctx, &nc); apierrors.IsConflict(err) {
		//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
		return ctrl.Result{Requeue: true}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// newManager is a controller manager on the package's API server, with
// the core and Nodeforge types, no metrics or health endpoints. Each test
// runs its own manager with the same controllers: their names repeat
// within this test process, which is fine here.
func newManager(t *testing.T) ctrl.Manager {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}
