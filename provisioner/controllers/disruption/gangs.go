package disruption

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// A gang (the pods of a PodGroup) runs whole or not at all, so drift and
// expiry replace the nodes that run one as a unit: a node running a
// gang's pods is disrupted only together with every other node running
// pods of the same PodGroups, each chosen by the same method, none held
// by do-not-disrupt, and all of them within their pools' budgets at once.
// Otherwise none is, and the claim says why (DisruptionBlocked): the
// unit waits. The unit's commands are submitted together; each node gets
// its own replacement and is drained once that replacement is up, so the
// gang's nodes go within the time of one launch, not one after another.
// A member whose own command is called off (its replacement cannot be
// planned, say) does not stop the others: it is judged again, with its
// gang now on new nodes. Emptiness never meets a gang's pods, and
// consolidation leaves their nodes alone (consolidation.go).

// gangMember is one claim of a unit, with its pool and what the method
// said of it.
type gangMember struct {
	claim *v1alpha1.NodeClaim
	pool  *v1alpha1.NodePool
	v     Verdict
}

// gangPeers are the other claims whose nodes run pods of a PodGroup that
// pods on nc's node belong to, and the first such group (namespace/name);
// none, and "", when its node runs no group's pod.
func (c *Controller) gangPeers(ctx context.Context, nc *v1alpha1.NodeClaim) ([]*v1alpha1.NodeClaim, string, error) {
	groups, err := c.groupsOn(ctx, nc.Status.NodeName)
	if err != nil || len(groups) == 0 {
		return nil, "", err
	}
	nodes := map[string]bool{}
	for _, g := range groups {
		var pods corev1.PodList
		if err := c.kube.List(ctx, &pods, client.InNamespace(g.Namespace)); err != nil {
			return nil, "", err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName == g.Name && p.Spec.NodeName != "" && !occupiesNot(p) {
				nodes[p.Spec.NodeName] = true
			}
		}
	}
	delete(nodes, nc.Status.NodeName)
	var peers []*v1alpha1.NodeClaim
	for node := range nodes {
		var claims v1alpha1.NodeClaimList
		if err := c.kube.List(ctx, &claims, client.MatchingFields{cluster.IndexClaimNode: node}); err != nil {
			return nil, "", err
		}
		for i := range claims.Items {
			peers = append(peers, &claims.Items[i])
		}
	}
	slices.SortFunc(peers, func(a, b *v1alpha1.NodeClaim) int { return strings.Compare(a.Name, b.Name) })
	return peers, groups[0].String(), nil
}

