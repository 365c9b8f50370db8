// Package iamfake is an in-process fake of the AWS IAM endpoint that speaks
// the AWS Query protocol IAM uses (POST form bodies Action=...&Version=
// 2010-05-08, XML answers), so that the real aws-sdk-go-v2 IAM client can
// be driven at it over loopback HTTP.
//
// It models what a node autoscaler needs to keep instance profiles for its
// nodes' roles: instance profiles (create, get, list by path prefix, tag,
// list tags, delete) holding at most one role each (add, remove), and roles
// enough to put in them (CreateRole, GetRole, and AddRole for tests).
// Names are unique regardless of case and looked up regardless of case, as
// IAM's are. Errors carry the codes and HTTP statuses IAM gives them
// (NoSuchEntity 404, EntityAlreadyExists, LimitExceeded and DeleteConflict
// 409, ValidationError and InvalidInput 400, AccessDenied 403), in IAM's
// ErrorResponse document. Faults can be injected per action, and every
// request is recorded.
//
// The wire shapes come from the SDK itself (service/iam v1.65.0, which
// serialises through schemas rather than generated serializers.go and
// deserializers.go): member names from schemas/schemas.go (InstanceProfile:
// Path, InstanceProfileName, InstanceProfileId, Arn, CreateDate, Roles,
// Tags; lists wrapped in <member> elements, requests flattened as
// Tags.member.N.Key), error codes and statuses from the AWSQueryError traits
// there, and the envelope (<XResponse><XResult>, <ErrorResponse><Error>)
// from smithy-go's transport/http/protocol/awsquery, which finds the result
// element by name and the error's Code and Message inside <Error>.
//
// Not modelled: policies (a role's permissions, PassRole, permission
// boundaries), DeleteRole and role updates, untagging, IAM's eventual
// consistency (a change is visible at once), the global account quotas, and
// signature verification (requests must carry a SigV4 Authorization header
// scoped to the iam service; the signature itself is not checked, nor the
// region, as IAM is a global service signed for us-east-1 by default and
// for the client's region when an endpoint is given).
package iamfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Account is the account ID in every ARN the fake makes.
const Account = "000000000000"

const (
	// apiVersion is the only IAM API version; requests must name it.
	apiVersion = "2010-05-08"
	// namespace is the XML namespace of every IAM response.
	namespace = "https://iam.amazonaws.com/doc/" + apiVersion + "/"
)

// Request is one call received, recorded whether it succeeded or not, so
// that tests can count calls and retries and read what the client sent.
type Request struct {
	// Action is the operation, e.g. CreateInstanceProfile.
	Action string
	// Params is the decoded form body, Action and Version included.
	Params url.Values
	// Time is when the request arrived.
	Time time.Time
}

// InstanceProfile is an instance profile as the fake holds it.
type InstanceProfile struct {
	Name string
	// Path is "/" or begins and ends with "/", e.g. /nodeforge/.
	Path string
	// ID is IAM's unique ID, AIPA followed by 17 characters.
	ID string
	// ARN is arn:aws:iam::<Account>:instance-profile<Path><Name>.
	ARN     string
	Created time.Time
	// Roles are the names of the roles in the profile: at most one.
	Roles []string
	Tags  map[string]string
}

func (p *InstanceProfile) clone() InstanceProfile {
	c := *p
	c.Roles = append([]string(nil), p.Roles...)
	c.Tags = make(map[string]string, len(p.Tags))
	for k, v := range p.Tags {
		c.Tags[k] = v
	}
	return c
}

// Role is an IAM role as the fake holds it.
type Role struct {
	Name string
	Path string
	// ID is IAM's unique ID, AROA followed by 17 characters.
	ID string
	// ARN is arn:aws:iam::<Account>:role<Path><Name>.
	ARN     string
	Created time.Time
	// AssumeRolePolicyDocument is the trust policy as given (JSON).
	AssumeRolePolicyDocument string
}

type fault struct {
	n      int
	status int
	code   string
}

