package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeOverlay changes what the published catalog says of the instance
// types (and offerings) its requirements select: their price, set or
// adjusted (a savings plan, a negotiated discount, a licence fee), and
// resources their nodes have that the provider does not list (huge pages,
// an extended resource a device plugin adds). The provisioner applies
// overlays when it publishes each pool's catalog, so the scheduler
// plugin's decision, repack, consolidation and the bind gate all read the
// adjusted figures. Field names and meanings follow Karpenter's
// karpenter.sh/v1alpha1 NodeOverlay (its published CRD schema and
// concepts page), with the refusals listed on each field.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=ovl
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.spec.weight`
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.status.instanceTypeCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeOverlay struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NodeOverlaySpec `json:"spec"`
	// +optional
	Status NodeOverlayStatus `json:"status,omitempty"`
}

// NodeOverlaySpec selects instance types and offerings and says what
// changes for them.
//
// +kubebuilder:validation:XValidation:message="set price or priceAdjustment, not both: price replaces the offering's price and priceAdjustment changes it",rule="!has(self.price) || !has(self.priceAdjustment)"
// +kubebuilder:validation:XValidation:message="an overlay must set price, priceAdjustment or capacity: one with none of them would change nothing",rule="has(self.price) || has(self.priceAdjustment) || (has(self.capacity) && size(self.capacity) > 0)"
// +kubebuilder:validation:XValidation:message="capacity cannot depend on topology.kubernetes.io/zone or nodeforge.dev/capacity-type: a node of a type has the same resources wherever and however it is bought; put price changes per zone or capacity type in an overlay of their own",rule="!has(self.capacity) || !has(self.requirements) || !self.requirements.exists(r, r.key in ['topology.kubernetes.io/zone', 'nodeforge.dev/capacity-type'])"
type NodeOverlaySpec struct {
	// Requirements on the labels a node of the offering would carry: the
	// instance type's (node.kubernetes.io/instance-type, kubernetes.io/arch,
	// nodeforge.dev/instance-family, …), the offering's
	// (topology.kubernetes.io/zone, nodeforge.dev/capacity-type), and the
	// pool's (nodeforge.dev/nodepool and its template's labels). All must
	// hold. None selects every instance type of every pool.
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:message="requirement keys in the domains \"karpenter.sh\" and \"karpenter.k8s.aws\" are Karpenter's: require nodeforge.dev/capacity-type, nodeforge.dev/nodepool and the nodeforge.dev/instance-* labels instead (nodeforge-convert rewrites them)",rule="self.all(r, !r.key.matches('^([^/]*\\\\.)?karpenter\\\\.(sh|k8s\\\\.aws)/'))"
	// +kubebuilder:validation:XValidation:message="requirements must not name kubernetes.io/hostname: a node's hostname is given when it is launched, so no instance type or offering has one",rule="self.all(r, r.key != 'kubernetes.io/hostname')"
	// +listType=atomic
	// +optional
	Requirements []LabelRequirement `json:"requirements,omitempty"`
	// Weight orders overlays that select the same type: for each field
	// (the price, each capacity name) the overlay of the highest weight
	// applies. Unset is 0. Of overlays of equal weight that set one field,
	// the one whose name sorts first applies; where they set it
	// differently, both say so in their ConflictFree condition.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	Weight *int32 `json:"weight,omitempty"`
	// Price replaces the price of each selected offering, in dollars per
	// hour (the currency of the provider's prices), such as "0.05".
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	Price *string `json:"price,omitempty"`
	// PriceAdjustment changes the price of each selected offering: by an
	// amount ("+0.10", "-0.5") or a share of it ("-50%", "+10%"). A price
	// never falls below 0; a share taken off is at most 100%.
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:message="priceAdjustment must be a signed amount or percentage, such as -0.5, +0.10, -50% or +10%",rule="self.matches('^[+-][0-9]+(\\\\.[0-9]+)?%?$')"
	// +kubebuilder:validation:XValidation:message="priceAdjustment cannot take off more than 100% of a price",rule="!self.matches('^-[0-9]+(\\\\.[0-9]+)?%$') || double(self.substring(1, self.size() - 1)) <= 100.0"
	// +optional
	PriceAdjustment *string `json:"priceAdjustment,omitempty"`
	// Capacity adds resources to the nodes of each selected type: extended
	// resources (a device plugin's, such as example.com/fpga) and huge
	// pages (hugepages-2Mi, hugepages-1Gi), in capacity and allocatable.
	// Huge pages are taken from allocatable memory, as the kubelet takes
	// pre-allocated huge pages from it. A name the provider already lists
	// is replaced. A node launched for a pod that asks for one of them is
	// bound only once the node reports it in allocatable (its device
	// plugin, or the huge pages its node class configures).
	// +kubebuilder:validation:MaxProperties=10
	// +kubebuilder:validation:XValidation:message="capacity may add only extended resources (a name with a domain outside kubernetes.io, such as example.com/fpga) and huge pages (hugepages-2Mi, hugepages-1Gi): cpu, memory, ephemeral-storage and pods are what the kubelet measures on the node, and an overlay cannot make it report more",rule="self.all(r, r.startsWith('hugepages-') || (r.contains('/') && !r.matches('^([^/]*\\\\.)?kubernetes\\\\.io/') && !r.startsWith('requests.')))"
	// +kubebuilder:validation:XValidation:message="capacity amounts must be more than zero",rule="self.all(r, !string(self[r]).startsWith('-') && string(self[r]) != '0')"
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
}

// LabelRequirement is a requirement on a node label, as in a node
// selector: a key, an operator and values.
//
// +kubebuilder:validation:XValidation:message="operators 'In' and 'NotIn' need at least one value",rule="!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)"
// +kubebuilder:validation:XValidation:message="operators 'Exists' and 'DoesNotExist' take no values",rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0"
// +kubebuilder:validation:XValidation:message="operators 'Gt' and 'Lt' take exactly one value, a whole number of at most 18 digits (a node label is compared as a 64-bit integer)",rule="!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]{1,18}$'))"
// +kubebuilder:validation:XValidation:message="requirement values must be label values: empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (one value per list item, not a comma-separated list)",rule="!has(self.values) || self.values.all(v, v.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'))"
type LabelRequirement struct {
	// Key is the node label the requirement applies to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:XValidation:message="requirement keys must be label keys: qualified names such as topology.kubernetes.io/zone or example.com/team",rule="self.matches('^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\\\\.)*[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')"
	Key string `json:"key"`
	// Operator relates the key to the values.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist;Gt;Lt
	Operator corev1.NodeSelectorOperator `json:"operator"`
	// Values for In and NotIn (a set), or one whole number for Gt and Lt.
	// +kubebuilder:validation:MaxItems=200
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
}

// NodeOverlayStatus says where the overlay applies.
type NodeOverlayStatus struct {
	// InstanceTypeCount is how many published instance types (counted once
	// across pools) carry one of its changes.
	// +optional
	InstanceTypeCount int32 `json:"instanceTypeCount"`
	// InstanceTypes names them, sorted, at most MaxOverlayStatusTypes.
	// +listType=atomic
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// Conditions: Ready is True once a published instance type carries
	// one of its changes, False with the reason when none does;
	// ConflictFree is False while an overlay of the same weight sets the
	// same field of a type it selects, naming it and which applies.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxOverlayStatusTypes bounds NodeOverlayStatus.InstanceTypes.
const MaxOverlayStatusTypes = 100

// NodeOverlayList is a list of NodeOverlays.
// +kubebuilder:object:root=true
type NodeOverlayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeOverlay `json:"items"`
}
