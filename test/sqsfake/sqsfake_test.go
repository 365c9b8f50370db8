package sqsfake

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// start serves a fake and returns the real SDK client for it.
func start(t *testing.T) (*Server, *sqs.Client) {
	t.Helper()
	s := New()
	url, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, sqs.New(sqs.Options{
		Region: "us-west-2", BaseEndpoint: sdkaws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.MaxBackoff = 4, 50*time.Millisecond
		}),
	})
}

// TestQueueThroughTheSDK: create, find, send, long-poll receive (a message
// sent during the wait ends it), redelivery after the visibility timeout
// with the receive count, deletion; the SDK checks every MD5.
func TestQueueThroughTheSDK(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: sdkaws.String("interruptions")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String("interruptions")})
	if err != nil || sdkaws.ToString(got.QueueUrl) != sdkaws.ToString(created.QueueUrl) {
		t.Fatalf("GetQueueUrl = %v, %v; want %s", got, err, sdkaws.ToString(created.QueueUrl))
	}
	url := created.QueueUrl

	// Nothing there: a short wait returns empty.
	empty, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 1})
	if err != nil || len(empty.Messages) != 0 {
		t.Fatalf("receive on an empty queue = %v, %v", empty, err)
	}

	// A long poll ends with the message sent while it waits.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: sdkaws.String(`{"detail-type":"x"}`)})
	}()
	r1, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 20, VisibilityTimeout: 1, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil || len(r1.Messages) != 1 || sdkaws.ToString(r1.Messages[0].Body) != `{"detail-type":"x"}` {
		t.Fatalf("long poll = %+v, %v; want the message sent during it", r1, err)
	}
	// In flight: not delivered again until its visibility timeout ends,
	// then again with a receive count of 2 and a new receipt handle.
	if again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url}); err != nil || len(again.Messages) != 0 {
		t.Fatalf("an in-flight message was delivered again at once: %+v, %v", again, err)
	}
	r2, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil || len(r2.Messages) != 1 {
		t.Fatalf("the message did not come back after its visibility timeout: %+v, %v", r2, err)
	}
	if n, _ := strconv.Atoi(r2.Messages[0].Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); n != 2 {
		t.Errorf("ApproximateReceiveCount = %v, want 2", r2.Messages[0].Attributes)
	}
	if sdkaws.ToString(r2.Messages[0].ReceiptHandle) == sdkaws.ToString(r1.Messages[0].ReceiptHandle) {
		t.Error("the second receipt has the first one's handle")
	}
	// The stale handle deletes nothing, as in SQS; the latest one does.
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: r1.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if len(s.Messages("interruptions")) != 1 {
		t.Fatal("a stale receipt handle deleted the message")
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: r2.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if left := s.Messages("interruptions"); len(left) != 0 {
		t.Fatalf("left after deletion: %+v", left)
	}
}

// TestErrorsAreTheSDKsTypes: a missing queue and a made-up receipt handle
// come back as the SDK's typed errors; injected server errors are retried
// by the SDK's retryer until one succeeds.
func TestErrorsAreTheSDKsTypes(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	_, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String("missing")})
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) {
		t.Errorf("GetQueueUrl of a missing queue: %v (%T), want *types.QueueDoesNotExist", err, err)
	}
	url := sdkaws.String(s.CreateQueue("q"))
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: sdkaws.String("made-up")})
	var invalid *types.ReceiptHandleIsInvalid
	if !errors.As(err, &invalid) {
		t.Errorf("DeleteMessage with a made-up handle: %v (%T), want *types.ReceiptHandleIsInvalid", err, err)
	}
	s.FailNext("ReceiveMessage", 2, 500, "InternalError")
	if _, err := s.Send("q", "hello"); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive after 2 injected 500s = %+v, %v; want the SDK to retry and get the message", out, err)
	}
	n := 0
	for _, r := range s.Requests() {
		if r.Action == "ReceiveMessage" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d ReceiveMessage calls, want 3 (2 failed, then 1)", n)
	}
}