// Server is a fake IAM endpoint; it implements http.Handler and is safe for
// concurrent use. All state sits behind one mutex, which makes every action
// atomic.
type Server struct {
	mu       sync.Mutex
	profiles map[string]*InstanceProfile // by lower-cased name
	roles    map[string]*Role            // by lower-cased name
	requests []Request
	faults   map[string]*fault
	now      func() time.Time
}

// New returns a server with no roles and no instance profiles.
func New() *Server {
	return &Server{profiles: map[string]*InstanceProfile{}, roles: map[string]*Role{}, faults: map[string]*fault{}, now: time.Now}
}

// Start serves s on a new loopback listener at 127.0.0.1 and returns its
// URL; stop closes the listener and every open connection, and may be
// called more than once.
func (s *Server) Start() (serverURL string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("iamfake: listening on loopback: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	// Close, not Shutdown: a fake has nothing to drain, and Shutdown waits
	// for idle connections the SDK keeps open.
	return "http://" + l.Addr().String(), func() { _ = hs.Close() }, nil
}

// handler answers one action with the members of its <XResult> element, or
// nil when the action has no result (AddRoleToInstanceProfile...). An
// error that is not an *apiError reaches the client as a 500.
type handler func(s *Server, q query) (any, error)

// handlers maps each modelled action to its implementation; any other is
// answered with InvalidAction.
var handlers = map[string]handler{
	"CreateInstanceProfile":         (*Server).createInstanceProfile,
	"GetInstanceProfile":            (*Server).getInstanceProfile,
	"ListInstanceProfiles":          (*Server).listInstanceProfiles,
	"DeleteInstanceProfile":         (*Server).deleteInstanceProfile,
	"AddRoleToInstanceProfile":      (*Server).addRoleToInstanceProfile,
	"RemoveRoleFromInstanceProfile": (*Server).removeRoleFromInstanceProfile,
	"TagInstanceProfile":            (*Server).tagInstanceProfile,
	"ListInstanceProfileTags":       (*Server).listInstanceProfileTags,
	"CreateRole":                    (*Server).createRole,
	"GetRole":                       (*Server).getRole,
}

// ServeHTTP answers one AWS Query request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	w.Header().Set("X-Amzn-RequestId", requestID)
	if err := r.ParseForm(); err != nil {
		writeError(w, requestID, badRequest("MalformedQueryString", "The request body is not a form: %v", err))
		return
	}
	q := query(r.PostForm)
	action := q.get("Action")
	s.record(action, r.PostForm)
	if r.Method != http.MethodPost {
		writeError(w, requestID, &apiError{Status: http.StatusMethodNotAllowed, Code: "InvalidAction", Message: "IAM accepts POST requests only"})
		return
	}
	if err := checkAuthorization(r); err != nil {
		writeError(w, requestID, err)
		return
	}
	if action == "" {
		writeError(w, requestID, badRequest("MissingAction", "The request must contain the parameter Action."))
		return
	}
	h, ok := handlers[action]
	if !ok || q.get("Version") != apiVersion {
		writeError(w, requestID, badRequest("InvalidAction", "Could not find operation %s for version %s", action, q.get("Version")))
		return
	}
	if err := s.injectedFault(action, q); err != nil {
		writeError(w, requestID, err)
		return
	}
	result, err := h(s, q)
	if err != nil {
		writeError(w, requestID, err)
		return
	}
	writeResponse(w, action, requestID, result)
}

func (s *Server) record(action string, form url.Values) {
	s.mu.Lock()
	defer s.mu.Unlock()
	copied := make(url.Values, len(form))
	for k, v := range form {
		copied[k] = append([]string(nil), v...)
	}
	s.requests = append(s.requests, Request{Action: action, Params: copied, Time: s.now()})
}

