package nodeshape

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/utils/ptr"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// PoolHashVersion is the version of what PoolHash hashes. Change it
// whenever PoolHash would give another answer for the same pool (a field
// added or dropped, another encoding): claims stamped under another
// version are stamped again rather than drifted, so an upgrade does not
// replace every node. (Karpenter records a hash version beside its
// NodePool hash for the same reason.)
const PoolHashVersion = "v1"

// hashedTemplate is what of a pool's template decides the node it
// launches: labels, annotations, taints, startup taints, requirements
// and the node class it names. ExpireAfter and terminationGracePeriod
// are left out: they govern a node's end, not what it is, and a claim
// copies expireAfter when it is made anyway.
type hashedTemplate struct {
	Labels        map[string]v1alpha1.LabelValue                  `json:"labels,omitempty"`
	Annotations   map[string]string                               `json:"annotations,omitempty"`
	Taints        []v1alpha1.Taint                                `json:"taints,omitempty"`
	StartupTaints []v1alpha1.Taint                                `json:"startupTaints,omitempty"`
	Requirements  []v1alpha1.NodeSelectorRequirementWithMinValues `json:"requirements,omitempty"`
	NodeClassRef  v1alpha1.NodeClassReference                     `json:"nodeClassRef"`
}

// PoolHash is the hash of the launch-relevant part of the pool's template
// (see hashedTemplate). The scheduler plugin stamps it on each claim it
// makes (v1alpha1.AnnotationNodePoolHash); a claim whose stamp differs
// from its pool's hash now was made from a template the pool no longer
// has. Order does not count where it means nothing to the node: taints
// are a set, and requirements (and the values of each) all hold at once,
// so reordering them drifts nothing. Maps hash alike whatever their
// order, since encoding/json sorts their keys.
func PoolHash(np *v1alpha1.NodePool) (string, error) {
	t := np.Spec.Template
	h := hashedTemplate{
		Labels:        t.ObjectMeta.Labels,
		Annotations:   t.ObjectMeta.Annotations,
		Taints:        sortedTaints(t.Spec.Taints),
		StartupTaints: sortedTaints(t.Spec.StartupTaints),
		Requirements:  sortedRequirements(t.Spec.Requirements),
		NodeClassRef:  t.Spec.NodeClassRef,
	}
	sum, err := Hash(h)
	if err != nil {
		return "", fmt.Errorf("hashing the template of nodepool %s: %w", np.Name, err)
	}
	return sum, nil
}

// Hash is the one hash Nodeforge stamps on what it makes: 16 hex digits,
// the first 8 bytes of the SHA-256 of v's JSON encoding. encoding/json
// sorts map keys, so equal values hash equal whatever order their maps
// were built in. The pool hash, the node class spec hash and the AWS
// launch template's name are all this; changing it changes every stamp
// at once, which drifts every node, so it does not change.
func Hash(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8]), nil
}

func sortedTaints(taints []v1alpha1.Taint) []v1alpha1.Taint {
	out := slices.Clone(taints)
	slices.SortFunc(out, func(a, b v1alpha1.Taint) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Effect, b.Effect))
	})
	return out
}

func sortedRequirements(reqs []v1alpha1.NodeSelectorRequirementWithMinValues) []v1alpha1.NodeSelectorRequirementWithMinValues {
	out := make([]v1alpha1.NodeSelectorRequirementWithMinValues, len(reqs))
	for i, r := range reqs {
		out[i] = *r.DeepCopy()
		slices.Sort(out[i].Values)
	}
	slices.SortFunc(out, func(a, b v1alpha1.NodeSelectorRequirementWithMinValues) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Operator, b.Operator), slices.Compare(a.Values, b.Values),
			cmp.Compare(ptr.Deref(a.MinValues, 0), ptr.Deref(b.MinValues, 0)))
	})
	return out
}

// Unmet returns the first of reqs that a node with these labels does not
// meet, or nil when it meets them all. Requirements are read as Accepts
// reads them: one on a key the node does not carry, and that is not a
// well-known label every Nodeforge node has, is not applied.
func Unmet(reqs []v1alpha1.NodeSelectorRequirementWithMinValues, labels map[string]string) (*v1alpha1.NodeSelectorRequirementWithMinValues, error) {
	for i := range reqs {
		q := reqs[i]
		if _, ok := labels[q.Key]; !ok && !wellKnown(q.Key) {
			continue
		}
		ok, err := matches([]v1alpha1.NodeSelectorRequirementWithMinValues{q}, labels)
		if err != nil {
			return nil, err
		}
		if !ok {
			return &q, nil
		}
	}
	return nil, nil
}
