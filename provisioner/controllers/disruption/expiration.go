package disruption

import (
	"context"
	"fmt"
	"time"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Expiration disrupts a node once its claim is older than the claim's
// expireAfter (the pool's when the claim was made), so that no node lives
// past what its operator allows: images and kernels are renewed by
// replacement. When its pods fit nowhere else, a replacement is launched
// and initialized first (replacement.go); the node is then drained
// through the Eviction API, so PodDisruptionBudgets hold.
type Expiration struct {
	now func() time.Time
}

var _ Method = &Expiration{}

// NewExpiration returns the expiration method.
func NewExpiration(now func() time.Time) *Expiration { return &Expiration{now: now} }

// Reason is Expired.
func (e *Expiration) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonExpired }

// Candidate chooses the claim once it is expireAfter old; an expireAfter
// of Never leaves it alone, and so does none at all (the API server
// defaults it to 720h; only a claim written around that has none).
func (e *Expiration) Candidate(_ context.Context, nc *v1alpha1.NodeClaim, _ *v1alpha1.NodePool) (Verdict, error) {
	if nc.Spec.ExpireAfter == "" {
		return Verdict{}, nil
	}
	after, ok, err := nc.Spec.ExpireAfter.Duration()
	if err != nil || !ok {
		return Verdict{}, err
	}
	age := e.now().Sub(nc.CreationTimestamp.Time)
	if left := after - age; left > 0 {
		return Verdict{RequeueAfter: left}, nil
	}
	return Verdict{Disrupt: true, Why: fmt.Sprintf("expired: %s old (expireAfter %s)", age.Round(time.Second), after)}, nil
}

// StillCandidate: an expired claim stays expired.
func (e *Expiration) StillCandidate(context.Context, *v1alpha1.NodeClaim) (bool, error) {
	return true, nil
}
