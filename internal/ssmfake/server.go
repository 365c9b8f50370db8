// Package ssmfake is an in-process fake of the AWS Systems Manager (SSM)
// endpoint's Parameter Store reads, speaking the protocol aws-sdk-go-v2's
// SSM client speaks, AWS JSON 1.1 (POST /, X-Amz-Target:
// AmazonSSM.<Action>, Content-Type: application/x-amz-json-1.1, JSON
// bodies), so that the real client can be driven at it over loopback HTTP.
//
// It models what a node autoscaler reads to choose an AMI: GetParameter,
// GetParameters (the names not found are listed in InvalidParameters) and
// GetParametersByPath (Path, Recursive, and pagination by MaxResults, at
// most 10, and NextToken). Parameters are of Type String, with Name, Value,
// Version (1 on the first Put, one more on each Put after),
// LastModifiedDate, ARN and DataType ("aws:ec2:image" when the value is an
// AMI ID, "text" otherwise). Tests publish and withdraw parameters in
// process with Put and Delete; SeedEKSOptimizedAL2023 publishes the public
// parameters of the EKS-optimised Amazon Linux 2023 AMIs. Member names and
// error shapes are the SDK's (service/ssm schemas/schemas.go: the
// GetParameter*, Parameter and error structures; type_registry.go); errors
// are a JSON body {"__type": "<code>", "message": "..."} with status 400
// (injected faults choose their own), from which the SDK takes the code
// (smithy-go transport/http/protocol/awsjson), and LastModifiedDate is
// epoch seconds as a JSON number, AWS JSON's timestamp format. Faults can be injected and
// every request is recorded.
//
// Every parameter's ARN is arn:aws:ssm:<region>:000000000000:parameter/<name
// without its leading slash>, public ones included (AWS gives those an
// empty account field).
//
// Not modelled: writing through the API (PutParameter, DeleteParameter),
// SecureString and StringList parameters, version and label selectors
// (name:3, name:label), parameter history, ParameterFilters (refused with a
// ValidationException rather than ignored), ARNs as names, KMS, tiers,
// policies, and signature verification (a SigV4 Authorization header
// scoped to the server's region and to "ssm" must be present; its
// signature is not checked).
package ssmfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Account is the account ID in every parameter's ARN.
const Account = "000000000000"

// Parameter is a stored parameter, as Get reports it.
type Parameter struct {
	Name         string
	Value        string
	Version      int64
	LastModified time.Time
	// DataType is "aws:ec2:image" for an AMI ID, "text" otherwise.
	DataType string
}

// Request is one call received, recorded whether it succeeded or not, so
// that tests can count calls and retries and read what the client sent.
type Request struct {
	// Action is the operation named by X-Amz-Target, e.g. GetParameter.
	Action string
	// Body is the JSON request body as decoded by encoding/json.
	Body map[string]any
	Time time.Time
}

type fault struct {
	n      int
	status int
	code   string
}

// Server is a fake SSM endpoint serving on a loopback port; it implements
// http.Handler. Its state is behind one mutex, as every action is small.
type Server struct {
	region string
	url    string
	hs     *http.Server

	mu       sync.Mutex
	params   map[string]*Parameter
	requests []Request
	faults   map[string]*fault // by action; "" is any action
	now      func() time.Time
}

// New starts a server for region (e.g. "us-west-2") on a loopback port.
// Requests must be signed for that region. Close stops it.
func New(region string) (*Server, error) {
	if region == "" {
		return nil, fmt.Errorf("ssmfake: a region is required")
	}
	s := &Server{region: region, params: map[string]*Parameter{}, faults: map[string]*fault{}, now: time.Now}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("ssmfake: listening on loopback: %w", err)
	}
	s.hs = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.hs.Serve(l) }()
	s.url = "http://" + l.Addr().String()
	return s, nil
}

// URL is the base URL to give the client as its BaseEndpoint.
func (s *Server) URL() string { return s.url }

// Close stops serving at once, dropping open connections; a fake has
// nothing to drain. It is safe to call more than once.
func (s *Server) Close() { _ = s.hs.Close() }

// imageID is what EC2 AMI IDs look like: 8 or 17 hex digits.
var imageID = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)

// Put sets a parameter's value, as PutParameter with Overwrite does: a new
// parameter gets version 1, an existing one its next version, even if the
// value is the same. It returns the parameter as stored. Names are taken
// as given; hierarchical ones start with "/".
func (s *Server) Put(name, value string) Parameter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(name, value)
}

