package virtualnodes

import (
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// claim is a virtual node: an open NodeClaim with the pods nominated to it.
type claim struct {
	name  string
	group *group
	// template is what the claim was nominated with: its pool's when it
	// was made (a NodeClaim's own when restored).
	template nodeshape.Template
	// poolHash is the nodeshape.PoolHash of the pool the template was
	// taken from, stamped on the claim (under nodeshape.PoolHashVersion)
	// so that the provisioner can tell when the pool changed since. Empty
	// on a claim restored from the API server: its stamp, whatever it is,
	// is kept as it was written.
	poolHash string
	options  []*option // still open, cheapest first
	// info is the node the claim would be with its largest open option:
	// the daemonset pods that would run there and the nominated pods. It is
	// in the view, so other pods' topology spread and affinity see it.
	info   *framework.NodeInfo
	dsPods []*corev1.Pod
	// lastNode and lastDS are info's node and daemonset pods when the
	// claim left the view with its last pod: a closed claim a repack
	// moves pods onto comes back with them.
	lastNode  *corev1.Node
	lastDS    []*corev1.Pod
	pods      map[types.UID]*corev1.Pod
	created   time.Time
	lastAdded time.Time
	open      bool
	// bound are pods of a closed claim that were bound, by the node they
	// were bound to; they count on the claim's node until the scheduler's
	// snapshot shows them there.
	bound map[types.UID]string
	// nodeName is the claim's node once it has registered: its pods wait
	// for it (Filter).
	nodeName string
	// written is the object as last read from or written to the API
	// server, nil until it exists there; dirty says it lags behind.
	written *v1alpha1.NodeClaim
	// specPods are the pods the spec last written counts (its requests
	// and the instance types that hold them): what the provisioner
	// launches for.
	specPods map[types.UID]*corev1.Pod
	dirty    bool
	// request is the ProvisioningRequest (namespace/name) whose pods the
	// claim was nominated, stamped on it
	// (v1alpha1.AnnotationProvisioningRequest).
	request string
	// buffer is the CapacityBuffer (namespace/name) whose chunks made the
	// claim, stamped on it (v1alpha1.AnnotationCapacityBuffer).
	buffer string
}

func metaName(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: labels}
}

// newClaimName returns "<pool>-<5 random letters and digits>", the way
// generateName would, but known before the write so the scheduling cycle
// need not wait for the API server.
func newClaimName(pool string) string {
	return pool + "-" + utilrand.String(5)
}

// add nominates pod to the claim: its NodeInfo gets the pod, and the
// options narrow to those that still hold everything.
func (c *claim) add(pod *corev1.Pod, options []*option, now time.Time) {
	c.pods[pod.UID] = pod
	c.info.AddPod(pod)
	c.setOptions(options)
	c.lastAdded = now
	c.dirty = true
}

// setOptions replaces the open options, keeping the NodeInfo on the
// largest of them.
func (c *claim) setOptions(options []*option) {
	c.options = options
	big := largest(options)
	if c.info.Node() == nil || c.info.Node().Labels[corev1.LabelInstanceTypeStable] != big.name {
		c.info.SetNode(c.node(big))
	}
}

// node is the claim's node with instance type o.
func (c *claim) node(o *option) *corev1.Node {
	return c.group.node(c.template, c.name, o)
}

// remove takes a pod off the claim.
func (c *claim) remove(pod *corev1.Pod) {
	if _, ok := c.pods[pod.UID]; !ok {
		return
	}
	delete(c.pods, pod.UID)
	_ = c.info.RemovePod(klog.TODO(), pod)
	c.dirty = true
}

// requests is what the claim's node must hold: nominated and daemonset pods.
func (c *claim) requests() corev1.ResourceList {
	return nodeshape.ResourceList(c.info.Requested, len(c.info.Pods))
}

// object is the NodeClaim as it should be in the API server.
func (c *claim) object() *v1alpha1.NodeClaim {
	np := c.group.pool.np
	names := make([]string, len(c.options))
	for i, o := range c.options {
		names[i] = o.name
	}
	reqs := nodeshape.ClaimRequirements(np.Spec.Template.Spec.Requirements, names, c.group.zone, c.group.capacityType, c.group.arch)
	nc := &v1alpha1.NodeClaim{
		ObjectMeta: metaName(c.name, map[string]string{v1alpha1.LabelNodePool: np.Name}),
		Spec: v1alpha1.NodeClaimSpec{
			NodePool:           np.Name,
			Requirements:       reqs,
			Resources:          v1alpha1.ResourceRequirements{Requests: c.requests()},
			NominatedPods:      int32(len(c.pods)),
			LastNominationTime: &metav1.MicroTime{Time: c.lastAdded},
			Labels:             c.template.Labels,
			Annotations:        c.template.Annotations,
			Taints:             c.template.Taints,
			StartupTaints:      c.template.StartupTaints,
			NodeClassRef:       np.Spec.Template.Spec.NodeClassRef,
			ExpireAfter:        np.Spec.Template.Spec.ExpireAfter,
			// A pool edited later leaves this claim's drain as it was.
			TerminationGracePeriod: np.Spec.Template.Spec.TerminationGracePeriod.DeepCopy(),
		},
	}
	nc.OwnerReferences = nodeshape.OwnedBy(np)
	if c.written != nil {
		nc.ResourceVersion = c.written.ResourceVersion
		nc.UID = c.written.UID
		// An update replaces the whole object: keep what others wrote
		// (do-not-disrupt, say) and the claim's own stamp.
		nc.Annotations = maps.Clone(c.written.Annotations)
		// What the claim was made from stays as it was made, as the API
		// server requires of its node class: a claim restored after a
		// restart hangs off its pool as it is now, which may name
		// another class or lifetimes since.
		nc.Spec.NodeClassRef = c.written.Spec.NodeClassRef
		nc.Spec.ExpireAfter = c.written.Spec.ExpireAfter
		nc.Spec.TerminationGracePeriod = c.written.Spec.TerminationGracePeriod.DeepCopy()
	}
	if c.request != "" {
		if nc.Annotations == nil {
			nc.Annotations = map[string]string{}
		}
		nc.Annotations[v1alpha1.AnnotationProvisioningRequest] = c.request
	}
	if c.buffer != "" {
		if nc.Annotations == nil {
			nc.Annotations = map[string]string{}
		}
		nc.Annotations[v1alpha1.AnnotationCapacityBuffer] = c.buffer
	}
	if c.poolHash != "" {
		if nc.Annotations == nil {
			nc.Annotations = map[string]string{}
		}
		nc.Annotations[v1alpha1.AnnotationNodePoolHash] = c.poolHash
		nc.Annotations[v1alpha1.AnnotationNodePoolHashVersion] = nodeshape.PoolHashVersion
	}
	return nc
}

// describe is the claim's options for humans: "c7.large ($0.031/h) and 12 more".
func (c *claim) describe() string {
	if len(c.options) == 0 {
		return "no options"
	}
	s := fmt.Sprintf("%s ($%s/h)", c.options[0].name, formatPrice(c.options[0].price))
	if n := len(c.options) - 1; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}

func formatPrice(p float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", p), "0"), ".")
}
