package v1alpha1

// The condition types of the objects Nodeforge writes, as `kubectl get -o
// yaml` shows them and docs/api.md lists them: a contract, defined once
// here and used by every controller that sets or reads one.

// NodeClaim conditions. Launched, Registered and Initialized record when
// each step of the claim's life happened; the phase, not they, is what
// the provisioner acts on.
const (
	// ConditionLaunched: an instance was created for the claim (False,
	// reason AccessDenied, when the cloud refused the launch, or
	// OutsideNodePool).
	ConditionLaunched = "Launched"
	// ConditionRegistered: the instance's node joined and was adopted
	// (False, reason OutsideNodePool, when the claim asked for more than
	// its pool makes).
	ConditionRegistered = "Registered"
	// ConditionInitialized: the node is ready and the claim's pods are
	// bound or handed to the scheduler.
	ConditionInitialized = "Initialized"
	// ConditionPacked is True on a claim its batch's repack has left ready
	// to launch (reason Repacked or Kept).
	ConditionPacked = "Packed"
	// ConditionEmpty is True while the claim's node runs no pod but
	// daemonset and static (mirror) pods; its LastTransitionTime is when
	// it became empty. Set only under a pool's consolidateAfter.
	ConditionEmpty = "Empty"
	// ConditionDrifted is True on a claim whose node is no longer what its
	// pool and node class would launch now; its reason says which (one of
	// the DriftedBy reasons) and its message says what, for people. It is
	// absent from a claim that has not drifted.
	ConditionDrifted = "Drifted"
)

// The reasons of a Drifted condition.
const (
	// DriftedByRequirements: the node's labels no longer meet one of the
	// pool's requirements.
	DriftedByRequirements = "RequirementsDrifted"
	// DriftedByNodePool: the pool's template (labels, annotations,
	// taints, startup taints, requirements, node class reference) is not
	// the one the claim was made from.
	DriftedByNodePool = "NodePoolDrifted"
	// DriftedByNodeClass: what the provider hashes of the node class
	// (NodeClass.Hash) is not what the claim was launched with.
	DriftedByNodeClass = "NodeClassDrifted"
	// DriftedByImage: the node class resolves to other machine images
	// than the one the instance was launched from (a newer recommended
	// image, published by the cloud), its spec unchanged.
	DriftedByImage = "ImageDrifted"
)

// NodePool and node class conditions.
const (
	// ConditionReady: a NodePool can launch (its node class is of a kind
	// the provisioner's cloud provider serves, exists, and is ready); a
	// node class is ready to launch from.
	ConditionReady = "Ready"
	// ConditionBudgetsValid is the NodePool condition that says every
	// disruption budget's schedule parses. The API server refuses one that
	// does not, so only a pool stored before it did can hold one; then the
	// message names the budget and the parser's complaint, and the
	// disruption controller treats that budget as always active. A
	// condition of its own rather than Ready=False: the pool still
	// launches nodes as it should, and only its disruption is held back,
	// more than its owner meant.
	ConditionBudgetsValid = "BudgetsValid"
	// ConditionLimitsSet is the NodePool condition that says spec.limits
	// caps the pool. It is False (reason NoLimits) for a pool without
	// limits, which any pod with schedulerName nodeforge-scheduler can make
	// launch whatever the pool's requirements allow, without bound. It
	// informs and no more: a pool without limits launches as its owner
	// wrote it, and stays Ready.
	ConditionLimitsSet = "LimitsSet"
	// ConditionReplicasReached is the condition of a fixed-size NodePool
	// (spec.replicas): True once as many of its claims stand as it has
	// replicas; False while some launch (reason ReplicasLaunching), or
	// when its limits leave no room for the rest (reason LimitsReached,
	// which also makes the pool not Ready) or it has no instance type to
	// launch (reason NoInstanceTypes). The message says how many stand.
	ConditionReplicasReached = "ReplicasReached"
	// ConditionNodesRegistering is the node class condition that is False
	// once several claims of the class in a row had no node register
	// within the registration TTL, naming them, and True again when a node
	// of the class registers. It does not make the class not Ready: it
	// says where to look (the class's user data, role, security groups,
	// the nodes' console output).
	ConditionNodesRegistering = "NodesRegistering"
)

// NodeOverlay conditions and their reasons. Ready is also a DeviceTemplate's.
const (
	// ConditionConflictFree is the NodeOverlay condition that is False
	// (reason OverlayConflict) while an overlay of the same weight sets the
	// same field (the price, or a capacity name to another amount) of an
	// instance type both select; its message names the other overlay, the
	// field, a type, and which of the two applies (the one whose name
	// sorts first).
	ConditionConflictFree = "ConflictFree"

	// ReasonOverlayApplied: Ready, a published instance type carries one
	// of the overlay's changes.
	ReasonOverlayApplied = "Applied"
	// ReasonOverlayNoInstanceType: not Ready, its requirements select no
	// published instance type or offering.
	ReasonOverlayNoInstanceType = "NoInstanceType"
	// ReasonOverlayOverridden: not Ready, it selects published types but
	// an overlay of higher weight, or of the same weight and a name that
	// sorts first, sets every field it sets on each of them.
	ReasonOverlayOverridden = "Overridden"
	// ReasonOverlayInvalidRequirements: not Ready, its requirements do
	// not parse as a node selector (the API server refuses such; an
	// overlay stored before a rule was added may hold one).
	ReasonOverlayInvalidRequirements = "InvalidRequirements"
	// ReasonOverlayConflict: ConflictFree is False.
	ReasonOverlayConflict = "OverlayConflict"
	// ReasonOverlayNoConflict: ConflictFree is True.
	ReasonOverlayNoConflict = "NoConflict"
)

// The reasons of a fixed-size pool's ReplicasReached condition.
const (
	ReasonReplicasReached   = "ReplicasReached"
	ReasonReplicasLaunching = "ReplicasLaunching"
	// ReasonReplicasLimited: the pool's limits leave no room for another
	// node; Ready is False with this reason too.
	ReasonReplicasLimited = "LimitsReached"
	// ReasonReplicasNoInstanceTypes: the pool's catalog publishes no
	// instance type it may launch.
	ReasonReplicasNoInstanceTypes = "NoInstanceTypes"
)
