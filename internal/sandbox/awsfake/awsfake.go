// Package awsfake is the machinery the in-process fakes of AWS endpoints
// share (ec2fake, iamfake, sqsfake, eksfake, ssmfake, imdsfake), so that
// each fake holds only what its service models: a loopback HTTP server
// (Serve), the check of a request's SigV4 Authorization header (SigV4), the
// record of the requests received (Log), faults injected into the next
// calls of an action (Faults), the error a fake answers with (Error), and
// the pieces of two wire protocols: AWS Query's form parameters and XML
// documents (Members, Tags, Query) and AWS JSON's X-Amz-Target dispatch
// and error documents (JSON).
//
// It knows no service: the codes, statuses and messages each fake answers
// with are its own, passed in or chosen from what these types report.
package awsfake

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Loopback is a handler served on a loopback port.
type Loopback struct {
	url string
	hs  *http.Server
}

// Serve serves h on a new listener at 127.0.0.1 until Close.
func Serve(h http.Handler) (*Loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on loopback: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	return &Loopback{url: "http://" + l.Addr().String(), hs: hs}, nil
}

// URL is the server's base URL, http://127.0.0.1:<port>.
func (l *Loopback) URL() string { return l.url }

// Close stops serving at once, closing the listener and every open
// connection; it is safe to call more than once. It closes rather than
// shuts down: Shutdown waits up to five seconds for connections a client
// opened but has not used yet, the SDK opens such spares under concurrent
// load, and a fake has nothing to drain.
func (l *Loopback) Close() { _ = l.hs.Close() }

// Error is an error as a service returns it to the client: the HTTP
// status, the error code the SDK reports (and maps to a typed error) and
// the message.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an Error with a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest returns a 400 Error, the status of most client errors.
func BadRequest(code, format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, code, format, args...)
}

// AsError returns err as the *Error it wraps, or, for an error of the
// fake's own (an encoding failure, say), as a 500 with the service's code
// for an internal error, such as InternalError or ServiceFailure.
func AsError(err error, internalCode string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: internalCode,
		Message: "An internal error has occurred: " + err.Error()}
}

// RequestID returns a UUID-shaped request ID, as EC2 and IAM give.
func RequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// HexID returns 32 random hex digits, for request and message IDs.
func HexID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
