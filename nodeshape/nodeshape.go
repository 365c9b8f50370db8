// Package nodeshape is the one place that says what node a NodeClaim
// becomes: its labels, taints, capacity and allocatable for a given
// instance type and offering; which offerings a claim may launch, at what
// price, in what order; whether requirements accept a node; whether
// requested resources fit; and the hash of a pool's template that tells
// when the nodes made from it have drifted (PoolHash). The scheduler plugin judges pods on the node
// built here, the provisioner launches and adopts the node built here, and
// the simulated cloud registers the node built here, so the node the
// scheduler accepted is the node that registers.
package nodeshape

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Template is what a node carries whatever instance type and offering it
// becomes: the pool's labels, annotations and taints as they were when the
// claim was made. A claim keeps its own copy (spec.labels,
// spec.annotations, spec.taints, spec.startupTaints) so that a pool edited
// after nomination does not change the node the scheduler already judged;
// drift compares the pool's hash then and now (PoolHash).
type Template struct {
	// Labels, nodeforge.dev/nodepool among them.
	Labels map[string]string
	// Annotations the provisioner sets on the node when it adopts it (a
	// kubelet cannot register a node with annotations of its choosing).
	Annotations map[string]string
	// Taints the node keeps.
	Taints []corev1.Taint
	// StartupTaints the node registers with, lifted by others once it is
	// ready; pods need not tolerate them to be provisioned for.
	StartupTaints []corev1.Taint
}

// ForPool is the template of a new claim of the pool.
func ForPool(np *v1alpha1.NodePool) Template {
	labels := np.Spec.Template.ObjectMeta.NodeLabels()
	labels[v1alpha1.LabelNodePool] = np.Name
	return Template{
		Labels:        labels,
		Annotations:   maps.Clone(np.Spec.Template.ObjectMeta.Annotations),
		Taints:        v1alpha1.CoreTaints(np.Spec.Template.Spec.Taints),
		StartupTaints: v1alpha1.CoreTaints(np.Spec.Template.Spec.StartupTaints),
	}
}

// ForClaim is the template a claim was nominated with.
func ForClaim(nc *v1alpha1.NodeClaim) Template {
	labels := maps.Clone(nc.Spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelNodePool] = nc.Spec.NodePool
	return Template{Labels: labels, Annotations: nc.Spec.Annotations, Taints: nc.Spec.Taints, StartupTaints: nc.Spec.StartupTaints}
}

// NodeLabels are the labels of a node of the template launched as instance
// type it in zone with capacityType, hostname aside. Nodeforge's and the
// well-known labels win over the type's, and the type's over the pool's.
// Karpenter's keys of the capacity type and of the instance attribute
// labels are set too, to the same values (docs/install.md, "Beside
// Karpenter").
func (t Template) NodeLabels(it *v1alpha1.InstanceType, zone, capacityType string) map[string]string {
	labels := make(map[string]string, len(t.Labels)+len(it.Labels)+5)
	maps.Copy(labels, t.Labels)
	labels[corev1.LabelOSStable] = "linux"
	maps.Copy(labels, it.Labels)
	for k, v := range it.Labels {
		if v1alpha1.IsInstanceLabel(k) {
			labels[v1alpha1.KarpenterInstanceLabel(k)] = v
		}
	}
	labels[corev1.LabelInstanceTypeStable] = it.Name
	labels[corev1.LabelTopologyZone] = zone
	labels[v1alpha1.LabelCapacityType] = capacityType
	labels[v1alpha1.LabelKarpenterCapacityType] = capacityType
	labels[v1alpha1.LabelNodePool] = t.Labels[v1alpha1.LabelNodePool]
	// kube-controller-manager's node lifecycle controller copies the
	// operating system and architecture to their deprecated beta keys on
	// every node, and pods may still select on those.
	for stable, beta := range betaLabels {
		if v, ok := labels[stable]; ok {
			labels[beta] = v
		}
	}
	return labels
}

// betaLabels are the deprecated keys the node lifecycle controller keeps
// equal to the stable ones.
var betaLabels = map[string]string{
	corev1.LabelOSStable:   "beta.kubernetes.io/os",
	corev1.LabelArchStable: "beta.kubernetes.io/arch",
}

// Node is the node as the scheduler sees it once it is ready for pods:
// the template's labels, annotations and taints (startup taints gone),
// name as its hostname, and the instance type's capacity and allocatable.
func (t Template) Node(name string, it *v1alpha1.InstanceType, zone, capacityType string) *corev1.Node {
	labels := t.NodeLabels(it, zone, capacityType)
	labels[corev1.LabelHostname] = name
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: maps.Clone(t.Annotations)},
		Spec:       corev1.NodeSpec{Taints: slices.Clone(t.Taints)},
		Status:     corev1.NodeStatus{Capacity: it.Capacity.DeepCopy(), Allocatable: it.Allocatable.DeepCopy()},
	}
}

// RegistrationTaints are the taints the node registers with: its own,
// its startup taints, and nodeforge.dev/binding, which keeps other
// schedulers off the room meant for the claim's pods until they are bound.
func (t Template) RegistrationTaints() []corev1.Taint {
	out := slices.Concat(t.Taints, t.StartupTaints)
	return append(out, corev1.Taint{Key: v1alpha1.TaintBinding, Effect: corev1.TaintEffectNoSchedule})
}
