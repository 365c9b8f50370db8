package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
)

// NodeSelectorRequirementWithMinValues is a node selector requirement on a
// node label, with an optional minimum number of distinct values that must
// stay open (Karpenter v1 semantics: with `minValues: 3` on instance types,
// a launch must be able to choose among at least three).
//
// +kubebuilder:validation:XValidation:message="operators 'In' and 'NotIn' need at least one value",rule="!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)"
// +kubebuilder:validation:XValidation:message="operators 'Exists' and 'DoesNotExist' take no values",rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0"
// +kubebuilder:validation:XValidation:message="operators 'Gt' and 'Lt' take exactly one value, a whole number of at most 18 digits (a node label is compared as a 64-bit integer)",rule="!(self.operator in ['Gt', 'Lt']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]{1,18}$'))"
// +kubebuilder:validation:XValidation:message="requirement values must be label values: empty or at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (one value per list item, not a comma-separated list)",rule="!has(self.values) || self.values.all(v, v.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'))"
// +kubebuilder:validation:XValidation:message="minValues needs operator 'In' with at least that many values",rule="!has(self.minValues) || (self.operator == 'In' && has(self.values) && self.minValues <= size(self.values))"
// +kubebuilder:validation:XValidation:message="minValues above 1 is not supported on topology.kubernetes.io/zone, nodeforge.dev/capacity-type or kubernetes.io/arch: each NodeClaim launches in one zone, with one capacity type and one architecture",rule="!has(self.minValues) || self.minValues == 1 || !(self.key in ['topology.kubernetes.io/zone', 'nodeforge.dev/capacity-type', 'kubernetes.io/arch'])"
type NodeSelectorRequirementWithMinValues struct {
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
	// MinValues is the minimum number of distinct values of Key that the
	// options left for a launch must span: a pod joins or makes a claim
	// only if the instance types that would still hold it span that many,
	// and a claim whose available options no longer do is not launched
	// (its pods get another). On instance-type keys it keeps a launch
	// flexible; on zone, capacity type and architecture it cannot exceed
	// 1, as a claim is launched in one of each.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +optional
	MinValues *int32 `json:"minValues,omitempty"`
}

// NodeClassReference points at the provider-specific launch settings of a
// NodePool or NodeClaim.
type NodeClassReference struct {
	// Group of the node class, e.g. nodeforge.dev.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:message="group must be an API group: lower-case DNS labels separated by dots, such as nodeforge.dev",rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')"
	Group string `json:"group"`
	// Kind of the node class, e.g. SimulatedNodeClass.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:message="kind must be a kind: a capital letter, then letters and digits, such as EC2NodeClass or SimulatedNodeClass",rule="self.matches('^[A-Z][A-Za-z0-9]*$')"
	Kind string `json:"kind"`
	// Name of the node class.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NillableDuration is a duration such as "30s", "1h30m" or "720h", or
// "Never" for no duration at all. Read it with Duration. Each number has
// at most 6 digits and the whole at most 12 characters, so every accepted
// value parses (the most is 999999h9999h, about 115 years; Go durations
// end at about 292 years).
// +kubebuilder:validation:MaxLength=12
// +kubebuilder:validation:XValidation:message="must be a duration in hours, minutes and seconds of at most 6 digits each and 12 characters in all, such as 30s, 15m or 1h30m, or Never",rule="self.matches('^(([0-9]{1,6}(s|m|h))+|Never)$')"
type NillableDuration string

// Never is the NillableDuration that disables what it configures.
const Never NillableDuration = "Never"
