package disruption

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Drift replaces a node that is no longer what its pool would launch now:
// its pool's template changed since the claim was made, its node class
// changed since the instance was launched, or its labels no longer meet
// the pool's requirements. Like expiration, the node is drained through
// the Eviction API and its pods provisioned for again as they go pending.
//
// What was launched is read from stamps on the claim. The pool's hash
// (nodeshape.PoolHash, under nodeshape.PoolHashVersion) is stamped by the
// scheduler plugin when it makes the claim, because the claim's template
// is the pool's at that moment; the node class's hash is stamped by the
// provisioner at launch, from the class it launches with. A claim made
// before stamping existed, or stamped under another hash version, is
// stamped now with the current hashes rather than drifted: nothing says
// its node differs, and replacing every node on upgrade would be worse
// than missing a change made before it.
type Drift struct {
	kube    client.Client // the cache, for deciding; writes the stamps
	classes []cloudprovider.NodeClass
}

var _ Method = &Drift{}

// NewDrift returns the drift method, reading node classes through the
// cloud provider's declarations of them.
func NewDrift(kube client.Client, classes []cloudprovider.NodeClass) *Drift {
	return &Drift{kube: kube, classes: classes}
}

// Reason is Drifted.
func (d *Drift) Reason() v1alpha1.DisruptionReason { return v1alpha1.DisruptionReasonDrifted }

// Candidate keeps the claim's Drifted condition, and chooses the claim
// once the condition is recorded: the condition is written first, so a
// claim disrupted for drift always says why on itself. Unlike the
// condition, which the caller writes, a missing stamp is written here
// (a metadata patch, which leaves nc at the written version).
func (d *Drift) Candidate(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (Verdict, error) {
	reason, why, err := d.drifted(ctx, nc, pool)
	if err != nil {
		return Verdict{}, err
	}
	if reason == "" {
		meta.RemoveStatusCondition(&nc.Status.Conditions, v1alpha1.ConditionDrifted)
		return Verdict{}, nil
	}
	if meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionDrifted, Status: metav1.ConditionTrue, Reason: reason, Message: why, ObservedGeneration: nc.Generation}) {
		klog.FromContext(ctx).Info("Nodeclaim drifted", "nodeClaim", klog.KObj(nc), "node", nc.Status.NodeName, "reason", reason, "why", why)
		return Verdict{}, nil // the caller writes the condition and asks again
	}
	return Verdict{Disrupt: true, Why: "drifted: " + why}, nil
}

// StillCandidate: a drifted node stays drifted; a pool edited back in the
// moment between deciding and tainting is not worth a second look.
func (d *Drift) StillCandidate(context.Context, *v1alpha1.NodeClaim) (bool, error) {
	return true, nil
}

// drifted says whether and why the claim's node has drifted, most
// specific first, and stamps a claim that lacks a stamp.
func (d *Drift) drifted(ctx context.Context, nc *v1alpha1.NodeClaim, pool *v1alpha1.NodePool) (reason, why string, err error) {
	var node corev1.Node
	if err := d.kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &node); err != nil {
		return "", "", client.IgnoreNotFound(err) // a node gone is the garbage collector's
	}
	unmet, err := nodeshape.Unmet(pool.Spec.Template.Spec.Requirements, node.Labels)
	if err != nil {
		return "", "", fmt.Errorf("reading the requirements of nodepool %s: %w", pool.Name, err)
	}
	if unmet != nil {
		return v1alpha1.DriftedByRequirements, fmt.Sprintf("node no longer satisfies requirement %s", describe(unmet)), nil
	}

	stamps := map[string]string{}
	poolHash, err := nodeshape.PoolHash(pool)
	if err != nil {
		return "", "", err
	}
	switch {
	case nc.Annotations[v1alpha1.AnnotationNodePoolHash] == "" || nc.Annotations[v1alpha1.AnnotationNodePoolHashVersion] != nodeshape.PoolHashVersion:
		stamps[v1alpha1.AnnotationNodePoolHash] = poolHash
		stamps[v1alpha1.AnnotationNodePoolHashVersion] = nodeshape.PoolHashVersion
	case nc.Annotations[v1alpha1.AnnotationNodePoolHash] != poolHash:
		return v1alpha1.DriftedByNodePool, fmt.Sprintf("NodePool %s template changed", pool.Name), nil
	}

	ref := nc.Spec.NodeClassRef
	classHash, imageWhy, served, err := cloudprovider.NodeClassDrift(ctx, d.kube, d.classes, nc)
	switch {
	case apierrors.IsNotFound(err) || !served:
		// A class that is gone or of a kind not served launches nothing
		// (the pool says so in its Ready condition); what the node was
		// launched with cannot be compared, and is not judged.
	case err != nil:
		return "", "", err
	case nc.Annotations[v1alpha1.AnnotationNodeClassHash] == "":
		stamps[v1alpha1.AnnotationNodeClassHash] = classHash
	case nc.Annotations[v1alpha1.AnnotationNodeClassHash] != classHash:
		return v1alpha1.DriftedByNodeClass, fmt.Sprintf("%s %s changed", ref.Kind, ref.Name), nil
	}
	if imageWhy != "" {
		return v1alpha1.DriftedByImage, imageWhy, nil
	}
	return "", "", d.stamp(ctx, nc, stamps)
}

// stamp records the hashes a claim made before drift detection lacks,
// so that a later change to its pool or node class is seen as one.
func (d *Drift) stamp(ctx context.Context, nc *v1alpha1.NodeClaim, stamps map[string]string) error {
	if len(stamps) == 0 {
		return nil
	}
	base := nc.DeepCopy()
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	for k, v := range stamps {
		nc.Annotations[k] = v
	}
	if err := d.kube.Patch(ctx, nc, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("stamping nodeclaim %s with the hashes it was launched with: %w", nc.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Stamped nodeclaim with the current hashes of its pool and node class", "nodeClaim", klog.KObj(nc), "stamps", stamps)
	return nil
}

// describe is a requirement for people: "topology.kubernetes.io/zone In [zone-a zone-b]".
func describe(q *v1alpha1.NodeSelectorRequirementWithMinValues) string {
	if len(q.Values) == 0 {
		return q.Key + " " + string(q.Operator)
	}
	return fmt.Sprintf("%s %s [%s]", q.Key, q.Operator, strings.Join(q.Values, " "))
}
