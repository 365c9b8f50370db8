package cloudprovider

import (
	"context"
	"strings"
	"time"
)

// InterruptionKind is what a cloud says is about to happen to an instance.
type InterruptionKind string

// The kinds of interruption the provisioner acts on.
const (
	// SpotInterruption: the cloud reclaims a spot instance at Deadline
	// (EC2 gives two minutes' notice).
	SpotInterruption InterruptionKind = "SpotInterruption"
	// RebalanceRecommendation: a spot instance is at elevated risk of
	// interruption.
	RebalanceRecommendation InterruptionKind = "RebalanceRecommendation"
	// ScheduledChange: the cloud will retire, stop or reboot the instance
	// for maintenance, at Deadline when it says when.
	ScheduledChange InterruptionKind = "ScheduledChange"
	// InstanceStopping: the instance is stopping, stopped, shutting down
	// or terminated, whoever asked.
	InstanceStopping InterruptionKind = "InstanceStopping"
	// UnknownMessage: a message the provider could not read, or of a kind
	// it does not act on; it is logged and removed from the queue.
	UnknownMessage InterruptionKind = "Unknown"
)

// Interruption is one message of a cloud's interruption queue.
type Interruption struct {
	Kind InterruptionKind
	// InstanceIDs the message is about, as they end the instances'
	// provider IDs (EC2's i-0123...).
	InstanceIDs []string
	// Sent is when the cloud sent it.
	Sent time.Time
	// Deadline is when the instance goes; zero when the message does not
	// say.
	Deadline time.Time
	// Detail says what the cloud said, for logs and Events.
	Detail string
	// Handle identifies the message to Done; opaque.
	Handle string
}

// MatchesProviderID reports whether the message is about the instance
// with providerID.
func (in Interruption) MatchesProviderID(providerID string) bool {
	for _, id := range in.InstanceIDs {
		if id != "" && strings.HasSuffix(providerID, "/"+id) {
			return true
		}
	}
	return false
}

// InterruptionQueue delivers a cloud's interruption messages.
type InterruptionQueue interface {
	// Receive waits for messages (long polling, up to about 20 seconds),
	// returning none when none came, and returns early when ctx ends.
	Receive(ctx context.Context) ([]Interruption, error)
	// Done removes a handled message from the queue; a message not
	// removed is delivered again after a while.
	Done(ctx context.Context, in Interruption) error
}
