package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceTypeCatalog lists instance types a NodePool can launch, with
// their offerings. The provisioner publishes a pool's catalog from its cloud
// provider as one object per instance-type family (m5, c7g, …), named
// <pool>.<family>, labelled nodeforge.dev/nodepool=<pool> and owned by the
// pool; the pool's catalog is the union of the objects whose spec.nodePool
// names it. The scheduler plugin reads them and so never needs cloud
// credentials or makes a cloud call.
//
// One object per family, not per pool, because a cloud region's whole
// offering set (about 900 types × 6 zones × 2 capacity types on AWS) nears
// etcd's 1.5 MiB limit on one object, and because an offering marked
// unavailable then rewrites only its family's object, not the pool's whole
// catalog. A family too large for one object is split into numbered parts
// (<pool>.<family>.2, …).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=itc
// +kubebuilder:printcolumn:name="NodePool",type=string,JSONPath=`.spec.nodePool`
// +kubebuilder:printcolumn:name="Types",type=integer,JSONPath=`.spec.instanceTypeCount`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InstanceTypeCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec InstanceTypeCatalogSpec `json:"spec,omitempty"`
}

// InstanceTypeCatalogSpec is one part of a pool's published catalog: the
// instance types of one family.
type InstanceTypeCatalogSpec struct {
	// NodePool whose catalog this object is part of. Readers key by it, not
	// by the object's name; the label nodeforge.dev/nodepool carries the
	// same value so that one pool's objects can be listed by selector.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodePool is immutable"
	NodePool string `json:"nodePool"`
	// ObjectCount is how many objects the pool's catalog is written as,
	// this one included; 0 means this object alone. Objects are written one
	// by one, so a reader takes a pool's catalog as published only once it
	// sees that many of them: a pool whose catalog is still being written
	// for the first time is not mistaken for a pool with fewer types.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObjectCount int32 `json:"objectCount,omitempty"`
	// Provider that published the catalog.
	// +optional
	Provider string `json:"provider,omitempty"`
	// InstanceTypeCount is len(instanceTypes) of this object, for kubectl.
	// +optional
	InstanceTypeCount int32 `json:"instanceTypeCount,omitempty"`
	// InstanceTypes of this object that the pool may launch: those of the
	// provider that meet the pool's requirements, with at least one
	// offering. A type appears in one object of its pool only.
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
	// ResourceSlices are what the DRA drivers of a node of this type
	// publish once it runs, one template a driver. A virtual node of the
	// type carries them, so that the scheduler's DynamicResources plugin
	// allocates devices on a node that does not exist yet.
	// +listType=map
	// +listMapKey=driver
	// +kubebuilder:validation:MaxItems=8
	// +optional
	ResourceSlices []ResourceSliceTemplate `json:"resourceSlices,omitempty"`
	// Overlays names the NodeOverlays whose changes the type's figures
	// carry (its offerings' prices, its capacity), sorted by name. The
	// figures above are the adjusted ones.
	// +listType=atomic
	// +optional
	Overlays []string `json:"overlays,omitempty"`
}

// ResourceSliceTemplate is the ResourceSlice one DRA driver publishes on
// a node of an instance type, without the node: on a node named N it is
// a slice with spec.nodeName N in a pool named N (generation 1, one
// slice), as the NVIDIA GPU driver and DRANET name theirs.
type ResourceSliceTemplate struct {
	// Driver that publishes the slice, such as gpu.nvidia.com.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Driver string `json:"driver"`
	// Devices as the driver publishes them, without the attributes that
	// differ from one node to the next (a GPU's uuid, its PCI bus ID),
	// which no node not yet launched has.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	Devices []resourcev1.Device `json:"devices"`
}

// Offering is an instance type in one zone with one purchase option.
type Offering struct {
	// Zone, the value of topology.kubernetes.io/zone.
	Zone string `json:"zone"`
	// CapacityType: spot, on-demand or reserved.
	CapacityType CapacityType `json:"capacityType"`
	// Price in dollars per hour, as a decimal string such as "0.0416".
	// A reserved offering, already paid for, is priced near zero.
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Price string `json:"price"`
	// Available is false while the provider reports no capacity for it.
	Available bool `json:"available"`
	// ReservationCapacity, on reserved offerings only, is how many more
	// instances the capacity reservations behind the offering take, as
	// the provider last counted them (EC2's available instances, less the
	// launches it has made since); the offering is unavailable at 0.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ReservationCapacity *int32 `json:"reservationCapacity,omitempty"`
}

// InstanceTypeCatalogList is a list of InstanceTypeCatalogs.
// +kubebuilder:object:root=true
type InstanceTypeCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InstanceTypeCatalog `json:"items"`
}
