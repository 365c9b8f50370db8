package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func offer(cpu int) cloudprovider.Offer {
	c := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(cpu), resource.DecimalSI)}
	return cloudprovider.Offer{InstanceType: v1alpha1.InstanceType{Name: fmt.Sprintf("c%d", cpu), Capacity: c, Allocatable: c}, Zone: "z", CapacityType: "on-demand", Price: float64(cpu)}
}

// capped is a claim of pool capped, its UID uid-<name>.
func capped(name string) *testobj.ClaimWrapper {
	return testobj.Claim(name).UID("uid-" + name).Pool("capped")
}

func names(offers []cloudprovider.Offer) []string {
	var out []string
	for _, o := range offers {
		out = append(out, o.InstanceType.Name)
	}
	return out
}

// TestReserveCountsInFlightLaunchesAtTheirLargestOffer: a launch that may
// fall back up to 4 cpu holds 4 cpu until it returns, then what it got.
func TestReserveCountsInFlightLaunchesAtTheirLargestOffer(t *testing.T) {
	ctx := context.Background()
	a, b := capped("a").Obj(), capped("b").Obj()
	kube := testobj.Client(a, b)
	l := NewLedger(kube, cloudfake.New())
	pool := testobj.Pool("capped").Limit("cpu", "6").Obj()

	got, err := l.Reserve(ctx, pool, a, []cloudprovider.Offer{offer(2), offer(4), offer(8)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names(got)) != "[c2 c4]" {
		t.Errorf("offers within a 6-cpu limit: %v, want [c2 c4]", names(got))
	}
	// While a is in flight at up to 4 cpu, b may take 2 at most.
	got, err = l.Reserve(ctx, pool, b, []cloudprovider.Offer{offer(2), offer(4)})
	if err != nil || fmt.Sprint(names(got)) != "[c2]" {
		t.Fatalf("second claim beside a 4-cpu reservation: %v, %v; want [c2]", names(got), err)
	}
	l.Release(b.UID)
	// a launched 2 cpu: b may now take 4.
	l.Launched(a.UID, &cloudprovider.Instance{ProviderID: "fake:///z/a", Capacity: offer(2).InstanceType.Capacity})
	got, err = l.Reserve(ctx, pool, b, []cloudprovider.Offer{offer(2), offer(4), offer(8)})
	if err != nil || fmt.Sprint(names(got)) != "[c2 c4]" {
		t.Fatalf("after a launched 2 cpu: %v, %v; want [c2 c4]", names(got), err)
	}
	used, err := l.Usage(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if used.Cpu().Value() != 6 {
		t.Errorf("usage %s cpu, want 6 (a launched 2 + b reserved 4)", used.Cpu())
	}
}

// TestReserveRefusesPastTheLimit: nothing fits, and the error says which
// limit and whether waiting could help.
func TestReserveRefusesPastTheLimit(t *testing.T) {
	ctx := context.Background()
	a, b := capped("a").Obj(), capped("b").Obj()
	l := NewLedger(testobj.Client(a, b), cloudfake.New())
	pool := testobj.Pool("capped").Limit("cpu", "4").Obj()
	if _, err := l.Reserve(ctx, pool, a, []cloudprovider.Offer{offer(4)}); err != nil {
		t.Fatal(err)
	}
	_, err := l.Reserve(ctx, pool, b, []cloudprovider.Offer{offer(2)})
	var exceeded *ExceededError
	if !errors.As(err, &exceeded) {
		t.Fatalf("second 2-cpu launch under a 4-cpu limit with 4 in flight: %v", err)
	}
	if want := "nodepool capped limits reached: cpu 4 in use or launching + 2 for c2 > limit 4"; exceeded.Error() != want || !exceeded.InFlight {
		t.Errorf("got %q inFlight=%v, want %q inFlight=true", exceeded.Error(), exceeded.InFlight, want)
	}
	l.Launched(a.UID, &cloudprovider.Instance{ProviderID: "fake:///z/a", Capacity: offer(4).InstanceType.Capacity})
	if _, err := l.Reserve(ctx, pool, b, []cloudprovider.Offer{offer(2)}); !errors.As(err, &exceeded) || exceeded.InFlight {
		t.Errorf("after a returned: %v, want a refusal with nothing in flight", err)
	}
}

// TestCacheCatchesUpWithoutDoubleCounting: once the cache shows the
// claim's providerID the reservation goes and the claim counts once.
func TestCacheCatchesUpWithoutDoubleCounting(t *testing.T) {
	ctx := context.Background()
	a := capped("a").Obj()
	kube := testobj.Client(a)
	l := NewLedger(kube, cloudfake.New())
	if _, err := l.Reserve(ctx, testobj.Pool("capped").Limit("cpu", "10").Obj(), a, []cloudprovider.Offer{offer(2), offer(4)}); err != nil {
		t.Fatal(err)
	}
	in := &cloudprovider.Instance{ProviderID: "fake:///z/a", Capacity: offer(2).InstanceType.Capacity}
	l.Launched(a.UID, in)
	a.Status.ProviderID, a.Status.Capacity = in.ProviderID, in.Capacity
	if err := kube.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	used, err := l.Usage(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if used.Cpu().Value() != 2 || len(l.reserved) != 0 {
		t.Errorf("usage %s cpu with %d reservations left, want 2 and none", used.Cpu(), len(l.reserved))
	}
	// The node registers reporting more than the catalog said: the larger
	// figure counts, once.
	node := testobj.Node("n").Label(v1alpha1.LabelNodePool, "capped").ProviderID(in.ProviderID).Capacity("cpu", "3").Obj()
	if err := kube.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	if used, _ = l.Usage(ctx, "capped"); used.Cpu().Value() != 3 {
		t.Errorf("usage with its node reporting 3 cpu: %s, want 3", used.Cpu())
	}
	// Two nodes of the pool that no claim names (no providerID): each counts.
	for _, name := range []string{"bare-1", "bare-2"} {
		bare := testobj.Node(name).Label(v1alpha1.LabelNodePool, "capped").Capacity("cpu", "1").Obj()
		if err := kube.Create(ctx, bare); err != nil {
			t.Fatal(err)
		}
	}
	if used, _ = l.Usage(ctx, "capped"); used.Cpu().Value() != 5 {
		t.Errorf("usage with two more 1-cpu nodes no claim names: %s, want 5", used.Cpu())
	}
}

// TestRestartCountsInstancesTheStatusDoesNotName: a provisioner that died
// between Create and the status write left an instance; the next process
// counts it before launching anything else.
func TestRestartCountsInstancesTheStatusDoesNotName(t *testing.T) {
	ctx := context.Background()
	a, b := capped("a").Obj(), capped("b").Obj()
	cloud := cloudfake.New()
	cloud.Add(&cloudprovider.Instance{ProviderID: "fake:///z/a", NodeClaim: "a", NodePool: "capped", Capacity: offer(4).InstanceType.Capacity})
	l := NewLedger(testobj.Client(a, b), cloud)
	_, err := l.Reserve(ctx, testobj.Pool("capped").Limit("cpu", "4").Obj(), b, []cloudprovider.Offer{offer(2)})
	var exceeded *ExceededError
	if !errors.As(err, &exceeded) {
		t.Errorf("a launch beside an unrecorded 4-cpu instance under a 4-cpu limit: %v", err)
	}
}

// TestConcurrentReservationsStayUnderTheLimit reserves from many
// goroutines at once: what is reserved never adds up past the limit.
func TestConcurrentReservationsStayUnderTheLimit(t *testing.T) {
	ctx := context.Background()
	var objs []client.Object
	var claims []*v1alpha1.NodeClaim
	for i := range 40 {
		c := capped(fmt.Sprintf("c%d", i)).Obj()
		claims = append(claims, c)
		objs = append(objs, c)
	}
	l := NewLedger(testobj.Client(objs...), cloudfake.New())
	pool := testobj.Pool("capped").Limit("cpu", "10").Obj()
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			_, _ = l.Reserve(ctx, pool, c, []cloudprovider.Offer{offer(1), offer(2), offer(3)})
		})
	}
	wg.Wait()
	used, err := l.Usage(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if used.Cpu().Value() > 10 || used.Cpu().Value() < 8 {
		t.Errorf("40 concurrent launches under a 10-cpu limit reserved %s cpu; want at most 10, and at least 8 (no offer of 3 left unused)", used.Cpu())
	}
}

// TestClaimsNotYetLaunchedCountTheirRequests: a claim the plugin made
// whose launch has not begun counts at least what its pods request, so a
// disruption's replacement planned beside it (Usage) and a launch beside
// it (Reserve) see the room it will take. Before, it counted nothing: the
// replacement passed, one of the two was refused at launch, and the
// disruption was planned again.
func TestClaimsNotYetLaunchedCountTheirRequests(t *testing.T) {
	ctx := context.Background()
	waiting := capped("waiting").Requests("cpu", "3").Obj()
	launched := capped("launched").ProviderID("fake:///z/launched").Obj()
	launched.Status.Capacity = offer(4).InstanceType.Capacity
	l := NewLedger(testobj.Client(waiting, launched), cloudfake.New())
	used, err := l.Usage(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if got := used.Cpu().String(); got != "7" {
		t.Errorf("usage with a launched 4-cpu claim and one waiting on 3 cpu of requests: %s cpu, want 7", got)
	}
	pool := testobj.Pool("capped").Limit("cpu", "8").Obj()
	if got, err := l.Reserve(ctx, pool, capped("replacement").Obj(), []cloudprovider.Offer{offer(2), offer(1)}); err != nil || fmt.Sprint(names(got)) != "[c1]" {
		t.Errorf("a replacement beside them under 8 cpu: %v, %v; want only [c1]", names(got), err)
	}
	// The waiting claim's own launch does not count it twice.
	l.Release("uid-replacement")
	if got, err := l.Reserve(ctx, pool, waiting, []cloudprovider.Offer{offer(4)}); err != nil || fmt.Sprint(names(got)) != "[c4]" {
		t.Errorf("the waiting claim's own launch: %v, %v; want [c4]", names(got), err)
	}
}
