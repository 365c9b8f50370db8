package nodeclaim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// A claim is launched with its own node class, labels, annotations and
// taints, and adopted by writing its labels and annotations on the node
// with the provisioner's rights. Whoever may write NodeClaims (the
// scheduler's account) must not get through the provisioner what the
// claim's pool does not give, so before launch and before adoption the
// claim is checked against its pool as it is now (nodeshape.WithinPool).

// refuseOutsidePool refuses a claim outside its pool: condType ("Launched"
// or "Registered") becomes False with reason v1alpha1.ReasonOutsideNodePool
// and the field that differs, a Warning Event on the claim and its pods
// says so, and the claim is deleted, which terminates an instance launched
// for it. Deleted at once, not left for the registration TTL: a claim
// made just before its pool was edited is refused too (the node it would
// become is drifted from the pool already), and its pods should get a
// claim of the pool as it is without waiting minutes; and a claim left
// would keep counting against the pool's limits.
func (b base) refuseOutsidePool(ctx context.Context, nc *v1alpha1.NodeClaim, condType, action string, outside error) (reconcile.Result, error) {
	field := ""
	var e *nodeshape.OutsidePoolError
	if errors.As(outside, &e) {
		field = "spec." + e.Field
	}
	klog.FromContext(ctx).Info("Deleting nodeclaim: it asks for more than its nodepool makes", "nodeClaim", klog.KObj(nc),
		"reason", v1alpha1.ReasonOutsideNodePool, "field", field, "detail", outside.Error(), "providerID", nc.Status.ProviderID)
	why := fmt.Sprintf("%v: not what nodepool %s makes", outside, nc.Spec.NodePool)
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: condType, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOutsideNodePool, Message: why})
	if err := b.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	what := "not launched"
	if nc.Status.ProviderID != "" {
		what = "its node is not adopted and instance " + nc.Status.ProviderID + " is terminated"
	}
	b.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonOutsideNodePool, action, why+"; "+what+", and the claim is deleted")
	b.podEvents(ctx, nc, corev1.EventTypeWarning, v1alpha1.ReasonOutsideNodePool, action, fmt.Sprintf("nodeclaim %s: %s; the pod will get another claim", nc.Name, why))
	metrics.ClaimsDeleted.WithLabelValues(nc.Spec.NodePool, v1alpha1.ReasonOutsideNodePool).Inc()
	b.releaseGroups(ctx, nc, "asked for more than its pool makes")
	return reconcile.Result{}, client.IgnoreNotFound(b.kube.Delete(ctx, nc))
}
