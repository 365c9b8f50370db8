package v1alpha1

import (
	"regexp"
	"slices"
	"strings"
)

// Well-known labels and taints. Every node Nodeforge launches carries
// LabelNodePool, LabelCapacityType and the Kubernetes well-known labels for
// instance type, zone, architecture and operating system.
const (
	// LabelNodePool names the NodePool a node or NodeClaim belongs to.
	LabelNodePool = Group + "/nodepool"
	// LabelCapacityType is the purchase option of a node: spot,
	// on-demand, or reserved (an on-demand capacity reservation of its
	// node class, named by LabelCapacityReservationID).
	LabelCapacityType = Group + "/capacity-type"
	// LabelKarpenterCapacityType is Karpenter's label of the same meaning
	// and values. Every Nodeforge node carries it too, equal to
	// LabelCapacityType, so that workloads whose nodeSelector or affinity
	// names it keep working unedited (docs/install.md, "Beside
	// Karpenter"). Karpenter counts a node as its own by its nodepool and
	// node class labels, never this one, so it does not adopt the node.
	LabelKarpenterCapacityType = "karpenter.sh/capacity-type"
	// CapacityTypeSpot, CapacityTypeOnDemand and CapacityTypeReserved are
	// the values of LabelCapacityType; Karpenter's are the same.
	CapacityTypeSpot     = "spot"
	CapacityTypeOnDemand = "on-demand"
	CapacityTypeReserved = "reserved"
	// LabelCapacityReservationID names the capacity reservation a node of
	// capacity type reserved runs in (EC2's cr-… id), set by the provider
	// when the node registers. LabelKarpenterCapacityReservationID is
	// Karpenter's key of the same meaning, set beside it, as
	// LabelKarpenterCapacityType is.
	LabelCapacityReservationID          = Group + "/capacity-reservation-id"
	LabelKarpenterCapacityReservationID = "karpenter.k8s.aws/capacity-reservation-id"

	// LabelDRADriverPrefix, followed by a DRA driver's name
	// (LabelDRADriver), labels a node "true" when its node class says the
	// node runs that driver (EC2NodeClass spec.draDrivers): the kubelet
	// registers with it, and the virtual nodes of the class carry it, so
	// the driver's DaemonSet can select such nodes and a device plugin's
	// DaemonSet avoid them.
	LabelDRADriverPrefix = "dra." + Group + "/"

	// TaintBinding is the startup taint the provisioner puts on a node it
	// adopts, so that the default scheduler does not take the room meant for
	// the pods nominated to it; it is removed once they are bound.
	TaintBinding = Group + "/binding"
	// TaintDisrupted marks a node that is being drained for termination.
	TaintDisrupted = Group + "/disrupted"

	// FinalizerTermination keeps a NodeClaim (and its Node) until its
	// instance is terminated.
	FinalizerTermination = Group + "/termination"

	// AnnotationDoNotDisrupt "true" keeps the provisioner from disrupting
	// a node voluntarily, for every reason (empty, expired, ...): on the
	// node's NodeClaim, on the Node, or on any pod bound to the node that
	// has not finished (Succeeded or Failed). A claim so held gets a
	// DisruptionBlocked Event naming what holds it. It does not stop a
	// drain already begun, nor the deletion of a claim by hand.
	AnnotationDoNotDisrupt = Group + "/do-not-disrupt"
	// AnnotationKarpenterDoNotDisrupt is Karpenter's annotation of the
	// same meaning, honoured like AnnotationDoNotDisrupt wherever that is,
	// so that a workload moving from Karpenter keeps its protection
	// without an edit.
	AnnotationKarpenterDoNotDisrupt = "karpenter.sh/do-not-disrupt"

	// AnnotationNodePoolHash on a NodeClaim is the hash of its pool's
	// template when the claim was made (nodeshape.PoolHash), stamped by
	// the scheduler plugin; the claim is drifted once the pool's differs.
	AnnotationNodePoolHash = Group + "/nodepool-hash"
	// AnnotationNodePoolHashVersion is the version of what
	// AnnotationNodePoolHash hashes (nodeshape.PoolHashVersion). A claim
	// stamped under another version is stamped again, not drifted, so
	// that changing what is hashed does not replace every node.
	AnnotationNodePoolHashVersion = Group + "/nodepool-hash-version"
	// AnnotationNodeClassHash on a NodeClaim is the hash of the node class
	// it was launched from (the cloud provider's NodeClass.Hash), stamped
	// by the provisioner at launch; the claim is drifted once the class's
	// differs.
	AnnotationNodeClassHash = Group + "/nodeclass-hash"
	// AnnotationReplacement on a NodeClaim being disrupted names the claim
	// launched to take its pods; the node is drained once that claim is
	// Initialized. It is written before the replacement is created, so a
	// provisioner that restarts in between finds what it was doing.
	AnnotationReplacement = Group + "/replacement"
	// AnnotationReplacementRequested is when AnnotationReplacement was
	// written (RFC 3339): a replacement not found soon after is one whose
	// creation has not reached the cache yet; not found long after, it
	// failed.
	AnnotationReplacementRequested = Group + "/replacement-requested"
	// AnnotationReleasedWith on a NodeClaim names the claim of the same
	// PodGroup's pods that was given up: the provisioner deletes it at the
	// next point where no launch of it is under way (before its launch,
	// or once the instance launched is recorded), which terminates any
	// instance it has.
	AnnotationReleasedWith = Group + "/released-with"
	// AnnotationProvisioningRequest on a NodeClaim names the
	// ProvisioningRequest (namespace/name) VirtualNodes made it for, with
	// the request's pods, which do not exist yet, nominated to it. The
	// provisioner launches it with no nominated pod, releases the
	// request's other claims when one is given up (all or none), and does
	// not disrupt its node while the request's booking lasts.
	AnnotationProvisioningRequest = Group + "/provisioning-request"
	// AnnotationCapacityBuffer on a NodeClaim names the CapacityBuffer
	// (namespace/name) VirtualNodes made it for: the buffer's chunks,
	// which are not pods, are nominated to it. The provisioner launches
	// it with no nominated pod while the buffer is ready.
	AnnotationCapacityBuffer = Group + "/capacity-buffer"
	// AnnotationReplaces on a replacement NodeClaim names the claim it
	// replaces. The provisioner launches it with no nominated pods, and
	// does not disrupt it while that claim is still there.
	AnnotationReplaces = Group + "/replaces"
	// AnnotationReplica on a NodeClaim says the provisioner made it to
	// keep a fixed-size pool (spec.replicas) at its count: it launches
	// with no nominated pod, and VirtualNodes nominates none to it.
	AnnotationReplica = Group + "/replica"
	// AnnotationDisruption on a claim waiting for its replacement is the
	// reason it is disrupted and why, "Drifted: NodePool a template
	// changed", for the Event and log line when its node is drained.
	AnnotationDisruption = Group + "/disruption"
	// AnnotationDrainStart on a claim waiting for its replacement is when
	// (RFC 3339) its node's drain starts whether or not the replacement is
	// ready: the cloud takes the instance back soon after (a spot
	// interruption). AnnotationDrainDeadline is when a drain must end.
	AnnotationDrainStart = Group + "/drain-start"
	// AnnotationDrainStartBefore ("drain-by") is read as
	// AnnotationDrainStart on a claim that has only it, so that a claim
	// interrupted across an upgrade from a provisioner that writes it
	// keeps its start. Nothing writes it.
	AnnotationDrainStartBefore = Group + "/drain-by"
	// AnnotationDrainDeadline on a claim being removed is when (RFC 3339)
	// PodDisruptionBudgets stop holding its drain: from then on each pod
	// left is deleted, not evicted, with its own grace period, and the
	// drain is over once each has had it. Repair sets it to the moment it
	// decides, with the claim's Disrupting mark (it is removed if that
	// write fails): an unhealthy node's pods cannot wait on a
	// PodDisruptionBudget that counts them as healthy.
	AnnotationDrainDeadline = Group + "/drain-deadline"
	// AnnotationRepackPlan on a NodeClaim is a repack of its batch that
	// the provisioner has decided and not finished (JSON): the claims
	// that stay, with the instance types and resources each is launched
	// with, and the pods that move. It is written before anything moves,
	// so a provisioner that restarts in between finishes the same plan.
	AnnotationRepackPlan = Group + "/repack-plan"
	// AnnotationRepackedInto on a NodeClaim a repack emptied is where its
	// pods went (JSON, pod UID to claim name), written before the claim
	// is deleted: the scheduler plugin moves them there in its view
	// instead of deciding them again.
	AnnotationRepackedInto = Group + "/repacked-into"
)

