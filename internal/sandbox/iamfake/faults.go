package iamfake

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// This file is the test-facing side of the fake: fault injection, planting
// roles and profiles, and inspection of what the server was asked and what
// it holds.

// FailNext makes the next n calls of action fail with the HTTP status and
// error code given, before they do anything; n = 0 clears the fault. It
// replaces any fault pending for action. Codes IAM uses: AccessDenied
// (403; the message then names the permission, as IAM's does),
// Throttling (400, which the SDK retries), ServiceFailure (500),
// LimitExceeded (409), ConcurrentModification (409).
func (s *Server) FailNext(action string, n, status int, code string) {
	s.faults.FailNext(action, n, awsfake.Fault{Status: status, Code: code})
}

// ClearFaults removes every pending fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// callerARN is who the fake says is calling, in AccessDenied messages.
const callerARN = "arn:aws:sts::" + Account + ":assumed-role/nodeforge-provisioner/iamfake"

// injectedFault returns the error of a pending fault for the call, if any.
func (s *Server) injectedFault(action string, q query) error {
	f, ok := s.faults.Take(action)
	if !ok {
		return nil
	}
	msg := "Injected fault."
	if f.Code == "AccessDenied" {
		s.mu.Lock()
		defer s.mu.Unlock()
		// IAM's wording, which names the permission and the resource.
		msg = fmt.Sprintf("User: %s is not authorized to perform: iam:%s on resource: %s because no identity-based policy allows the iam:%s action",
			callerARN, action, s.resourceOfLocked(action, q), action)
	}
	return &awsfake.Error{Status: f.Status, Code: f.Code, Message: msg}
}

// resourceOfLocked is the ARN a call acts on, for AccessDenied messages.
func (s *Server) resourceOfLocked(action string, q query) string {
	if name := q.Get("InstanceProfileName"); name != "" {
		path := q.Get("Path")
		if p := s.profiles[strings.ToLower(name)]; p != nil {
			path = p.Path
		}
		if path == "" {
			path = "/"
		}
		return "arn:aws:iam::" + Account + ":instance-profile" + path + name
	}
	if name := q.Get("RoleName"); name != "" {
		return "arn:aws:iam::" + Account + ":role/" + name
	}
	return "arn:aws:iam::" + Account + ":instance-profile" + q.Get("PathPrefix") + "*"
}

// AddRole creates a role at path "/" with a trust policy that lets EC2
// assume it, as a node role has, and returns it; a role of that name is
// returned as it is.
func (s *Server) AddRole(name string) Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.roles[strings.ToLower(name)]; r != nil {
		return *r
	}
	const trust = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`
	return *s.addRoleLocked(name, "/", trust)
}

// AddInstanceProfile plants an instance profile that no request created,
// such as one someone else owns, and returns it as stored. Missing fields
// are filled in: path "/", ID, ARN and creation time. Its roles must exist;
// an existing profile of that name is replaced.
func (s *Server) AddInstanceProfile(p InstanceProfile) (InstanceProfile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p.Roles) > 1 {
		return InstanceProfile{}, fmt.Errorf("iamfake: an instance profile holds at most one role, not %d", len(p.Roles))
	}
	for i, r := range p.Roles {
		role := s.roles[strings.ToLower(r)]
		if role == nil {
			return InstanceProfile{}, fmt.Errorf("iamfake: no role %s", r)
		}
		p.Roles[i] = role.Name
	}
	return s.addProfileLocked(p).clone(), nil
}

// InstanceProfiles returns a copy of every instance profile that exists
// now, sorted by name.
func (s *Server) InstanceProfiles() []InstanceProfile {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]InstanceProfile, 0, len(s.profiles))
	for _, key := range slices.Sorted(maps.Keys(s.profiles)) {
		out = append(out, s.profiles[key].clone())
	}
	return out
}

// Requests returns every request received, in order, failed ones included.
func (s *Server) Requests() []Request { return s.log.All() }

// Calls returns how many requests of action were received, retries and
// failures included; "" counts every action.
func (s *Server) Calls(action string) int {
	if action == "" {
		return s.log.Len()
	}
	return s.log.Count(action)
}

// statusOf is the HTTP status IAM answers an error code with, for tests
// and callers of FailNext that want IAM's own.
var statusOf = map[string]int{
	"NoSuchEntity":           http.StatusNotFound,
	"EntityAlreadyExists":    http.StatusConflict,
	"LimitExceeded":          http.StatusConflict,
	"DeleteConflict":         http.StatusConflict,
	"ConcurrentModification": http.StatusConflict,
	"ValidationError":        http.StatusBadRequest,
	"InvalidInput":           http.StatusBadRequest,
	"Throttling":             http.StatusBadRequest,
	"AccessDenied":           http.StatusForbidden,
	"ServiceFailure":         http.StatusInternalServerError,
}

// Status returns the HTTP status IAM gives with an error code (400 for a
// code it does not know), so that a test can write
// FailNext(action, 1, iamfake.Status("AccessDenied"), "AccessDenied").
func Status(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusBadRequest
}
