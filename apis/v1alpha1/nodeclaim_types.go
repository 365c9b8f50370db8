package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeClaim is one virtual node: the scheduler nominates pods to it before it
// exists, the provisioner launches an instance for it, and it then tracks the
// real node until that node is removed.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=nc
// +kubebuilder:subresource:status
// +kubebuilder:selectablefield:JSONPath=`.spec.nodePool`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.nodePool`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.instanceType`
// +kubebuilder:printcolumn:name="Options",type=integer,JSONPath=`.status.instanceTypeOptions`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.status.zone`
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacityType`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.spec.nominatedPods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Replacement",type=string,JSONPath=`.metadata.annotations.nodeforge\.dev/replacement`,priority=1
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.status.providerID`,priority=1
type NodeClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NodeClaimSpec `json:"spec"`
	// Status is what is known of the claim's instance and node. Defaulted,
	// so that a claim the provisioner has not yet written reads as
	// Nominating.
	// +kubebuilder:default={}
	// +optional
	Status NodeClaimStatus `json:"status,omitempty"`
}

// NodeClaimSpec is what the node must be: the pool it comes from, the
// requirements every pod nominated to it imposes (among them the instance
// types still open), and the resources those pods and the daemonsets request.
//
// What the node is made from (its pool, node class, labels, annotations,
// taints and startup taints) is fixed when the claim is made: the API
// server refuses a change to it, and the provisioner checks it against
// the pool before launch and before adoption. Four fields stay mutable:
// requirements and resources, which the scheduler rewrites as pods are
// nominated and the provisioner rewrites when it repacks a batch (the
// provisioner checks the requirements against the pool); and expireAfter
// and terminationGracePeriod, which only shorten or lengthen the node's
// life and drain, as deleting the claim (which the same writer may do)
// would.
//
// +kubebuilder:validation:XValidation:message="labels are immutable: they are the pool's template labels, copied when the claim is made",rule="has(self.labels) == has(oldSelf.labels) && (!has(self.labels) || self.labels == oldSelf.labels)",fieldPath=".labels"
// +kubebuilder:validation:XValidation:message="annotations are immutable: they are the pool's template annotations, copied when the claim is made",rule="has(self.annotations) == has(oldSelf.annotations) && (!has(self.annotations) || self.annotations == oldSelf.annotations)",fieldPath=".annotations"
// +kubebuilder:validation:XValidation:message="taints are immutable: they are the pool's template taints, copied when the claim is made",rule="has(self.taints) == has(oldSelf.taints) && (!has(self.taints) || self.taints == oldSelf.taints)",fieldPath=".taints"
// +kubebuilder:validation:XValidation:message="startupTaints are immutable: they are the pool's template startup taints, copied when the claim is made",rule="has(self.startupTaints) == has(oldSelf.startupTaints) && (!has(self.startupTaints) || self.startupTaints == oldSelf.startupTaints)",fieldPath=".startupTaints"
type NodeClaimSpec struct {
	// NodePool is the pool the claim was made from. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:message="nodePool is immutable",rule="self == oldSelf"
	// +required
	NodePool string `json:"nodePool"`
	// Requirements the node must satisfy: the pool's, narrowed to the
	// claim's open instance types, zone, capacity type and architecture.
	// Mutable: the scheduler narrows the instance types as it nominates
	// pods, and the provisioner rewrites them when it repacks a batch.
	// The provisioner launches a claim only if every requirement of its
	// pool is here and no looser.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Requirements []NodeSelectorRequirementWithMinValues `json:"requirements,omitempty"`
	// Resources requested by the nominated pods plus the daemonset
	// overhead. Mutable, as requirements are.
	// +optional
	Resources ResourceRequirements `json:"resources,omitempty"`
	// NominatedPods is how many pods are nominated to the claim, as the
	// scheduler last wrote it with requirements and resources (and the
	// provisioner when it repacks a batch): the provisioner waits until it
	// sees that many pods naming the claim before it launches. Mutable.
	// It is in the spec, with what those pods need, so that each
	// nomination is one write of the claim.
	// +kubebuilder:validation:Minimum=0
	// +optional
	NominatedPods int32 `json:"nominatedPods,omitempty"`
	// LastNominationTime is when a pod was last nominated to the claim;
	// the provisioner launches once it is older than the batch idle
	// duration. Microseconds, not seconds: a time truncated to the second
	// would make the 1 s batch window anything from 0 to 1 s. Mutable.
	// +optional
	LastNominationTime *metav1.MicroTime `json:"lastNominationTime,omitempty"`
	// Labels the node gets when it registers, beside the well-known labels
	// of its instance type and offering: the pool's template labels as they
	// were when the claim was made, and nodeforge.dev/nodepool, so that a
	// pool edited after nomination does not change the node the scheduler
	// already judged. Immutable. The keys a pool's template refuses are
	// refused here too (nodeforge.dev/nodepool aside): among them
	// node-role.kubernetes.io/ and node-restriction.kubernetes.io/ keys,
	// which no kubelet may set on its node.
	// +kubebuilder:validation:XValidation:message="label domain \"nodeforge.dev\" is reserved for Nodeforge; only nodeforge.dev/nodepool may be set",rule="self.all(k, !k.matches('^([^/]*\\\\.)?nodeforge\\\\.dev/') || k == 'nodeforge.dev/nodepool')"
	// +kubebuilder:validation:XValidation:message="label domains \"karpenter.sh\" and \"karpenter.k8s.aws\" are Karpenter's: Nodeforge sets karpenter.sh/capacity-type on every node itself, and Karpenter would count a node with its other labels as its own",rule="self.all(k, !k.matches('^([^/]*\\\\.)?karpenter\\\\.(sh|k8s\\\\.aws)/'))"
	// +kubebuilder:validation:XValidation:message="label keys must be qualified names, such as intent or example.com/team",rule="self.all(k, k.matches('^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\\\\.)*[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))"
	// +kubebuilder:validation:XValidation:message="label keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge, and a kubelet may not set node-role or node-restriction labels; only node.kubernetes.io/ and kubelet.kubernetes.io/ keys (other than node.kubernetes.io/instance-type) may be set",rule="self.all(k, !k.matches('^([^/]*\\\\.)?(kubernetes\\\\.io|k8s\\\\.io)/') || ((k.startsWith('node.kubernetes.io/') || k.startsWith('kubelet.kubernetes.io/')) && k != 'node.kubernetes.io/instance-type'))"
	// +kubebuilder:validation:MaxProperties=101
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations the node gets when it is adopted: the pool's template
	// annotations as they were when the claim was made. Immutable.
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Taints the node gets when it registers: the pool's template taints
	// as they were when the claim was made. Immutable.
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	Taints []corev1.Taint `json:"taints,omitempty"`
	// StartupTaints the node gets when it registers, removed by others:
	// the pool's template startup taints as they were when the claim was
	// made. Immutable.
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	StartupTaints []corev1.Taint `json:"startupTaints,omitempty"`
	// NodeClassRef names the provider-specific launch settings: the
	// pool's template's when the claim was made. Immutable.
	// +kubebuilder:validation:XValidation:message="nodeClassRef is immutable: it is the pool's template's, copied when the claim is made",rule="self == oldSelf"
	// +required
	NodeClassRef NodeClassReference `json:"nodeClassRef"`
	// ExpireAfter is copied from the pool when the claim is made, with no
	// floor of its own (see TerminationGracePeriod). Mutable: whoever may
	// write the claim may delete it, which ends the node's life sooner
	// than any expireAfter; changing it grants nothing more.
	// +kubebuilder:default="720h"
	// +optional
	ExpireAfter NillableDuration `json:"expireAfter,omitempty"`
	// TerminationGracePeriod is copied from the pool when the claim is
	// made. Once the claim has been deleting this long, its node is done
	// draining: each pod left is deleted, PDBs notwithstanding, early
	// enough that its own terminationGracePeriodSeconds ends by then, and
	// the instance is terminated. Unset: draining waits on PDBs for as
	// long as they hold. No floor, unlike the pool's: a claim copies what
	// its pool held when the claim was made, and a pool stored before the
	// floor must still launch. Mutable, as expireAfter is: a writer of the
	// claim could delete it instead.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:XValidation:message="terminationGracePeriod must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m",rule="self.matches('^([0-9]{1,6}(s|m|h))+$')"
	// +optional
	TerminationGracePeriod *metav1.Duration `json:"terminationGracePeriod,omitempty"`
}

