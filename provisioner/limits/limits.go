// Package limits makes a NodePool's spec.limits a hard ceiling where the
// money is spent: immediately before the provisioner asks the cloud for an
// instance.
//
// The scheduler plugin forecasts limits when it nominates, but a forecast
// cannot be the ceiling: it runs in another process, reads claims through
// a cache, and does not know which instance type a launch will fall back
// to. The Ledger here closes each gap:
//
//   - Every launch reserves, before Create, the capacity of the largest
//     offer it may end with (the cloud picks any of the offers it is given,
//     so the offers that would cross a limit are taken out first). Two
//     launches of one pool, in any workers, cannot both pass on the same
//     headroom, because reserving is one step under one lock.
//   - A reservation is kept after Create until the informer cache shows the
//     claim's providerID, so a status write the cache has not seen yet
//     never makes a launched instance invisible.
//   - After a restart the first check lists the cloud once: an instance
//     launched for a claim whose status does not name it yet (the process
//     died between Create and the status write) is counted from the cloud.
//
// Usage is capacity (not allocatable), like Karpenter's limits, and like
// the pool status the plugin forecasts with: per claim, the larger of its
// launched capacity and its node's reported capacity. A claim not launched
// yet counts what its pods request, the least it can use.
package limits

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// Ledger holds the capacity reserved by launches the cluster state does not
// show yet. It is safe for concurrent use; one Ledger serves every pool of
// one provisioner (the leader).
type Ledger struct {
	kube  client.Reader
	cloud cloudprovider.CloudProvider

	mu       sync.Mutex
	seeded   bool
	reserved map[types.UID]*reservation
}

// reservation is the capacity one claim's launch holds against its pool.
type reservation struct {
	pool      string
	resources corev1.ResourceList
	// providerID is set once Create has returned; until then the launch is
	// in flight and may still end on a smaller offer.
	providerID string
}

// NewLedger returns a Ledger that reads claims and nodes through kube and,
// once after start, the instances of cloud.
func NewLedger(kube client.Reader, cloud cloudprovider.CloudProvider) *Ledger {
	return &Ledger{kube: kube, cloud: cloud, reserved: map[types.UID]*reservation{}}
}

// ExceededError says that no offer of a claim fits under its pool's limits.
type ExceededError struct {
	NodePool string
	// Reason is a sentence for Events and logs, e.g. "cpu 4 in use or
	// launching + 2 for c7.large > limit 4".
	Reason string
	// InFlight says other launches of the pool are still in flight: they
	// may end smaller than they reserved, so the check is worth repeating
	// once they return.
	InFlight bool
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("nodepool %s limits reached: %s", e.NodePool, e.Reason)
}

// Reserve returns the offers claim nc may launch without taking pool past
// its limits, cheapest first as given, and reserves for the claim the
// largest capacity among them until Launched shrinks it or Release drops
// it. When none fits it returns an *ExceededError and reserves nothing.
// A second Reserve for the same claim replaces the first.
func (l *Ledger) Reserve(ctx context.Context, pool *v1alpha1.NodePool, nc *v1alpha1.NodeClaim, offers []cloudprovider.Offer) ([]cloudprovider.Offer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.reserved, nc.UID)
	used, inFlight, err := l.usage(ctx, pool.Name, nc.UID)
	if err != nil {
		return nil, err
	}
	allowed := slices.DeleteFunc(slices.Clone(offers), func(o cloudprovider.Offer) bool {
		return !nodeshape.WithinLimits(pool.Spec.Limits, used, o.InstanceType.Capacity)
	})
	if len(allowed) == 0 {
		reason := "no offers"
		if len(offers) > 0 {
			reason = nodeshape.ExceedsLimits(pool.Spec.Limits, used, offers[0].InstanceType.Capacity, offers[0].InstanceType.Name)
		}
		return nil, &ExceededError{NodePool: pool.Name, Reason: reason, InFlight: inFlight}
	}
	largest := corev1.ResourceList{}
	for _, o := range allowed {
		largest = quota.Max(largest, o.InstanceType.Capacity)
	}
	l.reserved[nc.UID] = &reservation{pool: pool.Name, resources: largest}
	return allowed, nil
}

// Launched records that the claim's Create returned instance in: the
// reservation shrinks to what was launched and stays until the cache shows
// the claim with its providerID.
func (l *Ledger) Launched(claim types.UID, in *cloudprovider.Instance) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.reserved[claim]; r != nil {
		r.resources, r.providerID = in.Capacity.DeepCopy(), in.ProviderID
	}
}

// Release drops the claim's reservation: its Create failed, or its
// instance is terminated and the claim is going.
func (l *Ledger) Release(claim types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.reserved, claim)
}

