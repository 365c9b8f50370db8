package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EC2NodeClass holds the AWS launch settings of the NodePools that refer to
// it: where instances go (subnets), how they are secured (security groups,
// instance profile, metadata options), what they boot (AMI, user data,
// volumes) and how their kubelet reserves resources. It lives in the
// nodeforge.dev group beside the other Nodeforge kinds.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=nodeforge,shortName=nfec2nc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Subnets",type=integer,JSONPath=`.status.subnetCount`
// +kubebuilder:printcolumn:name="AMIs",type=string,JSONPath=`.status.amis[*].id`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EC2NodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EC2NodeClassSpec `json:"spec"`
	// +optional
	Status EC2NodeClassStatus `json:"status,omitempty"`
}

// EC2NodeClassSpec is what instances of the class are launched with.
//
// +kubebuilder:validation:XValidation:message="set exactly one of role or instanceProfile",rule="has(self.role) != has(self.instanceProfile)"
type EC2NodeClassSpec struct {
	// SubnetSelectorTerms select the subnets instances are launched in; a
	// subnet matching any term is used. Their zones are the zones the
	// pools of this class can launch in.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +listType=atomic
	SubnetSelectorTerms []SelectorTerm `json:"subnetSelectorTerms"`
	// SecurityGroupSelectorTerms select the security groups of the
	// instances; every group matching any term is attached.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +listType=atomic
	SecurityGroupSelectorTerms []SecurityGroupSelectorTerm `json:"securityGroupSelectorTerms"`
	// AMISelectorTerms select the images instances boot: either one alias
	// (the EKS-optimised Amazon Linux 2023 image for the cluster's
	// Kubernetes version, "al2023@latest" or pinned "al2023@v20261101"), or
	// terms by id, name and owner, or tags. The newest matching image of
	// each architecture is used.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +kubebuilder:validation:XValidation:message="an alias term must be the only AMI selector term",rule="!self.exists(t, has(t.alias)) || self.size() == 1"
	// +listType=atomic
	AMISelectorTerms []AMISelectorTerm `json:"amiSelectorTerms"`
	// Role is the IAM role of the nodes, by name or ARN; the provisioner
	// creates and keeps an instance profile for it. Set this or
	// instanceProfile.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:message="role must be a role name (at most 64 of letters, digits and +=,.@_-) or a role ARN (arn:aws:iam::<account>:role/<path><name>)",rule="self.matches('^[\\\\w+=,.@-]{1,64}$') || self.matches('^arn:aws[a-z-]*:iam::[0-9]{12}:role/([\\\\w+=,.@-]+/)*[\\\\w+=,.@-]{1,64}$')"
	// +optional
	Role string `json:"role,omitempty"`
	// InstanceProfile is an existing IAM instance profile of the nodes.
	// Set this or role.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +optional
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// UserData is run by the instance at boot before it joins: a shell
	// script or a nodeadm NodeConfig document. Nodeforge adds the NodeConfig
	// that joins the node to the cluster as a separate MIME part after it.
	// +kubebuilder:validation:MaxLength=16384
	// +kubebuilder:validation:XValidation:message="userData that is already a MIME multi-part document is not supported yet: give the shell script or NodeConfig alone, and Nodeforge puts it in a MIME part before its own",rule="!self.matches('^(?i)[[:space:]]*(mime-version|content-type):')"
	// +optional
	UserData *string `json:"userData,omitempty"`
	// BlockDeviceMappings are the instances' volumes. Unset: one 20 GiB
	// encrypted gp3 root volume.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:XValidation:message="at most one block device mapping may be the root volume",rule="self.filter(m, has(m.rootVolume) && m.rootVolume).size() <= 1"
	// +listType=atomic
	// +optional
	BlockDeviceMappings []BlockDeviceMapping `json:"blockDeviceMappings,omitempty"`
	// MetadataOptions of the instance metadata service. The defaults
	// require IMDSv2 tokens and a hop limit of 1, so that pods cannot reach
	// the node's credentials.
	// +kubebuilder:default={httpEndpoint: enabled, httpProtocolIPv6: disabled, httpPutResponseHopLimit: 1, httpTokens: required}
	// +optional
	MetadataOptions *MetadataOptions `json:"metadataOptions,omitempty"`
	// Tags put on the instances, their volumes and launch templates. Name
	// is Nodeforge's (the NodeClaim's name).
	// +kubebuilder:validation:MaxProperties=40
	// +kubebuilder:validation:XValidation:message="tag keys in the nodeforge.dev domain, kubernetes.io/cluster/* and aws:* are reserved",rule="self.all(k, !k.matches('^([^/]*\\\\.)?nodeforge\\\\.dev/') && !k.startsWith('kubernetes.io/cluster/') && !k.startsWith('aws:') && k != 'eks:eks-cluster-name')"
	// +kubebuilder:validation:XValidation:message="tag keys are 1 to 128 characters and values at most 256",rule="self.all(k, k.size() >= 1 && k.size() <= 128 && self[k].size() <= 256)"
	// +kubebuilder:validation:XValidation:message="tag Name is not supported yet: Nodeforge names each instance after its NodeClaim",rule="!('Name' in self)"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// Kubelet settings of the nodes, which also decide the allocatable
	// resources Nodeforge plans with.
	// +optional
	Kubelet *KubeletConfiguration `json:"kubelet,omitempty"`
	// CapacityReservationSelectorTerms select the EC2 on-demand capacity
	// reservations (ODCRs) the class launches into: a reservation matching
	// any term, active, of a type and zone the class can launch, is offered
	// as capacity type "reserved" (nodeforge.dev/capacity-type), up to its
	// available instances, before spot and on-demand. Capacity Blocks for
	// ML and interruptible reservations are not launched into. Changing the
	// terms does not drift the nodes.
	// +kubebuilder:validation:MaxItems=30
	// +listType=atomic
	// +optional
	CapacityReservationSelectorTerms []CapacityReservationSelectorTerm `json:"capacityReservationSelectorTerms,omitempty"`
	// DRADrivers are the DRA drivers the class's nodes run, whose devices
	// Nodeforge describes for instance types not yet launched: only
	// gpu.nvidia.com (the NVIDIA GPU DRA driver) yet. A type whose GPUs
	// that driver publishes then carries its ResourceSlice template and no
	// nvidia.com/gpu, since the DRA driver replaces the device plugin on
	// those nodes; every node of the class is labelled
	// dra.nodeforge.dev/<driver>: "true" (LabelDRADriver), which the
	// driver's DaemonSet can select and the device plugin's avoid. Unset:
	// the nodes run the device plugins. DeviceTemplates describe any
	// other driver.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:message="draDrivers: only gpu.nvidia.com is supported yet; describe another driver's devices with a DeviceTemplate",rule="self.all(d, d == 'gpu.nvidia.com')"
	// +listType=set
	// +optional
	DRADrivers []string `json:"draDrivers,omitempty"`
}

