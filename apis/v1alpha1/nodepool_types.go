package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodePool says what Nodeforge may launch for pods that fit no existing node:
// the node template, the limits of the pool and how its nodes are disrupted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=np
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="NodeClass",type=string,JSONPath=`.spec.template.spec.nodeClassRef.name`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.resources.memory`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:message="nodepool names must be at most 57 characters, so that its nodeclaims' names (the pool's name and 6 more) fit in a label value",rule="self.metadata.name.size() <= 57"
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec NodePoolSpec `json:"spec"`
	// +optional
	Status NodePoolStatus `json:"status,omitempty"`
}

// NodePoolSpec is the desired state of a NodePool.
type NodePoolSpec struct {
	// Template describes the NodeClaims, and so the nodes, of this pool.
	// +required
	Template NodeClaimTemplate `json:"template"`
	// Disruption says when nodes of this pool may be removed or replaced.
	// +kubebuilder:default={consolidateAfter: "0s"}
	// +optional
	Disruption Disruption `json:"disruption,omitempty"`
	// Limits caps the total capacity of the pool's nodes, counting the ones
	// still launching; nothing is launched past them.
	// +optional
	Limits Limits `json:"limits,omitempty"`
	// Repair says when a node of the pool is unhealthy, and so replaced:
	// when one of its conditions matches a policy for longer than the
	// policy's toleration. Unset: Ready False or Unknown for 30m (the
	// conditions and toleration Karpenter's node repair uses for every
	// provider). Set with no policies: the pool's nodes are not repaired.
	// Repair is rate-limited per zone as kube-controller-manager's node
	// lifecycle controller limits evictions, and none is done in a pool
	// more than 20% of whose nodes are unhealthy.
	// +optional
	Repair *Repair `json:"repair,omitempty"`
	// Weight orders pools: a pod goes to the highest-weight pool that can
	// hold it. Pools without a weight come last.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Weight *int32 `json:"weight,omitempty"`
}

// Limits is the most capacity a pool may have, per resource (cpu, memory,
// nvidia.com/gpu, ...).
// +kubebuilder:validation:MaxProperties=30
// +kubebuilder:validation:XValidation:message="limits must not be negative",rule="self.all(r, !string(self[r]).startsWith('-'))"
type Limits corev1.ResourceList

// NodeClaimTemplate is the template every NodeClaim of a pool starts from.
type NodeClaimTemplate struct {
	// +optional
	ObjectMeta NodeClaimTemplateObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec NodeClaimTemplateSpec `json:"spec"`
}

// NodeClaimTemplateObjectMeta holds the labels and annotations put on every
// node of a pool.
type NodeClaimTemplateObjectMeta struct {
	// Labels put on every node of the pool. Pods select them with nodeSelector
	// or node affinity.
	// +kubebuilder:validation:XValidation:message="label domain \"nodeforge.dev\" is reserved for Nodeforge",rule="self.all(k, !k.matches('^([^/]*\\\\.)?nodeforge\\\\.dev/'))"
	// +kubebuilder:validation:XValidation:message="label domains \"karpenter.sh\" and \"karpenter.k8s.aws\" are Karpenter's: Nodeforge sets karpenter.sh/capacity-type on every node itself, and Karpenter would count a node with its other labels as its own",rule="self.all(k, !k.matches('^([^/]*\\\\.)?karpenter\\\\.(sh|k8s\\\\.aws)/'))"
	// +kubebuilder:validation:XValidation:message="label keys must be qualified names, such as intent or example.com/team",rule="self.all(k, k.matches('^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\\\\.)*[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))"
	// +kubebuilder:validation:XValidation:message="label keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge, and a kubelet may not set node-role or node-restriction labels; only node.kubernetes.io/ and kubelet.kubernetes.io/ keys (other than node.kubernetes.io/instance-type) may be set",rule="self.all(k, !k.matches('^([^/]*\\\\.)?(kubernetes\\\\.io|k8s\\\\.io)/') || ((k.startsWith('node.kubernetes.io/') || k.startsWith('kubelet.kubernetes.io/')) && k != 'node.kubernetes.io/instance-type'))"
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`
	// Annotations put on every node of the pool (by the provisioner, when
	// it adopts the node). A change to them drifts the pool's nodes.
	// +kubebuilder:validation:XValidation:message="annotation domain \"nodeforge.dev\" is reserved for Nodeforge",rule="self.all(k, !k.matches('^([^/]*\\\\.)?nodeforge\\\\.dev/'))"
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LabelValue is the value of a label on the pool's nodes, checked as the
// API server checks a Node's label values. It is a type of its own so that
// the schema bounds its length, which keeps the rule cheap to evaluate.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:message="label values must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit",rule="self.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')"
type LabelValue string

