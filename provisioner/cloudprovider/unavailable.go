package cloudprovider

import (
	"sync"
	"time"
)

// UnavailableOfferings remembers offerings that failed for lack of capacity
// (or whose instances never joined) so that nothing is launched there for
// a while: the catalog publishes them as unavailable, so the scheduler
// plugin stops choosing them, and launches skip them.
type UnavailableOfferings struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	until   map[offeringKey]time.Time
	changed []func() // called after Mark, outside the lock
}

type offeringKey struct{ instanceType, zone, capacityType string }

// NewUnavailableOfferings returns a cache whose entries last ttl.
func NewUnavailableOfferings(ttl time.Duration) *UnavailableOfferings {
	return &UnavailableOfferings{ttl: ttl, now: time.Now, until: map[offeringKey]time.Time{}}
}

// OnChange registers f to run after offerings are marked unavailable.
func (u *UnavailableOfferings) OnChange(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.changed = append(u.changed, f)
}

// Mark makes the offers unavailable for the cache's TTL.
func (u *UnavailableOfferings) Mark(offers ...Offer) {
	if len(offers) == 0 {
		return
	}
	u.mu.Lock()
	expiry := u.now().Add(u.ttl)
	for _, o := range offers {
		u.until[offeringKey{o.InstanceType.Name, o.Zone, o.CapacityType}] = expiry
	}
	fs := append([]func(){}, u.changed...)
	u.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Unavailable reports whether the offering is marked, and until when.
func (u *UnavailableOfferings) Unavailable(instanceType, zone, capacityType string) (bool, time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := offeringKey{instanceType, zone, capacityType}
	t, ok := u.until[k]
	if !ok {
		return false, time.Time{}
	}
	if !u.now().Before(t) {
		delete(u.until, k)
		return false, time.Time{}
	}
	return true, t
}
