package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of ProvisioningRequest.
const Group = "autoscaling.x-k8s.io"

var (
	// SchemeGroupVersion is the group version of these types.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1"}
	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &ProvisioningRequest{}, &ProvisioningRequestList{})
		metav1.AddToGroupVersion(s, SchemeGroupVersion)
		return nil
	})
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// ProvisioningRequest asks for capacity for a set of pods that do not
// exist yet: the pods of its podSets' templates, count of each.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=provreq;provreqs
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Class",type="string",JSONPath=".spec.provisioningClassName"
// +kubebuilder:printcolumn:name="Provisioned",type="string",JSONPath=".status.conditions[?(@.type==\"Provisioned\")].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type==\"Provisioned\")].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ProvisioningRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is immutable: to change a request, delete it and create another.
	//
	// +kubebuilder:validation:Required
	Spec   ProvisioningRequestSpec   `json:"spec"`
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata"`
	Items           []ProvisioningRequest `json:"items"`
}

// ProvisioningRequestSpec is the pods capacity is asked for, and how.
type ProvisioningRequestSpec struct {
	// PodSets are the groups of pods to provision for.
	//
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	PodSets []PodSet `json:"podSets"`
	// ProvisioningClassName is how the capacity is asked for. Nodeforge
	// serves check-capacity.autoscaling.x-k8s.io and
	// best-effort-atomic-scale-up.autoscaling.x-k8s.io; it leaves requests
	// of any other class to whoever serves it.
	//
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	ProvisioningClassName string `json:"provisioningClassName"`
	// Parameters are the class's parameters. Nodeforge acts on noRetry
	// (check-capacity) and ValidUntilSeconds (best-effort-atomic-scale-up),
	// and fails a request it serves that names any other.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:MaxProperties=100
	Parameters map[string]Parameter `json:"parameters,omitempty"`
}

// Parameter is a class's parameter value.
//
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet is count pods made from one PodTemplate.
type PodSet struct {
	// PodTemplateRef names a PodTemplate in the request's namespace: the
	// pods that will consume the capacity look like it.
	//
	// +kubebuilder:validation:Required
	PodTemplateRef Reference `json:"podTemplateRef"`
	// Count is how many pods of the template.
	//
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// Reference names an object in the request's namespace.
type Reference struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus is what the autoscaler answered.
type ProvisioningRequestStatus struct {
	// Conditions: Accepted, Provisioned, Failed, BookingExpired,
	// CapacityRevoked.
	//
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// ProvisioningClassDetails are the class's own details. Nodeforge
	// writes nodeforge.dev/nodeClaims, the NodeClaims it launched for the
	// request.
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails,omitempty"`
}

// Detail is a class's detail value.
//
// +kubebuilder:validation:MaxLength=32768
type Detail string

// Condition types, as Cluster Autoscaler sets them and Kueue reads them.
const (
	ConditionAccepted        = "Accepted"
	ConditionProvisioned     = "Provisioned"
	ConditionFailed          = "Failed"
	ConditionBookingExpired  = "BookingExpired"
	ConditionCapacityRevoked = "CapacityRevoked"
)

// Condition reasons, Cluster Autoscaler's where it has one.
const (
	ReasonAccepted                       = "Accepted"
	ReasonCapacityIsFound                = "CapacityIsFound"
	ReasonCapacityIsNotFound             = "CapacityIsNotFound"
	ReasonCapacityIsProvisioned          = "CapacityIsProvisioned"
	ReasonCapacityReservationTimeExpired = "CapacityReservationTimeExpired"
	ReasonExpired                        = "Expired"
	ReasonFailedToCreatePods             = "FailedToCreatePods"
	// ReasonUnsupportedParameter is Nodeforge's: the request names a
	// parameter Nodeforge does not act on.
	ReasonUnsupportedParameter = "UnsupportedParameter"
	// ReasonNodeClaimsLaunching is Nodeforge's, on Provisioned False:
	// the request's NodeClaims are launching.
	ReasonNodeClaimsLaunching = "NodeClaimsLaunching"
	// ReasonNodeClaimsGone is Nodeforge's, on CapacityRevoked True: a
	// node launched for the request went before its booking ended.
	ReasonNodeClaimsGone = "NodeClaimsGone"
)

// Classes Nodeforge serves, and the annotations pods that consume a
// request carry (set by Kueue).
const (
	ClassCheckCapacity           = "check-capacity.autoscaling.x-k8s.io"
	ClassBestEffortAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
	AnnotationConsumeRequest     = "autoscaling.x-k8s.io/consume-provisioning-request"
	AnnotationProvisioningClass  = "autoscaling.x-k8s.io/provisioning-class-name"
	ParameterNoRetry             = "noRetry"
	ParameterValidUntilSeconds   = "ValidUntilSeconds"
	DetailNodeClaims             = "nodeforge.dev/nodeClaims"
)