// Usage returns what the pool uses or has reserved, as Reserve counts it.
func (l *Ledger) Usage(ctx context.Context, pool string) (corev1.ResourceList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	used, _, err := l.usage(ctx, pool, "")
	return used, err
}

// usage adds up the pool's claims, nodes and reservations, leaving out the
// claim except. It drops reservations the cache has caught up with, and
// says whether any other launch of the pool is still in flight. Callers
// hold l.mu.
func (l *Ledger) usage(ctx context.Context, pool string, except types.UID) (corev1.ResourceList, bool, error) {
	if !l.seeded {
		// Once, every pool's claims: reservations for launches a
		// crash interrupted.
		var all v1alpha1.NodeClaimList
		if err := l.kube.List(ctx, &all); err != nil {
			return nil, false, fmt.Errorf("listing nodeclaims: %w", err)
		}
		if err := l.seed(ctx, all.Items); err != nil {
			return nil, false, err
		}
		l.seeded = true
	}
	var claims v1alpha1.NodeClaimList
	if err := l.kube.List(ctx, &claims, client.MatchingFields{cluster.IndexClaimPool: pool}); err != nil {
		return nil, false, fmt.Errorf("listing nodeclaims of nodepool %s: %w", pool, err)
	}
	var nodes corev1.NodeList
	if err := l.kube.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		return nil, false, fmt.Errorf("listing nodes of nodepool %s: %w", pool, err)
	}
	used := corev1.ResourceList{}
	nodeCapacity := map[string]corev1.ResourceList{}
	for i := range nodes.Items {
		if id := nodes.Items[i].Spec.ProviderID; id != "" {
			nodeCapacity[id] = nodes.Items[i].Status.Capacity
		} else {
			used = quota.Add(used, nodes.Items[i].Status.Capacity) // no claim can name it
		}
	}
	seen := map[types.UID]bool{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.Spec.NodePool != pool {
			continue
		}
		seen[nc.UID] = true
		if nc.UID == except {
			continue
		}
		counted := corev1.ResourceList{}
		if id := nc.Status.ProviderID; id != "" {
			counted = quota.Max(nc.Status.Capacity, nodeCapacity[id])
			delete(nodeCapacity, id)
		}
		r := l.reserved[nc.UID]
		if r != nil {
			if r.providerID != "" && r.providerID == nc.Status.ProviderID {
				delete(l.reserved, nc.UID) // the cache has caught up
			} else {
				counted = quota.Max(counted, r.resources)
			}
		}
		if nc.Status.ProviderID == "" && r == nil && nc.DeletionTimestamp.IsZero() {
			// Made, not launched yet, and not launching: it will run on
			// at least what its pods request, the least any instance it
			// becomes has. Without it, a disruption's replacement passes
			// the limits beside it, and one of the two is refused at
			// launch, given up, and planned again.
			counted = quota.Max(counted, nc.Spec.Resources.Requests)
		}
		used = quota.Add(used, counted)
	}
	inFlight := false
	for uid, r := range l.reserved {
		if r.pool != pool || uid == except {
			continue
		}
		if r.providerID == "" {
			inFlight = true
		}
		if !seen[uid] {
			// A claim the cache does not show (yet, or any more) whose
			// instance may run: count it until Release.
			used = quota.Add(used, r.resources)
		}
	}
	// Nodes of the pool that no claim accounts for still cost money.
	for _, c := range nodeCapacity {
		used = quota.Add(used, c)
	}
	return used, inFlight, nil
}

// seed counts, once after start, instances the cloud runs for claims whose
// status does not name them yet: a previous process launched them and
// stopped before it could write the claim's status.
func (l *Ledger) seed(ctx context.Context, claims []v1alpha1.NodeClaim) error {
	instances, err := l.cloud.List(ctx)
	if err != nil {
		return fmt.Errorf("listing instances to count against nodepool limits: %w", err)
	}
	byName := map[string]*v1alpha1.NodeClaim{}
	for i := range claims {
		byName[claims[i].Name] = &claims[i]
	}
	for _, in := range instances {
		nc := byName[in.NodeClaim]
		// An instance of a fleet launched for several claims counts for
		// one of them not counted yet.
		for _, name := range in.NodeClaims {
			if c := byName[name]; nc == nil && c != nil && c.Status.ProviderID == "" && l.reserved[c.UID] == nil {
				nc = c
			}
		}
		if nc == nil || nc.Status.ProviderID != "" {
			continue
		}
		l.reserved[nc.UID] = &reservation{pool: nc.Spec.NodePool, resources: in.Capacity.DeepCopy(), providerID: in.ProviderID}
	}
	return nil
}