// NodeLabels returns the template's labels as a Node carries them.
func (m NodeClaimTemplateObjectMeta) NodeLabels() map[string]string {
	out := make(map[string]string, len(m.Labels))
	for k, v := range m.Labels {
		out[k] = string(v)
	}
	return out
}

// NodeClaimTemplateSpec is the spec part of a NodeClaimTemplate.
type NodeClaimTemplateSpec struct {
	// Requirements narrow what may be launched, on well-known labels
	// (node.kubernetes.io/instance-type, topology.kubernetes.io/zone,
	// kubernetes.io/arch, nodeforge.dev/capacity-type, ...) or on the pool's
	// own labels.
	// +kubebuilder:validation:XValidation:message="requirement keys in the domain \"nodeforge.dev\" are reserved; only nodeforge.dev/capacity-type and the instance attribute labels (nodeforge.dev/instance-category, -family, -generation, -size, -cpu, -cpu-manufacturer, -memory, -gpu-name, -gpu-count, -gpu-manufacturer, -gpu-memory, -local-nvme, -hypervisor, -network-bandwidth, -encryption-in-transit-supported) may be required",rule="self.all(r, !r.key.matches('^([^/]*\\\\.)?nodeforge\\\\.dev/') || r.key == 'nodeforge.dev/capacity-type' || r.key.matches('^nodeforge\\\\.dev/instance-(category|family|generation|size|cpu|cpu-manufacturer|memory|gpu-name|gpu-count|gpu-manufacturer|gpu-memory|local-nvme|hypervisor|network-bandwidth|encryption-in-transit-supported)$'))"
	// +kubebuilder:validation:XValidation:message="requirement keys in the domains \"karpenter.sh\" and \"karpenter.k8s.aws\" are Karpenter's: require nodeforge.dev/capacity-type and the nodeforge.dev/instance-* labels instead (nodeforge-convert rewrites them)",rule="self.all(r, !r.key.matches('^([^/]*\\\\.)?karpenter\\\\.(sh|k8s\\\\.aws)/'))"
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Requirements []NodeSelectorRequirementWithMinValues `json:"requirements,omitempty"`
	// Taints put on every node of the pool; only pods that tolerate them run there.
	// +kubebuilder:validation:XValidation:message="taint domain \"nodeforge.dev\" is reserved for Nodeforge",rule="self.all(t, !t.key.startsWith('nodeforge.dev/'))"
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	Taints []Taint `json:"taints,omitempty"`
	// StartupTaints are put on a node when it starts and removed by someone
	// else (a CNI or a node agent) when the node is ready for work. Pods need
	// not tolerate them to be provisioned for.
	// +kubebuilder:validation:XValidation:message="taint domain \"nodeforge.dev\" is reserved for Nodeforge",rule="self.all(t, !t.key.startsWith('nodeforge.dev/'))"
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	StartupTaints []Taint `json:"startupTaints,omitempty"`
	// NodeClassRef names the provider-specific launch settings.
	// +required
	NodeClassRef NodeClassReference `json:"nodeClassRef"`
	// ExpireAfter is how long a node may live before it is replaced, or Never.
	// +kubebuilder:default="720h"
	// +optional
	ExpireAfter NillableDuration `json:"expireAfter,omitempty"`
	// TerminationGracePeriod caps how long draining a node may take,
	// counted from when its NodeClaim is deleted: each pod still there is
	// deleted, regardless of PDBs, early enough that its own
	// terminationGracePeriodSeconds ends by then, and the instance is
	// terminated at the latest then. Copied onto each NodeClaim when it is
	// made. Unset: no cap.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(s|m|h))+$`
	// +kubebuilder:validation:MaxLength=12
	// +optional
	TerminationGracePeriod *metav1.Duration `json:"terminationGracePeriod,omitempty"`
}

