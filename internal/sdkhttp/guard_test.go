package sdkhttp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"
)

// TestGuardClosedBodyRace plays the race GuardClosedBodyRace prevents in
// the order that loses it: EC2 answers 200 with part of its body; the SDK,
// back from Do, closes the request body; only then does net/http's write
// loop, held after writing the request body, read that body again; the
// rest of the answer is sent once the write loop is done, and the SDK
// reads it. Without the guard the write loop closes the connection and
// the SDK's read of the answer fails with "use of closed network
// connection"; with it the call succeeds. One attempt, so that a retry
// cannot hide the first one's failure.
func TestGuardClosedBodyRace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guard bool
	}{
		{name: "guarded, the write loop ends at the closed body and the answer is read", guard: true},
		{name: "unguarded, the write loop closes the connection under the answer", guard: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newBodyRace(t)
			var hc sdkaws.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
				dial := tr.DialContext
				tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &heldConn{Conn: c, race: r}, nil
				}
			})
			if tc.guard {
				hc = GuardClosedBodyRace(hc)
			}
			c := ec2.New(ec2.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(r.url), HTTPClient: hc,
				Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
				Retryer:     retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 1 }),
				APIOptions:  []func(*middleware.Stack) error{r.afterDo},
			})
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(i httptrace.WroteRequestInfo) { r.wrote <- i.Err },
			})
			_, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			if n := r.requests.Load(); n != 1 {
				t.Errorf("EC2 received %d requests, want 1", n)
			}
			switch {
			case tc.guard && err != nil:
				t.Errorf("DescribeInstances: %v", err)
			case !tc.guard && !errors.Is(err, net.ErrClosed):
				t.Errorf("DescribeInstances = %v, want %v: if net/http's write loop no longer closes the connection after smithy-go closed the body, GuardClosedBodyRace can go", err, net.ErrClosed)
			}
		})
	}
}

// bodyRace is the loopback EC2 of TestGuardClosedBodyRace and the events
// that order the race.
type bodyRace struct {
	url      string
	requests atomic.Int32
	// bodyClosed is closed once the SDK is back from Do and has closed the
	// request body; it releases the write loop held in heldConn.Write.
	bodyClosed chan struct{}
	// wrote receives the write loop's result, httptrace's WroteRequest.
	wrote chan error
	// connClosed is closed when the connection is.
	connClosed chan struct{}
	closeOnce  sync.Once
	// rest is closed when EC2 may send the rest of its answer.
	rest chan struct{}
}

const describeInstancesAnswer = `<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>race</requestId><reservationSet/></DescribeInstancesResponse>`

// newBodyRace starts an EC2 that answers every call with the first half
// of an empty DescribeInstances answer, and the second half once rest is
// closed.
func newBodyRace(t *testing.T) *bodyRace {
	t.Helper()
	r := &bodyRace{bodyClosed: make(chan struct{}), wrote: make(chan error, 1), connClosed: make(chan struct{}), rest: make(chan struct{})}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			t.Errorf("reading the request: %v", err)
			return
		}
		half := len(describeInstancesAnswer) / 2
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(describeInstancesAnswer)))
		_, _ = io.WriteString(w, describeInstancesAnswer[:half])
		w.(http.Flusher).Flush()
		if !waitFor(t, r.rest, "the write loop to end") {
			return
		}
		_, _ = io.WriteString(w, describeInstancesAnswer[half:])
	}))
	t.Cleanup(s.Close)
	r.url = s.URL
	return r
}

// afterDo adds the middleware closest to the HTTP client: once Do has
// returned and the request body is closed, it lets the write loop go on,
// waits for it to end (and for the connection to close if it failed),
// and only then lets EC2 send the rest of its answer for the SDK to read.
func (r *bodyRace) afterDo(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("bodyRace", func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleDeserialize(ctx, in)
		close(r.bodyClosed)
		select {
		case werr := <-r.wrote:
			if werr != nil {
				waitFor(nil, r.connClosed, "the write loop to close the connection")
			}
		case <-time.After(10 * time.Second):
		}
		close(r.rest)
		return out, md, err
	}), middleware.After)
}

// waitFor waits for ch to close, for 10 seconds at most; t, when not
// nil, is told if it did not.
func waitFor(t *testing.T, ch <-chan struct{}, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		if t != nil {
			t.Errorf("waited 10s for %s", what)
		}
		return false
	}
}

// heldConn is a client connection whose write of the request body returns
// only once the SDK has closed that body, and that tells race when it is
// closed. net/http writes a body it cannot size in memory after flushing
// the headers, in a write of its own.
type heldConn struct {
	net.Conn
	race *bodyRace
}

func (c *heldConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if !bytes.HasPrefix(p, []byte("POST ")) {
		waitFor(nil, c.race.bodyClosed, "the SDK to close the request body")
	}
	return n, err
}

func (c *heldConn) Close() error {
	c.race.closeOnce.Do(func() { close(c.race.connClosed) })
	return c.Conn.Close()
}