func (s *Server) putLocked(name, value string) Parameter {
	p := s.params[name]
	if p == nil {
		p = &Parameter{Name: name}
		s.params[name] = p
	}
	p.Value, p.Version, p.LastModified = value, p.Version+1, s.now()
	p.DataType = "text"
	if imageID.MatchString(value) {
		p.DataType = "aws:ec2:image"
	}
	return *p
}

// Delete removes a parameter, with its versions; reads then do not find
// it. Deleting an unknown name does nothing.
func (s *Server) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.params, name)
}

// Get returns a parameter as stored, and whether there is one.
func (s *Server) Get(name string) (Parameter, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.params[name]; p != nil {
		return *p, true
	}
	return Parameter{}, false
}

// Requests returns the calls received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// FailNext makes the next n calls of action ("" for any action) fail with
// HTTP status and the error code given, before they do anything: e.g. 400
// ThrottlingException or 500 InternalServerError, which the SDK retries,
// or 400 AccessDeniedException, which it does not. It replaces any fault
// pending for action; n = 0 clears it. A fault for the action is used
// before one for any action.
func (s *Server) FailNext(action string, n, status int, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[action] = &fault{n: n, status: status, code: code}
}

// apiError is an error as AWS JSON 1.1 returns it.
type apiError struct {
	status int
	code   string
	msg    string
}

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, code, fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one AWS JSON 1.1 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Amzn-RequestId", newID())
	target := r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, "AmazonSSM.")
	if r.Method != http.MethodPost || !ok {
		writeError(w, *badRequest("UnknownOperationException", "expected POST with X-Amz-Target: AmazonSSM.<Action>, got %s %q", r.Method, target))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		writeError(w, *badRequest("UnknownOperationException", "expected Content-Type: application/x-amz-json-1.1, got %q", ct))
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, *badRequest("SerializationException", "request body is not JSON: %v", err))
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Action: action, Body: body, Time: s.now()})
	if aerr := s.checkAuthorization(r); aerr != nil {
		s.mu.Unlock()
		writeError(w, *aerr)
		return
	}
	for _, key := range []string{action, ""} {
		if f := s.faults[key]; f != nil && f.n > 0 {
			f.n--
			s.mu.Unlock()
			writeError(w, apiError{f.status, f.code, "injected fault"})
			return
		}
	}
	s.mu.Unlock()
	var out any
	var aerr *apiError
	switch action {
	case "GetParameter":
		out, aerr = s.getParameter(body)
	case "GetParameters":
		out, aerr = s.getParameters(body)
	case "GetParametersByPath":
		out, aerr = s.getParametersByPath(body)
	default:
		aerr = badRequest("UnknownOperationException", "ssmfake does not implement %s", action)
	}
	if aerr != nil {
		writeError(w, *aerr)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}

// checkAuthorization requires a SigV4 Authorization header whose
// credential scope (AKID/date/region/service/aws4_request) names the
// server's region and ssm, without checking the signature.
func (s *Server) checkAuthorization(r *http.Request) *apiError {
	const scheme = "AWS4-HMAC-SHA256 "
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), scheme)
	if !ok {
		return &apiError{http.StatusBadRequest, "MissingAuthenticationTokenException", "Request is missing Authentication Token"}
	}
	var scope []string
	for _, part := range strings.Split(auth, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			scope = strings.Split(v, "/")
		}
	}
	switch {
	case len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request":
		return &apiError{http.StatusBadRequest, "InvalidSignatureException", "Authorization header has no valid Credential scope"}
	case scope[2] != s.region:
		return &apiError{http.StatusBadRequest, "InvalidSignatureException",
			fmt.Sprintf("Credential should be scoped to a valid region, not '%s'.", scope[2])}
	case scope[3] != "ssm":
		return &apiError{http.StatusBadRequest, "InvalidSignatureException", "Credential should be scoped to correct service: 'ssm'."}
	}
	return nil
}

// writeError answers with an AWS JSON error document; the SDK takes the
// error's code from __type and decodes the rest into the typed error. The
// SDK's schemas spell the message member "message" for some SSM errors and
// "Message" for others; the SDK reads either casing into either, as
// services are not consistent (smithy-go's JSON errorMessageMember), so
// the fake always sends "message".
func writeError(w http.ResponseWriter, e apiError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.code, "message": e.msg})
}

