package nodeclaim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/simulator"
)

// base is what every step of a claim's life uses: the cluster, the clock
// and the recorder, to read a claim's node and pods, say what happened in
// Events, and give up a claim that missed a deadline. Giving up marks the
// claim's offerings unavailable, so base holds those too. Each step embeds
// it beside the dependencies of its own.
type base struct {
	kube        client.Client
	recorder    events.EventRecorder
	unavailable *cloudprovider.UnavailableOfferings
	now         func() time.Time
}

// nodeOf is the node registered with the claim's providerID, or nil.
func (b base) nodeOf(ctx context.Context, nc *v1alpha1.NodeClaim) (*corev1.Node, error) {
	if nc.Status.ProviderID == "" {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := b.kube.List(ctx, &nodes, client.MatchingFields{indexProviderID: nc.Status.ProviderID}); err != nil {
		return nil, err
	}
	if len(nodes.Items) == 0 {
		return nil, nil
	}
	return &nodes.Items[0], nil
}

// event records an Event on the claim.
func (b base) event(nc *v1alpha1.NodeClaim, typ, reason, action, note string) {
	if b.recorder != nil {
		b.recorder.Eventf(nc, nil, typ, reason, action, "%s", note)
	}
}

// podEvents records an event on every pod nominated to the claim.
func (b base) podEvents(ctx context.Context, nc *v1alpha1.NodeClaim, typ, reason, action, note string) {
	if b.recorder == nil {
		return
	}
	pods, err := b.nominatedPods(ctx, nc.Name)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Listing nominated pods for events failed", "err", err)
		return
	}
	for i := range pods {
		b.recordPod(&pods[i], typ, reason, action, note)
	}
}

// recordPod records an Event on the pod.
func (b base) recordPod(p *corev1.Pod, typ, reason, action, note string) {
	if b.recorder != nil {
		b.recorder.Eventf(p, nil, typ, reason, action, "%s", note)
	}
}

// giveUp deletes a claim that missed a deadline, which terminates its
// instance if it has one. Its offerings are avoided for a while (a node
// that does not come up there would not the next time either), and Events
// on the claim and its pods say why; the pods get another claim.
func (b base) giveUp(ctx context.Context, nc *v1alpha1.NodeClaim, reason, action, why string, avoid ...cloudprovider.Offer) (reconcile.Result, error) {
	klog.FromContext(ctx).Info("Deleting nodeclaim that missed its deadline", "reason", reason, "why", why, "providerID", nc.Status.ProviderID)
	b.unavailable.Mark(avoid...)
	metrics.ClaimsFailed.WithLabelValues(nc.Spec.NodePool, reason).Inc()
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, reason).Inc()
	what := "nothing was launched"
	if nc.Status.ProviderID != "" {
		what = "terminating instance " + nc.Status.ProviderID
	}
	b.event(nc, corev1.EventTypeWarning, reason, action, why+"; "+what)
	b.podEvents(ctx, nc, corev1.EventTypeWarning, reason, action, fmt.Sprintf("nodeclaim %s: %s; the pod will get another claim", nc.Name, why))
	b.releaseGroups(ctx, nc, "was "+why)
	return reconcile.Result{}, client.IgnoreNotFound(b.kube.Delete(ctx, nc))
}

// nominatedPods are the pending pods nominated to the claim in the order
// the scheduler's queue takes them (higher priority first, then older),
// ties broken by namespace and name so that which of two pods that cannot
// share the node is bound does not depend on the cache's order.
func (b base) nominatedPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := b.kube.List(ctx, &pods, client.MatchingFields{indexNominated: name}); err != nil {
		return nil, err
	}
	slices.SortFunc(pods.Items, bindOrder)
	return pods.Items, nil
}

// bindOrder is simulator.BindOrder for the values a list returns.
func bindOrder(a, b corev1.Pod) int { return simulator.BindOrder(&a, &b) }
