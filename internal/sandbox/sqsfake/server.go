// Package sqsfake is an in-process fake of the Amazon SQS endpoint that
// speaks the protocol aws-sdk-go-v2's SQS client speaks, AWS JSON 1.0
// (POST /, X-Amz-Target: AmazonSQS.<Action>, JSON bodies), so that the real
// client can be driven at it over loopback HTTP.
//
// It models what an interruption queue needs: standard queues, messages
// with visibility timeouts and receive counts, long polling, deletion by
// receipt handle, and purging. Member names and error shapes are the
// SDK's (service/sqs schemas/schemas.go and type_registry.go: QueueUrl,
// MessageBody, MD5OfBody, com.amazonaws.sqs#QueueDoesNotExist...); the MD5
// of each body is given, as the SDK checks it. SQS is "query compatible":
// the SDK sends X-Amzn-Query-Mode: true and takes an error's code from the
// X-Amzn-Query-Error header SQS answers with (e.g.
// AWS.SimpleQueueService.NonExistentQueue), so errors carry that header
// too. System attributes (ApproximateReceiveCount, SentTimestamp,
// ApproximateFirstReceiveTimestamp) come back only when asked for. Faults
// can be injected and every request is recorded.
//
// Not modelled: FIFO queues, message attributes, delays, dead-letter
// queues, batches, ChangeMessageVisibility, queue attributes other than
// VisibilityTimeout at creation, and signature verification (a SigV4
// Authorization header must be present; its signature is not checked).
// Visibility timeouts and long polls run on the real clock.
package sqsfake

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// Account is the account ID in every queue URL.
const Account = "000000000000"

// Request is one call received, recorded whether it succeeded or not, so
// that tests can count calls and retries and read what the client sent.
type Request struct {
	// Action is the operation named by X-Amz-Target, e.g. ReceiveMessage.
	Action string
	// Body is the JSON request body as decoded by encoding/json.
	Body map[string]any
	// Time is when the request arrived.
	Time time.Time
}

// Message is a message in a queue, as Messages reports it.
type Message struct {
	// ID is the MessageId SQS gave it.
	ID string
	// Body is the message body as sent.
	Body string
	// ReceiveCount is how many times it has been received.
	ReceiveCount int
	// InFlight is true while it is received and not yet visible again.
	InFlight bool
}

type message struct {
	id, body     string
	receives     int
	visibleAt    time.Time
	receipt      string          // the latest receipt handle
	stale        map[string]bool // earlier ones
	firstReceive time.Time
	sent         time.Time
}

type queue struct {
	name       string
	visibility time.Duration
	msgs       []*message
}

// Server is a fake SQS endpoint; it implements http.Handler. Its queues
// are behind one mutex, and the request log and the faults keep their own;
// long polls wait on a channel closed whenever a message is sent or
// becomes visible.
type Server struct {
	mu      sync.Mutex
	base    string // http://host:port, once started
	queues  map[string]*queue
	log     awsfake.Log[Request]
	faults  awsfake.Faults
	wake    chan struct{}
	polling int // ReceiveMessage calls waiting now
	now     func() time.Time
}

// New returns an empty server.
func New() *Server {
	return &Server{queues: map[string]*queue{}, wake: make(chan struct{}), now: time.Now}
}

// Start serves on a loopback port and returns its URL and a stop function.
func (s *Server) Start() (string, func(), error) {
	l, err := awsfake.Serve(s)
	if err != nil {
		return "", nil, fmt.Errorf("sqsfake: %w", err)
	}
	s.mu.Lock()
	s.base = l.URL()
	s.mu.Unlock()
	return l.URL(), l.Close, nil
}

// CreateQueue makes a queue (if it is not there) and returns its URL.
func (s *Server) CreateQueue(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.createLocked(name, 30*time.Second)
}

func (s *Server) createLocked(name string, visibility time.Duration) string {
	if s.queues[name] == nil {
		s.queues[name] = &queue{name: name, visibility: visibility}
	}
	return s.base + "/" + Account + "/" + name
}