// groupsOn are the PodGroups the pods on node belong to, sorted.
func (c *Controller) groupsOn(ctx context.Context, node string) ([]types.NamespacedName, error) {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.MatchingFields{cluster.IndexPodNode: node}); err != nil {
		return nil, err
	}
	var out []types.NamespacedName
	for i := range pods.Items {
		p := &pods.Items[i]
		if sg := p.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && !occupiesNot(p) {
			k := types.NamespacedName{Namespace: p.Namespace, Name: *sg.PodGroupName}
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

func occupiesNot(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// submitUnit disrupts nc, which method m chose (v), together with the
// other nodes of the gangs it runs, or waits. handled is false when nc
// runs no gang's pod: the caller disrupts it alone.
func (c *Controller) submitUnit(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool, m Method, v Verdict) (reconcile.Result, bool, error) {
	peers, group, err := c.gangPeers(ctx, nc)
	if err != nil || len(peers) == 0 {
		return reconcile.Result{}, err != nil, err
	}
	unit := []gangMember{{claim: nc, pool: pool, v: v}}
	for _, p := range peers {
		member, why, err := c.unitMember(ctx, p, m)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		if why != "" {
			c.noteBlocked(ctx, nc, m.Reason(), fmt.Sprintf("it runs pods of PodGroup %s, whose %d nodes are replaced together; %s", group, len(peers)+1, why))
			return reconcile.Result{RequeueAfter: c.exec.timers.BudgetRetry}, true, nil
		}
		unit = append(unit, member)
	}
	if !c.reserveUnit(ctx, unit, m.Reason()) {
		c.noteBlocked(ctx, nc, m.Reason(), fmt.Sprintf("it runs pods of PodGroup %s, whose %d nodes are replaced together, and the disruption budgets do not allow %d at once", group, len(unit), len(unit)))
		return reconcile.Result{RequeueAfter: c.exec.timers.BudgetRetry}, true, nil
	}
	names := make([]string, len(unit))
	for i, u := range unit {
		names[i] = u.claim.Name
	}
	klog.FromContext(ctx).Info("Disrupting the nodes of a pod group together", "podGroup", group, "reason", m.Reason(), "nodeClaims", names)
	var firstErr error
	for _, u := range unit {
		res, err := c.exec.Submit(ctx, c.command(u.claim, u.pool, m, u.v))
		if err != nil || !res.IsZero() {
			if !c.exec.Busy(u.claim.UID) {
				// Not taken by another command: the reservation is this
				// unit's own (another's is never released here).
				c.exec.budgets.release(u.claim.UID)
			}
			klog.FromContext(ctx).Info("A node of the pod group's unit was not taken; it is judged again", "podGroup", group, "nodeClaim", klog.KObj(u.claim), "err", err)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return reconcile.Result{RequeueAfter: c.exec.timers.ReplacementRetry}, true, firstErr
}

// unitMember is what m says of peer p of a unit, or why p cannot be
// disrupted with it now.
func (c *Controller) unitMember(ctx context.Context, p *v1alpha1.NodeClaim, m Method) (gangMember, string, error) {
	if p.Status.Phase != v1alpha1.NodeClaimInitialized || isDisrupting(p) || c.exec.Busy(p.UID) {
		return gangMember{}, fmt.Sprintf("nodeclaim %s is not ready to be disrupted (phase %s)", p.Name, p.Status.Phase), nil
	}
	var pool v1alpha1.NodePool
	if err := c.kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodePool}, &pool); err != nil {
		return gangMember{}, "", client.IgnoreNotFound(err)
	}
	if !forceful(m.Reason()) {
		if k := v1alpha1.DoNotDisrupt(p.Annotations); k != "" {
			return gangMember{}, fmt.Sprintf("nodeclaim %s has %s=true", p.Name, k), nil
		}
		held, err := heldBy(ctx, p.Status.NodeName, cachedHolders{c.kube})
		if err != nil || held != "" {
			return gangMember{}, fmt.Sprintf("nodeclaim %s: %s", p.Name, held), err
		}
	}
	v, err := m.Candidate(ctx, p.DeepCopy(), &pool)
	if err != nil {
		return gangMember{}, "", err
	}
	if !v.Disrupt {
		return gangMember{}, fmt.Sprintf("nodeclaim %s is not %s", p.Name, reasonWord(m.Reason())), nil
	}
	return gangMember{claim: p, pool: &pool, v: v}, "", nil
}

// reasonWord is a reason as an adjective: "drifted", "expired".
func reasonWord(r v1alpha1.DisruptionReason) string {
	switch r {
	case v1alpha1.DisruptionReasonDrifted:
		return "drifted"
	case v1alpha1.DisruptionReasonExpired:
		return "expired"
	}
	return "chosen for " + string(r)
}

// reserveUnit reserves the budgets of every member of the unit, or none.
func (c *Controller) reserveUnit(ctx context.Context, unit []gangMember, reason v1alpha1.DisruptionReason) bool {
	now := c.now()
	for i, u := range unit {
		ok, _, err := c.exec.budgets.reserve(ctx, c.exec.kube, u.pool, u.claim, reason, now)
		if err != nil || !ok {
			for _, r := range unit[:i] {
				c.exec.budgets.release(r.claim.UID)
			}
			return false
		}
	}
	return true
}
