package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of CapacityBuffer.
const Group = "autoscaling.x-k8s.io"

var (
	// SchemeGroupVersion is the group version of these types.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1beta1"}
	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &CapacityBuffer{}, &CapacityBufferList{})
		metav1.AddToGroupVersion(s, SchemeGroupVersion)
		return nil
	})
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// CapacityBuffer keeps spare capacity: room for a number of chunks, each
// the shape of one pod of a template, so that pods of that shape start
// without waiting for a node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=capacitybuffers,scope=Namespaced,shortName=cb
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Strategy",type="string",JSONPath=".spec.provisioningStrategy"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.conditions[?(@.type=='ReadyForProvisioning')].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type CapacityBuffer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:validation:Required
	Spec   CapacityBufferSpec   `json:"spec"`
	Status CapacityBufferStatus `json:"status,omitempty"`
}

// CapacityBufferList is a list of CapacityBuffers.
//
// +kubebuilder:object:root=true
type CapacityBufferList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapacityBuffer `json:"items"`
}

// LocalObjectRef names an object in the buffer's namespace.
type LocalObjectRef struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ScalableRef names an object with a scale subresource.
type ScalableRef struct {
	// APIGroup of the object; empty for the core group.
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind of the object (Deployment, StatefulSet, ReplicaSet...).
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ResourceName names a resource, as core/v1's does.
type ResourceName string

// ResourceList is a set of resource amounts.
type ResourceList map[ResourceName]resource.Quantity

// CapacityBufferSpec is the capacity to keep.
//
// +kubebuilder:validation:XValidation:rule="!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",message="with podTemplateRef, replicas or limits must be set"
// +kubebuilder:validation:XValidation:rule="!(has(self.podTemplateRef) && has(self.scalableRef))",message="set podTemplateRef or scalableRef, not both"
// +kubebuilder:validation:XValidation:rule="has(self.podTemplateRef) || has(self.scalableRef)",message="set podTemplateRef or scalableRef"
// +kubebuilder:validation:XValidation:rule="!has(self.percentage) || has(self.scalableRef)",message="percentage applies to a scalableRef only"
type CapacityBufferSpec struct {
	// ProvisioningStrategy is how the buffer is kept. Nodeforge serves
	// buffer.x-k8s.io/active-capacity, the default, and leaves buffers
	// of any other strategy to whoever serves it.
	// +kubebuilder:default="buffer.x-k8s.io/active-capacity"
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
	// PodTemplateRef names a PodTemplate in the buffer's namespace: the
	// shape of one chunk.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`
	// ScalableRef names a workload whose pod template is the shape of
	// one chunk, and whose replicas percentage counts from.
	// +optional
	ScalableRef *ScalableRef `json:"scalableRef,omitempty"`
	// Replicas is how many chunks to keep room for. With percentage too,
	// the larger of the two.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Percentage of the scalableRef's replicas to keep room for, rounded
	// up (at least 1).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Percentage *int32 `json:"percentage,omitempty"`
	// Limits cap the chunks by their total requests; with neither
	// replicas nor percentage, as many chunks as fit in them.
	// +optional
	Limits *ResourceList `json:"limits,omitempty"`
}

// CapacityBufferStatus is what the buffer resolved to, and how it is kept.
type CapacityBufferStatus struct {
	// PodTemplateRef is the PodTemplate the chunks are made from: the
	// spec's, or one made from the scalableRef's pod template.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`
	// Replicas is the number of chunks room is kept for.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// PodTemplateGeneration is the generation of the PodTemplate read.
	// +optional
	PodTemplateGeneration *int64 `json:"podTemplateGeneration,omitempty"`
	// Conditions: ReadyForProvisioning, Provisioning, LimitedByQuotas.
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// ProvisioningStrategy is the strategy the buffer is kept by.
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
}

// The strategy Nodeforge serves, and the condition types of the status,
// as the upstream controllers write them.
const (
	StrategyActiveCapacity        = "buffer.x-k8s.io/active-capacity"
	ConditionReadyForProvisioning = "ReadyForProvisioning"
	ConditionProvisioning         = "Provisioning"
	ConditionLimitedByQuotas      = "LimitedByQuotas"
)
