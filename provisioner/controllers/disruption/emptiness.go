package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/cluster/bufferroom"
	"github.com/nodeforge/nodeforge/simulator"
)

// Emptiness disrupts a node that has run no pod (daemonset, static and
// finished pods aside, and none nominated to it) for its pool's
// consolidateAfter. A static pod is the node's own (its kubelet runs it
// from a file): it neither keeps the node nor can go elsewhere.
type Emptiness struct {
	kube client.Reader        // the cache, for deciding
	pods kubernetes.Interface // the API server, for the last look
	now  func() time.Time
	// Buffers, when set, places the chunks of the ready CapacityBuffers
	// (cluster.ReadyBuffers) on the cluster without the node before it
	// goes: a node whose removal leaves a chunk without room is kept.
	Buffers *simulator.Scheduler
}

var _ Method = &Emptiness{}

// NewEmptiness returns the emptiness method.
func NewEmptiness(kube client.Reader, pods kubernetes.Interface, now func() time.Time) *Emptiness {
	return &Emptiness{kube: kube, pods: pods, now: now}
}

// bookingRecheck is how often a node kept for a ProvisioningRequest's
// booking is looked at again: the request's booking ends when
// VirtualNodes sets BookingExpired, which no claim event follows.
const bookingRecheck = 30 * time.Second

// Reason is Empty.
func (e *Emptiness) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonEmpty }

// Candidate keeps the claim's Empty condition and chooses the claim once
// it has been empty for consolidateAfter. A pool whose consolidateAfter
// is Never is left alone, and so is a fixed-size pool, whose nodes are
// kept empty or not.
func (e *Emptiness) Candidate(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (Verdict, error) {
	if pool.Fixed() {
		return Verdict{}, nil
	}
	after, ok, err := pool.Spec.Disruption.ConsolidateAfter.Duration()
	if err != nil || !ok {
		return Verdict{}, err
	}
	empty, err := e.empty(ctx, nc.Status.NodeName)
	if err != nil {
		return Verdict{}, err
	}
	status := metav1.ConditionFalse
	if empty {
		status = metav1.ConditionTrue
	}
	if meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionEmpty, Status: status, Reason: v1alpha1.ConditionEmpty, ObservedGeneration: nc.Generation}) || !empty {
		return Verdict{}, nil
	}
	// A node launched for a ProvisioningRequest is empty until the
	// request's pods come: it is kept while the request's booking lasts.
	if held, _, err := cluster.RequestHolds(ctx, e.kube, nc); err != nil || held {
		return Verdict{RequeueAfter: bookingRecheck}, err
	}
	since := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionEmpty).LastTransitionTime.Time
	emptyFor := e.now().Sub(since)
	if wait := after - emptyFor; wait > 0 {
		return Verdict{RequeueAfter: wait}, nil
	}
	if held, err := e.keepsBufferRoom(ctx, nc.Status.NodeName); err != nil || held != "" {
		return Verdict{RequeueAfter: bookingRecheck, Held: held}, err
	}
	return Verdict{Disrupt: true, Why: fmt.Sprintf("empty for %s (consolidateAfter %s)", emptyFor.Round(time.Second), after)}, nil
}

// keepsBufferRoom says why the node must stay for the CapacityBuffers'
// room: some ready buffer's chunk has no room on the cluster without it
// (every buffer's chunks placed, lowest priority, after the pods bound
// now). Only the room is counted, never a real pod moved for it.
func (e *Emptiness) keepsBufferRoom(ctx context.Context, node string) (string, error) {
	if e.Buffers == nil {
		return "", nil
	}
	buffers, err := bufferroom.Ready(ctx, e.kube)
	if err != nil || len(buffers) == 0 {
		return "", err
	}
	sim, err := bufferroom.Snapshot(ctx, e.kube)
	if err != nil {
		return "", err
	}
	if short, st, ok := bufferroom.Room(ctx, e.Buffers, sim.Without(node), buffers); !ok {
		return fmt.Sprintf("removing it leaves CapacityBuffer %s's chunks without room (%s)", short, sayWhy(st)), nil
	}
	return "", nil
}

// empty reads the cache: no pod on the node but daemonset and finished
// pods, and none nominated to it (handed to the scheduler to bind, their
// volumes perhaps still being provisioned). It only reads the pods, so it
// reads the cache's own objects, not copies: it runs on every change to
// a node's pods, and copying every pod of the node each time would be a
// large part of the provisioner's CPU in a scale-up (docs/benchmarks.md).
func (e *Emptiness) empty(ctx context.Context, node string) (bool, error) {
	var handed corev1.PodList
	if err := e.kube.List(ctx, &handed, client.MatchingFields{cluster.IndexPodNominated: node}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	if len(handed.Items) > 0 {
		return false, nil
	}
	var pods corev1.PodList
	if err := e.kube.List(ctx, &pods, client.MatchingFields{cluster.IndexPodNode: node}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; occupies(p) {
			return false, nil
		}
	}
	return true, nil
}

// occupies: a pod that keeps its node from being empty. Daemonset pods
// run wherever there is a node, static (mirror) pods are the node's own,
// and finished pods hold nothing.
func occupies(p *corev1.Pod) bool {
	return !podutil.IsPodTerminal(p) && !cluster.OwnedByDaemonSet(p) && !cluster.IsMirror(p)
}

// StillCandidate looks at the API server itself, once the node has been
// tainted and the pause has passed: is the node still empty, and is no
// pod on its way there? A pod nominated to the node, or to its claim (the
// scheduler or the bind gate is placing it), would be bound to a node
// that is then deleted, and a bare pod lost so is lost for good.
//
// The nominated pods are listed before the bound ones: a pod that goes
// from nominated to bound between the two lists is then seen in one of
// them (listed the other way round, it was in neither). A pod the
// scheduler assumed onto the node before the taint, and whose PreBind is
// still binding its volumes, shows nowhere but in its claims: a pending
// PersistentVolumeClaim whose selected node (the volume binder's
// volume.kubernetes.io/selected-node) is this node keeps it too.
func (e *Emptiness) StillCandidate(ctx context.Context, nc *v1alpha1.NodeClaim) (bool, error) {
	name := nc.Status.NodeName
	for _, to := range []string{name, nc.Name} {
		nominated, err := e.pods.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.nominatedNodeName", to).String()})
		if err != nil {
			return false, fmt.Errorf("listing pods nominated to %s: %w", to, err)
		}
		for i := range nominated.Items {
			if p := &nominated.Items[i]; p.Status.NominatedNodeName == to && (p.Spec.NodeName == "" || p.Spec.NodeName == name) && !podutil.IsPodTerminal(p) {
				return false, nil
			}
		}
	}
	pods, err := e.pods.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()})
	if err != nil {
		return false, fmt.Errorf("listing pods of node %s: %w", name, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == name && occupies(p) {
			return false, nil
		}
	}
	claims, err := e.pods.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("listing persistent volume claims: %w", err)
	}
	for i := range claims.Items {
		if pvc := &claims.Items[i]; pvc.Status.Phase == corev1.ClaimPending && pvc.Annotations[annSelectedNode] == name {
			return false, nil
		}
	}
	return true, nil
}

// annSelectedNode is the annotation the scheduler's volume binding
// (PreBind) puts on a PersistentVolumeClaim of a WaitForFirstConsumer
// class: the node its pod is being bound to, while the volume is
// provisioned there.
const annSelectedNode = "volume.kubernetes.io/selected-node"
