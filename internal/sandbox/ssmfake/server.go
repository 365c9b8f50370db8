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
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
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

// Server is a fake SSM endpoint serving on a loopback port; it implements
// http.Handler. Its parameters are behind one mutex, as every action is
// small; the request log and the faults keep their own.
type Server struct {
	region string
	lb     *awsfake.Loopback

	mu     sync.Mutex
	params map[string]*Parameter
	log    awsfake.Log[Request]
	faults awsfake.Faults // by action; "" is any action
	now    func() time.Time
}

// New starts a server for region (e.g. "us-west-2") on a loopback port.
// Requests must be signed for that region. Close stops it.
func New(region string) (*Server, error) {
	if region == "" {
		return nil, fmt.Errorf("ssmfake: a region is required")
	}
	s := &Server{region: region, params: map[string]*Parameter{}, now: time.Now}
	var err error
	if s.lb, err = awsfake.Serve(s); err != nil {
		return nil, fmt.Errorf("ssmfake: %w", err)
	}
	return s, nil
}

// URL is the base URL to give the client as its BaseEndpoint.
func (s *Server) URL() string { return s.lb.URL() }

// Close stops serving at once, dropping open connections; a fake has
// nothing to drain. It is safe to call more than once.
func (s *Server) Close() { s.lb.Close() }

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
func (s *Server) Requests() []Request { return s.log.All() }

// FailNext makes the next n calls of action ("" for any action) fail with
// HTTP status and the error code given, before they do anything: e.g. 400
// ThrottlingException or 500 InternalServerError, which the SDK retries,
// or 400 AccessDeniedException, which it does not. It replaces any fault
// pending for action; n = 0 clears it. A fault for the action is used
// before one for any action.
func (s *Server) FailNext(action string, n, status int, code string) {
	s.faults.FailNext(action, n, awsfake.Fault{Status: status, Code: code})
}

// protocol is SSM's AWS JSON 1.1. The SDK's schemas spell the message
// member "message" for some SSM errors and "Message" for others; the SDK
// reads either casing into either, as services are not consistent
// (smithy-go's JSON errorMessageMember), so the fake always sends
// "message".
var protocol = awsfake.JSON[*Server]{
	Name:              "ssmfake",
	Target:            "AmazonSSM",
	ContentType:       "application/x-amz-json-1.1",
	StrictContentType: true,
	BadTarget:         "UnknownOperationException",
	Unsupported:       "UnknownOperationException",
	Actions: map[string]awsfake.JSONAction[*Server]{
		"GetParameter":        (*Server).getParameter,
		"GetParameters":       (*Server).getParameters,
		"GetParametersByPath": (*Server).getParametersByPath,
	},
}

// ServeHTTP answers one AWS JSON 1.1 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	protocol.Serve(w, r, s, s.admit)
}

// admit records a call, checks its signature and injects a pending fault.
func (s *Server) admit(r *http.Request, action string, body map[string]any) *awsfake.Error {
	s.log.Add(action, Request{Action: action, Body: body, Time: s.now()})
	if e := (awsfake.SigV4{Service: "ssm", Region: s.region}).Check(r); e != nil {
		return &awsfake.Error{Status: http.StatusBadRequest, Code: e.Code(), Message: e.Error()}
	}
	return s.faults.Inject(action, "")
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

func (s *Server) getParameter(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	name := awsfake.JSONString(body, "Name")
	if name == "" {
		return nil, awsfake.BadRequest("ValidationException", "1 validation error detected: Value null at 'name' failed to satisfy constraint: Member must not be null")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.params[name]
	if p == nil {
		return nil, awsfake.BadRequest("ParameterNotFound", "Parameter %s not found.", name)
	}
	return map[string]any{"Parameter": s.wire(p)}, nil
}

func (s *Server) getParameters(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	list, _ := body["Names"].([]any)
	if len(list) < 1 || len(list) > 10 {
		return nil, awsfake.BadRequest("ValidationException",
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
func (s *Server) getParametersByPath(_ *http.Request, body map[string]any) (any, *awsfake.Error) {
	path := awsfake.JSONString(body, "Path")
	if !strings.HasPrefix(path, "/") {
		return nil, awsfake.BadRequest("ValidationException", "The parameter doesn't meet the parameter name requirements. The parameter name must begin with a forward slash \"/\". Path: %q", path)
	}
	if f, _ := body["ParameterFilters"].([]any); len(f) > 0 {
		return nil, awsfake.BadRequest("ValidationException", "ssmfake does not model ParameterFilters")
	}
	recursive, _ := body["Recursive"].(bool)
	max := 10
	if v, ok := body["MaxResults"].(float64); ok {
		if v < 1 || v > 10 {
			return nil, awsfake.BadRequest("ValidationException",
				"1 validation error detected: Value '%v' at 'maxResults' failed to satisfy constraint: Member must have value between 1 and 10", v)
		}
		max = int(v)
	}
	var after string
	if tok := awsfake.JSONString(body, "NextToken"); tok != "" {
		var t pageToken
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || json.Unmarshal(raw, &t) != nil || t.Path != path || t.Recursive != recursive {
			return nil, awsfake.BadRequest("InvalidNextToken", "The specified token isn't valid.")
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
