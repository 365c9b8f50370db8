package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceTypeCatalog lists the instance types a NodePool can launch, with
// their offerings. The provisioner writes one per pool, named after it, from
// its cloud provider; the scheduler plugin reads it and so never needs cloud
// credentials or makes a cloud call.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=itc
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.spec.instanceTypeCount`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InstanceTypeCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec InstanceTypeCatalogSpec `json:"spec,omitempty"`
}

// InstanceTypeCatalogSpec is the published catalog of one pool.
type InstanceTypeCatalogSpec struct {
	// Provider that published the catalog.
	// +optional
	Provider string `json:"provider,omitempty"`
	// InstanceTypeCount is len(instanceTypes), for kubectl.
	// +optional
	InstanceTypeCount int32 `json:"instanceTypeCount,omitempty"`
	// InstanceTypes the pool may launch: those of the provider that meet the
	// pool's requirements, with at least one offering.
	// +listType=map
	// +listMapKey=name
	// +optional
	InstanceTypes []InstanceType `json:"instanceTypes,omitempty"`
}

// InstanceType is one kind of machine.
type InstanceType struct {
	// Name, the value of node.kubernetes.io/instance-type.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Labels every node of this type carries, such as kubernetes.io/arch.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity of a node of this type.
	Capacity corev1.ResourceList `json:"capacity"`
	// Allocatable is the capacity left for pods once the system and
	// kubelet reservations and the eviction threshold are taken off.
	Allocatable corev1.ResourceList `json:"allocatable"`
	// Offerings: where and how this type can be bought, and at what price.
	// +listType=atomic
	Offerings []Offering `json:"offerings"`
}

// Offering is an instance type in one zone with one purchase option.
type Offering struct {
	// Zone, the value of topology.kubernetes.io/zone.
	Zone string `json:"zone"`
	// CapacityType: spot or on-demand.
	CapacityType CapacityType `json:"capacityType"`
	// Price in dollars per hour, as a decimal string such as "0.0416".
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price"`
	// Available is false while the provider reports no capacity for it.
	Available bool `json:"available"`
}

// InstanceTypeCatalogList is a list of InstanceTypeCatalogs.
// +kubebuilder:object:root=true
type InstanceTypeCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InstanceTypeCatalog `json:"items"`
}
