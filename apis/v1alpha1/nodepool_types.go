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
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`,priority=1
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.nodes
// +kubebuilder:validation:XValidation:message="spec.replicas cannot be added to or removed from an existing nodepool: a pool is either fixed-size or launches for pending pods; make a new pool instead",rule="has(self.spec.replicas) == has(oldSelf.spec.replicas)"
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
//
// A pool with replicas is fixed-size: it keeps that many nodes whatever the
// pods, is never consolidated and takes no part in choosing a pool for a
// pending pod, so the fields that only steer those are refused beside it.
// +kubebuilder:validation:XValidation:message="a fixed-size nodepool (spec.replicas) is never chosen for pending pods, so spec.weight, which orders pools for them, cannot be set",rule="!has(self.replicas) || !has(self.weight)"
// +kubebuilder:validation:XValidation:message="a fixed-size nodepool (spec.replicas) is never consolidated, its nodes empty or not: leave spec.disruption.consolidationPolicy unset (the default) and spec.disruption.consolidateAfter unset or Never",rule="!has(self.replicas) || !has(self.disruption) || ((!has(self.disruption.consolidationPolicy) || self.disruption.consolidationPolicy == 'WhenEmptyOrUnderutilized') && (self.disruption.consolidateAfter == '0s' || self.disruption.consolidateAfter == 'Never'))"
type NodePoolSpec struct {
	// Replicas makes the pool fixed-size: the provisioner keeps this many
	// nodes of it whatever the pods, launching them with no pod, and
	// replaces one that is deleted, drifts, expires or is repaired.
	// Scaling down removes the emptiest nodes first, drained as any
	// disruption is (PodDisruptionBudgets and do-not-disrupt hold; the
	// disruption budgets do not, since the owner asked for it).
	// spec.limits still cap the pool: set them one node above replicas so
	// that a drifted node's replacement can launch beside it. A fixed
	// pool is never consolidated, and VirtualNodes launches no node in it
	// for a pending pod; pods land on its nodes through the scheduler.
	// It cannot be added to or removed from an existing pool, and is
	// refused beside weight and a consolidation policy.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int64 `json:"replicas,omitempty"`

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
	// +kubebuilder:validation:XValidation:message="requirements must not name kubernetes.io/hostname: a node's hostname is given to it when it is launched, so no node can be launched with a hostname chosen beforehand; spread or pin pods per node with pod anti-affinity or topology spread on kubernetes.io/hostname instead",rule="self.all(r, r.key != 'kubernetes.io/hostname')"
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
	// ExpireAfter is how long a node may live before it is replaced, or
	// Never. It is at least 1h (MinExpireAfter): a node's life counts from
	// when its NodeClaim is made, launching and joining take minutes (up
	// to the provisioner's --registration-ttl, 15m), and so do its drain
	// and its replacement's launch; a shorter life replaces nodes about as
	// fast as they become useful, and 0s would replace each node as soon
	// as it was made.
	// +kubebuilder:default="720h"
	// +kubebuilder:validation:XValidation:message="expireAfter must be at least 1h, or Never: a node's life counts from when its NodeClaim is made and launching, joining and draining it take minutes, so a shorter one replaces nodes about as fast as they become useful",rule="self == 'Never' || !self.matches('^([0-9]{1,6}(s|m|h))+$') || duration(self) >= duration('1h')"
	// +optional
	ExpireAfter NillableDuration `json:"expireAfter,omitempty"`
	// TerminationGracePeriod caps how long draining a node may take,
	// counted from when its NodeClaim is deleted: each pod still there is
	// deleted, regardless of PDBs, early enough that its own
	// terminationGracePeriodSeconds ends by then, and the instance is
	// terminated at the latest then. Copied onto each NodeClaim when it is
	// made. Unset: no cap. It is at least 1m (MinTerminationGracePeriod):
	// a pod is deleted its own grace period (30s unless it says otherwise)
	// before the cap, so with a cap of 30s or less every such pod is
	// deleted the moment the drain starts and no PDB is ever asked; 1m
	// leaves it 30s of evictions that PDBs can refuse.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:XValidation:message="terminationGracePeriod must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m",rule="self.matches('^([0-9]{1,6}(s|m|h))+$')"
	// +kubebuilder:validation:XValidation:message="terminationGracePeriod must be at least 1m, or unset: pods are deleted regardless of PodDisruptionBudgets early enough that their own grace period (30s by default) ends by then, so a shorter one deletes them as soon as a drain starts",rule="!self.matches('^([0-9]{1,6}(s|m|h))+$') || duration(self) >= duration('1m')"
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
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:XValidation:message="tolerationDuration must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m",rule="self.matches('^([0-9]{1,6}(s|m|h))+$')"
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
	// DisruptionReasonScaledDown: a fixed-size pool's replicas were
	// lowered, and its emptiest nodes go. No budget's either: the owner
	// asked for it (as Karpenter's static pools do); PodDisruptionBudgets
	// and do-not-disrupt still hold.
	DisruptionReasonScaledDown DisruptionReason = "ScaledDown"
)

// Fixed says whether the pool is fixed-size (spec.replicas set).
func (np *NodePool) Fixed() bool { return np.Spec.Replicas != nil }

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
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:message="nodes must be a whole number, such as 5, or a percentage from 0% to 100%, such as 10%",rule="self.matches('^((100|[0-9]{1,2})%|[0-9]+)$')"
	Nodes string `json:"nodes"`
	// Schedule is a cron schedule (UTC) of when the budget starts to apply:
	// five fields (minute 0-59, hour 0-23, day of month 1-31, month 1-12
	// or jan-dec, day of week 0-6 or sun-sat, 0 being Sunday), each *, a
	// number, a range (1-5), a step (*/15, 0-30/10) or a comma-separated
	// list of these; or @yearly, @annually, @monthly, @weekly, @daily,
	// @midnight or @hourly. The budget applies from each start for
	// duration. The API server accepts exactly what the disruption
	// controller's cron parser (v1alpha1.ParseSchedule) does; a pool
	// stored before it checked, whose schedule does not parse, has its
	// BudgetsValid condition False, and the budget applies always.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:message="schedule must be a cron schedule in UTC: five fields separated by spaces (minute hour day-of-month month day-of-week), such as '0 9 * * mon-fri', or one of @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly",rule="self.startsWith('@') ? self in ['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly'] : size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) == 5"
	// +kubebuilder:validation:XValidation:message="schedule's minute, its first field, must be *, a number from 0 to 59, a range such as 0-29 (its start not after its end), a step such as */15 or 0-29/5, or a comma-separated list of these",rule="self.startsWith('@') || size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) != 5 || self.find(r'^[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]*([^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+){0}[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+').find(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+$').matches(r'^(,|([*?](-[^,/]*)?|[+]?0*([0-9]|[1-5][0-9])|[+]?0*(0-([+]?0*([0-9]|[1-5][0-9]))|1-([+]?0*([1-9]|[1-5][0-9]))|2-([+]?0*([2-9]|[1-5][0-9]))|3-([+]?0*([3-9]|[1-5][0-9]))|4-([+]?0*([4-9]|[1-5][0-9]))|5-([+]?0*([5-9]|[1-5][0-9]))|6-([+]?0*([6-9]|[1-5][0-9]))|7-([+]?0*([7-9]|[1-5][0-9]))|8-([+]?0*([8-9]|[1-5][0-9]))|9-([+]?0*(9|[1-5][0-9]))|10-([+]?0*([1-5][0-9]))|11-([+]?0*(1[1-9]|[2-5][0-9]))|12-([+]?0*(1[2-9]|[2-5][0-9]))|13-([+]?0*(1[3-9]|[2-5][0-9]))|14-([+]?0*(1[4-9]|[2-5][0-9]))|15-([+]?0*(1[5-9]|[2-5][0-9]))|16-([+]?0*(1[6-9]|[2-5][0-9]))|17-([+]?0*(1[7-9]|[2-5][0-9]))|18-([+]?0*(1[8-9]|[2-5][0-9]))|19-([+]?0*(19|[2-5][0-9]))|20-([+]?0*([2-5][0-9]))|21-([+]?0*(2[1-9]|[3-5][0-9]))|22-([+]?0*(2[2-9]|[3-5][0-9]))|23-([+]?0*(2[3-9]|[3-5][0-9]))|24-([+]?0*(2[4-9]|[3-5][0-9]))|25-([+]?0*(2[5-9]|[3-5][0-9]))|26-([+]?0*(2[6-9]|[3-5][0-9]))|27-([+]?0*(2[7-9]|[3-5][0-9]))|28-([+]?0*(2[8-9]|[3-5][0-9]))|29-([+]?0*(29|[3-5][0-9]))|30-([+]?0*([3-5][0-9]))|31-([+]?0*(3[1-9]|[4-5][0-9]))|32-([+]?0*(3[2-9]|[4-5][0-9]))|33-([+]?0*(3[3-9]|[4-5][0-9]))|34-([+]?0*(3[4-9]|[4-5][0-9]))|35-([+]?0*(3[5-9]|[4-5][0-9]))|36-([+]?0*(3[6-9]|[4-5][0-9]))|37-([+]?0*(3[7-9]|[4-5][0-9]))|38-([+]?0*(3[8-9]|[4-5][0-9]))|39-([+]?0*(39|[4-5][0-9]))|40-([+]?0*([4-5][0-9]))|41-([+]?0*(4[1-9]|5[0-9]))|42-([+]?0*(4[2-9]|5[0-9]))|43-([+]?0*(4[3-9]|5[0-9]))|44-([+]?0*(4[4-9]|5[0-9]))|45-([+]?0*(4[5-9]|5[0-9]))|46-([+]?0*(4[6-9]|5[0-9]))|47-([+]?0*(4[7-9]|5[0-9]))|48-([+]?0*(4[8-9]|5[0-9]))|49-([+]?0*(49|5[0-9]))|50-([+]?0*(5[0-9]))|51-([+]?0*(5[1-9]))|52-([+]?0*(5[2-9]))|53-([+]?0*(5[3-9]))|54-([+]?0*(5[4-9]))|55-([+]?0*(5[5-9]))|56-([+]?0*(5[6-9]))|57-([+]?0*(5[7-9]))|58-([+]?0*(5[8-9]))|59-([+]?0*(59))))(/[+]?0*([1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6][0-9]{0}|9223372036854775807))?(,|$))*$')"
	// +kubebuilder:validation:XValidation:message="schedule's hour, its second field, must be *, a number from 0 to 23, a range such as 9-17 (its start not after its end), a step such as */6 or 9-17/2, or a comma-separated list of these",rule="self.startsWith('@') || size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) != 5 || self.find(r'^[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]*([^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+){1}[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+').find(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+$').matches(r'^(,|([*?](-[^,/]*)?|[+]?0*([0-9]|1[0-9]|2[0-3])|[+]?0*(0-([+]?0*([0-9]|1[0-9]|2[0-3]))|1-([+]?0*([1-9]|1[0-9]|2[0-3]))|2-([+]?0*([2-9]|1[0-9]|2[0-3]))|3-([+]?0*([3-9]|1[0-9]|2[0-3]))|4-([+]?0*([4-9]|1[0-9]|2[0-3]))|5-([+]?0*([5-9]|1[0-9]|2[0-3]))|6-([+]?0*([6-9]|1[0-9]|2[0-3]))|7-([+]?0*([7-9]|1[0-9]|2[0-3]))|8-([+]?0*([8-9]|1[0-9]|2[0-3]))|9-([+]?0*(9|1[0-9]|2[0-3]))|10-([+]?0*(1[0-9]|2[0-3]))|11-([+]?0*(1[1-9]|2[0-3]))|12-([+]?0*(1[2-9]|2[0-3]))|13-([+]?0*(1[3-9]|2[0-3]))|14-([+]?0*(1[4-9]|2[0-3]))|15-([+]?0*(1[5-9]|2[0-3]))|16-([+]?0*(1[6-9]|2[0-3]))|17-([+]?0*(1[7-9]|2[0-3]))|18-([+]?0*(1[8-9]|2[0-3]))|19-([+]?0*(19|2[0-3]))|20-([+]?0*(2[0-3]))|21-([+]?0*(2[1-3]))|22-([+]?0*(2[2-3]))|23-([+]?0*(23))))(/[+]?0*([1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6][0-9]{0}|9223372036854775807))?(,|$))*$')"
	// +kubebuilder:validation:XValidation:message="schedule's day of month, its third field, must be *, a number from 1 to 31, a range such as 1-15 (its start not after its end), a step such as */10 or 1-15/7, or a comma-separated list of these",rule="self.startsWith('@') || size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) != 5 || self.find(r'^[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]*([^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+){2}[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+').find(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+$').matches(r'^(,|([*?](-[^,/]*)?|[+]?0*([1-9]|[1-2][0-9]|3[0-1])|[+]?0*(1-([+]?0*([1-9]|[1-2][0-9]|3[0-1]))|2-([+]?0*([2-9]|[1-2][0-9]|3[0-1]))|3-([+]?0*([3-9]|[1-2][0-9]|3[0-1]))|4-([+]?0*([4-9]|[1-2][0-9]|3[0-1]))|5-([+]?0*([5-9]|[1-2][0-9]|3[0-1]))|6-([+]?0*([6-9]|[1-2][0-9]|3[0-1]))|7-([+]?0*([7-9]|[1-2][0-9]|3[0-1]))|8-([+]?0*([8-9]|[1-2][0-9]|3[0-1]))|9-([+]?0*(9|[1-2][0-9]|3[0-1]))|10-([+]?0*([1-2][0-9]|3[0-1]))|11-([+]?0*(1[1-9]|2[0-9]|3[0-1]))|12-([+]?0*(1[2-9]|2[0-9]|3[0-1]))|13-([+]?0*(1[3-9]|2[0-9]|3[0-1]))|14-([+]?0*(1[4-9]|2[0-9]|3[0-1]))|15-([+]?0*(1[5-9]|2[0-9]|3[0-1]))|16-([+]?0*(1[6-9]|2[0-9]|3[0-1]))|17-([+]?0*(1[7-9]|2[0-9]|3[0-1]))|18-([+]?0*(1[8-9]|2[0-9]|3[0-1]))|19-([+]?0*(19|2[0-9]|3[0-1]))|20-([+]?0*(2[0-9]|3[0-1]))|21-([+]?0*(2[1-9]|3[0-1]))|22-([+]?0*(2[2-9]|3[0-1]))|23-([+]?0*(2[3-9]|3[0-1]))|24-([+]?0*(2[4-9]|3[0-1]))|25-([+]?0*(2[5-9]|3[0-1]))|26-([+]?0*(2[6-9]|3[0-1]))|27-([+]?0*(2[7-9]|3[0-1]))|28-([+]?0*(2[8-9]|3[0-1]))|29-([+]?0*(29|3[0-1]))|30-([+]?0*(3[0-1]))|31-([+]?0*(31))))(/[+]?0*([1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6][0-9]{0}|9223372036854775807))?(,|$))*$')"
	// +kubebuilder:validation:XValidation:message="schedule's month, its fourth field, must be *, a number from 1 to 12 or a name jan to dec, a range such as jan-jun (its start not after its end), a step such as */3 or 1-6/2, or a comma-separated list of these",rule="self.startsWith('@') || size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) != 5 || self.find(r'^[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]*([^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+){3}[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+').find(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+$').matches(r'^(,|([*?](-[^,/]*)?|[+]?0*([1-9]|1[0-2])|[jJ][aA][nN]|[fF][eE][bB]|[mM][aA][rR]|[aA][pP][rR]|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC]|([+]?0*1|[jJ][aA][nN])-([+]?0*([1-9]|1[0-2])|[jJ][aA][nN]|[fF][eE][bB]|[mM][aA][rR]|[aA][pP][rR]|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*2|[fF][eE][bB])-([+]?0*([2-9]|1[0-2])|[fF][eE][bB]|[mM][aA][rR]|[aA][pP][rR]|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*3|[mM][aA][rR])-([+]?0*([3-9]|1[0-2])|[mM][aA][rR]|[aA][pP][rR]|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*4|[aA][pP][rR])-([+]?0*([4-9]|1[0-2])|[aA][pP][rR]|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*5|[mM][aA][yY])-([+]?0*([5-9]|1[0-2])|[mM][aA][yY]|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*6|[jJ][uU][nN])-([+]?0*([6-9]|1[0-2])|[jJ][uU][nN]|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*7|[jJ][uU][lL])-([+]?0*([7-9]|1[0-2])|[jJ][uU][lL]|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*8|[aA][uU][gG])-([+]?0*([8-9]|1[0-2])|[aA][uU][gG]|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*9|[sS][eE][pP])-([+]?0*(9|1[0-2])|[sS][eE][pP]|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*10|[oO][cC][tT])-([+]?0*(1[0-2])|[oO][cC][tT]|[nN][oO][vV]|[dD][eE][cC])|([+]?0*11|[nN][oO][vV])-([+]?0*(1[1-2])|[nN][oO][vV]|[dD][eE][cC])|([+]?0*12|[dD][eE][cC])-([+]?0*(12)|[dD][eE][cC]))(/[+]?0*([1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6][0-9]{0}|9223372036854775807))?(,|$))*$')"
	// +kubebuilder:validation:XValidation:message="schedule's day of week, its fifth field, must be *, a number from 0 to 6 (0 is Sunday; 7 is not accepted) or a name sun to sat, a range such as mon-fri (its start not after its end), a step such as */2 or 1-5/2, or a comma-separated list of these",rule="self.startsWith('@') || size(self.findAll(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+')) != 5 || self.find(r'^[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]*([^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+[\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+){4}[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+').find(r'[^\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+$').matches(r'^(,|([*?](-[^,/]*)?|[+]?0*([0-6])|[sS][uU][nN]|[mM][oO][nN]|[tT][uU][eE]|[wW][eE][dD]|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT]|([+]?0*0|[sS][uU][nN])-([+]?0*([0-6])|[sS][uU][nN]|[mM][oO][nN]|[tT][uU][eE]|[wW][eE][dD]|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*1|[mM][oO][nN])-([+]?0*([1-6])|[mM][oO][nN]|[tT][uU][eE]|[wW][eE][dD]|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*2|[tT][uU][eE])-([+]?0*([2-6])|[tT][uU][eE]|[wW][eE][dD]|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*3|[wW][eE][dD])-([+]?0*([3-6])|[wW][eE][dD]|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*4|[tT][hH][uU])-([+]?0*([4-6])|[tT][hH][uU]|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*5|[fF][rR][iI\\x{130}])-([+]?0*([5-6])|[fF][rR][iI\\x{130}]|[sS][aA][tT])|([+]?0*6|[sS][aA][tT])-([+]?0*(6)|[sS][aA][tT]))(/[+]?0*([1-9][0-9]{0,17}|[1-8][0-9]{18}|9[0-1][0-9]{17}|92[0-1][0-9]{16}|922[0-2][0-9]{15}|9223[0-2][0-9]{14}|92233[0-6][0-9]{13}|922337[0-1][0-9]{12}|92233720[0-2][0-9]{10}|922337203[0-5][0-9]{9}|9223372036[0-7][0-9]{8}|92233720368[0-4][0-9]{7}|922337203685[0-3][0-9]{6}|9223372036854[0-6][0-9]{5}|92233720368547[0-6][0-9]{4}|922337203685477[0-4][0-9]{3}|9223372036854775[0-7][0-9]{2}|922337203685477580[0-6][0-9]{0}|9223372036854775807))?(,|$))*$')"
	// +optional
	Schedule *string `json:"schedule,omitempty"`
	// Duration is how long the budget applies after each scheduled start.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:XValidation:message="duration must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m",rule="self.matches('^([0-9]{1,6}(s|m|h))+$')"
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
	// exists and is ready) and, for a fixed-size pool, its limits leave
	// room for its replicas; ReplicasReached says whether a fixed-size
	// pool has its replicas.
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