// ResourceRequirements are the resources a NodeClaim must hold.
type ResourceRequirements struct {
	// Requests is the sum of the nominated pods' requests (init containers,
	// sidecars and pod overhead included) and the daemonset overhead.
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

// NodeClaimPhase is where a NodeClaim is in its life.
// +kubebuilder:validation:Enum=Nominating;Launching;Launched;Registered;Initialized;Disrupting
type NodeClaimPhase string

// The phases of a NodeClaim, in order. The provisioner acts on the phase:
// each step moves the claim to the next one.
const (
	// NodeClaimNominating: the claim is open; the scheduler may nominate more pods.
	NodeClaimNominating NodeClaimPhase = "Nominating"
	// NodeClaimLaunching: the provisioner closed the claim to nominations
	// and is launching its instance.
	NodeClaimLaunching NodeClaimPhase = "Launching"
	// NodeClaimLaunched: an instance was created for the claim.
	NodeClaimLaunched NodeClaimPhase = "Launched"
	// NodeClaimRegistered: the instance's node joined and was adopted.
	NodeClaimRegistered NodeClaimPhase = "Registered"
	// NodeClaimInitialized: the node is ready and its nominated pods are bound.
	NodeClaimInitialized NodeClaimPhase = "Initialized"
	// NodeClaimDisrupting: the provisioner is removing the node for a
	// disruption reason (empty, underutilized, expired, drifted), its
	// replacement, if its pods needed one, already initialized; the claim
	// is being deleted. A claim deleted for another reason (a deadline
	// missed, garbage collection) keeps the phase it had.
	NodeClaimDisrupting NodeClaimPhase = "Disrupting"
)

// NodeClaimStatus is what is known of the claim's instance and node.
type NodeClaimStatus struct {
	// Phase is where the claim is in its life, and so what the provisioner
	// does next: it acts on the phase, and records each step it completes
	// as a condition. The conditions do not drive it.
	// The scheduler writes only the spec: a claim whose status was never
	// written reads as Nominating.
	// +kubebuilder:default=Nominating
	// +optional
	Phase NodeClaimPhase `json:"phase,omitempty"`
	// Conditions record when each step happened: Launched (False, reason
	// AccessDenied, when the cloud refused the launch), Registered,
	// Initialized (Launched or Registered False, reason OutsideNodePool,
	// when the claim asked for more than its pool makes; it is deleted), Empty (True while the node runs no pod but
	// daemonset pods, set only under a pool's consolidateAfter) and
	// Drifted (True, with a reason and a message saying what, once the
	// pool's template or node class changed since launch or the node no
	// longer meets the pool's requirements; absent otherwise).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ProviderID of the launched instance, as its node will report it.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// NodeName of the registered node.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// InstanceType chosen at launch.
	// +optional
	InstanceType string `json:"instanceType,omitempty"`
	// InstanceTypeOptions is how many instance types the claim could
	// become when the provisioner closed it to nominations (its repack may
	// narrow it); 1 once launched. While the claim is Nominating, its
	// open types are the spec's instance-type requirement.
	// +optional
	InstanceTypeOptions int32 `json:"instanceTypeOptions,omitempty"`
	// Zone chosen at launch.
	// +optional
	Zone string `json:"zone,omitempty"`
	// CapacityType chosen at launch: spot, on-demand or reserved.
	// +optional
	CapacityType string `json:"capacityType,omitempty"`
	// Capacity of the launched instance.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// Allocatable of the launched instance, as expected before it registers.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// Price of the launched instance in dollars per hour, e.g. "0.0416".
	// +optional
	Price string `json:"price,omitempty"`
	// ImageID is the machine image the instance was launched from, where
	// the cloud has one (an AMI on AWS); a node whose image its class no
	// longer resolves to has drifted.
	// +optional
	ImageID string `json:"imageID,omitempty"`
}

// NodeClaimList is a list of NodeClaims.
// +kubebuilder:object:root=true
type NodeClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeClaim `json:"items"`
}
