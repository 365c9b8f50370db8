package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// SQSAPI is the part of the SQS client the interruption queue calls;
// *sqs.Client implements it.
type SQSAPI interface {
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// SpotNotice is how long before EC2 reclaims a spot instance it sends the
// interruption warning (EC2's documentation: two minutes).
const SpotNotice = 2 * time.Minute

// InterruptionQueue reads the SQS queue that EventBridge rules feed with
// EC2's events (docs/aws.md gives the rules): spot interruption warnings,
// rebalance recommendations, instance state changes and AWS Health
// scheduled changes for EC2.
type InterruptionQueue struct {
	api  SQSAPI
	name string
	url  string
	// Timeout bounds each call, beyond the long poll's own 20 seconds
	// for a receive (the provisioner's --cloud-call-timeout); 0: none.
	Timeout time.Duration
}

// NewInterruptionQueue reads the queue named, or at the URL given.
func NewInterruptionQueue(api SQSAPI, nameOrURL string) *InterruptionQueue {
	q := &InterruptionQueue{api: api, name: nameOrURL}
	if strings.HasPrefix(nameOrURL, "https://") || strings.HasPrefix(nameOrURL, "http://") {
		q.url = nameOrURL
	}
	return q
}

var _ cloudprovider.InterruptionQueue = &InterruptionQueue{}

// longPoll is how long a receive waits for a message: SQS's longest.
const longPoll = 20 * time.Second

// Receive long-polls the queue for up to 20 seconds (SQS's longest wait)
// and returns up to 10 messages, each read into an Interruption; one it
// cannot read is an UnknownMessage, so that it is logged and removed.
func (q *InterruptionQueue) Receive(ctx context.Context) ([]cloudprovider.Interruption, error) {
	if q.url == "" {
		var out *sqs.GetQueueUrlOutput
		err := cloudprovider.Within(ctx, q.Timeout, "sqs:GetQueueUrl", func(ctx context.Context) (err error) {
			out, err = q.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String(q.name)})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("finding interruption queue %s: %w", q.name, err)
		}
		q.url = sdkaws.ToString(out.QueueUrl)
	}
	var out *sqs.ReceiveMessageOutput
	wait := time.Duration(0)
	if q.Timeout > 0 {
		wait = longPoll + q.Timeout
	}
	err := cloudprovider.Within(ctx, wait, "sqs:ReceiveMessage", func(ctx context.Context) (err error) {
		out, err = q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: sdkaws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: int32(longPoll / time.Second)})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receiving from interruption queue %s: %w", q.url, err)
	}
	msgs := make([]cloudprovider.Interruption, 0, len(out.Messages))
	for _, m := range out.Messages {
		in := ParseEvent([]byte(sdkaws.ToString(m.Body)))
		in.Handle = sdkaws.ToString(m.ReceiptHandle)
		msgs = append(msgs, in)
	}
	return msgs, nil
}

// Done deletes the message from the queue.
func (q *InterruptionQueue) Done(ctx context.Context, in cloudprovider.Interruption) error {
	err := cloudprovider.Within(ctx, q.Timeout, "sqs:DeleteMessage", func(ctx context.Context) error {
		_, err := q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: sdkaws.String(q.url), ReceiptHandle: sdkaws.String(in.Handle)})
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting interruption message: %w", err)
	}
	return nil
}

// event is an EventBridge event as it reaches SQS. The field names are
// EventBridge's envelope and the detail of each EC2 and AWS Health event
// (the EC2 and AWS Health user guides' event examples).
type event struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Time       time.Time       `json:"time"`
	Detail     json.RawMessage `json:"detail"`
}

type ec2Detail struct {
	InstanceID     string `json:"instance-id"`
	InstanceAction string `json:"instance-action"`
	State          string `json:"state"`
}