// Instance attribute labels: what an instance type is, on every instance
// type of a catalog, on the virtual node the scheduler judges a pod on and
// on the node that registers, so a pool's requirements and a pod's
// selectors can choose types by attribute (Gt and Lt included). Their
// names and value formats are those of Karpenter's
// karpenter.k8s.aws/instance-* labels (Karpenter's instance-types
// reference), so a requirement reads the same with the prefix changed. A
// type without the attribute (no GPU, no local NVMe) has no such label.
const (
	// LabelInstanceCategory is the letters before the generation:
	// "c" for c7g.xlarge.
	LabelInstanceCategory = Group + "/instance-category"
	// LabelInstanceFamily is the name before the dot: "c7g".
	LabelInstanceFamily = Group + "/instance-family"
	// LabelInstanceGeneration is the number after the category: "7".
	LabelInstanceGeneration = Group + "/instance-generation"
	// LabelInstanceSize is the name after the dot: "xlarge".
	LabelInstanceSize = Group + "/instance-size"
	// LabelInstanceCPU is the number of vCPUs: "4".
	LabelInstanceCPU = Group + "/instance-cpu"
	// LabelInstanceCPUManufacturer is "intel", "amd" or "aws".
	LabelInstanceCPUManufacturer = Group + "/instance-cpu-manufacturer"
	// LabelInstanceMemory is the memory in MiB, before any overhead: "8192".
	LabelInstanceMemory = Group + "/instance-memory"
	// LabelInstanceGPUName is the GPU model, lower case: "t4".
	LabelInstanceGPUName = Group + "/instance-gpu-name"
	// LabelInstanceGPUCount is the number of GPUs: "1".
	LabelInstanceGPUCount = Group + "/instance-gpu-count"
	// LabelInstanceGPUManufacturer is the GPU maker, lower case: "nvidia".
	LabelInstanceGPUManufacturer = Group + "/instance-gpu-manufacturer"
	// LabelInstanceGPUMemory is the memory of one GPU in MiB: "16384".
	LabelInstanceGPUMemory = Group + "/instance-gpu-memory"
	// LabelInstanceLocalNVMe is the local NVMe instance storage in GB: "125".
	LabelInstanceLocalNVMe = Group + "/instance-local-nvme"
	// LabelInstanceHypervisor is "nitro" or "xen".
	LabelInstanceHypervisor = Group + "/instance-hypervisor"
	// LabelInstanceNetworkBandwidth is the baseline network bandwidth in
	// Mbit/s: "750".
	LabelInstanceNetworkBandwidth = Group + "/instance-network-bandwidth"
	// LabelInstanceEncryptionInTransitSupported is "true" or "false".
	LabelInstanceEncryptionInTransitSupported = Group + "/instance-encryption-in-transit-supported"
)

