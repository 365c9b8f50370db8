package aws

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/nodeforge/nodeforge/internal/sandbox/sqsfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// sqsClient is the real SDK client for the endpoint at url, sending
// through sdkhttp.GuardClosedBodyRace as the provisioner's does.
func sqsClient(url string) *sqs.Client {
	return sqs.New(sqs.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		HTTPClient:  sdkhttp.GuardClosedBodyRace(&http.Client{Timeout: 30 * time.Second})})
}

// TestInterruptionQueueOverTheWire: the provider's InterruptionQueue,
// through the real SQS client, finds the queue by name, receives
// EventBridge's events (a spot interruption warning and a message it
// cannot read), and deletes them once done, so that they are not
// delivered again. Against internal/sandbox/sqsfake always, and against moto_server
// (an AWS emulator) as a second check where it is installed.
func TestInterruptionQueueOverTheWire(t *testing.T) {
	endpoints := map[string]func(t *testing.T) string{
		"sqsfake": func(t *testing.T) string {
			url, stop, err := sqsfake.New().Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			return url
		},
		"moto": startMoto,
	}
	for name, start := range endpoints {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := sqsClient(start(t))
			created, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: sdkaws.String("nodeforge-conformance")})
			if err != nil {
				t.Fatal(err)
			}
			sent := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
			for _, body := range []string{
				`{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"000000000000","time":"2026-11-24T12:00:00Z","region":"us-west-2","resources":["arn:aws:ec2:us-west-2a:instance/i-0abc"],"detail":{"instance-id":"i-0abc","instance-action":"terminate"}}`,
				`not an event`,
			} {
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: created.QueueUrl, MessageBody: sdkaws.String(body)}); err != nil {
					t.Fatal(err)
				}
			}
			q := aws.NewInterruptionQueue(c, "nodeforge-conformance")
			var got []cloudprovider.Interruption
			for try := 0; try < 5 && len(got) < 2; try++ {
				msgs, err := q.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, msgs...)
			}
			if len(got) != 2 {
				t.Fatalf("received %d messages, want 2: %+v", len(got), got)
			}
			kinds := map[cloudprovider.InterruptionKind]cloudprovider.Interruption{}
			for _, m := range got {
				kinds[m.Kind] = m
				if m.Handle == "" {
					t.Errorf("message %+v has no receipt handle", m)
				}
			}
			spot, ok := kinds[cloudprovider.SpotInterruption]
			if !ok || !spot.MatchesProviderID("aws:///us-west-2a/i-0abc") || !spot.Deadline.Equal(sent.Add(aws.SpotNotice)) {
				t.Errorf("spot interruption read as %+v", spot)
			}
			if _, ok := kinds[cloudprovider.UnknownMessage]; !ok {
				t.Errorf("the unreadable message was not handed over as Unknown: %+v", got)
			}
			for _, m := range got {
				if err := q.Done(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			// Deleted: nothing comes back, even after the visibility
			// timeout a received message would have had.
			left, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, VisibilityTimeout: 0, WaitTimeSeconds: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Messages) != 0 {
				t.Errorf("%d messages still in the queue after Done", len(left.Messages))
			}
		})
	}
}

// startMoto runs moto_server on a free loopback port, or skips the test
// when it is not installed.
func startMoto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		t.Skip("moto_server not installed: the sqsfake run is the check")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		resp, err := http.Get(url + "/moto-api/")
		if err == nil {
			_ = resp.Body.Close()
			return url
		}
		if i == 300 {
			t.Fatalf("moto_server did not answer on %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