// checkAuthorization insists on a SigV4 Authorization header scoped to the
// iam service, which catches a client built without credentials or for
// another service's endpoint. The signature is not verified.
func checkAuthorization(r *http.Request) error {
	const scheme = "AWS4-HMAC-SHA256 "
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, scheme) {
		return &apiError{Status: http.StatusForbidden, Code: "MissingAuthenticationToken",
			Message: "Request is missing Authentication Token"}
	}
	var credential string
	for _, part := range strings.Split(strings.TrimPrefix(auth, scheme), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			credential = v
		}
	}
	// Credential=AKID/20261122/us-east-1/iam/aws4_request
	scope := strings.Split(credential, "/")
	if len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request" {
		return &apiError{Status: http.StatusForbidden, Code: "IncompleteSignature",
			Message: "Authorization header requires a Credential parameter of the form AKID/date/region/iam/aws4_request."}
	}
	if scope[3] != "iam" {
		return &apiError{Status: http.StatusForbidden, Code: "IncompleteSignature",
			Message: fmt.Sprintf("Credential should be scoped to correct service: 'iam', not '%s'.", scope[3])}
	}
	return nil
}

// apiError is an error IAM would return to the client.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

// validation is IAM's ValidationError, worded as IAM words a constraint
// failure.
func validation(format string, args ...any) *apiError {
	return badRequest("ValidationError", "1 validation error detected: "+format, args...)
}

func noSuchEntity(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: "NoSuchEntity", Message: fmt.Sprintf(format, args...)}
}

func conflict(code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusConflict, Code: code, Message: fmt.Sprintf(format, args...)}
}

// writeError answers with IAM's error document. The SDK takes Code and
// Message from the <Error> element wherever it is, and maps the code to a
// typed error through the AWSQueryError traits (NoSuchEntity to
// *types.NoSuchEntityException...); codes without one, such as
// AccessDenied, arrive as a generic API error with that code.
func writeError(w http.ResponseWriter, requestID string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Code: "ServiceFailure",
			Message: "An internal error has occurred: " + err.Error()}
	}
	fault := "Sender"
	if ae.Status >= 500 {
		fault = "Receiver"
	}
	doc := struct {
		XMLName   xml.Name `xml:"ErrorResponse"`
		Xmlns     string   `xml:"xmlns,attr"`
		Type      string   `xml:"Error>Type"`
		Code      string   `xml:"Error>Code"`
		Message   string   `xml:"Error>Message"`
		RequestID string   `xml:"RequestId"`
	}{Xmlns: namespace, Type: fault, Code: ae.Code, Message: ae.Message, RequestID: requestID}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(ae.Status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(doc)
}

// writeResponse answers <ActionResponse xmlns=...><ActionResult>result
// </ActionResult><ResponseMetadata><RequestId>...</RequestId>
// </ResponseMetadata></ActionResponse>, leaving out the result element for
// actions that have none, as IAM does.
func writeResponse(w http.ResponseWriter, action, requestID string, result any) {
	var buf strings.Builder
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	start := xml.StartElement{Name: xml.Name{Local: action + "Response"}, Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: namespace}}}
	err := enc.EncodeToken(start)
	if err == nil && result != nil {
		err = enc.EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}})
	}
	if err == nil {
		meta := struct {
			RequestID string `xml:"RequestId"`
		}{requestID}
		err = enc.EncodeElement(meta, xml.StartElement{Name: xml.Name{Local: "ResponseMetadata"}})
	}
	if err == nil {
		err = enc.EncodeToken(start.End())
	}
	if err == nil {
		err = enc.Flush()
	}
	if err != nil {
		writeError(w, requestID, fmt.Errorf("encoding %s response: %w", action, err))
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	_, _ = w.Write([]byte(buf.String()))
}

// iamTime prints a timestamp as IAM does, e.g. 2026-11-01T00:00:00Z.
func iamTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// newID returns an IAM unique ID: the type's prefix (AIPA for instance
// profiles, AROA for roles) and 17 upper-case letters and digits.
func newID(prefix string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var b [17]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b[:])
}

// newRequestID returns a UUID-shaped request ID, as IAM uses.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