// CapacityReservationSelectorTerm selects capacity reservations by id, or
// by tags and instance match criteria, optionally of one owner.
//
// +kubebuilder:validation:XValidation:message="id names one reservation and cannot be combined with tags, ownerID or instanceMatchCriteria",rule="!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))"
// +kubebuilder:validation:XValidation:message="set id, or tags and/or instanceMatchCriteria (with an optional ownerID)",rule="has(self.id) || has(self.tags) || has(self.instanceMatchCriteria)"
type CapacityReservationSelectorTerm struct {
	// ID of the reservation, such as cr-0123456789abcdef0.
	// +kubebuilder:validation:Pattern=`^cr-[0-9a-z]+$`
	// +optional
	ID string `json:"id,omitempty"`
	// Tags the reservation must carry; a value of "*" matches any value.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=20
	// +kubebuilder:validation:XValidation:message="tag keys and values must not be empty",rule="self.all(k, k != '' && self[k] != '')"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// OwnerID is the account that owns the reservation (one shared with
	// this account through AWS RAM, say). Unset: any owner.
	// +kubebuilder:validation:Pattern=`^[0-9]{12}$`
	// +optional
	OwnerID string `json:"ownerID,omitempty"`
	// InstanceMatchCriteria of the reservation: open (any instance of its
	// type and zone may use it) or targeted (only launches that name it).
	// Nodeforge names the reservation in either case.
	// +kubebuilder:validation:Enum=open;targeted
	// +optional
	InstanceMatchCriteria string `json:"instanceMatchCriteria,omitempty"`
}