type healthDetail struct {
	Service           string `json:"service"`
	EventTypeCategory string `json:"eventTypeCategory"`
	EventTypeCode     string `json:"eventTypeCode"`
	StartTime         string `json:"startTime"`
	AffectedEntities  []struct {
		EntityValue string `json:"entityValue"`
	} `json:"affectedEntities"`
}

// The detail types acted on.
const (
	detailSpotInterruption = "EC2 Spot Instance Interruption Warning"
	detailRebalance        = "EC2 Instance Rebalance Recommendation"
	detailStateChange      = "EC2 Instance State-change Notification"
	detailHealth           = "AWS Health Event"
)

// ParseEvent reads one EventBridge event.
func ParseEvent(body []byte) cloudprovider.Interruption {
	unknown := func(why string) cloudprovider.Interruption {
		s := string(body)
		if len(s) > 300 {
			s = s[:300] + "..."
		}
		return cloudprovider.Interruption{Kind: cloudprovider.UnknownMessage, Detail: why + ": " + s}
	}
	var e event
	if err := json.Unmarshal(body, &e); err != nil {
		return unknown("not an EventBridge event (" + err.Error() + ")")
	}
	switch e.DetailType {
	case detailSpotInterruption, detailRebalance, detailStateChange:
		var d ec2Detail
		if err := json.Unmarshal(e.Detail, &d); err != nil || d.InstanceID == "" {
			return unknown(e.DetailType + " without an instance-id")
		}
		in := cloudprovider.Interruption{InstanceIDs: []string{d.InstanceID}, Sent: e.Time}
		switch e.DetailType {
		case detailSpotInterruption:
			in.Kind, in.Deadline = cloudprovider.SpotInterruption, e.Time.Add(SpotNotice)
			in.Detail = fmt.Sprintf("EC2 spot interruption warning for instance %s (%s)", d.InstanceID, d.InstanceAction)
		case detailRebalance:
			in.Kind = cloudprovider.RebalanceRecommendation
			in.Detail = fmt.Sprintf("EC2 rebalance recommendation for instance %s: elevated risk of spot interruption", d.InstanceID)
		default:
			switch d.State {
			case "stopping", "stopped", "shutting-down", "terminated":
			default:
				return unknown(fmt.Sprintf("instance %s is %s: nothing to do", d.InstanceID, d.State))
			}
			in.Kind = cloudprovider.InstanceStopping
			in.Detail = fmt.Sprintf("EC2 instance %s is %s", d.InstanceID, d.State)
		}
		return in
	case detailHealth:
		var d healthDetail
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			return unknown("unreadable AWS Health event")
		}
		if d.Service != "EC2" || d.EventTypeCategory != "scheduledChange" {
			return unknown(fmt.Sprintf("AWS Health event %s/%s: not an EC2 scheduled change", d.Service, d.EventTypeCategory))
		}
		in := cloudprovider.Interruption{Kind: cloudprovider.ScheduledChange, Sent: e.Time}
		for _, a := range d.AffectedEntities {
			if strings.HasPrefix(a.EntityValue, "i-") {
				in.InstanceIDs = append(in.InstanceIDs, a.EntityValue)
			}
		}
		if len(in.InstanceIDs) == 0 {
			return unknown("AWS Health scheduled change naming no instance")
		}
		// AWS Health writes times as RFC 1123 ("Sat, 05 Jun 2021
		// 15:10:09 GMT").
		for _, layout := range []string{time.RFC1123, time.RFC3339} {
			if t, err := time.Parse(layout, d.StartTime); err == nil {
				in.Deadline = t
				break
			}
		}
		in.Detail = fmt.Sprintf("AWS Health scheduled change %s for instance(s) %s", d.EventTypeCode, strings.Join(in.InstanceIDs, ", "))
		if !in.Deadline.IsZero() {
			in.Detail += " starting " + in.Deadline.UTC().Format(time.RFC3339)
		}
		return in
	}
	return unknown(fmt.Sprintf("event %q from %s is not one Nodeforge acts on", e.DetailType, e.Source))
}
