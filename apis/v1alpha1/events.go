package v1alpha1

// The reasons and actions of the Events Nodeforge records, as `kubectl
// describe` and `kubectl get events` show them and docs/api.md lists them
// (section Events): a contract users match on, defined once here and used
// by every component that records one. Each reason constant is named
// Reason followed by its value, each action Action followed by its value.
//
// The Events of a disruption (Disrupting, Replacing, Unconsolidatable,
// DisruptionBlocked, DrainingWithoutReplacement, RepairHeld, Interrupted,
// RebalanceRecommended) carry the method's DisruptionReason as their
// action, not one of the actions below.

// Events on a pod, from nodeforge-scheduler.
const (
	// ReasonNoInstanceType: a Warning on a pod that no NodePool can launch
	// a node for, with each pool's reason. Nothing is launched; the
	// scheduler tries the pod again as the cluster changes.
	ReasonNoInstanceType = "NoInstanceType"
	// ReasonGroupNotLaunchable: a Warning on each pod of a gang (a
	// PodGroup of policy gang) fewer than minCount of whose pods can have
	// a node, with how many can and the first refused pod's reason. None
	// of its pods is nominated and nothing is launched.
	ReasonGroupNotLaunchable = "GroupNotLaunchable"
)

// Events of a NodeClaim's launch, on the claim and, where the claim is
// given up, on each pod nominated to it (which then gets another claim).
const (
	// ReasonLaunched: a Normal on a NodeClaim whose instance was launched,
	// naming the instance, its type, zone, capacity type and price. Not
	// on its pods: their FailedScheduling Event names the claim.
	ReasonLaunched = "Launched"
	// ReasonLaunchFailed: a Warning on a NodeClaim and its pods when none
	// of its instance type options is available, or its available ones
	// are fewer than its pool's minValues (the claim is deleted); and on
	// the NodeClaim alone when the cloud's Create failed otherwise than
	// for capacity, permission or the node class (the launch is retried).
	ReasonLaunchFailed = "LaunchFailed"
	// ReasonInsufficientCapacity: a Warning on a NodeClaim none of whose
	// options had capacity; they are marked unavailable and the launch is
	// retried.
	ReasonInsufficientCapacity = "InsufficientCapacity"
	// ReasonNodeClassNotReady: a Warning on a NodeClaim whose node class
	// is not ready to launch from; the launch is retried.
	ReasonNodeClassNotReady = "NodeClassNotReady"
	// ReasonLimitReached: a Warning on a NodeClaim and its pods when
	// launching it would pass its pool's limits; it is deleted unlaunched.
	ReasonLimitReached = "LimitReached"
	// ReasonAccessDenied: a Warning on a NodeClaim and its pods when the
	// cloud refused the launch for lack of permission. It is also the
	// reason of the claim's Launched condition (False): the claim is not
	// retried, and is deleted after the registration TTL.
	ReasonAccessDenied = "AccessDenied"
	// ReasonOutsideNodePool: a Warning on a NodeClaim and its pods when
	// the claim asks for more than its pool, as the pool is now, makes:
	// another node class, labels, annotations or taints the template does
	// not have, requirements looser than the pool's. It is also the reason
	// of the claim's Launched or Registered condition (False). Such a
	// claim is not launched or adopted, and is deleted.
	ReasonOutsideNodePool = "OutsideNodePool"
	// ReasonGroupReleased: a Warning on a NodeClaim, and its pods, deleted
	// because another claim of the same PodGroup's pods was given up (not
	// launched, refused, or timed out), naming that claim and why: a
	// group's pods start together or not at all, and the group is decided
	// afresh.
	ReasonGroupReleased = "GroupReleased"
	// ReasonLaunchTimeout: a Warning on a NodeClaim and its pods when the
	// claim was not launched within the launch TTL; it is deleted.
	ReasonLaunchTimeout = "LaunchTimeout"
	// ReasonRepacked: a Normal on a NodeClaim its batch's repack changed:
	// on one emptied into cheaper claims of its batch (action Delete; it
	// is deleted unlaunched), and on the claim that holds the plan (action
	// Launch), with the batch's price before and after.
	ReasonRepacked = "Repacked"
	// ReasonDeleted: a Normal on a NodeClaim deleted before launch because
	// no pod is nominated to it any more (action NoPods).
	ReasonDeleted = "Deleted"
)