// SelectorTerm selects by tags or by id.
//
// +kubebuilder:validation:XValidation:message="set exactly one of tags or id",rule="has(self.tags) != has(self.id)"
type SelectorTerm struct {
	// Tags the resource must carry; a value of "*" matches any value.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=20
	// +kubebuilder:validation:XValidation:message="tag keys and values must not be empty",rule="self.all(k, k != '' && self[k] != '')"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// ID of the resource, such as subnet-0123456789abcdef0.
	// +kubebuilder:validation:Pattern=`^subnet-[0-9a-z]+$`
	// +optional
	ID string `json:"id,omitempty"`
}

// SecurityGroupSelectorTerm selects by tags, id or name.
//
// +kubebuilder:validation:XValidation:message="set exactly one of tags, id or name",rule="[has(self.tags), has(self.id), has(self.name)].filter(x, x).size() == 1"
type SecurityGroupSelectorTerm struct {
	// Tags the group must carry; a value of "*" matches any value.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=20
	// +kubebuilder:validation:XValidation:message="tag keys and values must not be empty",rule="self.all(k, k != '' && self[k] != '')"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// ID of the group, such as sg-0123456789abcdef0.
	// +kubebuilder:validation:Pattern=`^sg-[0-9a-z]+$`
	// +optional
	ID string `json:"id,omitempty"`
	// Name of the group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Name string `json:"name,omitempty"`
}

// AMISelectorTerm selects images by alias, id, name (and owner) or tags.
//
// +kubebuilder:validation:XValidation:message="alias cannot be combined with id, name, owner or tags",rule="!has(self.alias) || !(has(self.id) || has(self.name) || has(self.owner) || has(self.tags))"
// +kubebuilder:validation:XValidation:message="id cannot be combined with name, owner or tags",rule="!has(self.id) || !(has(self.name) || has(self.owner) || has(self.tags))"
// +kubebuilder:validation:XValidation:message="set one of alias, id, name or tags",rule="has(self.alias) || has(self.id) || has(self.name) || has(self.tags)"
type AMISelectorTerm struct {
	// Alias of an EKS-optimised image family with a version: al2023@latest
	// or al2023@vYYYYMMDD. The image is the newest (or that release of the)
	// Amazon Linux 2023 EKS image for the cluster's Kubernetes version.
	// +kubebuilder:validation:Pattern=`^al2023@(latest|v[0-9]{8})$`
	// +optional
	Alias string `json:"alias,omitempty"`
	// ID of the image, such as ami-0123456789abcdef0.
	// +kubebuilder:validation:Pattern=`^ami-[0-9a-z]+$`
	// +optional
	ID string `json:"id,omitempty"`
	// Name of the image; "*" matches any characters.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Name string `json:"name,omitempty"`
	// Owner of the image named: an account id, "self" or "amazon". Unset:
	// self and amazon.
	// +kubebuilder:validation:Pattern=`^([0-9]{12}|self|amazon)$`
	// +optional
	Owner string `json:"owner,omitempty"`
	// Tags the image must carry; a value of "*" matches any value.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=20
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
}

// BlockDeviceMapping is one volume of the instances.
type BlockDeviceMapping struct {
	// DeviceName, such as /dev/xvda.
	// +kubebuilder:validation:Pattern=`^/dev/[a-z0-9]+$`
	DeviceName string `json:"deviceName"`
	// RootVolume marks the volume the image boots from.
	// +optional
	RootVolume bool `json:"rootVolume,omitempty"`
	// EBS volume settings.
	EBS BlockDevice `json:"ebs"`
}

// BlockDevice is an EBS volume.
//
// +kubebuilder:validation:XValidation:message="iops and throughput can only be set on gp3, io1 and io2 volumes (throughput on gp3 only)",rule="(!has(self.iops) || self.volumeType in ['gp3','io1','io2']) && (!has(self.throughput) || self.volumeType == 'gp3')"
type BlockDevice struct {
	// VolumeSize in GiB.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	VolumeSize int32 `json:"volumeSize"`
	// VolumeType of the volume.
	// +kubebuilder:default=gp3
	// +kubebuilder:validation:Enum=gp2;gp3;io1;io2;st1;sc1;standard
	// +optional
	VolumeType string `json:"volumeType,omitempty"`
	// IOPS of gp3, io1 and io2 volumes.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=256000
	// +optional
	IOPS *int32 `json:"iops,omitempty"`
	// Throughput of gp3 volumes in MiB/s.
	// +kubebuilder:validation:Minimum=125
	// +kubebuilder:validation:Maximum=2000
	// +optional
	Throughput *int32 `json:"throughput,omitempty"`
	// Encrypted volume; true unless set false.
	// +kubebuilder:default=true
	// +optional
	Encrypted *bool `json:"encrypted,omitempty"`
	// KMSKeyID encrypts the volume with this key instead of the default.
	// +optional
	KMSKeyID string `json:"kmsKeyID,omitempty"`
	// DeleteOnTermination; true unless set false.
	// +kubebuilder:default=true
	// +optional
	DeleteOnTermination *bool `json:"deleteOnTermination,omitempty"`
}

