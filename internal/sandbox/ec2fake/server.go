// Package ec2fake is an in-process fake of the Amazon EC2 endpoint that speaks
// the EC2 Query protocol, so that the real aws-sdk-go-v2 EC2 client can be
// driven at it over loopback HTTP.
//
// It models the small part of EC2 a node autoscaler uses: the catalogue
// (zones, instance types, offerings, Spot prices, subnets, security groups,
// AMIs), on-demand capacity reservations, launch templates, instant EC2
// Fleets and the instances they launch.
// Request keys and response element names are the ones the SDK's own
// serializers and deserializers use (service/ec2 serializers.go and
// deserializers.go), so a test that passes here exercises the same wire shapes
// as production. Faults (capacity errors, capacity limits, throttling, access
// denial) can be injected, EC2's request rate limits can be switched on
// (ratelimit.go), and every request is recorded for inspection.
//
// What is deliberately not modelled: fleets other than Type=instant, launch
// template versions other than 1, networking beyond one private IPv4 address
// per instance, and signature verification (requests must carry a SigV4
// Authorization header scoped to the world's region, but the signature itself
// is not checked).
package ec2fake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// namespace is the XML namespace of every EC2 response for API version
// 2016-11-15, the only version the SDK speaks.
const namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

// Request is one call received by the server, recorded whether it succeeded or
// not, so tests can count retries and read the exact wire form.
type Request struct {
	Action string
	Form   url.Values
	Time   time.Time
}

// Server is a fake EC2 endpoint. It implements http.Handler and is safe for
// concurrent use; all state sits behind one mutex because the fake is small
// and a single lock makes every action atomic, as EC2's are. The request
// log keeps its own.
type Server struct {
	mu sync.Mutex

	world     World
	priceTime time.Time // when the current Spot prices "were set"

	zones     map[string]Zone // by name and by ID
	types     map[string]*InstanceType
	subnets   []*subnetState
	groups    []*SecurityGroup
	images    []*Image
	templates []*LaunchTemplate
	instances []*Instance
	// reservations are the on-demand capacity reservations
	// (reservations.go).
	reservations []*CapacityReservation

	templateTokens map[string]tokenRecord  // CreateLaunchTemplate ClientToken -> template
	fleetTokens    map[string]*fleetRecord // CreateFleet ClientToken -> first answer

	faults    []CapacityFault
	limits    []*capacityLimit
	throttles map[string]int
	denied    map[string]bool
	// rates are EC2's request rate limits (ratelimit.go), when on.
	rates rateLimiter
	// noSpotRole: the account has no spot service-linked role and the
	// caller may not make it (MissingSpotRole).
	noSpotRole bool

	log         awsfake.Log[Request]
	onLaunch    []func(Instance)
	onTerminate []func(Instance)
}

// New returns a server holding a copy of w. Missing defaults are filled in:
// the account ID, and the region from the first zone name when Region is
// empty.
func New(w World) *Server {
	w = w.clone()
	if w.AccountID == "" {
		w.AccountID = DefaultAccountID
	}
	if w.Region == "" && len(w.Zones) > 0 {
		w.Region = strings.TrimRight(w.Zones[0].Name, "abcdefghijklmnopqrstuvwxyz")
	}
	s := &Server{
		world:          w,
		zones:          map[string]Zone{},
		types:          map[string]*InstanceType{},
		templateTokens: map[string]tokenRecord{},
		fleetTokens:    map[string]*fleetRecord{},
		throttles:      map[string]int{},
		denied:         map[string]bool{},
		rates:          rateLimiter{on: w.RequestRateLimits, buckets: map[string]*tokenBucket{}, throttled: map[string]int{}},
	}
	s.priceTime = s.now().Truncate(time.Hour)
	for _, z := range w.Zones {
		s.zones[z.Name] = z
		s.zones[z.ID] = z
	}
	for i := range w.InstanceTypes {
		it := &w.InstanceTypes[i]
		s.types[it.Name] = it
	}
	for i := range w.Subnets {
		s.subnets = append(s.subnets, newSubnetState(w.Subnets[i]))
	}
	for i := range w.SecurityGroups {
		s.groups = append(s.groups, &w.SecurityGroups[i])
	}
	for i := range w.Images {
		s.images = append(s.images, &w.Images[i])
	}
	for i := range w.CapacityReservations {
		s.reservations = append(s.reservations, &w.CapacityReservations[i])
	}
	return s
}