// Taint is a taint on the pool's nodes: corev1.Taint's key, value and
// effect, bounded and checked as the API server checks a Node's taints, so
// a pool whose nodes could never register is refused when it is created.
type Taint struct {
	// Key is a qualified name, such as dedicated or example.com/gpu.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:XValidation:message="taint keys must be qualified names, such as dedicated or example.com/gpu",rule="self.matches('^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\\\\.)*[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')"
	// +required
	Key string `json:"key"`
	// Value, like a label value: empty, or letters, digits, '-', '_' and '.'.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:message="taint values must be empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit",rule="self.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')"
	// +optional
	Value string `json:"value,omitempty"`
	// Effect is NoSchedule, PreferNoSchedule or NoExecute.
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	// +required
	Effect corev1.TaintEffect `json:"effect"`
}

// Core returns the taint as a Node carries it.
func (t Taint) Core() corev1.Taint {
	return corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
}

// CoreTaints returns taints as a Node carries them.
func CoreTaints(taints []Taint) []corev1.Taint {
	if taints == nil {
		return nil
	}
	out := make([]corev1.Taint, len(taints))
	for i, t := range taints {
		out[i] = t.Core()
	}
	return out
}

// ConsolidationPolicy says which nodes consolidation may remove.
// +kubebuilder:validation:Enum=WhenEmpty;WhenEmptyOrUnderutilized
type ConsolidationPolicy string

// The consolidation policies.
const (
	ConsolidationPolicyWhenEmpty                ConsolidationPolicy = "WhenEmpty"
	ConsolidationPolicyWhenEmptyOrUnderutilized ConsolidationPolicy = "WhenEmptyOrUnderutilized"
)

// Disruption configures how nodes of a pool are disrupted.
type Disruption struct {
	// ConsolidationPolicy: WhenEmpty removes nodes running no pods but
	// daemonset pods; WhenEmptyOrUnderutilized also removes or replaces nodes
	// whose pods fit elsewhere.
	// +kubebuilder:default=WhenEmptyOrUnderutilized
	// +optional
	ConsolidationPolicy ConsolidationPolicy `json:"consolidationPolicy,omitempty"`
	// ConsolidateAfter is how long a node must have had no pod added or
	// removed before consolidation considers it, or Never.
	// +required
	ConsolidateAfter NillableDuration `json:"consolidateAfter"`
	// Budgets cap how many nodes of the pool may be disrupted at once. The
	// most restrictive active budget wins.
	// +kubebuilder:default={{nodes: "10%"}}
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:message="a budget with a schedule needs a duration, and a duration needs a schedule",rule="self.all(b, has(b.schedule) == has(b.duration))"
	// +listType=atomic
	// +optional
	Budgets []Budget `json:"budgets,omitempty"`
}

// Repair is when a node of a pool is unhealthy.
type Repair struct {
	// Policies: a node is unhealthy once a condition matches one for
	// longer than its toleration.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Policies []RepairPolicy `json:"policies"`
}