// MetadataOptions configure the instance metadata service.
type MetadataOptions struct {
	// HTTPEndpoint enables or disables the metadata service.
	// +kubebuilder:default=enabled
	// +kubebuilder:validation:Enum=enabled;disabled
	// +optional
	HTTPEndpoint string `json:"httpEndpoint,omitempty"`
	// HTTPProtocolIPv6 enables the IPv6 endpoint of the metadata service.
	// +kubebuilder:default=disabled
	// +kubebuilder:validation:Enum=enabled;disabled
	// +optional
	HTTPProtocolIPv6 string `json:"httpProtocolIPv6,omitempty"`
	// HTTPPutResponseHopLimit is how many network hops a metadata token
	// may travel; 1 keeps it on the host, out of reach of pods.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	HTTPPutResponseHopLimit int32 `json:"httpPutResponseHopLimit,omitempty"`
	// HTTPTokens: required means IMDSv2 only.
	// +kubebuilder:default=required
	// +kubebuilder:validation:Enum=required;optional
	// +optional
	HTTPTokens string `json:"httpTokens,omitempty"`
}

// KubeletConfiguration is the part of the kubelet's configuration that
// decides how much of a node pods may use.
// +kubebuilder:validation:XValidation:message="reservedENIs lowers the max pods computed from the network interfaces; it cannot be set together with maxPods",rule="!(has(self.maxPods) && has(self.reservedENIs))"
type KubeletConfiguration struct {
	// MaxPods per node, on every instance type. Unset: what the VPC CNI can
	// address without prefix delegation on the type's default network
	// card: (ENIs − reservedENIs) × (IPv4 addresses per ENI − 1) + 2, as
	// nodeadm computes it. Above that figure, pods need prefix delegation
	// or they stay in ContainerCreating; the class's MaxPodsAddressable
	// condition names such types. Written to nodeadm as its
	// maxPodsExpression, so that its kube-reserved memory (255 MiB + 11 MiB
	// a pod) is computed from the same figure.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=737
	// +optional
	MaxPods *int32 `json:"maxPods,omitempty"`
	// PodsPerCore caps a node's pods at this many per vCPU, as the kubelet's
	// podsPerCore does: the lower of it and max pods applies. nodeadm still
	// reserves memory for max pods.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	PodsPerCore *int32 `json:"podsPerCore,omitempty"`
	// ReservedENIs of the default network card give pods no addresses
	// (custom networking, or interfaces another agent attaches): unset max
	// pods is computed from the others. A type with no ENI left holds
	// only the two host-network pods.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	// +optional
	ReservedENIs *int32 `json:"reservedENIs,omitempty"`
	// KubeReserved overrides the reservation for Kubernetes daemons.
	// Unset resources follow the EKS formulas (CPU by cores, memory by max
	// pods).
	// +kubebuilder:validation:XValidation:message="kubeReserved keys must be cpu, memory, ephemeral-storage or pid",rule="self.all(k, k in ['cpu','memory','ephemeral-storage','pid'])"
	// +kubebuilder:validation:XValidation:message="kubeReserved values must be quantities such as 100m or 1Gi",rule="self.all(k, isQuantity(self[k]) && !quantity(self[k]).isLessThan(quantity('0')))"
	// +kubebuilder:validation:MaxProperties=4
	// +optional
	KubeReserved map[string]KubeletValue `json:"kubeReserved,omitempty"`
	// SystemReserved is the reservation for operating system daemons.
	// +kubebuilder:validation:XValidation:message="systemReserved keys must be cpu, memory, ephemeral-storage or pid",rule="self.all(k, k in ['cpu','memory','ephemeral-storage','pid'])"
	// +kubebuilder:validation:XValidation:message="systemReserved values must be quantities such as 100m or 1Gi",rule="self.all(k, isQuantity(self[k]) && !quantity(self[k]).isLessThan(quantity('0')))"
	// +kubebuilder:validation:MaxProperties=4
	// +optional
	SystemReserved map[string]KubeletValue `json:"systemReserved,omitempty"`
	// EvictionHard thresholds. Unset memory.available: 100Mi.
	// +kubebuilder:validation:XValidation:message="evictionHard keys must be memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree or pid.available",rule="self.all(k, k in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])"
	// +kubebuilder:validation:XValidation:message="evictionHard values must be quantities such as 100Mi or percentages such as 10%",rule="self.all(k, self[k].matches('^[0-9]+(\\\\.[0-9]+)?%$') || isQuantity(self[k]))"
	// +kubebuilder:validation:MaxProperties=6
	// +optional
	EvictionHard map[string]KubeletValue `json:"evictionHard,omitempty"`
}

