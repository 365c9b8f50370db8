package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// batchEnv is a fake EC2 region, an API server holding one resolved
// class, and providers for cluster "batch" made on it.
type batchEnv struct {
	ec2  *ec2fake.Server
	url  string
	kube client.Client
	ref  v1alpha1.NodeClassReference
}

func newBatchEnv(t *testing.T) *batchEnv {
	t.Helper()
	e := &batchEnv{ec2: ec2fake.New(ec2fake.DefaultWorld())}
	var stop func()
	var err error
	if e.url, stop, err = e.ec2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	e.kube = testobj.Client()
	if err := e.kube.Create(context.Background(), &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: classSpec("", "NodeforgeNodeInstanceProfile")}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewNodeClassController(e.kube, e.provider(t)).Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "batch"}}); err != nil {
		t.Fatal(err)
	}
	e.ref = v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "batch"}
	return e
}

// provider is a new provider, as after a restart, whose batches wait for
// ever until full: the tests say how many calls make one.
func (e *batchEnv) provider(t *testing.T) *Provider {
	t.Helper()
	prices, err := pricing.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	c := ec2.New(ec2.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(e.url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		HTTPClient:  sdkhttp.GuardClosedBodyRace(nil), Retryer: testRetryer()})
	p, err := New(c, e.kube, prices, Options{Region: "us-west-2", ClusterName: "batch", ClusterEndpoint: "https://api.batch.example", KubernetesVersion: "1.37"})
	if err != nil {
		t.Fatal(err)
	}
	p.gets.window, p.terminations.window, p.fleets.window = time.Hour, time.Hour, time.Hour
	return p
}

// offers are the on-demand offers of m5.large, cheapest first.
func (e *batchEnv) offers(t *testing.T, p *Provider) []cloudprovider.Offer {
	t.Helper()
	its, err := p.InstanceTypes(context.Background(), &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: e.ref}}}})
	if err != nil {
		t.Fatal(err)
	}
	var out []cloudprovider.Offer
	for _, it := range its {
		for _, o := range it.Offerings {
			if it.Name == "m5.large" && string(o.CapacityType) == v1alpha1.CapacityTypeOnDemand {
				price, _ := strconv.ParseFloat(o.Price, 64)
				out = append(out, cloudprovider.Offer{InstanceType: it, Zone: o.Zone, CapacityType: string(o.CapacityType), Price: price})
			}
		}
	}
	return out
}

func (e *batchEnv) launch(i int, offers []cloudprovider.Offer) cloudprovider.Launch {
	return cloudprovider.Launch{
		NodeClaim: fmt.Sprintf("claim-%d", i), ClaimUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), NodePool: "apps",
		Template:  nodeshape.Template{Labels: map[string]string{v1alpha1.LabelNodePool: "apps"}},
		NodeClass: e.ref, Offers: offers,
	}
}

// each runs f for 0..n-1 at once and waits for all.
func each(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}

