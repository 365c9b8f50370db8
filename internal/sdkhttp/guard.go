// Package sdkhttp holds what the programs' and the sandbox's
// aws-sdk-go-v2 clients send their requests through.
package sdkhttp

import (
	"io"
	"net/http"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// GuardClosedBodyRace returns c, or the SDK's default client
// (awshttp.NewBuildableClient) when c is nil, sending each request's body
// to net/http with only its Read and Close methods, so that the SDK
// closing the body early cannot make net/http close the connection under
// the response.
//
// The race: smithy-go, the SDK's HTTP layer, closes the request body as
// soon as Do returns the response, and its body (safeWriteToReadCloser)
// then answers WriteTo with io.EOF. net/http's write loop may not be done
// with the body by then: after writing ContentLength bytes, writeBody
// reads it once more, through WriteTo, for extra bytes; it takes that
// io.EOF for a write error and closes the connection, the SDK's read of a
// 200 response fails with "use of closed network connection", and the
// retryer sends again a call AWS has already carried out. Read on the
// closed body returns (0, io.EOF), which net/http takes for the body's
// end.
//
// The guard can go once smithy-go's WriteTo after Close returns (0, nil);
// TestGuardClosedBodyRace then fails for want of the race.
func GuardClosedBodyRace(c sdkaws.HTTPClient) sdkaws.HTTPClient {
	if c == nil {
		c = awshttp.NewBuildableClient()
	}
	return closedBodyRaceGuard{next: c}
}

// closedBodyRaceGuard is the client GuardClosedBodyRace returns.
type closedBodyRaceGuard struct{ next sdkaws.HTTPClient }

// Do sends a shallow copy of r whose body hides every method but Read and
// Close; GetBody and ContentLength are r's.
func (g closedBodyRaceGuard) Do(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return g.next.Do(r)
	}
	guarded := *r
	guarded.Body = struct{ io.ReadCloser }{r.Body}
	return g.next.Do(&guarded)
}
