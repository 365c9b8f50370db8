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
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
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

// Server is a fake IAM endpoint; it implements http.Handler and is safe for
// concurrent use. Its roles and profiles sit behind one mutex, which makes
// every action atomic; the request log and the faults keep their own.
type Server struct {
	mu       sync.Mutex
	profiles map[string]*InstanceProfile // by lower-cased name
	roles    map[string]*Role            // by lower-cased name
	log      awsfake.Log[Request]
	faults   awsfake.Faults
	now      func() time.Time
}

// New returns a server with no roles and no instance profiles.
func New() *Server {
	return &Server{profiles: map[string]*InstanceProfile{}, roles: map[string]*Role{}, now: time.Now}
}

// Start serves s on a new loopback listener at 127.0.0.1 and returns its
// URL; stop closes the listener and every open connection, and may be
// called more than once.
func (s *Server) Start() (serverURL string, stop func(), err error) {
	l, err := awsfake.Serve(s)
	if err != nil {
		return "", nil, fmt.Errorf("iamfake: %w", err)
	}
	return l.URL(), l.Close, nil
}

// protocol writes IAM's answers: results in <XResponse><XResult> and
// errors in IAM's ErrorResponse document. The SDK takes Code and Message
// from the <Error> element and maps the code to a typed error through the
// AWSQueryError traits (NoSuchEntity to *types.NoSuchEntityException...);
// codes without one, such as AccessDenied, arrive as a generic API error
// with that code.
var protocol = awsfake.Query{Namespace: namespace, InternalCode: "ServiceFailure"}

// signature is what IAM asks of a request's Authorization header. IAM is
// global, so the region is not checked.
var signature = awsfake.SigV4{Service: "iam"}

// handler answers one action with the members of its <XResult> element, or
// nil when the action has no result (AddRoleToInstanceProfile...). An
// error that is not an *awsfake.Error reaches the client as a 500.
type handler func(s *Server, q query) (any, error)

// handlers maps each modelled action to its implementation; any other is
// answered with InvalidAction. The actions on one instance profile find it
// through onProfile, after reading what else they are given.
var handlers = map[string]handler{
	"CreateInstanceProfile":         (*Server).createInstanceProfile,
	"GetInstanceProfile":            onProfile(nothing, (*Server).getInstanceProfile),
	"ListInstanceProfiles":          (*Server).listInstanceProfiles,
	"DeleteInstanceProfile":         onProfile(nothing, (*Server).deleteInstanceProfile),
	"AddRoleToInstanceProfile":      onProfile(roleName, (*Server).addRoleToInstanceProfile),
	"RemoveRoleFromInstanceProfile": onProfile(roleName, (*Server).removeRoleFromInstanceProfile),
	"TagInstanceProfile":            onProfile(tagsToAdd, (*Server).tagInstanceProfile),
	"ListInstanceProfileTags":       onProfile(nothing, (*Server).listInstanceProfileTags),
	"CreateRole":                    (*Server).createRole,
	"GetRole":                       (*Server).getRole,
}

// ServeHTTP answers one AWS Query request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := awsfake.RequestID()
	w.Header().Set("X-Amzn-RequestId", requestID)
	if err := r.ParseForm(); err != nil {
		protocol.WriteError(w, requestID, awsfake.BadRequest("MalformedQueryString", "The request body is not a form: %v", err))
		return
	}
	q := query{r.PostForm}
	action := q.Get("Action")
	s.log.Add(action, Request{Action: action, Params: awsfake.CloneForm(r.PostForm), Time: s.now()})
	result, err := s.serve(r, action, q)
	if err != nil {
		protocol.WriteError(w, requestID, err)
		return
	}
	protocol.WriteResult(w, action, requestID, result)
}

// serve checks a request as IAM does, in IAM's order, and runs its action.
func (s *Server) serve(r *http.Request, action string, q query) (any, error) {
	if r.Method != http.MethodPost {
		return nil, awsfake.Errorf(http.StatusMethodNotAllowed, "InvalidAction", "IAM accepts POST requests only")
	}
	if err := checkAuthorization(r); err != nil {
		return nil, err
	}
	if action == "" {
		return nil, awsfake.BadRequest("MissingAction", "The request must contain the parameter Action.")
	}
	h, ok := handlers[action]
	if !ok || q.Get("Version") != apiVersion {
		return nil, awsfake.BadRequest("InvalidAction", "Could not find operation %s for version %s", action, q.Get("Version"))
	}
	if err := s.injectedFault(action, q); err != nil {
		return nil, err
	}
	return h(s, q)
}

// checkAuthorization insists on a SigV4 Authorization header scoped to the
// iam service, which catches a client built without credentials or for
// another service's endpoint, and refuses others in IAM's words.
func checkAuthorization(r *http.Request) error {
	e := signature.Check(r)
	switch {
	case e == nil:
		return nil
	case e.Fault == awsfake.Unsigned:
		return awsfake.Errorf(http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
	case e.Fault == awsfake.WrongService:
		return awsfake.Errorf(http.StatusForbidden, "IncompleteSignature",
			"Credential should be scoped to correct service: 'iam', not '%s'.", e.Service)
	}
	return awsfake.Errorf(http.StatusForbidden, "IncompleteSignature",
		"Authorization header requires a Credential parameter of the form AKID/date/region/iam/aws4_request.")
}

// validation is IAM's ValidationError, worded as IAM words a constraint
// failure.
func validation(format string, args ...any) *awsfake.Error {
	return awsfake.BadRequest("ValidationError", "1 validation error detected: "+format, args...)
}

func noSuchEntity(format string, args ...any) *awsfake.Error {
	return awsfake.Errorf(http.StatusNotFound, "NoSuchEntity", format, args...)
}

func conflict(code, format string, args ...any) *awsfake.Error {
	return awsfake.Errorf(http.StatusConflict, code, format, args...)
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
