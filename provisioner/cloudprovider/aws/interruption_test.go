package aws

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// TestParseEvent reads each EventBridge event the docs' rules deliver, in
// the shapes of the EC2 and AWS Health user guides' examples, and refuses
// what it cannot act on without losing it (UnknownMessage, so that it is
// logged and removed).
func TestParseEvent(t *testing.T) {
	sent := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, body string
		kind       cloudprovider.InterruptionKind
		ids        []string
		deadline   time.Time
		detail     string
	}{
		{"spot interruption", `{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-24T12:00:00Z","region":"us-west-2","resources":["arn:aws:ec2:us-west-2a:instance/i-0abc"],"detail":{"instance-id":"i-0abc","instance-action":"terminate"}}`,
			cloudprovider.SpotInterruption, []string{"i-0abc"}, sent.Add(2 * time.Minute), "spot interruption warning for instance i-0abc (terminate)"},
		{"rebalance", `{"detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{"instance-id":"i-0abc"}}`,
			cloudprovider.RebalanceRecommendation, []string{"i-0abc"}, time.Time{}, "rebalance recommendation"},
		{"terminated", `{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{"instance-id":"i-0abc","state":"terminated"}}`,
			cloudprovider.InstanceStopping, []string{"i-0abc"}, time.Time{}, "i-0abc is terminated"},
		{"stopping", `{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{"instance-id":"i-0abc","state":"stopping"}}`,
			cloudprovider.InstanceStopping, []string{"i-0abc"}, time.Time{}, "i-0abc is stopping"},
		{"running is nothing to do", `{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{"instance-id":"i-0abc","state":"running"}}`,
			cloudprovider.UnknownMessage, nil, time.Time{}, "nothing to do"},
		{"scheduled retirement", `{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-24T12:00:00Z","detail":{"eventArn":"arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Sat, 28 Nov 2026 15:10:09 GMT","affectedEntities":[{"entityValue":"i-0abc"},{"entityValue":"i-0def"}]}}`,
			cloudprovider.ScheduledChange, []string{"i-0abc", "i-0def"}, time.Date(2026, 11, 28, 15, 10, 9, 0, time.UTC), "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"},
		{"health issue of another service", `{"detail-type":"AWS Health Event","source":"aws.health","time":"2026-11-24T12:00:00Z","detail":{"service":"RDS","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"db-1"}]}}`,
			cloudprovider.UnknownMessage, nil, time.Time{}, "not an EC2 scheduled change"},
		{"spot warning without an instance", `{"detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{}}`,
			cloudprovider.UnknownMessage, nil, time.Time{}, "without an instance-id"},
		{"not JSON", `hello`, cloudprovider.UnknownMessage, nil, time.Time{}, "not an EventBridge event"},
		{"other event", `{"detail-type":"EC2 AMI State Change","source":"aws.ec2","time":"2026-11-24T12:00:00Z","detail":{}}`,
			cloudprovider.UnknownMessage, nil, time.Time{}, "not one Nodeforge acts on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseEvent([]byte(tc.body))
			if got.Kind != tc.kind || strings.Join(got.InstanceIDs, ",") != strings.Join(tc.ids, ",") || !got.Deadline.Equal(tc.deadline) {
				t.Errorf("ParseEvent = kind %s, instances %v, deadline %s; want %s, %v, %s", got.Kind, got.InstanceIDs, got.Deadline, tc.kind, tc.ids, tc.deadline)
			}
			if !strings.Contains(got.Detail, tc.detail) {
				t.Errorf("detail %q lacks %q", got.Detail, tc.detail)
			}
			if tc.kind != cloudprovider.UnknownMessage && !got.Sent.Equal(sent) {
				t.Errorf("sent %s, want %s", got.Sent, sent)
			}
		})
	}
}

// TestInterruptionMatchesProviderID: an instance ID matches the end of
// the provider ID, not a prefix of another ID.
func TestInterruptionMatchesProviderID(t *testing.T) {
	in := cloudprovider.Interruption{InstanceIDs: []string{"i-0abc"}}
	if !in.MatchesProviderID("aws:///us-west-2a/i-0abc") {
		t.Error("i-0abc does not match its own provider ID")
	}
	if in.MatchesProviderID("aws:///us-west-2a/i-0abcd") || in.MatchesProviderID("aws:///us-west-2a/xi-0abc") {
		t.Error("i-0abc matches another instance's provider ID")
	}
}

// hangingSQS is a queue whose every call waits until its context ends, as
// an endpoint that accepts the connection and never answers does.
type hangingSQS struct{}

func (hangingSQS) GetQueueUrl(ctx context.Context, _ *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingSQS) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingSQS) DeleteMessage(ctx context.Context, _ *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestInterruptionQueueCallsHaveADeadline: with --cloud-call-timeout set,
// a queue that never answers fails the call, naming it, rather than hold
// the interruption loop for ever.
func TestInterruptionQueueCallsHaveADeadline(t *testing.T) {
	q := NewInterruptionQueue(hangingSQS{}, "nodeforge-interruptions")
	q.Timeout = 50 * time.Millisecond
	ctx := context.Background()
	if _, err := q.Receive(ctx); err == nil || !strings.Contains(err.Error(), "sqs:GetQueueUrl did not answer within 50ms") {
		t.Errorf("finding the queue: %v, want a deadline error naming sqs:GetQueueUrl", err)
	}
	if err := q.Done(ctx, cloudprovider.Interruption{Handle: "h"}); err == nil || !strings.Contains(err.Error(), "sqs:DeleteMessage did not answer within 50ms") {
		t.Errorf("deleting a message: %v, want a deadline error naming sqs:DeleteMessage", err)
	}
}
