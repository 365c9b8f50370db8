package v1beta1

// Reasons of the conditions Nodeforge writes on a CapacityBuffer's
// status: users and tests match on them.
const (
	// ReasonResolved: ReadyForProvisioning True; the chunks' template
	// and number are in the status.
	ReasonResolved = "Resolved"
	// ReasonPodTemplateNotFound: the spec's podTemplateRef names no
	// PodTemplate in the buffer's namespace.
	ReasonPodTemplateNotFound = "PodTemplateNotFound"
	// ReasonUnsupportedScalableRef: the scalableRef is of a kind
	// Nodeforge does not read (it reads apps/v1 Deployment, StatefulSet
	// and ReplicaSet).
	ReasonUnsupportedScalableRef = "UnsupportedScalableRef"
	// ReasonScalableRefNotFound: the scalableRef names no object.
	ReasonScalableRefNotFound = "ScalableRefNotFound"
	// ReasonUnboundedReplicas: neither replicas nor percentage is set, and
	// the limits cap nothing a chunk requests, so the number of chunks
	// has no bound.
	ReasonUnboundedReplicas = "UnboundedReplicas"
	// ReasonTooManyChunks: the buffer resolves to more chunks than
	// Nodeforge keeps room for in one buffer (MaxChunks).
	ReasonTooManyChunks = "TooManyChunks"
	// ReasonNotReadyForProvisioning: Provisioning False because
	// ReadyForProvisioning is.
	ReasonNotReadyForProvisioning = "NotReadyForProvisioning"
	// ReasonRoomKept: Provisioning True, and every chunk has room on the
	// nodes now.
	ReasonRoomKept = "RoomKept"
	// ReasonRoomShort: Provisioning True, and some chunks have no room on
	// the nodes now: the scheduler launches nodes for them.
	ReasonRoomShort = "RoomShort"
	// ReasonLimitsCutReplicas: LimitedByQuotas True; the limits cut the
	// number of chunks.
	ReasonLimitsCutReplicas = "LimitsCutReplicas"
	// ReasonWithinLimits: LimitedByQuotas False.
	ReasonWithinLimits = "WithinLimits"
)

// MaxChunks is the most chunks Nodeforge keeps room for in one buffer,
// as in one ProvisioningRequest: each chunk is a pod both programs
// decide, and limits alone on a tiny chunk could ask for billions.
const MaxChunks = 5000
