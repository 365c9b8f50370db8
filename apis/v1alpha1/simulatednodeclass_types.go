package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SimulatedNodeClass holds the launch settings of the simulated cloud: how
// long its instances take to register, and the faults to inject. The local
// sandbox and the tests use it in place of a real provider's node class.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=snc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Delay",type=string,JSONPath=`.spec.registrationDelay`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SimulatedNodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec SimulatedNodeClassSpec `json:"spec,omitempty"`
	// +optional
	Status SimulatedNodeClassStatus `json:"status,omitempty"`
}

// SimulatedNodeClassSpec configures the simulated instances of a pool.
type SimulatedNodeClassSpec struct {
	// RegistrationDelay is how long after launch an instance's node joins
	// the cluster.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +optional
	RegistrationDelay *metav1.Duration `json:"registrationDelay,omitempty"`
	// DevicePluginDelay is how long after its node registers an instance's
	// extended resources (nvidia.com/gpu and other devices) appear in the
	// node's capacity and allocatable, as when a device plugin registers
	// after the kubelet. Zero: at registration.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +optional
	DevicePluginDelay *metav1.Duration `json:"devicePluginDelay,omitempty"`
	// CloudControllerDelay is how long after its node registers the
	// simulated cloud controller manager initialises it: the node
	// registers with node.cloudprovider.kubernetes.io/uninitialized:NoSchedule,
	// as a kubelet run with an external cloud provider (EKS) does, and the
	// taint is lifted after this delay. Unset: 1s. Zero: the node
	// registers without the taint, as in a cluster whose kubelets run
	// without an external cloud provider.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +optional
	CloudControllerDelay *metav1.Duration `json:"cloudControllerDelay,omitempty"`
	// Faults to inject into launches whose offering matches.
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	Faults []SimulatedFault `json:"faults,omitempty"`
	// Tags put on every simulated instance.
	// +kubebuilder:validation:XValidation:message="tag keys starting with \"nodeforge.dev/\" are reserved for Nodeforge",rule="self.all(k, !k.startsWith('nodeforge.dev/'))"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
}

// SimulatedFaultKind is the kind of fault the simulated cloud injects.
// +kubebuilder:validation:Enum=InsufficientCapacity;LaunchFailure;NeverRegister;NodeFailure
type SimulatedFaultKind string

// The faults the simulated cloud can inject.
const (
	// FaultInsufficientCapacity refuses launches of matching offerings with
	// an insufficient-capacity error, as a cloud out of that type would.
	FaultInsufficientCapacity SimulatedFaultKind = "InsufficientCapacity"
	// FaultLaunchFailure fails matching launches with a generic error.
	FaultLaunchFailure SimulatedFaultKind = "LaunchFailure"
	// FaultNeverRegister launches matching instances whose nodes never join.
	FaultNeverRegister SimulatedFaultKind = "NeverRegister"
	// FaultNodeFailure makes the nodes of matching instances fail `after`
	// they registered (at once for those registered longer ago): their
	// kubelets stop renewing their node leases, so the node lifecycle
	// controller marks them Ready Unknown as it would a dead machine.
	// It fails running nodes as well as new ones, so a fault naming only
	// a zone is that zone's outage. A node it failed stays failed when the
	// fault is removed, as a dead kubelet does not come back: it is
	// repaired, or deleted by hand.
	FaultNodeFailure SimulatedFaultKind = "NodeFailure"
)

// SimulatedFault injects one kind of fault into the launches whose offering
// matches every field that is set (an empty field matches everything);
// NodeFailure into the instances, running or launched later.
// +kubebuilder:validation:XValidation:message="after applies to kind NodeFailure only",rule="!has(self.after) || self.kind == 'NodeFailure'"
type SimulatedFault struct {
	// Kind of fault.
	// +required
	Kind SimulatedFaultKind `json:"kind"`
	// Zones the fault applies to.
	// +listType=set
	// +optional
	Zones []string `json:"zones,omitempty"`
	// InstanceTypes the fault applies to.
	// +listType=set
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// CapacityTypes the fault applies to: spot, on-demand (the simulated
	// cloud has no capacity reservations).
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:message="the simulated cloud has no capacity reservations: its capacity types are spot and on-demand",rule="!self.exists(t, t == 'reserved')"
	// +optional
	CapacityTypes []CapacityType `json:"capacityTypes,omitempty"`
	// After is, for NodeFailure, how long after its node registered an
	// instance fails. Zero: as soon as it registers.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +optional
	After *metav1.Duration `json:"after,omitempty"`
}

// CapacityType is a purchase option: spot, on-demand, or reserved (an
// on-demand capacity reservation).
// +kubebuilder:validation:Enum=spot;on-demand;reserved
type CapacityType string

// SimulatedNodeClassStatus is the observed state of a SimulatedNodeClass.
type SimulatedNodeClassStatus struct {
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SimulatedNodeClassList is a list of SimulatedNodeClasses.
// +kubebuilder:object:root=true
type SimulatedNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimulatedNodeClass `json:"items"`
}
