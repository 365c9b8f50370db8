// Package sqsfake is an in-process fake of the Amazon SQS endpoint that
// speaks the protocol aws-sdk-go-v2's SQS client speaks, AWS JSON 1.0
// (POST /, X-Amz-Target: AmazonSQS.<Action>, JSON bodies), so that the real
// client can be driven at it over loopback HTTP.
//
// It models what an interruption queue needs: standard queues, messages
// with visibility timeouts and receive counts, long polling, and deletion
// by receipt handle. Member names and error shapes are the SDK's (its
// schemas and type registry: QueueUrl, MessageBody, MD5OfBody,
// com.amazonaws.sqs#QueueDoesNotExist...); the MD5 of each body is given, as
// the SDK checks it. Faults can be injected and every request is recorded.
//
// Not modelled: FIFO queues, message attributes, delays, dead-letter
// queues, batches, and signature verification (a SigV4 Authorization
// header must be present; its signature is not checked).
package sqsfake

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Account is the account ID in every queue URL.
const Account = "000000000000"

// Request is one call received, recorded whether it succeeded or not.
type Request struct {
	Action string
	Body   map[string]any
	Time   time.Time
}

// Message is a message in a queue, as Messages reports it.
type Message struct {
	ID           string
	Body         string
	ReceiveCount int
	// InFlight: received and not yet visible again.
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

type fault struct {
	n      int
	status int
	code   string
}

// Server is a fake SQS endpoint; it implements http.Handler. All state is
// behind one mutex; long polls wait on a channel closed whenever a message
// is sent or becomes visible.
type Server struct {
	mu       sync.Mutex
	base     string // http://host:port, once started
	queues   map[string]*queue
	requests []Request
	faults   map[string]*fault
	wake     chan struct{}
	now      func() time.Time
}

// New returns an empty server.
func New() *Server {
	return &Server{queues: map[string]*queue{}, faults: map[string]*fault{}, wake: make(chan struct{}), now: time.Now}
}

// Start serves on a loopback port and returns its URL and a stop function.
func (s *Server) Start() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	s.mu.Lock()
	s.base = "http://" + l.Addr().String()
	s.mu.Unlock()
	return s.base, func() { _ = srv.Close() }, nil
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
	m := &message{id: newID(), body: body, sent: s.now(), visibleAt: s.now()}
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
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// FailNext makes the next n calls of action fail with HTTP status and the
// error code given (e.g. 500 "InternalError", 400 "ThrottlingException"),
// before they do anything.
func (s *Server) FailNext(action string, n, status int, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[action] = &fault{n: n, status: status, code: code}
}

func (s *Server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// apiError is an error as the AWS JSON protocol returns it.
type apiError struct {
	status int
	code   string // shape name, or a code such as InternalError
	msg    string
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, "AmazonSQS.")
	var body map[string]any
	if r.Method != http.MethodPost || !ok {
		writeError(w, apiError{400, "InvalidAction", "expected POST with X-Amz-Target: AmazonSQS.<Action>, got " + r.Method + " " + target})
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, apiError{400, "SerializationException", "request body is not JSON: " + err.Error()})
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Action: action, Body: body, Time: s.now()})
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
		s.mu.Unlock()
		writeError(w, apiError{403, "MissingAuthenticationToken", "request is not signed with SigV4"})
		return
	}
	if f := s.faults[action]; f != nil && f.n > 0 {
		f.n--
		s.mu.Unlock()
		writeError(w, apiError{f.status, f.code, "injected fault"})
		return
	}
	s.mu.Unlock()
	var out any
	var aerr *apiError
	switch action {
	case "CreateQueue":
		out, aerr = s.createQueue(body)
	case "GetQueueUrl":
		out, aerr = s.getQueueURL(body)
	case "SendMessage":
		out, aerr = s.sendMessage(body)
	case "ReceiveMessage":
		out, aerr = s.receiveMessage(r, body)
	case "DeleteMessage":
		out, aerr = s.deleteMessage(body)
	case "DeleteQueue":
		out, aerr = s.deleteQueue(body)
	default:
		aerr = &apiError{400, "UnsupportedOperation", "sqsfake does not implement " + action}
	}
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.code, "message": e.msg})
}

