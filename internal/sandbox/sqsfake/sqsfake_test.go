package sqsfake

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// start serves a fake and returns the real SDK client for it, built as
// production builds it (NewFromConfig), with a retryer that backs off
// briefly so that retried faults keep the tests quick.
func start(t *testing.T, opts ...func(*sqs.Options)) (*Server, *sqs.Client) {
	t.Helper()
	s := New()
	url, stop, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cfg := sdkaws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		Retryer: func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts, o.MaxBackoff = 4, 50*time.Millisecond })
		},
	}
	opts = append([]func(*sqs.Options){func(o *sqs.Options) { o.BaseEndpoint = sdkaws.String(url) }}, opts...)
	return s, sqs.NewFromConfig(cfg, opts...)
}

var receiveCount = []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount}

// TestQueueThroughTheSDK: create, find, send, long-poll receive (a message
// sent during the wait ends it), redelivery after the visibility timeout
// with the receive count, deletion; the SDK checks every MD5 it is given.
func TestQueueThroughTheSDK(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: sdkaws.String("interruptions")})
	if err != nil {
		t.Fatal(err)
	}
	if u := sdkaws.ToString(created.QueueUrl); !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/"+Account+"/interruptions") {
		t.Errorf("QueueUrl = %s, want http://<listener>/%s/interruptions", u, Account)
	}
	again, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: sdkaws.String("interruptions")})
	if err != nil || sdkaws.ToString(again.QueueUrl) != sdkaws.ToString(created.QueueUrl) {
		t.Fatalf("CreateQueue again = %v, %v; want the same URL", again, err)
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
	const body = `{"detail-type":"x"}`
	sent := make(chan *sqs.SendMessageOutput, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: sdkaws.String(body)})
		if err != nil {
			t.Errorf("SendMessage: %v", err)
		}
		sent <- out
	}()
	began := time.Now()
	r1, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 20, VisibilityTimeout: 1, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: receiveCount})
	if err != nil || len(r1.Messages) != 1 || sdkaws.ToString(r1.Messages[0].Body) != body {
		t.Fatalf("long poll = %+v, %v; want the message sent during it", r1, err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("the long poll took %v to return a message sent after 200ms", d)
	}
	// The SDK only checks MD5s that are there: check they are.
	out := <-sent
	if out == nil || out.MD5OfMessageBody == nil || sdkaws.ToString(out.MessageId) != sdkaws.ToString(r1.Messages[0].MessageId) {
		t.Errorf("SendMessage = %+v; want an MD5OfMessageBody and the MessageId received", out)
	}
	if r1.Messages[0].MD5OfBody == nil || r1.Messages[0].ReceiptHandle == nil {
		t.Errorf("received message has no MD5OfBody or ReceiptHandle: %+v", r1.Messages[0])
	}
	if n := r1.Messages[0].Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)]; n != "1" {
		t.Errorf("first ApproximateReceiveCount = %q, want 1", n)
	}

	// In flight: not delivered again until its visibility timeout ends,
	// then again with a receive count of 2 and a new receipt handle.
	if again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url}); err != nil || len(again.Messages) != 0 {
		t.Fatalf("an in-flight message was delivered again at once: %+v, %v", again, err)
	}
	if m := s.Messages("interruptions"); len(m) != 1 || !m[0].InFlight || m[0].ReceiveCount != 1 {
		t.Fatalf("Messages = %+v, want one in flight, received once", m)
	}
	r2, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5, MessageSystemAttributeNames: receiveCount})
	if err != nil || len(r2.Messages) != 1 {
		t.Fatalf("the message did not come back after its visibility timeout: %+v, %v", r2, err)
	}
	if n, _ := strconv.Atoi(r2.Messages[0].Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)]); n != 2 {
		t.Errorf("ApproximateReceiveCount = %v, want 2", r2.Messages[0].Attributes)
	}
	if sdkaws.ToString(r2.Messages[0].ReceiptHandle) == sdkaws.ToString(r1.Messages[0].ReceiptHandle) {
		t.Error("the second receipt has the first one's handle")
	}
	// The stale handle deletes nothing, as SQS's DeleteMessage reference
	// says; the latest one deletes the message.
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

// TestReceiveOptions: MaxNumberOfMessages defaults to 1 and caps a
// receive; system attributes come back only when asked for, in either
// request field; out-of-range values are refused.
func TestReceiveOptions(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	url := sdkaws.String(s.CreateQueue("q"))
	for i := range 12 {
		if _, err := s.Send("q", "m"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	one, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url})
	if err != nil || len(one.Messages) != 1 {
		t.Fatalf("receive with no MaxNumberOfMessages = %d messages, %v; want 1", len(one.Messages), err)
	}
	if len(one.Messages[0].Attributes) != 0 {
		t.Errorf("attributes not asked for came back: %v", one.Messages[0].Attributes)
	}
	ten, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 10,
		//lint:ignore SA1019 the fake must still read the older AttributeNames that clients send
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil || len(ten.Messages) != 10 {
		t.Fatalf("receive of up to 10 = %d messages, %v; want 10", len(ten.Messages), err)
	}
	if a := ten.Messages[0].Attributes; a["SentTimestamp"] == "" || a["ApproximateReceiveCount"] != "1" {
		t.Errorf("AttributeNames [All] gave %v", a)
	}
	for _, in := range []*sqs.ReceiveMessageInput{
		{QueueUrl: url, MaxNumberOfMessages: 11},
		{QueueUrl: url, WaitTimeSeconds: 21},
	} {
		_, err := c.ReceiveMessage(ctx, in)
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
			t.Errorf("ReceiveMessage(Max %d, Wait %d) = %v, want InvalidParameterValue", in.MaxNumberOfMessages, in.WaitTimeSeconds, err)
		}
	}
}

