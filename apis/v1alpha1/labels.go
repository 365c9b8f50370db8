package v1alpha1

import "regexp"

// Well-known labels and taints. Every node Nodeforge launches carries
// LabelNodePool, LabelCapacityType and the Kubernetes well-known labels for
// instance type, zone, architecture and operating system.
const (
	// LabelNodePool names the NodePool a node or NodeClaim belongs to.
	LabelNodePool = Group + "/nodepool"
	// LabelCapacityType is the purchase option of a node: spot or on-demand.
	LabelCapacityType = Group + "/capacity-type"
	// CapacityTypeSpot and CapacityTypeOnDemand are the values of LabelCapacityType.
	CapacityTypeSpot     = "spot"
	CapacityTypeOnDemand = "on-demand"

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
	// AnnotationReplaces on a replacement NodeClaim names the claim it
	// replaces. The provisioner launches it with no nominated pods, and
	// does not disrupt it while that claim is still there.
	AnnotationReplaces = Group + "/replaces"
	// AnnotationDisruption on a claim waiting for its replacement is the
	// reason it is disrupted and why, "Drifted: NodePool a template
	// changed", for the Event and log line when its node is drained.
	AnnotationDisruption = Group + "/disruption"
	// AnnotationDrainBy on a claim waiting for its replacement is when
	// (RFC 3339) its node is drained whether or not the replacement is
	// ready: the cloud takes the instance back soon after (a spot
	// interruption).
	AnnotationDrainBy = Group + "/drain-by"
	// AnnotationDrainDeadline on a claim being removed is when (RFC 3339)
	// its drain ends at the latest, whatever its terminationGracePeriod
	// says: pods still there are deleted rather than evicted. Repair sets
	// it to the moment it decides: an unhealthy node's pods cannot wait on
	// a PodDisruptionBudget that counts them as healthy.
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

// reservedKey matches label and taint keys in the nodeforge.dev domain or one
// of its subdomains. Users may not set these on a NodePool: Nodeforge owns them.
// The same expression appears in the CEL rules of the types below.
var reservedKey = regexp.MustCompile(`^([^/]*\.)?nodeforge\.dev/`)

// IsReservedKey reports whether a label or taint key belongs to Nodeforge.
func IsReservedKey(key string) bool { return reservedKey.MatchString(key) }
