package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeviceTemplate says what a DRA driver publishes on the nodes of some
// instance types, for drivers the cloud provider does not describe (an
// FPGA's, a NIC's, a driver of your own): the provisioner adds its slices
// to the published catalog of every type its requirements select, so that
// virtual nodes of those types carry them and the scheduler's
// DynamicResources plugin allocates claims on them before the node exists.
// A template's slice replaces the provider's for the same driver.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=dt
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.status.instanceTypes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeviceTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec DeviceTemplateSpec `json:"spec"`
	// +optional
	Status DeviceTemplateStatus `json:"status,omitempty"`
}

// DeviceTemplateSpec selects instance types and says what their nodes'
// drivers publish.
type DeviceTemplateSpec struct {
	// Requirements on the instance types' labels, as the catalog lists
	// them (node.kubernetes.io/instance-type, nodeforge.dev/instance-family,
	// nodeforge.dev/instance-gpu-name, …): all must hold.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +listType=atomic
	Requirements []corev1.NodeSelectorRequirement `json:"requirements"`
	// ResourceSlices: one a driver, each the slice a node of a selected
	// type publishes, without the node (its pool is named after the node).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=driver
	ResourceSlices []ResourceSliceTemplate `json:"resourceSlices"`
}

// DeviceTemplateStatus says where the template applies.
type DeviceTemplateStatus struct {
	// InstanceTypes is how many published instance types (counted once
	// across pools) carry its slices.
	// +optional
	InstanceTypes int32 `json:"instanceTypes"`
	// Conditions: Ready is True once a published instance type carries
	// its slices, False with the reason when none does.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeviceTemplateList is a list of DeviceTemplates.
// +kubebuilder:object:root=true
type DeviceTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeviceTemplate `json:"items"`
}
