package aws

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// BenchmarkLaunchBurst launches a burst of claims (2,000 unless
// -burst-claims says otherwise) through the provider and the real SDK into
// the fake EC2 region with EC2's request rate limits on (ec2fake's
// ratelimit.go), and reports requests by action, throttles met, and
// seconds until every claim's instance was launched (Create returned) and
// until each was found running by the Get registration makes. The SDK's retryer is the provisioner's
// (--aws-max-attempts=8, backoff capped at 20 s).
//
// The lifecycle controller is modelled by worker pools over one queue of
// steps: a launch (Create) then a registration (Get). A step that fails is
// queued again 5 s later for a launch and 10 s later for a registration,
// as the controller's RequeueAfter does. Two shapes:
//   - shared-4: four workers take both steps (--nodeclaim-workers=4 at
//     HEAD before launches had workers of their own);
//   - launch-64+4: 64 launch workers, four for the rest.
//
// All claims of the burst have the same options, as a deployment's pods
// nominated to claims of one pool do.
func BenchmarkLaunchBurst(b *testing.B) {
	for _, shape := range []struct {
		name          string
		launch, other int
	}{{"shared-4", 0, 4}, {"launch-64+4", 64, 4}} {
		b.Run(shape.name, func(b *testing.B) {
			for range b.N {
				runBurst(b, burstClaims(), shape.launch, shape.other)
			}
		})
	}
}

func burstClaims() int {
	if n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("NODEFORGE_BURST_CLAIMS"))); err == nil && n > 0 {
		return n
	}
	return 2000
}