// wireParameter is a Parameter with the SDK's member names.
type wireParameter struct {
	Name             string  `json:"Name"`
	Type             string  `json:"Type"`
	Value            string  `json:"Value"`
	Version          int64   `json:"Version"`
	LastModifiedDate float64 `json:"LastModifiedDate"`
	ARN              string  `json:"ARN"`
	DataType         string  `json:"DataType"`
}

func (s *Server) wire(p *Parameter) wireParameter {
	return wireParameter{
		Name:             p.Name,
		Type:             "String",
		Value:            p.Value,
		Version:          p.Version,
		LastModifiedDate: float64(p.LastModified.UnixMilli()) / 1000,
		ARN:              "arn:aws:ssm:" + s.region + ":" + Account + ":parameter/" + strings.TrimPrefix(p.Name, "/"),
		DataType:         p.DataType,
	}
}

func str(body map[string]any, key string) string {
	v, _ := body[key].(string)
	return v
}

func (s *Server) getParameter(body map[string]any) (any, *apiError) {
	name := str(body, "Name")
	if name == "" {
		return nil, badRequest("ValidationException", "1 validation error detected: Value null at 'name' failed to satisfy constraint: Member must not be null")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.params[name]
	if p == nil {
		return nil, badRequest("ParameterNotFound", "Parameter %s not found.", name)
	}
	return map[string]any{"Parameter": s.wire(p)}, nil
}

func (s *Server) getParameters(body map[string]any) (any, *apiError) {
	list, _ := body["Names"].([]any)
	if len(list) < 1 || len(list) > 10 {
		return nil, badRequest("ValidationException",
			"1 validation error detected: Value at 'names' failed to satisfy constraint: Member must have length between 1 and 10, got %d", len(list))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found, invalid := []wireParameter{}, []string{}
	seen := map[string]bool{}
	for _, v := range list {
		name, _ := v.(string)
		if seen[name] {
			continue
		}
		seen[name] = true
		if p := s.params[name]; p != nil {
			found = append(found, s.wire(p))
		} else {
			invalid = append(invalid, name)
		}
	}
	return map[string]any{"Parameters": found, "InvalidParameters": invalid}, nil
}

// pageToken is what a NextToken carries: the query it continues and the
// last name returned, so that a page starts after it even if parameters
// were put or deleted in between.
type pageToken struct {
	Path      string `json:"p"`
	Recursive bool   `json:"r"`
	After     string `json:"a"`
}

// getParametersByPath returns the parameters under Path, in name order: a
// level below it, or every level when Recursive.
func (s *Server) getParametersByPath(body map[string]any) (any, *apiError) {
	path := str(body, "Path")
	if !strings.HasPrefix(path, "/") {
		return nil, badRequest("ValidationException", "The parameter doesn't meet the parameter name requirements. The parameter name must begin with a forward slash \"/\". Path: %q", path)
	}
	if f, _ := body["ParameterFilters"].([]any); len(f) > 0 {
		return nil, badRequest("ValidationException", "ssmfake does not model ParameterFilters")
	}
	recursive, _ := body["Recursive"].(bool)
	max := 10
	if v, ok := body["MaxResults"].(float64); ok {
		if v < 1 || v > 10 {
			return nil, badRequest("ValidationException",
				"1 validation error detected: Value '%v' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 10", v)
		}
		max = int(v)
	}
	var after string
	if tok := str(body, "NextToken"); tok != "" {
		var t pageToken
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || json.Unmarshal(raw, &t) != nil || t.Path != path || t.Recursive != recursive {
			return nil, badRequest("InvalidNextToken", "The specified token isn't valid.")
		}
		after = t.After
	}
	prefix := strings.TrimSuffix(path, "/") + "/"
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name := range s.params {
		rest, under := strings.CutPrefix(name, prefix)
		if under && rest != "" && (recursive || !strings.Contains(rest, "/")) && name > after {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := map[string]any{}
	if len(names) > max {
		names = names[:max]
		raw, _ := json.Marshal(pageToken{Path: path, Recursive: recursive, After: names[max-1]})
		out["NextToken"] = base64.RawURLEncoding.EncodeToString(raw)
	}
	page := make([]wireParameter, 0, len(names))
	for _, name := range names {
		page = append(page, s.wire(s.params[name]))
	}
	out["Parameters"] = page
	return out, nil
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