func str(body map[string]any, key string) string {
	v, _ := body[key].(string)
	return v
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
func (s *Server) queueOf(body map[string]any) (*queue, *apiError) {
	u := str(body, "QueueUrl")
	name := u[strings.LastIndex(u, "/")+1:]
	if q := s.queues[name]; q != nil && u != "" {
		return q, nil
	}
	return nil, &apiError{400, "QueueDoesNotExist", "The specified queue does not exist: " + u}
}

func (s *Server) createQueue(body map[string]any) (any, *apiError) {
	name := str(body, "QueueName")
	if name == "" || len(name) > 80 {
		return nil, &apiError{400, "InvalidAttributeName", "QueueName must be 1 to 80 characters"}
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

func (s *Server) getQueueURL(body map[string]any) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := str(body, "QueueName")
	if s.queues[name] == nil {
		return nil, &apiError{400, "QueueDoesNotExist", "The specified queue does not exist: " + name}
	}
	return map[string]string{"QueueUrl": s.base + "/" + Account + "/" + name}, nil
}

func (s *Server) deleteQueue(body map[string]any) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	delete(s.queues, q.name)
	return map[string]string{}, nil
}

func (s *Server) sendMessage(body map[string]any) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	text := str(body, "MessageBody")
	if text == "" {
		return nil, &apiError{400, "InvalidParameterValue", "MessageBody must not be empty"}
	}
	id := s.sendLocked(q, text)
	return map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(text)}, nil
}

// receiveMessage returns up to MaxNumberOfMessages visible messages, each
// made invisible for the visibility timeout, waiting up to WaitTimeSeconds
// for one to be there.
func (s *Server) receiveMessage(r *http.Request, body map[string]any) (any, *apiError) {
	max, wait := num(body, "MaxNumberOfMessages", 1), num(body, "WaitTimeSeconds", 0)
	if max < 1 || max > 10 {
		return nil, &apiError{400, "InvalidParameterValue", "MaxNumberOfMessages must be from 1 to 10"}
	}
	if wait < 0 || wait > 20 {
		return nil, &apiError{400, "InvalidParameterValue", "WaitTimeSeconds must be from 0 to 20"}
	}
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
		now := s.now()
		var out []map[string]any
		next := time.Duration(-1) // until the next in-flight message is visible again
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
			m.visibleAt, m.receipt = now.Add(vis), newID()+newID()
			out = append(out, map[string]any{
				"MessageId": m.id, "ReceiptHandle": m.receipt, "MD5OfBody": md5Hex(m.body), "Body": m.body,
				"Attributes": map[string]string{
					"ApproximateReceiveCount":          strconv.Itoa(m.receives),
					"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
					"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
				},
			})
		}
		wake := s.wake
		s.mu.Unlock()
		if len(out) > 0 || wait == 0 {
			return map[string]any{"Messages": out}, nil
		}
		var reappear <-chan time.Time
		if next >= 0 {
			t := time.NewTimer(next)
			defer t.Stop()
			reappear = t.C
		}
		select {
		case <-wake:
		case <-reappear:
		case <-deadline.C:
			return map[string]any{"Messages": []any{}}, nil
		case <-r.Context().Done():
			return map[string]any{"Messages": []any{}}, nil
		}
	}
}

func (s *Server) deleteMessage(body map[string]any) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueOf(body)
	if aerr != nil {
		return nil, aerr
	}
	h := str(body, "ReceiptHandle")
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
	return nil, &apiError{400, "ReceiptHandleIsInvalid", "The input receipt handle is invalid: " + h}
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
