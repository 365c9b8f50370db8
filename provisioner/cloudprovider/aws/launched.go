package aws

import (
	"context"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Before each launch Create looks for an instance already launched for
// the claim, so that a provisioner that stopped between CreateFleet and
// writing the claim's status adopts that instance rather than launching
// another. Asked per claim, that is a DescribeInstances per launch, which a
// burst of claims spends EC2's Describe tokens on; so all claims are
// answered from one list of the cluster's instances by claim UID, taken
// again when it is older than launchedListTTL. That is as safe as asking
// per claim:
//   - a provisioner that starts again has no list; its first is taken
//     after it started, so it holds every instance the one before it
//     launched (as far as EC2's eventually consistent Describe shows
//     them, as asking per claim would);
//   - this process's own launches are remembered (recent) until a list
//     surely holds them, since a list taken before a launch does not;
//   - a claim whose CreateFleet ended with no answer (a timeout, a lost
//     connection: it may have launched) is answered only from a list
//     begun after that call began.
//
// The ClientToken (clientToken in launch.go) is the second guard: a
// request EC2 has seen is answered with its first answer.
const (
	launchedListTTL = 5 * time.Second
	// recentTTL is how long a launch is remembered: longer than EC2's
	// Describe takes to show a new instance.
	recentTTL = time.Minute
)

// launchedList is the cluster's instances by claim UID, and what this
// process launched since.
type launchedList struct {
	mu     sync.Mutex
	last   *listing // the newest list that succeeded
	flight *listing // the list being taken, if any
	recent map[string]recentLaunch
	unsure map[string]time.Time
}

type listing struct {
	started time.Time
	done    chan struct{}
	byUID   map[string]*cloudprovider.Instance
	err     error
}

type recentLaunch struct {
	in *cloudprovider.Instance
	at time.Time
}

// launched records an instance this process launched for the claim, and
// that the claim's launch is no longer in doubt.
func (l *launchedList) launched(claimUID string, in *cloudprovider.Instance, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recent == nil {
		l.recent = map[string]recentLaunch{}
	}
	l.recent[claimUID] = recentLaunch{in: in, at: now}
	delete(l.unsure, claimUID)
}

// unanswered records that a CreateFleet for the claim, begun at began,
// ended without an answer.
func (l *launchedList) unanswered(claimUID string, began time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsure == nil {
		l.unsure = map[string]time.Time{}
	}
	l.unsure[claimUID] = began
}

// recentFor returns a copy of the instance this process launched for
// the claim within recentTTL, if any.
func (l *launchedList) recentFor(claimUID string, now time.Time) (*cloudprovider.Instance, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, r := range l.recent {
		if now.Sub(r.at) > recentTTL {
			delete(l.recent, uid)
		}
	}
	r, ok := l.recent[claimUID]
	if !ok {
		return nil, false
	}
	in := *r.in
	return &in, true
}

// launchedFor finds a live instance launched for the claim UID, if any.
func (p *Provider) launchedFor(ctx context.Context, claimUID string) (*cloudprovider.Instance, error) {
	l := &p.launched
	now := p.now()
	if in, ok := l.recentFor(claimUID, now); ok {
		return in, nil
	}
	l.mu.Lock()
	notBefore := now.Add(-launchedListTTL)
	if began, ok := l.unsure[claimUID]; ok && began.After(notBefore) {
		notBefore = began
	}
	l.mu.Unlock()
	byUID, err := l.list(ctx, notBefore, p.now, p.instancesByClaim)
	if err != nil {
		return nil, err
	}
	return byUID[claimUID], nil
}

// list returns a list begun no earlier than notBefore: the last one, the
// one being taken, or a new one. One is taken at a time, for all callers.
func (l *launchedList) list(ctx context.Context, notBefore time.Time, now func() time.Time, take func(context.Context) (map[string]*cloudprovider.Instance, error)) (map[string]*cloudprovider.Instance, error) {
	for {
		l.mu.Lock()
		if l.last != nil && !l.last.started.Before(notBefore) {
			byUID := l.last.byUID
			l.mu.Unlock()
			return byUID, nil
		}
		if f := l.flight; f != nil {
			l.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if f.err != nil {
				return nil, f.err
			}
			continue // it may have begun too early for this caller
		}
		f := &listing{started: now(), done: make(chan struct{})}
		l.flight = f
		l.mu.Unlock()
		// The list serves every caller waiting on it, not only this one.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchCallTimeout)
		f.byUID, f.err = take(tctx)
		cancel()
		l.mu.Lock()
		l.flight = nil
		if f.err == nil {
			l.last = f
		}
		close(f.done)
		l.mu.Unlock()
		if f.err != nil {
			return nil, f.err
		}
	}
}

// instancesByClaim lists the cluster's live instances by the claim UID
// they were launched for: the one they are tagged with, or, for a fleet
// launched for several claims, the one fleetPairs pairs them with. The
// pairing needs every instance of the fleet, so terminated ones are
// listed too.
func (p *Provider) instancesByClaim(ctx context.Context) (map[string]*cloudprovider.Instance, error) {
	out := map[string]*cloudprovider.Instance{}
	type fleet struct {
		claims map[string]string
		ids    []string
		live   map[string]ec2types.Instance
	}
	fleets := map[string]*fleet{}
	pages := ec2.NewDescribeInstancesPaginator(p.ec2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: sdkaws.String("tag:" + TagCluster), Values: []string{p.opts.ClusterName}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeInstances", err)
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				tags := map[string]string{}
				for _, t := range in.Tags {
					tags[sdkaws.ToString(t.Key)] = sdkaws.ToString(t.Value)
				}
				if uid := tags[TagNodeClaimUID]; uid != "" {
					if live(in) {
						out[uid] = p.instance(in)
					}
					continue
				}
				id := tags[TagFleet]
				if id == "" {
					continue
				}
				f := fleets[id]
				if f == nil {
					f = &fleet{claims: fleetClaims(tags), live: map[string]ec2types.Instance{}}
					fleets[id] = f
				}
				f.ids = append(f.ids, sdkaws.ToString(in.InstanceId))
				if live(in) {
					f.live[sdkaws.ToString(in.InstanceId)] = in
				}
			}
		}
	}
	for _, f := range fleets {
		for id, uid := range fleetPairs(f.claims, f.ids) {
			if in, ok := f.live[id]; ok {
				got := p.instance(in)
				got.NodeClaim = f.claims[uid]
				out[uid] = got
			}
		}
	}
	return out, nil
}