// Start serves s on a new loopback listener at 127.0.0.1. stop closes the
// listener and every open connection at once; it is safe to call more than
// once.
func (s *Server) Start() (serverURL string, stop func(), err error) {
	l, err := awsfake.Serve(s)
	if err != nil {
		return "", nil, fmt.Errorf("ec2fake: %w", err)
	}
	return l.URL(), l.Close, nil
}

// handler answers one action. It returns the response body, or an error that
// is an *apiError when it should reach the client as an EC2 error.
type handler func(s *Server, q query) (response, error)

// handlers maps each modelled action to its implementation. Anything else is
// answered with InvalidAction, as EC2 does for an unknown action.
var handlers = map[string]handler{
	"DescribeAvailabilityZones":      (*Server).describeAvailabilityZones,
	"DescribeInstanceTypes":          (*Server).describeInstanceTypes,
	"DescribeInstanceTypeOfferings":  (*Server).describeInstanceTypeOfferings,
	"DescribeSpotPriceHistory":       (*Server).describeSpotPriceHistory,
	"DescribeSubnets":                (*Server).describeSubnets,
	"DescribeSecurityGroups":         (*Server).describeSecurityGroups,
	"DescribeImages":                 (*Server).describeImages,
	"DescribeCapacityReservations":   (*Server).describeCapacityReservations,
	"CreateLaunchTemplate":           (*Server).createLaunchTemplate,
	"DescribeLaunchTemplates":        (*Server).describeLaunchTemplates,
	"DescribeLaunchTemplateVersions": (*Server).describeLaunchTemplateVersions,
	"DeleteLaunchTemplate":           (*Server).deleteLaunchTemplate,
	"CreateFleet":                    (*Server).createFleet,
	"RunInstances":                   (*Server).runInstances,
	"DescribeInstances":              (*Server).describeInstances,
	"TerminateInstances":             (*Server).terminateInstances,
	"CreateTags":                     (*Server).createTags,
	"DeleteTags":                     (*Server).deleteTags,
}

// ServeHTTP answers one EC2 Query request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := awsfake.RequestID()
	if err := r.ParseForm(); err != nil {
		writeError(w, requestID, badRequest("MalformedQueryString", "The query string is malformed: %v", err))
		return
	}
	action := r.Form.Get("Action")
	s.log.Add(action, Request{Action: action, Form: awsfake.CloneForm(r.Form), Time: s.now()})

	if err := s.checkAuthorization(r); err != nil {
		writeError(w, requestID, err)
		return
	}
	if action == "" {
		writeError(w, requestID, badRequest("MissingAction", "The request must contain the parameter Action."))
		return
	}
	if err := s.rateLimited(action, query(r.Form)); err != nil {
		writeError(w, requestID, err)
		return
	}
	if err := s.injectedFailure(action); err != nil {
		writeError(w, requestID, err)
		return
	}
	h, ok := handlers[action]
	if !ok {
		writeError(w, requestID, badRequest("InvalidAction", "The action %s is not valid for this web service.", action))
		return
	}
	// What the call would need beside its own action (ec2:CreateTags to
	// tag on create, iam:PassRole for an instance profile), checked with
	// and without DryRun, as IAM evaluates them.
	if err := s.impliedPermissions(action, query(r.Form)); err != nil {
		writeError(w, requestID, err)
		return
	}
	// Clients probe their permissions with DryRun: EC2 answers 412
	// DryRunOperation when the call is allowed (the denials above and in
	// injectedFailure come first, as EC2's authorization does), and does
	// nothing. A spot fleet without the spot service-linked role fails
	// here too.
	if r.Form.Get("DryRun") == "true" {
		if err := s.dryRunSpotRole(action, query(r.Form)); err != nil {
			writeError(w, requestID, err)
			return
		}
		writeError(w, requestID, &apiError{Status: http.StatusPreconditionFailed, Code: "DryRunOperation",
			Message: "Request would have succeeded, but DryRun flag is set."})
		return
	}
	body, err := h(s, query(r.Form))
	if err != nil {
		writeError(w, requestID, err)
		return
	}
	writeResponse(w, action, requestID, body)
}

