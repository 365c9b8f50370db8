package disruption

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// ScaleDown disrupts the nodes of a fixed-size pool (spec.replicas) past
// its count, the emptiest first (cluster.Emptiest: fewest pods a drain
// evicts, then the newest). No budget holds it: the owner lowered the
// count, as Karpenter's static pools treat a scale-down; PodDisruptionBudgets
// hold the drain, and a node do-not-disrupt holds (on the claim, the node
// or a pod) is passed over for the next emptiest. No replacement is launched: the pods go where the scheduler
// puts them.
type ScaleDown struct {
	cache client.Reader // for deciding
	live  client.Reader // the API server, for the last look
}

var _ Method = &ScaleDown{}

// NewScaleDown returns the scale-down method.
func NewScaleDown(cache, live client.Reader) *ScaleDown { return &ScaleDown{cache: cache, live: live} }

// Reason is ScaledDown.
func (s *ScaleDown) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonScaledDown }

// Candidate chooses the claim when its pool is fixed-size, more of its
// claims stand than it has replicas, and the claim is among the emptiest
// of its initialized ones that many.
func (s *ScaleDown) Candidate(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (Verdict, error) {
	if !pool.Fixed() {
		return Verdict{}, nil
	}
	chosen, why, err := s.chosen(ctx, s.cache, nc, pool)
	if err != nil || !chosen {
		return Verdict{}, err
	}
	return Verdict{Disrupt: true, Why: why}, nil
}

// StillCandidate looks again at the API server: the claim must still be
// one of the emptiest past the count (a pod bound to it meanwhile may
// make another emptier).
func (s *ScaleDown) StillCandidate(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, error) {
	var pool v1alpha1.NodePool
	if err := s.live.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !pool.Fixed() {
		return false, nil
	}
	chosen, _, err := s.chosen(ctx, s.live, nc, &pool)
	return chosen, err
}

// chosen says whether nc is among the claims of fixed-size pool that a
// scale-down removes now, reading through r.
func (s *ScaleDown) chosen(ctx context.Context, r client.Reader, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (bool, string, error) {
	var claims v1alpha1.NodeClaimList
	if err := r.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: pool.Name}); err != nil {
		return false, "", fmt.Errorf("listing nodeclaims of nodepool %s: %w", pool.Name, err)
	}
	standing := cluster.StandingOf(claims.Items, pool.Name)
	excess := len(standing) - int(*pool.Spec.Replicas)
	if excess <= 0 {
		return false, "", nil
	}
	var ready []*v1alpha1.NodeClaim
	pods := map[string]int{}
	for _, c := range standing {
		if c.Status.Phase != v1alpha1.NodeClaimInitialized || c.Status.NodeName == "" || v1alpha1.DoNotDisrupt(c.Annotations) != "" {
			continue
		}
		// A node do-not-disrupt holds is passed over, so that the next
		// emptiest goes instead of the scale-down waiting on it.
		if held, err := heldBy(ctx, c.Status.NodeName, cachedHolders{r}); err != nil || held != "" {
			if err != nil {
				return false, "", err
			}
			continue
		}
		n, err := evictable(ctx, r, c.Status.NodeName)
		if err != nil {
			return false, "", err
		}
		ready, pods[c.Name] = append(ready, c), n
	}
	order := cluster.Emptiest(ready, pods)
	i := slices.IndexFunc(order, func(c *v1alpha1.NodeClaim) bool { return c.Name == nc.Name })
	if i < 0 || i >= excess {
		return false, "", nil
	}
	return true, fmt.Sprintf("nodepool %s is scaled to %d replicas and has %d: one of the %d emptiest (%d pods)", pool.Name, *pool.Spec.Replicas, len(standing), excess, pods[nc.Name]), nil
}

// evictable counts the pods on node that a drain evicts.
func evictable(ctx context.Context, r client.Reader, node string) (int, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{cluster.IndexPodNode: node}); err != nil {
		return 0, fmt.Errorf("listing pods of node %s: %w", node, err)
	}
	n := 0
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == node && occupies(p) {
			n++
		}
	}
	return n, nil
}