// Send puts a message on the queue, as EventBridge would.
func (s *Server) Send(queueName, body string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return "", fmt.Errorf("no queue %s", queueName)
	}
	return s.sendLocked(q, body), nil
}

func (s *Server) sendLocked(q *queue, body string) string {
	m := &message{id: awsfake.HexID(), body: body, sent: s.now(), visibleAt: s.now()}
	q.msgs = append(q.msgs, m)
	s.wakeLocked()
	return m.id
}

// Messages lists what the queue holds, visible or in flight.
func (s *Server) Messages(queueName string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return nil
	}
	out := make([]Message, 0, len(q.msgs))
	for _, m := range q.msgs {
		out = append(out, Message{ID: m.id, Body: m.body, ReceiveCount: m.receives, InFlight: s.now().Before(m.visibleAt)})
	}
	return out
}

// Requests returns the calls received so far.
func (s *Server) Requests() []Request { return s.log.All() }

// FailNext makes the next n calls of action fail with HTTP status and the
// error code given (e.g. 500 "InternalError", 400 "RequestThrottled"),
// before they do anything. It replaces any fault pending for action; n = 0
// clears it.
func (s *Server) FailNext(action string, n, status int, code string) {
	s.faults.FailNext(action, n, awsfake.Fault{Status: status, Code: code})
}

// Polling returns how many ReceiveMessage calls are waiting for a message
// now, so that a test can send once a consumer is parked in a long poll,
// or check that a cancelled poll has ended.
func (s *Server) Polling() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polling
}

func (s *Server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// protocol is SQS's AWS JSON 1.0. SQS is "query compatible": the SDK
// sends X-Amzn-Query-Mode: true and takes an error's code from the
// X-Amzn-Query-Error header, which holds the codes SQS had in its Query
// days where they differ from the error's shape name (the AWSQueryError
// traits in the SDK's schemas/schemas.go); __type holds the shape.
var protocol = awsfake.JSON[*Server]{
	Name:            "sqsfake",
	Target:          "AmazonSQS",
	ContentType:     "application/x-amz-json-1.0",
	BadTarget:       "InvalidAction",
	Unsupported:     "UnsupportedOperation",
	TypePrefix:      "com.amazonaws.sqs#",
	QueryCompatible: true,
	QueryCodes: map[string]string{
		"QueueDoesNotExist":    "AWS.SimpleQueueService.NonExistentQueue",
		"UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
		"QueueNameExists":      "QueueAlreadyExists",
	},
	Actions: map[string]awsfake.JSONAction[*Server]{
		"CreateQueue":    (*Server).createQueue,
		"GetQueueUrl":    (*Server).getQueueURL,
		"SendMessage":    (*Server).sendMessage,
		"ReceiveMessage": (*Server).receiveMessage,
		"DeleteMessage":  (*Server).deleteMessage,
		"DeleteQueue":    (*Server).deleteQueue,
		"PurgeQueue":     (*Server).purgeQueue,
	},
}

// ServeHTTP answers one AWS JSON 1.0 request: POST / with X-Amz-Target
// AmazonSQS.<Action> and a JSON body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	protocol.Serve(w, r, s, s.admit)
}

// admit records a call, checks that it is signed and injects a pending
// fault. Only the scheme of the Authorization header is checked, not its
// credential scope.
func (s *Server) admit(r *http.Request, action string, body map[string]any) *awsfake.Error {
	s.log.Add(action, Request{Action: action, Body: body, Time: s.now()})
	if e := (awsfake.SigV4{Service: "sqs"}).Check(r); e != nil && e.Fault == awsfake.Unsigned {
		return awsfake.Errorf(http.StatusForbidden, "MissingAuthenticationToken", "request is not signed with SigV4")
	}
	return s.faults.Inject(action)
}