// TestLongPollEndsWithTheClient: a long poll whose context ends stops
// waiting at the server too, so that it does not take a message sent
// afterwards and hide it for a visibility timeout.
func TestLongPollEndsWithTheClient(t *testing.T) {
	s, c := start(t)
	url := sdkaws.String(s.CreateQueue("q"))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 20})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReceiveMessage with a 300ms context = %v, want the deadline", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("the cancelled long poll took %v", d)
	}
	for end := time.Now().Add(5 * time.Second); s.Polling() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the server is still waiting on a long poll whose client has gone")
		}
	}
	if _, err := s.Send("q", "after"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if m := s.Messages("q"); len(m) != 1 || m[0].InFlight {
		t.Errorf("Messages = %+v, want one message, not in flight", m)
	}
}

// TestQueueLifecycle: PurgeQueue empties a queue; after DeleteQueue, calls
// on it and lookups of it fail with QueueDoesNotExist.
func TestQueueLifecycle(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	url := sdkaws.String(s.CreateQueue("q"))
	for _, b := range []string{"a", "b"} {
		if _, err := s.Send("q", b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: url}); err != nil {
		t.Fatal(err)
	}
	if m := s.Messages("q"); len(m) != 0 {
		t.Fatalf("after PurgeQueue: %+v", m)
	}
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url}); err != nil {
		t.Fatal(err)
	}
	var missing *sqstypes.QueueDoesNotExist
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: sdkaws.String("x")}); !errors.As(err, &missing) {
		t.Errorf("SendMessage to a deleted queue: %v, want *types.QueueDoesNotExist", err)
	}
	if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String("q")}); !errors.As(err, &missing) {
		t.Errorf("GetQueueUrl of a deleted queue: %v, want *types.QueueDoesNotExist", err)
	}
	if _, err := s.Send("q", "x"); err == nil {
		t.Error("Send to a deleted queue succeeded")
	}
}

// TestErrorsAreTheSDKsTypes: a missing queue, a made-up receipt handle and
// an action the fake lacks come back as the SDK's typed errors with the
// codes SQS's query-compatibility header gives; an unsigned request is
// refused; injected server errors and throttling are retried by the SDK's
// retryer until a call succeeds.
func TestErrorsAreTheSDKsTypes(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	_, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String("missing")})
	var missing *sqstypes.QueueDoesNotExist
	if !errors.As(err, &missing) {
		t.Errorf("GetQueueUrl of a missing queue: %v (%T), want *types.QueueDoesNotExist", err, err)
	} else if missing.ErrorCode() != "AWS.SimpleQueueService.NonExistentQueue" {
		t.Errorf("QueueDoesNotExist.ErrorCode() = %q, want SQS's query code AWS.SimpleQueueService.NonExistentQueue", missing.ErrorCode())
	}
	url := sdkaws.String(s.CreateQueue("q"))
	_, err = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: sdkaws.String("made-up")})
	var invalid *sqstypes.ReceiptHandleIsInvalid
	if !errors.As(err, &invalid) {
		t.Errorf("DeleteMessage with a made-up handle: %v (%T), want *types.ReceiptHandleIsInvalid", err, err)
	}
	_, err = c.ListQueues(ctx, &sqs.ListQueuesInput{})
	var unsupported *sqstypes.UnsupportedOperation
	if !errors.As(err, &unsupported) || !strings.Contains(unsupported.ErrorMessage(), "ListQueues") {
		t.Errorf("ListQueues: %v (%T), want *types.UnsupportedOperation naming the action", err, err)
	}

	_, anon := start(t, func(o *sqs.Options) { o.Credentials = sdkaws.AnonymousCredentials{} })
	_, err = anon.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String("q")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "MissingAuthenticationToken" {
		t.Errorf("unsigned GetQueueUrl: %v, want MissingAuthenticationToken", err)
	}

	calls := func(action string) int {
		n := 0
		for _, r := range s.Requests() {
			if r.Action == action {
				n++
			}
		}
		return n
	}
	s.FailNext("ReceiveMessage", 2, 500, "InternalError")
	if _, err := s.Send("q", "hello"); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive after 2 injected 500s = %+v, %v; want the SDK to retry and get the message", out, err)
	}
	if n := calls("ReceiveMessage"); n != 3 {
		t.Errorf("%d ReceiveMessage calls, want 3 (2 failed, then 1)", n)
	}

	s.FailNext("SendMessage", 3, 400, "RequestThrottled")
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: sdkaws.String("x")}); err != nil {
		t.Fatalf("send after 3 throttles: %v; want the SDK to retry", err)
	}
	if n := calls("SendMessage"); n != 4 {
		t.Errorf("%d SendMessage calls, want 4 (3 throttled, then 1)", n)
	}
	// More faults than the retryer's 4 attempts: the typed error surfaces.
	s.FailNext("SendMessage", 10, 400, "RequestThrottled")
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: sdkaws.String("x")})
	var throttled *sqstypes.RequestThrottled
	if !errors.As(err, &throttled) {
		t.Errorf("send throttled past the retries: %v, want *types.RequestThrottled", err)
	}
	if r := s.Requests(); r[len(r)-1].Body["QueueUrl"] != *url {
		t.Errorf("last request recorded = %+v, want its QueueUrl %s", r[len(r)-1], *url)
	}
}
