// Package bufferroom places the chunks of CapacityBuffers with the
// provisioner's scheduling simulator: whether they have room on the
// cluster, or on the cluster without some nodes. The buffer status
// controller counts their room with it, and disruption keeps the nodes
// that room is on.
package bufferroom

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/simulator"
)

// Chunks are the chunks of one ready CapacityBuffer.
type Chunks struct {
	Buffer types.NamespacedName
	Pods   []*corev1.Pod
}

// Ready lists the CapacityBuffers Nodeforge keeps that are
// ReadyForProvisioning, with their chunks (nodeshape.BufferPods) made
// from the PodTemplate their status names. Where the API server serves
// no CapacityBuffers, there are none. A buffer whose PodTemplate is gone
// since its status was written has no chunks until the status says so.
func Ready(ctx context.Context, c client.Reader) ([]Chunks, error) {
	var list bufferv1beta1.CapacityBufferList
	switch err := c.List(ctx, &list); {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing capacity buffers: %w", err)
	}
	var out []Chunks
	for i := range list.Items {
		b := &list.Items[i]
		if !cluster.ServesBuffer(b) || !b.DeletionTimestamp.IsZero() || b.Status.PodTemplateRef == nil ||
			!meta.IsStatusConditionTrue(b.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning) {
			continue
		}
		var tpl corev1.PodTemplate
		if err := c.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Status.PodTemplateRef.Name}, &tpl); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading pod template of capacity buffer %s: %w", klog.KObj(b), err)
		}
		if pods := nodeshape.BufferPods(b, &tpl); len(pods) > 0 {
			out = append(out, Chunks{Buffer: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, Pods: pods})
		}
	}
	return out, nil
}

// Room places the buffers' chunks on view, one after the other, with the
// scheduler's first fit (simulator.Scheduler.PlaceAny), and stops at the
// first chunk that has no room: it returns that chunk's buffer and the
// scheduler's reason, or ok when every chunk has room. Placed chunks are
// bound in view. The chunks' priority is the lowest, so they are placed
// after every real pod already in view.
func Room(ctx context.Context, sched *simulator.Scheduler, view *simulator.View, buffers []Chunks) (short types.NamespacedName, why *fwk.Status, ok bool) {
	for _, b := range buffers {
		for _, p := range b.Pods {
			if _, st := sched.PlaceAny(ctx, view, p); !st.IsSuccess() {
				return b.Buffer, st, false
			}
		}
	}
	return types.NamespacedName{}, nil, true
}

// Count places pods on view as Room does, every one of them, and
// counts those that have room.
func Count(ctx context.Context, sched *simulator.Scheduler, view *simulator.View, pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if _, st := sched.PlaceAny(ctx, view, p); st.IsSuccess() {
			n++
		}
	}
	return n
}

// Snapshot is the simulator's cluster of every node and the pods bound
// to them, read from c.
func Snapshot(ctx context.Context, c client.Reader) (*simulator.Cluster, error) {
	var nodes corev1.NodeList
	var pods corev1.PodList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	if err := c.List(ctx, &pods); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	ns := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		ns[i] = &nodes.Items[i]
	}
	ps := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		ps[i] = &pods.Items[i]
	}
	return simulator.NewCluster(ns, ps), nil
}