// checkAuthorization insists on a SigV4 Authorization header scoped to this
// region and to ec2, which catches a client built without credentials or for
// the wrong region, and refuses others in EC2's words.
func (s *Server) checkAuthorization(r *http.Request) error {
	e := awsfake.SigV4{Service: "ec2", Region: s.world.Region}.Check(r)
	if e == nil {
		return nil
	}
	msg := "AWS was not able to validate the provided access credentials"
	switch e.Fault {
	case awsfake.WrongRegion:
		msg = fmt.Sprintf("Credential should be scoped to a valid region, not '%s'. ", e.Region)
	case awsfake.WrongService:
		msg = "Credential should be scoped to correct service: 'ec2'. "
	}
	return &apiError{Status: http.StatusUnauthorized, Code: "AuthFailure", Message: msg}
}

// apiError is an error EC2 would return to the client.
type apiError = awsfake.Error

// badRequest is the usual client error: EC2 answers 400 for validation and
// not-found errors alike.
func badRequest(code, format string, args ...any) *apiError {
	return awsfake.BadRequest(code, format, args...)
}

// invalidParameter is the error EC2 gives for most malformed values.
func invalidParameter(format string, args ...any) *apiError {
	return badRequest("InvalidParameterValue", format, args...)
}

func writeError(w http.ResponseWriter, requestID string, err error) {
	ae := awsfake.AsError(err, "InternalError")
	// The error document is not namespaced: the SDK decodes
	// Response>Errors>Error>{Code,Message} and Response>RequestID.
	doc := struct {
		XMLName   xml.Name `xml:"Response"`
		Code      string   `xml:"Errors>Error>Code"`
		Message   string   `xml:"Errors>Error>Message"`
		RequestID string   `xml:"RequestID"`
	}{Code: ae.Code, Message: ae.Message, RequestID: requestID}
	awsfake.WriteXML(w, ae.Status, "text/xml;charset=UTF-8", doc)
}

// response is a response body. Each one embeds meta, which carries the
// requestId element EC2 puts first in every response.
type response interface{ setRequestID(string) }

type meta struct {
	RequestID string `xml:"requestId"`
}

func (m *meta) setRequestID(id string) { m.RequestID = id }

func writeResponse(w http.ResponseWriter, action, requestID string, body response) {
	body.setRequestID(requestID)
	start := xml.StartElement{
		Name: xml.Name{Local: action + "Response"},
		Attr: []xml.Attr{{Name: xml.Name{Local: "xmlns"}, Value: namespace}},
	}
	var buf strings.Builder
	buf.WriteString(xml.Header)
	if err := xml.NewEncoder(&buf).EncodeElement(body, start); err != nil {
		writeError(w, requestID, fmt.Errorf("encoding %s response: %w", action, err))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write([]byte(buf.String()))
}

// ec2Time is a timestamp printed as EC2 prints it, with milliseconds and a Z.
type ec2Time time.Time

func (t ec2Time) MarshalText() ([]byte, error) { return []byte(formatTime(time.Time(t))), nil }

// formatTime prints a timestamp as EC2 does, e.g. 2026-11-01T00:00:00.000Z.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// xmlTag is an element of a tagSet.
type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func tagSet(tags map[string]string) []xmlTag {
	var out []xmlTag
	for _, k := range sortedKeys(tags) {
		out = append(out, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

func (s *Server) now() time.Time {
	if s.world.Now != nil {
		return s.world.Now()
	}
	return time.Now()
}

// newID returns an EC2-style resource ID: the prefix, a dash and 17 hex
// digits, the long form every resource type uses today.
func newID(prefix string) string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])[:17]
}

// runInstances is modelled only for DryRun, which clients use to check
// that they may launch with an instance profile (iam:PassRole) and tags;
// the fake launches with CreateFleet alone.
func (s *Server) runInstances(query) (response, error) {
	return nil, badRequest("Unsupported", "ec2fake models RunInstances only with DryRun; launch with CreateFleet.")
}