// Events of a NodeClaim's registration and initialization.
const (
	// ReasonRegistered: a Normal on a NodeClaim whose node registered and
	// was adopted.
	ReasonRegistered = "Registered"
	// ReasonProviderIDMismatch: a Warning on a NodeClaim whose node's
	// instance was launched for another claim; the node is not adopted.
	ReasonProviderIDMismatch = "ProviderIDMismatch"
	// ReasonRegistrationTimeout: a Warning on a NodeClaim and its pods
	// when no node registered for it within the registration TTL (it is
	// deleted), and on its node class, counting the timeouts in a row.
	ReasonRegistrationTimeout = "RegistrationTimeout"
	// ReasonInitializationTimeout: a Warning on a NodeClaim and its pods
	// when its node was not ready for pods within the initialization TTL
	// of registering; it is deleted.
	ReasonInitializationTimeout = "InitializationTimeout"
	// ReasonInitialized: a Normal on a NodeClaim whose node is ready and
	// whose pods are bound or handed to the scheduler, with how many of
	// each. Not on its pods: the binding is their record.
	ReasonInitialized = "Initialized"
	// ReasonNominationCleared: a Warning on a pod whose claim's node the
	// scheduler's plugins refuse it on (naming the plugin), or that could
	// not be bound there within the initialization TTL. Its nomination is
	// cleared, and the scheduler tries it again.
	ReasonNominationCleared = "NominationCleared"
	// ReasonHandedOff: a Normal on a pod that only the scheduler's binding
	// cycle can bind (a volume to provision, a device to allocate, a
	// Permit or PreBind plugin): it is nominated to its claim's ready node
	// for the scheduler to bind.
	ReasonHandedOff = "HandedOff"
)

// Events of a NodeClaim's drain and termination, on the claim and, for
// a pod deleted or not evicted, on the pod.
const (
	// ReasonNodeDeleted: a Normal on a NodeClaim whose Node someone
	// deleted; the claim is deleted too, which drains the node and
	// terminates its instance.
	ReasonNodeDeleted = "NodeDeleted"
	// ReasonEvictionBlocked: a Warning on a pod and its NodeClaim when a
	// PodDisruptionBudget refuses the pod's eviction, naming the budget;
	// at most once a minute a pod. The drain retries.
	ReasonEvictionBlocked = "EvictionBlocked"
	// ReasonDrainHeld: a Warning on a NodeClaim whose drain waits for
	// pods annotated do-not-disrupt, naming them and until when; at most
	// once a minute a claim.
	ReasonDrainHeld = "DrainHeld"
	// ReasonTerminationGracePeriodPassed: a Warning on a pod and its
	// NodeClaim when the claim's terminationGracePeriod is running out and
	// the pod is deleted, PodDisruptionBudgets and do-not-disrupt
	// notwithstanding.
	ReasonTerminationGracePeriodPassed = "TerminationGracePeriodPassed"
	// ReasonNodeUnhealthy: a Warning on a pod and its NodeClaim when
	// repair's drain deadline has passed and the pod is deleted,
	// PodDisruptionBudgets and do-not-disrupt notwithstanding.
	ReasonNodeUnhealthy = "NodeUnhealthy"
	// ReasonNodeUnreachable: a Warning on a pod and its NodeClaim when the
	// node has not been Ready for longer than the node monitor grace
	// period and the pod is deleted, PodDisruptionBudgets and
	// do-not-disrupt notwithstanding.
	ReasonNodeUnreachable = "NodeUnreachable"
	// ReasonNodeNotReady: a Warning on a pod still terminating, past its
	// grace period, on a node that is not Ready: it is deleted for good,
	// as its kubelet cannot confirm it stopped.
	ReasonNodeNotReady = "NodeNotReady"
)

