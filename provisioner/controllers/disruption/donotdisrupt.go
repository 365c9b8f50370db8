package disruption

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// blockedNoteEvery is how often a claim that stays blocked for the same
// reason gets the Event (and log line) again: reconciles come with every
// change to the node's pods, and one line per change would drown the rest.
const blockedNoteEvery = 5 * time.Minute

// holders reads a node and the pods bound to it: from the cache to
// decide, from the API server for the last look after the taint.
type holders interface {
	node(ctx context.Context, name string) (*corev1.Node, error) // nil when gone
	pods(ctx context.Context, node string) ([]corev1.Pod, error)
}

// heldBy says what keeps node from voluntary disruption: "pod ns/name has
// nodeforge.dev/do-not-disrupt=true" (or Karpenter's karpenter.sh/
// do-not-disrupt), the same of the node, or "" when
// nothing does. A pod counts while it is bound to the node and not
// finished; daemonset pods count too, as their owner asked.
func heldBy(ctx context.Context, node string, from holders) (string, error) {
	n, err := from.node(ctx, node)
	if err != nil {
		return "", fmt.Errorf("reading node %s: %w", node, err)
	}
	if n != nil {
		if k := v1alpha1.DoNotDisrupt(n.Annotations); k != "" {
			return fmt.Sprintf("node %s has %s=true", node, k), nil
		}
	}
	pods, err := from.pods(ctx, node)
	if err != nil {
		return "", fmt.Errorf("listing pods of node %s: %w", node, err)
	}
	for i := range pods {
		if p := &pods[i]; !podutil.IsPodTerminal(p) {
			if k := v1alpha1.DoNotDisrupt(p.Annotations); k != "" {
				return fmt.Sprintf("pod %s/%s has %s=true", p.Namespace, p.Name, k), nil
			}
		}
	}
	return "", nil
}

// noteBlocked logs and records that a method chose nc for reason but
// held keeps it, when that is news: the first time, when what holds it
// changes, and then every blockedNoteEvery.
func (c *Controller) noteBlocked(ctx context.Context, nc *v1alpha1.NodeClaim, reason v1alpha1.DisruptionReason, held string) {
	msg := fmt.Sprintf("%s: not disrupting node %s: %s", reason, nc.Status.NodeName, held)
	if !c.blocked.news(nc.UID, msg, c.now()) {
		return
	}
	klog.FromContext(ctx).V(2).Info("Disruption blocked by do-not-disrupt", "nodeClaim", klog.KObj(nc), "node", nc.Status.NodeName, "reason", reason, "heldBy", held)
	if c.recorder != nil {
		c.recorder.Eventf(nc, nil, corev1.EventTypeNormal, v1alpha1.ReasonDisruptionBlocked, string(reason), "%s", msg)
	}
}

// blockedNotes remembers, per claim, the last blocked note and when it
// was made, across the controller's workers.
type blockedNotes struct {
	mu   sync.Mutex
	last map[types.UID]blockedNote
}

type blockedNote struct {
	msg string
	at  time.Time
}

// news reports whether msg for uid at now is worth saying, and if so
// remembers it. Entries older than blockedNoteEvery are dropped on the
// way, so claims deleted while blocked do not accumulate.
func (b *blockedNotes) news(uid types.UID, msg string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[types.UID]blockedNote{}
	}
	prev, seen := b.last[uid]
	if seen && prev.msg == msg && now.Sub(prev.at) < blockedNoteEvery {
		return false
	}
	for k, n := range b.last {
		if now.Sub(n.at) >= blockedNoteEvery {
			delete(b.last, k)
		}
	}
	b.last[uid] = blockedNote{msg: msg, at: now}
	return true
}

// forget drops uid's note: it is no longer blocked, so being blocked
// again is news.
func (b *blockedNotes) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.last, uid)
}

// cachedHolders reads the manager's cache, through the cluster.IndexPodNode index.
type cachedHolders struct{ kube client.Reader }

func (h cachedHolders) node(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	if err := h.kube.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return &n, nil
}

func (h cachedHolders) pods(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := h.kube.List(ctx, &pods, client.MatchingFields{cluster.IndexPodNode: node}); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// liveHolders reads the API server.
type liveHolders struct{ live kubernetes.Interface }

func (h liveHolders) node(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := h.live.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return n, err
}

func (h liveHolders) pods(ctx context.Context, node string) ([]corev1.Pod, error) {
	pods, err := h.live.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	// The API server selects by node; a client that ignores field
	// selectors (client-go's fake) must not make other nodes' pods count.
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != node }), nil
}
