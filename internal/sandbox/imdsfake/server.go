// Package imdsfake is an in-process fake of the EC2 instance metadata
// service (IMDS) with IMDSv2 required, the setting AWS recommends and the
// default for new instance types: a session token from
// PUT /latest/api/token (X-aws-ec2-metadata-token-ttl-seconds: 1 to 21600)
// must be presented in X-aws-ec2-metadata-token on every read, or the read
// is answered 401. It serves on a loopback port, so that aws-sdk-go-v2's
// IMDS client (feature/ec2/imds, imds.Options.Endpoint) and
// config.LoadDefaultConfig with config.WithEC2IMDSRegion can be pointed
// at it.
//
// It serves the instance identity document
// (/latest/dynamic/instance-identity/document, JSON, which the SDK's
// GetRegion and GetInstanceIdentityDocument read), the placement region,
// availability zone and zone ID, instance-id, instance-type, ami-id and
// local-ipv4 under /latest/meta-data/, and whatever a test adds with Set
// (say, meta-data/spot/instance-action). The paths, headers and the
// document's member names are the SDK's (feature/ec2/imds
// api_op_GetToken.go, token_provider.go, api_op_GetMetadata.go,
// api_op_GetInstanceIdentityDocument.go); the SDK requires the TTL header
// on the token's answer and, on a 401, fetches a new token and retries,
// which RevokeTokens lets a test exercise. Faults can be injected and
// every request is recorded.
//
// Not modelled: IMDSv1 (requests without a token are refused, as on an
// instance with HttpTokens=required), directory listings, IAM credentials,
// user data, tags, the hop limit and the refusal of tokens requested
// through a proxy (X-Forwarded-For), and the signature of the identity
// document. IMDS is not signed with SigV4, so no Authorization header is
// asked for. Tokens expire on the real clock.
package imdsfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// The headers of IMDSv2 sessions.
const (
	TokenHeader    = "X-aws-ec2-metadata-token"
	TokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
)

// maxTokenTTL is the longest session IMDS grants: six hours.
const maxTokenTTL = 21600

// Instance is the instance whose metadata the server answers with.
type Instance struct {
	// Region is e.g. us-west-2; New takes it from AvailabilityZone when
	// empty.
	Region string
	// AvailabilityZone is e.g. us-west-2a; New makes it Region + "a" when
	// empty.
	AvailabilityZone   string
	AvailabilityZoneID string // e.g. usw2-az1; not served if empty
	InstanceID         string // e.g. i-0123456789abcdef0
	InstanceType       string // e.g. m7i.large
	ImageID            string // the AMI it runs
	AccountID          string
	PrivateIP          string
	Architecture       string // x86_64 or arm64
	PendingTime        time.Time
}

// document is the instance identity document, with the member names the
// SDK's InstanceIdentityDocument decodes.
type document struct {
	AccountID               string    `json:"accountId"`
	Architecture            string    `json:"architecture"`
	AvailabilityZone        string    `json:"availabilityZone"`
	BillingProducts         []string  `json:"billingProducts"`
	DevpayProductCodes      []string  `json:"devpayProductCodes"`
	MarketplaceProductCodes []string  `json:"marketplaceProductCodes"`
	ImageID                 string    `json:"imageId"`
	InstanceID              string    `json:"instanceId"`
	InstanceType            string    `json:"instanceType"`
	KernelID                string    `json:"kernelId"`
	PendingTime             time.Time `json:"pendingTime"`
	PrivateIP               string    `json:"privateIp"`
	RamdiskID               string    `json:"ramdiskId"`
	Region                  string    `json:"region"`
	Version                 string    `json:"version"`
}

// Request is one call received, recorded whether it succeeded or not.
type Request struct {
	Method string
	// Path is the request's path, e.g. /latest/meta-data/placement/region.
	Path string
	// Token is the session token presented, if any.
	Token string
	Time  time.Time
}

// Server is a fake IMDS serving on a loopback port; it implements
// http.Handler. Its values and tokens are behind one mutex; the request
// log and the faults keep their own.
type Server struct {
	lb *awsfake.Loopback

	mu     sync.Mutex
	doc    []byte            // the identity document, as served
	values map[string]string // path below /latest/ -> value
	tokens map[string]time.Time
	log    awsfake.Log[Request]
	faults awsfake.Faults // by path; "" is any path
	now    func() time.Time
}