func num(body map[string]any, key string, def int) int {
	switch v := body[key].(type) {
	case float64:
		return int(v)
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// queueOf finds the queue of the request's QueueUrl.
func (s *Server) queueOf(body map[string]any) (*queue, *awsfake.Error) {
	u := awsfake.JSONString(body, "QueueUrl")
	name := u[strings.LastIndex(u, "/")+1:]
	if q := s.queues[name]; q != nil && u != "" {
		return q, nil
	}
	return nil, awsfake.BadRequest("QueueDoesNotExist", "The specified queue does not exist: %s", u)
}

// queueName is what SQS accepts for a standard queue's name.
var queueName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func (s *Server) createQueue(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	name := awsfake.JSONString(body, "QueueName")
	if !queueName.MatchString(name) {
		return nil, awsfake.BadRequest("InvalidParameterValue", "QueueName must be 1 to 80 letters, digits, hyphens or underscores (FIFO queues are not modelled): %s", name)
	}
	vis := 30 * time.Second
	if attrs, ok := body["Attributes"].(map[string]any); ok {
		if v, err := strconv.Atoi(fmt.Sprint(attrs["VisibilityTimeout"])); err == nil {
			vis = time.Duration(v) * time.Second
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]string{"QueueUrl": s.createLocked(name, vis)}, nil
}

func (s *Server) getQueueURL(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := awsfake.JSONString(body, "QueueName")
	if s.queues[name] == nil {
		return nil, awsfake.BadRequest("QueueDoesNotExist", "The specified queue does not exist: %s", name)
	}
	return map[string]string{"QueueUrl": s.base + "/" + Account + "/" + name}, nil
}

func (s *Server) deleteQueue(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	delete(s.queues, q.name)
	return map[string]string{}, nil
}

// purgeQueue drops every message, in flight or not.
func (s *Server) purgeQueue(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	q.msgs = nil
	return map[string]string{}, nil
}

// wanted returns the system attributes a ReceiveMessage asks for, in
// MessageSystemAttributeNames or the older AttributeNames; "All" is all.
func wanted(body map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, key := range []string{"MessageSystemAttributeNames", "AttributeNames"} {
		list, _ := body[key].([]any)
		for _, v := range list {
			if name, ok := v.(string); ok {
				out[name] = true
			}
		}
	}
	return out
}

func (s *Server) sendMessage(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	text := awsfake.JSONString(body, "MessageBody")
	if text == "" {
		return nil, awsfake.BadRequest("InvalidParameterValue", "MessageBody must not be empty")
	}
	id := s.sendLocked(q, text)
	return map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(text)}, nil
}

// receiveMessage returns up to MaxNumberOfMessages visible messages, each
// made invisible for the visibility timeout, waiting up to WaitTimeSeconds
// for one to be there.
func (s *Server) receiveMessage(r *http.Request, body map[string]any) (any, *awsfake.Error) {
	max, wait, aerr := receiveLimits(body)
	if aerr != nil {
		return nil, aerr
	}
	attrs := wanted(body)
	deadline := time.NewTimer(time.Duration(wait) * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		q, aerr := s.queueOf(body)
		if aerr != nil {
			s.mu.Unlock()
			return nil, aerr
		}
		vis := q.visibility
		if v := num(body, "VisibilityTimeout", -1); v >= 0 {
			vis = time.Duration(v) * time.Second
		}
		out, next := receiveLocked(q, s.now(), vis, max, attrs)
		wake := s.wake
		if len(out) == 0 && wait > 0 {
			s.polling++
		}
		s.mu.Unlock()
		if len(out) > 0 {
			return map[string]any{"Messages": out}, nil
		}
		if wait == 0 {
			return map[string]any{}, nil // SQS leaves Messages out when there are none
		}
		ended := awaitMessage(r.Context().Done(), wake, next, deadline.C)
		s.mu.Lock()
		s.polling--
		s.mu.Unlock()
		if ended {
			return map[string]any{}, nil
		}
	}
}

// receiveLimits reads ReceiveMessage's MaxNumberOfMessages and
// WaitTimeSeconds from body, and checks them and VisibilityTimeout
// against SQS's bounds.
func receiveLimits(body map[string]any) (max, wait int, aerr *awsfake.Error) {
	max, wait = num(body, "MaxNumberOfMessages", 1), num(body, "WaitTimeSeconds", 0)
	if max < 1 || max > 10 {
		return 0, 0, awsfake.BadRequest("InvalidParameterValue", "MaxNumberOfMessages must be from 1 to 10")
	}
	if wait < 0 || wait > 20 {
		return 0, 0, awsfake.BadRequest("InvalidParameterValue", "WaitTimeSeconds must be from 0 to 20")
	}
	if v := num(body, "VisibilityTimeout", 0); v < 0 || v > 43200 {
		return 0, 0, awsfake.BadRequest("InvalidParameterValue", "VisibilityTimeout must be from 0 to 43200")
	}
	return max, wait, nil
}

// receiveLocked receives up to max of q's messages visible at now, each
// made invisible for vis, with the system attributes in attrs. It also
// returns how long until the next in-flight message is visible again, or
// -1 if none is in flight. s.mu is held.
func receiveLocked(q *queue, now time.Time, vis time.Duration, max int, attrs map[string]bool) ([]map[string]any, time.Duration) {
	var out []map[string]any
	next := time.Duration(-1)
	for _, m := range q.msgs {
		if now.Before(m.visibleAt) {
			if d := m.visibleAt.Sub(now); next < 0 || d < next {
				next = d
			}
			continue
		}
		if len(out) == max {
			break
		}
		out = append(out, m.receive(now, vis, attrs))
	}
	return out, next
}

// receive marks m received at now, invisible for vis under a new receipt
// handle (the one before goes stale), and returns it as ReceiveMessage
// answers it, with the system attributes in attrs.
func (m *message) receive(now time.Time, vis time.Duration, attrs map[string]bool) map[string]any {
	m.receives++
	if m.firstReceive.IsZero() {
		m.firstReceive = now
	}
	if m.receipt != "" {
		if m.stale == nil {
			m.stale = map[string]bool{}
		}
		m.stale[m.receipt] = true
	}
	m.visibleAt, m.receipt = now.Add(vis), awsfake.HexID()+awsfake.HexID()
	msg := map[string]any{"MessageId": m.id, "ReceiptHandle": m.receipt, "MD5OfBody": md5Hex(m.body), "Body": m.body}
	got := map[string]string{}
	for name, v := range map[string]string{
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
	} {
		if attrs["All"] || attrs[name] {
			got[name] = v
		}
	}
	if len(got) > 0 {
		msg["Attributes"] = got
	}
	return msg
}

// awaitMessage waits for a send (wake closed), for an in-flight message
// to become visible again (after next, if next >= 0), for the end of the
// wait (deadline), or for the client to go away (done). It reports
// whether the wait ended, rather than a message being there to receive.
func awaitMessage(done <-chan struct{}, wake chan struct{}, next time.Duration, deadline <-chan time.Time) (ended bool) {
	var reappear <-chan time.Time
	if next >= 0 {
		t := time.NewTimer(next)
		defer t.Stop()
		reappear = t.C
	}
	select {
	case <-wake:
	case <-reappear:
	case <-deadline:
		return true
	case <-done:
		return true
	}
	return false
}

func (s *Server) deleteMessage(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	h := awsfake.JSONString(body, "ReceiptHandle")
	for i, m := range q.msgs {
		if m.receipt != "" && m.receipt == h {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return map[string]string{}, nil
		}
		if m.stale[h] {
			// As SQS does: an earlier receipt of a message received
			// again succeeds, but the message stays.
			return map[string]string{}, nil
		}
	}
	return nil, awsfake.BadRequest("ReceiptHandleIsInvalid", "The input receipt handle is invalid: %s", h)
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