func TestGetsAndDeletesArriveAsOneRequest(t *testing.T) {
	ctx := context.Background()
	e := newBatchEnv(t)
	p := e.provider(t)
	var ids []string
	for range 5 {
		ids = append(ids, e.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", Tags: map[string]string{TagCluster: "batch", TagNodeClaim: "x"}}).ID)
	}
	gone := e.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01", State: "terminated"}).ID
	unknown := "i-0123456789abcdef0"
	asked := append(slices.Clone(ids), gone, unknown)

	t.Run("each Get has its own answer, from one DescribeInstances while every instance is known", func(t *testing.T) {
		p.gets.max = len(ids)
		before := e.ec2.Calls("DescribeInstances")
		got := make([]*cloudprovider.Instance, len(ids))
		errs := make([]error, len(ids))
		each(len(ids), func(i int) { got[i], errs[i] = p.Get(ctx, "aws:///us-west-2a/"+ids[i]) })
		for i, id := range ids {
			if errs[i] != nil || got[i] == nil || got[i].ProviderID != "aws:///us-west-2a/"+id || got[i].Labels == nil {
				t.Errorf("Get %s = %+v, %v; want the instance, with its type's labels", id, got[i], errs[i])
			}
		}
		if n := e.ec2.Calls("DescribeInstances") - before; n != 1 {
			t.Errorf("%d DescribeInstances for %d Gets, want 1", n, len(ids))
		}
	})

	t.Run("one instance EC2 does not know fails the request by ID; asked again by filter, the others are found and it is not", func(t *testing.T) {
		p.gets.max = len(asked)
		before := e.ec2.Calls("DescribeInstances")
		errs := make([]error, len(asked))
		each(len(asked), func(i int) { _, errs[i] = p.Get(ctx, "aws:///us-west-2a/"+asked[i]) })
		for i, id := range asked {
			wantGone := id == gone || id == unknown
			if gotGone := errors.Is(errs[i], cloudprovider.ErrNotFound); gotGone != wantGone || !wantGone && errs[i] != nil {
				t.Errorf("Get %s: %v; want not found: %t", id, errs[i], wantGone)
			}
		}
		if n := e.ec2.Calls("DescribeInstances") - before; n != 2 {
			t.Errorf("%d DescribeInstances, want 2: by ID, refused, then by filter", n)
		}
	})

	t.Run("Deletes: one TerminateInstances; then each is terminating, and once terminated not found", func(t *testing.T) {
		p.gets.max, p.terminations.max = len(ids), len(ids)
		before := e.ec2.Calls("TerminateInstances")
		errs := make([]error, len(ids))
		each(len(ids), func(i int) { errs[i] = p.Delete(ctx, "aws:///us-west-2a/"+ids[i]) })
		for i, err := range errs {
			if err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
				t.Errorf("Delete %s: %v", ids[i], err)
			}
		}
		if n := e.ec2.Calls("TerminateInstances") - before; n != 1 {
			t.Errorf("%d TerminateInstances for %d Deletes, want 1", n, len(ids))
		}
		for _, in := range e.ec2.Instances() {
			if slices.Contains(ids, in.ID) && in.State != "shutting-down" && in.State != "terminated" {
				t.Errorf("instance %s is %s after Delete", in.ID, in.State)
			}
		}
	})

	t.Run("a batch of terminations with one instance EC2 does not know: each sent alone, each its own answer", func(t *testing.T) {
		live := e.ec2.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: "subnet-0c1a4f3e2d5b60a01"}).ID
		got := p.terminateIDs(ctx, []string{live, unknown})
		if r := got[live]; r.err != nil {
			t.Errorf("known instance: %v", r.err)
		}
		if r := got[unknown]; !errors.Is(r.err, cloudprovider.ErrNotFound) {
			t.Errorf("unknown instance: %v, want not found", r.err)
		}
	})
}

