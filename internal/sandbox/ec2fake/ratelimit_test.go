package ec2fake_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// bucketClock is a settable clock for the fake's token buckets.
type bucketClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *bucketClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *bucketClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// limited starts a fake with the request rate limits on, on a clock that
// moves only when the test moves it, and a client that never retries.
func limited(t *testing.T) (*ec2fake.Server, *ec2.Client, *bucketClock) {
	t.Helper()
	clk := &bucketClock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	w := world
	w.Now = clk.now
	w.RequestRateLimits = true
	s, _, url := start(t, w)
	return s, newClient(url, sdkaws.NopRetryer{}), clk
}

// calls makes n calls and returns how many EC2 throttled; any other error
// fails the test.
func calls(t *testing.T, n int, call func() error) int {
	t.Helper()
	throttled := 0
	for range n {
		err := call()
		if err == nil {
			continue
		}
		var re *awshttp.ResponseError
		if errorCode(err) != "RequestLimitExceeded" || !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusServiceUnavailable {
			t.Fatalf("call: %v; want success or 503 RequestLimitExceeded", err)
		}
		throttled++
	}
	return throttled
}

func TestRequestRateLimits(t *testing.T) {
	filtered := func(c *ec2.Client) func() error {
		return func() error {
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("instance-state-name", "running")}})
			return err
		}
	}
	tag := func(c *ec2.Client, id string) func() error {
		return func() error {
			_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: sdkaws.String("k"), Value: sdkaws.String("v")}}})
			return err
		}
	}

	t.Run("off unless asked for: 300 calls in one instant all answered", func(t *testing.T) {
		_, c, _ := start(t, world)
		if n := calls(t, 300, filtered(c)); n != 0 {
			t.Errorf("%d calls throttled, want none", n)
		}
	})

	t.Run("a non-mutating API: a bucket of 100, refilled at 20 a second", func(t *testing.T) {
		s, c, clk := limited(t)
		if n := calls(t, 110, filtered(c)); n != 10 {
			t.Errorf("%d of 110 calls in one instant throttled, want 10", n)
		}
		clk.add(time.Second)
		if n := calls(t, 25, filtered(c)); n != 5 {
			t.Errorf("%d of 25 calls a second later throttled, want 5", n)
		}
		if got := s.Throttled()["DescribeInstances"]; got != 15 {
			t.Errorf("Throttled counts %d DescribeInstances, want 15", got)
		}
	})

	t.Run("the same API unfiltered and unpaginated: a bucket of 50, refilled at 10 a second", func(t *testing.T) {
		_, c, clk := limited(t)
		all := func() error { _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); return err }
		if n := calls(t, 60, all); n != 10 {
			t.Errorf("%d of 60 unfiltered calls throttled, want 10", n)
		}
		clk.add(time.Second)
		if n := calls(t, 15, all); n != 5 {
			t.Errorf("%d of 15 unfiltered calls a second later throttled, want 5", n)
		}
		if n := calls(t, 100, filtered(c)); n != 0 {
			t.Errorf("filtered calls throttled %d times by the unfiltered bucket, want 0", n)
		}
	})

	t.Run("a mutating API: a bucket of 50, refilled at 5 a second; each API has its own", func(t *testing.T) {
		s, c, clk := limited(t)
		in := s.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: subnetA})
		if n := calls(t, 55, tag(c, in.ID)); n != 5 {
			t.Errorf("%d of 55 CreateTags throttled, want 5", n)
		}
		if n := calls(t, 1, filtered(c)); n != 0 {
			t.Error("DescribeInstances throttled by CreateTags' bucket")
		}
		clk.add(2 * time.Second)
		if n := calls(t, 12, tag(c, in.ID)); n != 2 {
			t.Errorf("%d of 12 CreateTags two seconds later throttled, want 2", n)
		}
	})

	t.Run("a throttled request does nothing", func(t *testing.T) {
		s, c, _ := limited(t)
		in := s.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: subnetA})
		calls(t, 50, tag(c, in.ID))
		_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{in.ID}, Tags: []ec2types.Tag{{Key: sdkaws.String("after"), Value: sdkaws.String("x")}}})
		wantCode(t, err, "RequestLimitExceeded")
		for _, i := range s.Instances() {
			if _, ok := i.Tags["after"]; i.ID == in.ID && ok {
				t.Errorf("the throttled CreateTags tagged the instance: %v", i.Tags)
			}
		}
	})

	t.Run("TerminateInstances spends a resource token per instance: 1000, refilled at 20 a second", func(t *testing.T) {
		s, c, clk := limited(t)
		var ids []string
		for range 1001 {
			ids = append(ids, s.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: subnetA}).ID)
		}
		if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[:1000]}); err != nil {
			t.Fatalf("1000 instances in one request: %v", err)
		}
		last := func() error {
			_, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[1000:]})
			return err
		}
		if n := calls(t, 1, last); n != 1 {
			t.Error("the 1001st instance was terminated with no resource token left")
		}
		clk.add(time.Second)
		if n := calls(t, 1, last); n != 0 {
			t.Error("still throttled a second later")
		}
	})

	t.Run("switched off again, nothing is throttled", func(t *testing.T) {
		s, c, _ := limited(t)
		s.LimitRequestRates(false)
		if n := calls(t, 150, filtered(c)); n != 0 {
			t.Errorf("%d calls throttled, want none", n)
		}
	})
}