// KubeletValue is a resource quantity such as 100m or 1Gi, or for
// eviction thresholds a percentage such as 10%.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=32
type KubeletValue string

// EC2NodeClassStatus is what the class's selectors resolved to.
type EC2NodeClassStatus struct {
	// Subnets resolved from subnetSelectorTerms.
	// +listType=atomic
	// +optional
	Subnets []ResolvedSubnet `json:"subnets,omitempty"`
	// SubnetCount is len(subnets), for kubectl.
	// +optional
	SubnetCount int32 `json:"subnetCount,omitempty"`
	// SecurityGroups resolved from securityGroupSelectorTerms.
	// +listType=atomic
	// +optional
	SecurityGroups []ResolvedSecurityGroup `json:"securityGroups,omitempty"`
	// AMIs resolved from amiSelectorTerms: for an alias, one per
	// architecture and variant (standard, nvidia, neuron); otherwise the
	// newest per architecture, for every instance type.
	// +listType=atomic
	// +optional
	AMIs []ResolvedAMI `json:"amis,omitempty"`
	// InstanceProfile the instances are launched with.
	// +optional
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// CapacityReservations resolved from capacityReservationSelectorTerms:
	// the active reservations the class can launch into, with their
	// available instances when they were resolved.
	// +listType=atomic
	// +optional
	CapacityReservations []ResolvedCapacityReservation `json:"capacityReservations,omitempty"`
	// Conditions: Ready, and SubnetsReady, SecurityGroupsReady, AMIsReady,
	// InstanceProfileReady saying what is missing when it is not;
	// CapacityReservationsReady when the class selects reservations.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ResolvedSubnet is a subnet a selector term matched.
type ResolvedSubnet struct {
	ID     string `json:"id"`
	Zone   string `json:"zone"`
	ZoneID string `json:"zoneID,omitempty"`
}

// ResolvedSecurityGroup is a security group a selector term matched.
type ResolvedSecurityGroup struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// ResolvedAMI is the image instances of one architecture boot.
type ResolvedAMI struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Architecture in Kubernetes terms: amd64 or arm64.
	Architecture string `json:"architecture"`
	// Variant of an EKS-optimised image, chosen per instance type:
	// standard; nvidia for types with NVIDIA GPUs; neuron for Inferentia
	// and Trainium. Empty: an image for every type of its architecture.
	// +optional
	Variant string `json:"variant,omitempty"`
}

// ResolvedCapacityReservation is an on-demand capacity reservation a
// selector term matched.
type ResolvedCapacityReservation struct {
	ID           string `json:"id"`
	InstanceType string `json:"instanceType"`
	Zone         string `json:"zone"`
	// AvailableInstanceCount is how many more instances the reservation
	// took when it was resolved.
	AvailableInstanceCount int32 `json:"availableInstanceCount"`
	// EndTime is when the reservation ends; unset: when it is cancelled.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// OwnerID is the account that owns the reservation.
	OwnerID string `json:"ownerID"`
	// InstanceMatchCriteria: open or targeted.
	InstanceMatchCriteria string `json:"instanceMatchCriteria"`
}

// EC2NodeClassList is a list of EC2NodeClasses.
// +kubebuilder:object:root=true
type EC2NodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EC2NodeClass `json:"items"`
}
