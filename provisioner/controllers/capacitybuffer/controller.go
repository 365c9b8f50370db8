// Package capacitybuffer keeps the status of CapacityBuffers
// (autoscaling.x-k8s.io/v1beta1) as the upstream buffer controller
// writes it, for the buffers of the buffer.x-k8s.io/active-capacity
// strategy (or none): which PodTemplate the chunks are made from (the
// spec's, or one made from a scalable workload's pod template), how many
// chunks there are (replicas.go), and the conditions ReadyForProvisioning,
// Provisioning and LimitedByQuotas. VirtualNodes reads that status to keep
// room for the chunks; this controller also says, in the Provisioning
// condition, how many of them have room on the nodes now, placed by the
// provisioner's scheduling simulator.
package capacitybuffer

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/simulator"
)

// Resync is how often a buffer's status is written again without an
// event: whether its chunks have room changes with every pod bound
// anywhere, which is not watched for.
const Resync = 10 * time.Second

// TemplateSuffix ends the name of the PodTemplate made for a buffer of a
// scalableRef: <buffer>-capacitybuffer.
const TemplateSuffix = "-capacitybuffer"

// Controller writes CapacityBuffer status.
type Controller struct {
	kube client.Client
	// live reads the workloads a scalableRef names, from the API server:
	// the cache holds only their metadata, which is all a watch needs,
	// and a cluster's ReplicaSets are many.
	live  client.Reader
	sched *simulator.Scheduler // nil: the room is not counted
}

// New returns the controller; live reads the workloads (the manager's
// API reader), sched places the chunks to count how many have room (nil:
// not counted).
func New(kube client.Client, live client.Reader, sched *simulator.Scheduler) *Controller {
	return &Controller{kube: kube, live: live, sched: sched}
}

// SetupWithManager registers the controller, "capacitybuffer". A buffer
// is reconciled when it changes, when the PodTemplate or workload it
// names changes (workloads are watched by their metadata only), and
// every Resync.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	named := func(match func(b *bufferv1beta1.CapacityBuffer, o client.Object) bool) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			var list bufferv1beta1.CapacityBufferList
			if err := c.kube.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
				klog.FromContext(ctx).Error(err, "Listing capacity buffers failed", "namespace", o.GetNamespace())
				return nil
			}
			var out []reconcile.Request
			for i := range list.Items {
				if b := &list.Items[i]; match(b, o) {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
				}
			}
			return out
		})
	}
	b := ctrl.NewControllerManagedBy(mgr).Named("capacitybuffer").
		For(&bufferv1beta1.CapacityBuffer{}).
		Watches(&corev1.PodTemplate{}, named(func(b *bufferv1beta1.CapacityBuffer, o client.Object) bool {
			return (b.Spec.PodTemplateRef != nil && b.Spec.PodTemplateRef.Name == o.GetName()) ||
				(b.Status.PodTemplateRef != nil && b.Status.PodTemplateRef.Name == o.GetName())
		}))
	for kind, obj := range workloadKinds {
		b = b.Watches(obj(), named(func(b *bufferv1beta1.CapacityBuffer, o client.Object) bool {
			r := b.Spec.ScalableRef
			return r != nil && r.APIGroup == appsv1.GroupName && r.Kind == kind && r.Name == o.GetName()
		}), builder.OnlyMetadata)
	}
	return b.Complete(c)
}

// Reconcile writes one buffer's status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b bufferv1beta1.CapacityBuffer
	if err := c.kube.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.ServesBuffer(&b) || !b.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	r, err := c.resolve(ctx, &b)
	if err != nil {
		return reconcile.Result{}, err
	}
	next := b.DeepCopy()
	c.setStatus(ctx, next, r)
	if !equality.Semantic.DeepEqual(b.Status, next.Status) {
		if err := c.kube.Status().Patch(ctx, next, client.MergeFrom(&b)); err != nil {
			return reconcile.Result{}, fmt.Errorf("writing status of capacity buffer %s: %w", req, err)
		}
		log := klog.FromContext(ctx).WithValues("capacityBuffer", klog.KObj(&b))
		if ready := meta.FindStatusCondition(next.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning); ready != nil && ready.Status == metav1.ConditionFalse {
			log.V(1).Info("Capacity buffer not ready for provisioning", "reason", ready.Reason, "message", ready.Message)
		} else {
			log.V(2).Info("Capacity buffer status written", "replicas", r.count.Replicas, "podTemplate", r.template.Name)
		}
	}
	return reconcile.Result{RequeueAfter: Resync}, nil
}

// setOwner makes b the controlling owner of o, so o goes with it.
func (c *Controller) setOwner(b *bufferv1beta1.CapacityBuffer, o client.Object) error {
	return controllerutil.SetControllerReference(b, o, c.kube.Scheme())
}

// isGone: the object does not exist, or the API server does not serve
// its kind.
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}