// New starts a server for inst on a loopback port. Close stops it.
func New(inst Instance) (*Server, error) {
	if inst.Region == "" {
		inst.Region = strings.TrimRight(inst.AvailabilityZone, "abcdefghijklmnopqrstuvwxyz")
	}
	if inst.Region == "" {
		return nil, fmt.Errorf("imdsfake: the instance needs a Region or an AvailabilityZone")
	}
	if inst.AvailabilityZone == "" {
		inst.AvailabilityZone = inst.Region + "a"
	}
	doc, err := json.MarshalIndent(document{
		AccountID: inst.AccountID, Architecture: inst.Architecture, AvailabilityZone: inst.AvailabilityZone,
		ImageID: inst.ImageID, InstanceID: inst.InstanceID, InstanceType: inst.InstanceType,
		PendingTime: inst.PendingTime.UTC(), PrivateIP: inst.PrivateIP, Region: inst.Region, Version: "2017-09-30",
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("imdsfake: encoding the identity document: %w", err)
	}
	s := &Server{doc: doc, values: map[string]string{}, tokens: map[string]time.Time{}, now: time.Now}
	for path, v := range map[string]string{
		"meta-data/placement/region":               inst.Region,
		"meta-data/placement/availability-zone":    inst.AvailabilityZone,
		"meta-data/placement/availability-zone-id": inst.AvailabilityZoneID,
		"meta-data/instance-id":                    inst.InstanceID,
		"meta-data/instance-type":                  inst.InstanceType,
		"meta-data/ami-id":                         inst.ImageID,
		"meta-data/local-ipv4":                     inst.PrivateIP,
	} {
		if v != "" {
			s.values[path] = v
		}
	}
	if s.lb, err = awsfake.Serve(s); err != nil {
		return nil, fmt.Errorf("imdsfake: %w", err)
	}
	return s, nil
}

// URL is the endpoint to give the client, as imds.Options.Endpoint.
func (s *Server) URL() string { return s.lb.URL() }

// Close stops serving at once, dropping open connections. It is safe to
// call more than once.
func (s *Server) Close() { s.lb.Close() }

// Set serves value at path, relative to /latest/ (e.g.
// "meta-data/spot/instance-action"), replacing what was there. It does not
// change the identity document.
func (s *Server) Set(path, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[strings.Trim(path, "/")] = value
}

// Delete stops serving path, relative to /latest/; reads of it are then
// answered 404, as IMDS answers for a path with nothing there.
func (s *Server) Delete(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.values, strings.Trim(path, "/"))
}

// RevokeTokens makes every token issued so far invalid, as when a session
// expires early, so that a test can check that a client fetches a new one.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

// Requests returns the calls received so far, in order.
func (s *Server) Requests() []Request { return s.log.All() }

// FailNext makes the next n requests of path (e.g. /latest/api/token or
// /latest/dynamic/instance-identity/document; "" for any path) fail with
// HTTP status before they do anything. The SDK retries 500, 502, 503 and
// 504. It replaces any fault pending for path; n = 0 clears it. A fault for
// the path is used before one for any path.
func (s *Server) FailNext(path string, n, status int) {
	s.faults.FailNext(path, n, awsfake.Fault{Status: status})
}

// ServeHTTP answers one IMDS request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get(TokenHeader)
	s.log.Add(r.URL.Path, Request{Method: r.Method, Path: r.URL.Path, Token: token, Time: s.now()})
	if f, ok := s.faults.Take(r.URL.Path, ""); ok {
		http.Error(w, http.StatusText(f.Status), f.Status)
		return
	}

	if r.URL.Path == "/latest/api/token" {
		s.issueToken(w, r)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if expires, ok := s.tokens[token]; token == "" || !ok || !s.now().Before(expires) {
		delete(s.tokens, token)
		http.Error(w, http.StatusText(http.StatusUnauthorized), http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	path, latest := strings.CutPrefix(r.URL.Path, "/latest/")
	path = strings.Trim(path, "/")
	value, found := s.values[path]
	var body []byte
	switch {
	case !latest:
		http.Error(w, http.StatusText(http.StatusNotFound), http.StatusNotFound)
		return
	case path == "dynamic/instance-identity/document":
		body = s.doc
	case found:
		body = []byte(value)
	default:
		http.Error(w, http.StatusText(http.StatusNotFound), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// issueToken answers PUT /latest/api/token with a new session token valid
// for the seconds asked, and echoes the TTL, which the SDK reads to know
// when to ask again.
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(TokenTTLHeader))
	if err != nil || ttl < 1 || ttl > maxTokenTTL {
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	b := make([]byte, 42)
	_, _ = rand.Read(b)
	token := base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	s.tokens[token] = s.now().Add(time.Duration(ttl) * time.Second)
	s.mu.Unlock()
	w.Header().Set(TokenTTLHeader, strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(token))
}
