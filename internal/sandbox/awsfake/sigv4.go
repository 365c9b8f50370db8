package awsfake

import (
	"fmt"
	"net/http"
	"strings"
)

// SigV4 is the signature a fake asks of every request: an Authorization
// header of the AWS4-HMAC-SHA256 scheme whose credential scope
// (Credential=AKID/date/region/service/aws4_request) names Service and,
// unless Region is empty, Region. IAM is global, so iamfake leaves Region
// empty: its client signs for us-east-1 by default and for its own region
// when given an endpoint.
//
// The signature itself is not checked: a fake has no secret to check it
// against that a test would not also have to configure. What the check
// catches is a client built without credentials, or for another region or
// another service's endpoint.
type SigV4 struct {
	Service string
	Region  string
}

// SigV4Fault is what Check finds wrong with a request.
type SigV4Fault int

const (
	// Unsigned is a request without an AWS4-HMAC-SHA256 Authorization
	// header.
	Unsigned SigV4Fault = iota + 1
	// NoScope is a header without a Credential of the form
	// AKID/date/region/service/aws4_request.
	NoScope
	// WrongRegion is a credential scoped to another region.
	WrongRegion
	// WrongService is a credential scoped to another service.
	WrongService
)

// SigV4Error is a request Check refuses: the fault, and what the
// credential scope names, for the messages that quote it.
type SigV4Error struct {
	Fault SigV4Fault
	// Region and Service are the scope's; empty for Unsigned and NoScope.
	Region, Service string
	// want is the service asked for.
	want string
}

// Check returns nil when r is signed for v's service and region, and
// otherwise what is wrong with it. The scope is checked in that order:
// its form, its region, its service.
func (v SigV4) Check(r *http.Request) *SigV4Error {
	const scheme = "AWS4-HMAC-SHA256 "
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), scheme)
	if !ok {
		return &SigV4Error{Fault: Unsigned, want: v.Service}
	}
	var scope []string
	for _, part := range strings.Split(auth, ",") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			scope = strings.Split(c, "/")
		}
	}
	switch {
	case len(scope) != 5 || scope[0] == "" || scope[4] != "aws4_request":
		return &SigV4Error{Fault: NoScope, want: v.Service}
	case v.Region != "" && scope[2] != v.Region:
		return &SigV4Error{Fault: WrongRegion, Region: scope[2], Service: scope[3], want: v.Service}
	case scope[3] != v.Service:
		return &SigV4Error{Fault: WrongService, Region: scope[2], Service: scope[3], want: v.Service}
	}
	return nil
}

// Error words the fault as AWS's JSON and REST-JSON services do.
func (e *SigV4Error) Error() string {
	switch e.Fault {
	case Unsigned:
		return "Request is missing Authentication Token"
	case WrongRegion:
		return fmt.Sprintf("Credential should be scoped to a valid region, not '%s'.", e.Region)
	case WrongService:
		return fmt.Sprintf("Credential should be scoped to correct service: '%s'.", e.want)
	}
	return "Authorization header has no valid Credential scope"
}

// Code is the error code AWS's JSON and REST-JSON services give the fault:
// MissingAuthenticationTokenException for an unsigned request,
// InvalidSignatureException for the others.
func (e *SigV4Error) Code() string {
	if e.Fault == Unsigned {
		return "MissingAuthenticationTokenException"
	}
	return "InvalidSignatureException"
}
