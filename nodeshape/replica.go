package nodeshape

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// MaxReplicaOptions is how many instance types a fixed-size pool's claim
// may launch as, cheapest first: the plugin's default for a claim's
// options, and as many overrides as one EC2 fleet request takes.
const MaxReplicaOptions = 60

// ReplicaClaim is the claim that keeps fixed-size pool np at its count,
// named name, with no pod: every offer (cheapest first, as
// Offers orders them) of the cheapest offer's zone, capacity
// type and architecture, up to MaxReplicaOptions (more when the pool's
// minValues need them), so that the launch can fall back as any claim's
// does. It returns nil when offers is empty.
func ReplicaClaim(np *v1alpha1.NodePool, name string, offers []Offer) *v1alpha1.NodeClaim {
	if len(offers) == 0 {
		return nil
	}
	t := ForPool(np)
	chosen := offers[0]
	reqs := np.Spec.Template.Spec.Requirements
	var names []string
	var its []*v1alpha1.InstanceType
	for i := range offers {
		o := &offers[i]
		if o.Group() != chosen.Group() || slices.Contains(names, o.InstanceType.Name) {
			continue
		}
		if len(names) >= MaxReplicaOptions && MinValuesUnmet(t, reqs, its, chosen.Zone, chosen.CapacityType) == "" {
			break
		}
		names = append(names, o.InstanceType.Name)
		its = append(its, &o.InstanceType)
	}
	annotations := map[string]string{v1alpha1.AnnotationReplica: "true"}
	if hash, err := PoolHash(np); err == nil {
		annotations[v1alpha1.AnnotationNodePoolHash] = hash
		annotations[v1alpha1.AnnotationNodePoolHashVersion] = PoolHashVersion
	}
	return &v1alpha1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelNodePool: np.Name}, Annotations: annotations, OwnerReferences: OwnedBy(np)},
		Spec: v1alpha1.NodeClaimSpec{
			NodePool:               np.Name,
			Requirements:           ClaimRequirements(reqs, names, chosen.Zone, chosen.CapacityType, chosen.InstanceType.Labels[corev1.LabelArchStable]),
			Labels:                 maps.Clone(t.Labels),
			Annotations:            t.Annotations,
			Taints:                 t.Taints,
			StartupTaints:          t.StartupTaints,
			NodeClassRef:           np.Spec.Template.Spec.NodeClassRef,
			ExpireAfter:            np.Spec.Template.Spec.ExpireAfter,
			TerminationGracePeriod: np.Spec.Template.Spec.TerminationGracePeriod.DeepCopy(),
		},
	}
}