func runBurst(b *testing.B, claims, launchWorkers, otherWorkers int) {
	b.Helper()
	ctx := context.Background()
	w := ec2fake.DefaultWorld()
	w.RequestRateLimits = true
	srv := ec2fake.New(w)
	url, stop, err := srv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	client := ec2.New(ec2.Options{
		Region: "us-west-2", BaseEndpoint: sdkaws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		HTTPClient:  sdkhttp.GuardClosedBodyRace(nil),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = DefaultMaxAttempts
			o.MaxBackoff = 20 * time.Second
		}),
	})
	kube := testobj.Client()
	prices, err := pricing.Shipped()
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(client, kube, prices, Options{Region: "us-west-2", ClusterName: "burst", ClusterEndpoint: "https://api.burst.example", KubernetesVersion: "1.37"})
	if err != nil {
		b.Fatal(err)
	}
	spec := v1alpha1.EC2NodeClassSpec{
		InstanceProfile:            "NodeforgeNodeInstanceProfile",
		SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
	}
	if err := kube.Create(ctx, &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "burst"}, Spec: spec}); err != nil {
		b.Fatal(err)
	}
	if _, err := NewNodeClassController(kube, p).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "burst"}}); err != nil {
		b.Fatal(err)
	}
	ref := v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "burst"}
	its, err := p.InstanceTypes(ctx, &v1alpha1.NodePool{Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: ref}}}})
	if err != nil {
		b.Fatal(err)
	}
	var offers []cloudprovider.Offer
	for _, it := range its {
		if it.Name != "m5.large" && it.Name != "m5.xlarge" {
			continue
		}
		for _, o := range it.Offerings {
			if string(o.CapacityType) == v1alpha1.CapacityTypeOnDemand {
				price, _ := strconv.ParseFloat(o.Price, 64)
				offers = append(offers, cloudprovider.Offer{InstanceType: it, Zone: o.Zone, CapacityType: string(o.CapacityType), Price: price})
			}
		}
	}
	slices.SortStableFunc(offers, func(a, b cloudprovider.Offer) int {
		if a.Price != b.Price {
			if a.Price < b.Price {
				return -1
			}
			return 1
		}
		return strings.Compare(a.InstanceType.Name+a.Zone, b.InstanceType.Name+b.Zone)
	})
	srv.LimitRequestRates(true) // the class's resolution is not the burst's
	before := map[string]int{}
	for _, r := range srv.Requests() {
		before[r.Action]++
	}

	type step struct {
		claim    int
		register bool
	}
	launches, others := make(chan step, 2*claims), make(chan step, 2*claims)
	if launchWorkers == 0 {
		launches = others
	}
	providerIDs := make([]string, claims)
	var done sync.WaitGroup
	done.Add(claims)
	var failedLaunches, failedGets atomic.Int64
	var lastLaunch atomic.Int64 // unix nanoseconds
	launch := func(i int) cloudprovider.Launch {
		name := fmt.Sprintf("burst-%05d", i)
		return cloudprovider.Launch{
			NodeClaim: name, ClaimUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), NodePool: "apps",
			Template:  nodeshape.Template{Labels: map[string]string{v1alpha1.LabelNodePool: "apps"}},
			NodeClass: ref, Offers: offers,
		}
	}
	work := func(s step) {
		if !s.register {
			in, err := p.Create(ctx, launch(s.claim))
			if err != nil {
				failedLaunches.Add(1)
				time.AfterFunc(5*time.Second, func() { launches <- s })
				return
			}
			providerIDs[s.claim] = in.ProviderID
			lastLaunch.Store(time.Now().UnixNano())
			others <- step{claim: s.claim, register: true}
			return
		}
		if _, err := p.Get(ctx, providerIDs[s.claim]); err != nil {
			failedGets.Add(1)
			time.AfterFunc(10*time.Second, func() { others <- s })
			return
		}
		done.Done()
	}
	start := time.Now()
	for i := range claims {
		launches <- step{claim: i}
	}
	for range launchWorkers {
		go func() {
			for s := range launches {
				work(s)
			}
		}()
	}
	for range otherWorkers {
		go func() {
			for s := range others {
				work(s)
			}
		}()
	}
	done.Wait()
	elapsed := time.Since(start)
	// Every claim is done, so no step is queued or waiting to be.
	close(others)
	if launchWorkers > 0 {
		close(launches)
	}

	// One instance a claim, each launched for its claim by its tags: its
	// own, or its claim's among those of a fleet of several.
	byID := map[string]ec2fake.Instance{}
	for _, in := range srv.Instances() {
		if in.State == "running" || in.State == "pending" {
			byID[in.ID] = in
		}
	}
	if len(byID) != claims {
		b.Errorf("%d instances live after the burst, want %d (one a claim)", len(byID), claims)
	}
	taken := map[string]bool{}
	for i, pid := range providerIDs {
		id := pid[strings.LastIndex(pid, "/")+1:]
		in, name := byID[id], fmt.Sprintf("burst-%05d", i)
		if taken[id] || in.Tags["nodeforge.dev/nodeclaim"] != name && in.Tags["nodeforge.dev/claim-"+launch(i).ClaimUID] != name {
			b.Errorf("claim %s got instance %s (taken twice: %t), tagged %v", name, pid, taken[id], in.Tags)
		}
		taken[id] = true
	}
	after := map[string]int{}
	for _, r := range srv.Requests() {
		after[r.Action]++
	}
	var byAction []string
	for _, a := range slices.Sorted(maps.Keys(after)) {
		if n := after[a] - before[a]; n > 0 {
			byAction = append(byAction, fmt.Sprintf("%s=%d", a, n))
		}
	}
	throttled := srv.Throttled()
	var throttles []string
	total := 0
	for _, a := range slices.Sorted(maps.Keys(throttled)) {
		throttles = append(throttles, fmt.Sprintf("%s=%d", a, throttled[a]))
		total += throttled[a]
	}
	launched := time.Unix(0, lastLaunch.Load()).Sub(start)
	b.Logf("%d claims, workers launch=%d other=%d: %.1f s to all launched, %.1f s to all running; requests %s; throttled %d (%s); launch errors %d, Get errors %d",
		claims, launchWorkers, otherWorkers, launched.Seconds(), elapsed.Seconds(), strings.Join(byAction, " "), total, strings.Join(throttles, " "), failedLaunches.Load(), failedGets.Load())
	b.ReportMetric(launched.Seconds(), "s-to-launched")
	b.ReportMetric(elapsed.Seconds(), "s-to-running")
	b.ReportMetric(float64(after["CreateFleet"]-before["CreateFleet"]), "CreateFleet")
	b.ReportMetric(float64(after["DescribeInstances"]-before["DescribeInstances"]), "DescribeInstances")
	b.ReportMetric(float64(total), "throttled")
}