// InstanceLabels are the instance attribute label keys. A requirement on
// one applies to every instance type, those without the label included
// (they do not meet In, Exists, Gt or Lt), the way it applies to the node
// that registers.
var InstanceLabels = []string{
	LabelInstanceCategory, LabelInstanceFamily, LabelInstanceGeneration, LabelInstanceSize,
	LabelInstanceCPU, LabelInstanceCPUManufacturer, LabelInstanceMemory,
	LabelInstanceGPUName, LabelInstanceGPUCount, LabelInstanceGPUManufacturer, LabelInstanceGPUMemory,
	LabelInstanceLocalNVMe, LabelInstanceHypervisor, LabelInstanceNetworkBandwidth,
	LabelInstanceEncryptionInTransitSupported,
}

// IsInstanceLabel reports whether key is an instance attribute label.
func IsInstanceLabel(key string) bool {
	return slices.Contains(InstanceLabels, key)
}

// KarpenterInstanceLabel is Karpenter's key of the instance attribute
// label key (karpenter.k8s.aws/instance-family for
// nodeforge.dev/instance-family; the names and values are Karpenter's).
// Every Nodeforge node carries both, so that a workload selecting
// Karpenter's keeps working unedited; Karpenter counts a node as its own
// by its nodepool and node class labels, never these.
func KarpenterInstanceLabel(key string) string {
	return "karpenter.k8s.aws/" + strings.TrimPrefix(key, Group+"/")
}

// InstanceNameLabels are the labels an instance type's name says: its
// family and size (either side of the dot), and the family's category (the
// letters it starts with) and generation (the digits after them, past a
// "-<n>tb" memory size): c7g.xlarge is category c, family c7g, generation
// 7, size xlarge; u-6tb1.metal is category u, generation 1, as Karpenter
// reads them.
func InstanceNameLabels(name string) map[string]string {
	family, size, ok := strings.Cut(name, ".")
	out := map[string]string{}
	if !ok || family == "" || size == "" {
		return out
	}
	out[LabelInstanceFamily], out[LabelInstanceSize] = family, size
	if m := familyParts.FindStringSubmatch(family); m != nil {
		out[LabelInstanceCategory], out[LabelInstanceGeneration] = m[1], m[2]
	}
	return out
}

// familyParts reads an instance family: its category, an optional memory
// size ("-6tb", of the u family), and its generation.
var familyParts = regexp.MustCompile(`^([a-z]+)(?:-[0-9]+tb)?([0-9]+)`)

// reservedKey matches label and taint keys in the nodeforge.dev domain or one
// of its subdomains. Users may not set these on a NodePool: Nodeforge owns them.
// The same expression appears in the CEL rules of the types below.
var reservedKey = regexp.MustCompile(`^([^/]*\.)?nodeforge\.dev/`)

// LabelDRADriver is the label of nodes that run the DRA driver named.
func LabelDRADriver(driver string) string { return LabelDRADriverPrefix + driver }

// IsReservedKey reports whether a label or taint key belongs to Nodeforge.
func IsReservedKey(key string) bool { return reservedKey.MatchString(key) }

// DoNotDisruptAnnotations are the annotations that, set to "true", keep
// the provisioner from disrupting a node voluntarily: Nodeforge's own
// first, then Karpenter's.
var DoNotDisruptAnnotations = []string{AnnotationDoNotDisrupt, AnnotationKarpenterDoNotDisrupt}

// DoNotDisrupt returns which do-not-disrupt annotation annotations set to
// "true", or "" when none does.
func DoNotDisrupt(annotations map[string]string) string {
	for _, k := range DoNotDisruptAnnotations {
		if annotations[k] == "true" {
			return k
		}
	}
	return ""
}