// RepairPolicy names a node condition that makes a node unhealthy.
type RepairPolicy struct {
	// ConditionType of the node: Ready, or one a node problem detector or
	// device plugin sets (say, example.com/GPUHealthy).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +required
	ConditionType string `json:"conditionType"`
	// ConditionStatus that is unhealthy.
	// +kubebuilder:validation:Enum=True;False;Unknown
	// +required
	ConditionStatus string `json:"conditionStatus"`
	// TolerationDuration is how long the condition may hold, from its
	// lastTransitionTime, before the node is repaired.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(s|m|h))+$`
	// +kubebuilder:validation:MaxLength=12
	// +required
	TolerationDuration metav1.Duration `json:"tolerationDuration"`
}

// DefaultRepairPolicies apply to a pool that sets no repair.
var DefaultRepairPolicies = []RepairPolicy{
	{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionFalse), TolerationDuration: metav1.Duration{Duration: 30 * time.Minute}},
	{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionUnknown), TolerationDuration: metav1.Duration{Duration: 30 * time.Minute}},
}

// RepairPolicies are the pool's, or the defaults.
func (np *NodePool) RepairPolicies() []RepairPolicy {
	if np.Spec.Repair == nil {
		return DefaultRepairPolicies
	}
	return np.Spec.Repair.Policies
}

// DisruptionReason names a disruption method a budget applies to.
// +kubebuilder:validation:Enum=Empty;Underutilized;Drifted;Expired;Unhealthy
type DisruptionReason string

// The disruption methods, by the reason each gives: the values a budget's
// reasons accept, and the reason on a disrupted claim's Events and
// metrics. Interrupted (a spot interruption or a scheduled event) is no
// budget's: the cloud takes the node whatever a budget says.
const (
	DisruptionReasonEmpty         DisruptionReason = "Empty"
	DisruptionReasonUnderutilized DisruptionReason = "Underutilized"
	DisruptionReasonDrifted       DisruptionReason = "Drifted"
	DisruptionReasonExpired       DisruptionReason = "Expired"
	DisruptionReasonUnhealthy     DisruptionReason = "Unhealthy"
	DisruptionReasonInterrupted   DisruptionReason = "Interrupted"
)

// Budget limits disruption, for some reasons, possibly only during a schedule.
// +kubebuilder:validation:XValidation:message="a scheduled budget's duration must be more than 0s: a window of no time never applies",rule="!has(self.duration) || self.duration.matches('[1-9]')"
type Budget struct {
	// Reasons this budget applies to; all reasons when empty.
	// +listType=set
	// +optional
	Reasons []DisruptionReason `json:"reasons,omitempty"`
	// Nodes is how many nodes may be disrupted at once: a whole number, or
	// a percentage from 0% to 100% of the pool's nodes (rounded up).
	// +kubebuilder:default="10%"
	// +kubebuilder:validation:Pattern=`^((100|[0-9]{1,2})%|[0-9]+)$`
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:message="nodes must be a whole number or a percentage from 0% to 100%",rule="self.matches('^((100|[0-9]{1,2})%|[0-9]+)$')"
	Nodes string `json:"nodes"`
	// Schedule is a cron schedule (UTC) of when the budget starts to apply:
	// five fields (minute hour day-of-month month day-of-week) or
	// @yearly, @monthly, @weekly, @daily, @hourly. The budget applies from
	// each start for duration. A schedule that does not parse makes the
	// pool's BudgetsValid condition False, and the budget applies always.
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|(\S+\s+\S+\s+\S+\s+\S+\s+\S+))$`
	// +optional
	Schedule *string `json:"schedule,omitempty"`
	// Duration is how long the budget applies after each scheduled start.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]{1,6}(s|m|h))+$`
	// +kubebuilder:validation:MaxLength=12
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// NodePoolStatus is the observed state of a NodePool.
type NodePoolStatus struct {
	// Nodes is the number of registered nodes of the pool.
	// +optional
	Nodes int64 `json:"nodes"`
	// Resources is the capacity of the pool's nodes and of its claims that
	// are launching, the figure compared against spec.limits.
	// +optional
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// Conditions: Ready is true when the pool can launch (its node class
	// exists and is ready).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodePoolList is a list of NodePools.
// +kubebuilder:object:root=true
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodePool `json:"items"`
}