// TestClaimsWithTheSameOptionsShareAFleet launches five claims with the
// same options at once: one CreateFleet of five, one instance a claim.
// A provider started again (a crash before the claims' statuses were
// written) finds each claim's instance and launches nothing.
func TestClaimsWithTheSameOptionsShareAFleet(t *testing.T) {
	ctx := context.Background()
	e := newBatchEnv(t)
	p := e.provider(t)
	offers := e.offers(t, p)
	const n = 5
	p.fleets.max = n
	before := e.ec2.Calls("CreateFleet")
	got := make([]*cloudprovider.Instance, n)
	errs := make([]error, n)
	each(n, func(i int) { got[i], errs[i] = p.Create(ctx, e.launch(i, offers)) })
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if seen[got[i].ProviderID] || got[i].NodeClaim != e.launch(i, nil).NodeClaim {
			t.Errorf("claim %d got %s for %q (given before: %t)", i, got[i].ProviderID, got[i].NodeClaim, seen[got[i].ProviderID])
		}
		seen[got[i].ProviderID] = true
	}
	if c := e.ec2.Calls("CreateFleet") - before; c != 1 {
		t.Fatalf("%d CreateFleet for %d claims, want 1", c, n)
	}
	req := e.ec2.Requests()
	var fleet ec2fake.Request
	for _, r := range req {
		if r.Action == "CreateFleet" {
			fleet = r
		}
	}
	if v := fleet.Form.Get("TargetCapacitySpecification.TotalTargetCapacity"); v != strconv.Itoa(n) {
		t.Errorf("TotalTargetCapacity %s, want %d", v, n)
	}

	t.Run("each instance names every claim of the fleet, and Get says it may serve each", func(t *testing.T) {
		p.gets.max = 1
		for i := range n {
			in, err := p.Get(ctx, got[i].ProviderID)
			if err != nil {
				t.Fatal(err)
			}
			for j := range n {
				if !in.LaunchedFor(e.launch(j, nil).NodeClaim) {
					t.Errorf("instance %s does not name claim %d: %v", in.ProviderID, j, in.NodeClaims)
				}
			}
			if in.LaunchedFor("claim-99") {
				t.Errorf("instance %s names a claim not of its fleet", in.ProviderID)
			}
		}
	})

	t.Run("a provider started again gives each claim the instance it had, and launches none", func(t *testing.T) {
		again := e.provider(t)
		again.fleets.max = n
		before := e.ec2.Calls("CreateFleet")
		for i := range n {
			in, err := again.Create(ctx, e.launch(i, offers))
			if err != nil {
				t.Fatal(err)
			}
			if in.ProviderID != got[i].ProviderID {
				t.Errorf("claim %d: %s after the restart, %s before", i, in.ProviderID, got[i].ProviderID)
			}
		}
		if c := e.ec2.Calls("CreateFleet") - before; c != 0 {
			t.Errorf("%d CreateFleet after the restart, want 0", c)
		}
	})

	t.Run("the pairing holds when an instance of the fleet is terminated", func(t *testing.T) {
		p.gets.max, p.terminations.max = 1, 1
		if err := p.Delete(ctx, got[0].ProviderID); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			t.Fatal(err)
		}
		again := e.provider(t)
		for i := 1; i < n; i++ {
			in, err := again.launchedFor(ctx, e.launch(i, nil).ClaimUID)
			if err != nil || in == nil || in.ProviderID != got[i].ProviderID {
				t.Errorf("claim %d: %+v, %v; want %s", i, in, err, got[i].ProviderID)
			}
		}
		if in, err := again.launchedFor(ctx, e.launch(0, nil).ClaimUID); err != nil || in != nil {
			t.Errorf("claim 0, whose instance is terminated: %+v, %v; want none", in, err)
		}
	})
}

// TestABatchGoesWhenTheOneInFlightReturns: with no window, a call is sent
// at once when nothing is in flight; calls made meanwhile wait and go
// together when it returns; each caller gets its own answer.
func TestABatchGoesWhenTheOneInFlightReturns(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sent [][]int
	b := &batcher[int, int]{max: 100, do: func(_ context.Context, keys []int) map[int]result[int] {
		mu.Lock()
		sent = append(sent, slices.Clone(keys))
		first := len(sent) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := map[int]result[int]{}
		for _, k := range keys {
			out[k] = result[int]{v: k * 10}
		}
		return out
	}}
	ctx := context.Background()
	answers := make([]int, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); answers[0], _ = b.call(ctx, 0) }()
	// Wait until the first call is in flight, then make three more.
	for {
		b.mu.Lock()
		inflight := b.inflight
		b.mu.Unlock()
		if inflight == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i], _ = b.call(ctx, i) }()
	}
	for {
		b.mu.Lock()
		waiting := b.pending != nil && len(b.pending.keys) == 3
		b.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if len(sent) != 2 || !slices.Equal(sent[0], []int{0}) || len(sent[1]) != 3 {
		t.Errorf("batches sent %v, want [0] then the three calls made while it was in flight", sent)
	}
	if !slices.Equal(answers, []int{0, 10, 20, 30}) {
		t.Errorf("answers %v, want each caller's own", answers)
	}
}