// Events of disruption, on the NodeClaim chosen, with the method's
// DisruptionReason as their action.
const (
	// ReasonDisrupting: a Normal on a NodeClaim a disruption removes: its
	// node is drained and its instance terminated, and why (what it saves,
	// what drifted, the replacement's node).
	ReasonDisrupting = "Disrupting"
	// ReasonReplacing: a Normal on a NodeClaim whose pods fit nowhere
	// else: a replacement is launched for them before it is drained.
	ReasonReplacing = "Replacing"
	// ReasonUnconsolidatable: a Normal on a NodeClaim consolidation keeps,
	// once per reason, naming the pod and the plugin that refuses it
	// elsewhere (action Underutilized).
	ReasonUnconsolidatable = "Unconsolidatable"
	// ReasonDisruptionBlocked: on a NodeClaim a method chose but that
	// keeps running: a Normal when a do-not-disrupt annotation holds it or
	// the command is called off (a change seen at the last look, no
	// replacement to be had), a Warning when the replacement launched for
	// it is called off.
	ReasonDisruptionBlocked = "DisruptionBlocked"
	// ReasonDrainingWithoutReplacement: a Warning on a NodeClaim drained
	// though no replacement can be launched for its pods, and why.
	ReasonDrainingWithoutReplacement = "DrainingWithoutReplacement"
	// ReasonRepairHeld: a Warning on an unhealthy node's NodeClaim that
	// repair holds back for now (the pool's or the zone's limits), once
	// per reason (action Unhealthy).
	ReasonRepairHeld = "RepairHeld"
	// ReasonInterrupted: a Warning on a NodeClaim whose instance the cloud
	// warned it will reclaim (a spot interruption, a scheduled change); it
	// is replaced and drained (action Interrupted). The value is
	// DisruptionReasonInterrupted's.
	ReasonInterrupted = "Interrupted"
	// ReasonRebalanceRecommended: a Normal on a NodeClaim whose spot
	// instance the cloud recommends rebalancing; nothing else is done
	// until an interruption warning (action Interrupted).
	ReasonRebalanceRecommended = "RebalanceRecommended"
)

// Events on a NodePool.
const (
	// ReasonInvalidSchedule: a Warning on a NodePool when one of its
	// disruption budgets' schedules cannot be parsed; such a budget
	// applies at all times (the pool's BudgetsValid condition says the
	// same).
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonOnDemandPricesUnknown: a Warning on a NodePool (related: its
	// EC2NodeClass) offering instance types on demand without their
	// region's price, at a stand-in region's price or at none.
	ReasonOnDemandPricesUnknown = "OnDemandPricesUnknown"
	// ReasonDevicesCorrected: a Warning on a NodePool one of whose running
	// nodes publishes other DRA devices than its instance type's template
	// (the provider's or a DeviceTemplate's) said, naming the node, the
	// type, the driver and both device lists; the pool's catalog then
	// carries what the node publishes. Once per content.
	ReasonDevicesCorrected = "DevicesCorrected"
)

// The actions of Nodeforge's Events: what it was doing when it recorded
// one.
const (
	// ActionProvisioning: nodeforge-scheduler deciding a pod's virtual
	// node (NoInstanceType).
	ActionProvisioning = "Provisioning"
	// ActionLaunch: launching a NodeClaim's instance.
	ActionLaunch = "Launch"
	// ActionRegister: registering and adopting a NodeClaim's node.
	ActionRegister = "Register"
	// ActionInitialize: waiting for a NodeClaim's node to be ready for
	// pods (InitializationTimeout).
	ActionInitialize = "Initialize"
	// ActionBind: the bind gate judging and binding a NodeClaim's pods.
	ActionBind = "Bind"
	// ActionDelete: deleting a NodeClaim before its time (NodeDeleted, a
	// repack that emptied it).
	ActionDelete = "Delete"
	// ActionNoPods: deleting a NodeClaim no pod is nominated to (Deleted).
	ActionNoPods = "NoPods"
	// ActionDrain: draining a NodeClaim's node.
	ActionDrain = "Drain"
	// ActionValidateBudgets: checking a NodePool's disruption budgets.
	ActionValidateBudgets = "ValidateBudgets"
	// ActionPriceInstanceTypes: pricing the instance types a NodePool
	// offers.
	ActionPriceInstanceTypes = "PriceInstanceTypes"
	// ActionPublishCatalog: publishing the instance type catalog of a
	// NodePool.
	ActionPublishCatalog = "PublishCatalog"
)
