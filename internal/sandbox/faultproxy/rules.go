package faultproxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Rule fails chosen requests, where the random share (Config) fails any:
// "the next 7 patches of nodeclaims", "a nodeclaims/status update that
// sets phase Disrupting", "two node updates in a row after every three".
// A test adds one (Proxy.AddRule) at the moment it wants a write to fail,
// and removes it when done. Rules apply before the random share: a
// request a rule fails is not drawn for it, and Config.Except does not
// protect it.
//
// Which failures reach the caller: client-go retries a 429 with
// Retry-After (TooManyRequests) on its own, up to ten times, so a rule
// of TooManyRequests failing fewer in a row than that is never seen by
// the provisioner's code. InternalError (500 without Retry-After), and
// Drop or TimeoutAfterApply of a write, reach the caller; a dropped read
// client-go retries.
type Rule struct {
	// Resource is what the request's path names, with its subresource:
	// "nodes", "nodeclaims", "nodeclaims/status", "pods/eviction",
	// "leases". Empty matches every resource.
	Resource string
	// Verb is the Kubernetes verb, as the API server's RequestInfo and
	// RBAC read it: get, list, watch, create, update, patch, delete or
	// deletecollection. A PUT is "update", a POST "create" (an eviction
	// too), a GET without a name "list", or "watch" with ?watch=true.
	// Empty matches every verb.
	Verb string
	// Name is the object's name in the path; empty matches any. A create
	// names none in its path: match on Body instead.
	Name string
	// Body, when set, must hold for the request's body, which the proxy
	// then reads and sends on unchanged. Contains builds the usual one.
	Body func(body []byte) bool

	// Fail is how many matching requests fail in a row, at least 1.
	Fail int
	// Pass, when above zero, makes the rule repeat: Pass matching
	// requests pass, then Fail fail, then Pass pass, and so on. Zero
	// fails the next Fail matching requests and passes every one after.
	Pass int
	// Fault is how the requests fail; empty is InternalError, which
	// reaches the caller and applies nothing.
	Fault Fault
}

// Contains is a Rule.Body that holds for a body containing s, such as
// `"phase":"Disrupting"` in a JSON body.
func Contains(s string) func([]byte) bool {
	return func(body []byte) bool { return bytes.Contains(body, []byte(s)) }
}

// verbs are the Kubernetes verbs a Rule may name.
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// String says what the rule fails, for a test's log.
func (r Rule) String() string {
	what := strings.TrimSpace(strings.Join([]string{or(r.Verb, "any verb"), or(r.Resource, "any resource"), r.Name}, " "))
	if r.Body != nil {
		what += " with a chosen body"
	}
	if r.Pass > 0 {
		return fmt.Sprintf("%s: %d fail with %s after every %d that pass", what, r.Fail, r.Fault, r.Pass)
	}
	return fmt.Sprintf("%s: the next %d fail with %s", what, r.Fail, r.Fault)
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// RuleID names a rule added to a proxy.
type RuleID int

// RuleCount is what a rule did.
type RuleCount struct {
	ID RuleID
	// Rule says what the rule fails (Rule.String).
	Rule string
	// Matched is how many requests the rule matched, Failed how many of
	// those it failed.
	Matched, Failed int
	// Removed: the rule was removed and matches nothing more.
	Removed bool
}

// AddRule makes the proxy fail requests as r says from now on, until
// RemoveRule. It panics on a rule that could fail nothing or names an
// unknown verb or fault: a mistake in the test.
func (p *Proxy) AddRule(r Rule) RuleID {
	if r.Fault == "" {
		r.Fault = InternalError
	}
	switch {
	case r.Fail < 1 || r.Pass < 0:
		panic(fmt.Sprintf("faultproxy: rule %s fails nothing: Fail must be at least 1 and Pass not negative", r))
	case r.Verb != "" && !slices.Contains(verbs, r.Verb):
		panic(fmt.Sprintf("faultproxy: rule %s: verb %q is not one of %v", r, r.Verb, verbs))
	case !slices.Contains(All, r.Fault):
		panic(fmt.Sprintf("faultproxy: rule %s: unknown fault %q", r, r.Fault))
	}
	return p.rules.add(r)
}

// RemoveRule stops rule id from failing anything and returns what it
// did; its counts stay in Report.
func (p *Proxy) RemoveRule(id RuleID) RuleCount { return p.rules.remove(id) }

// RuleCount is what rule id did so far: the requests it matched and
// those it failed.
func (p *Proxy) RuleCount(id RuleID) RuleCount { return p.rules.count(id) }

// request is what rules match a request on.
type request struct {
	verb, resource, name string
	// body is the request's body, read only when a rule with a Body
	// predicate may match (hasBody).
	body    []byte
	hasBody bool
}

// requestOf reads the verb, resource and name of a request as the API
// server does (k8s.io/apiserver's RequestInfoFactory), for the paths the
// provisioner uses: "PUT /apis/g/v/nodeclaims/c/status" is an update of
// "nodeclaims/status" named "c". A path outside /api and /apis is its own
// resource, with the method as its verb ("get /version").
func requestOf(method, path string, query url.Values) request {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return request{verb: strings.ToLower(method), resource: path}
	}
	watch := query.Get("watch") == "true" || query.Get("watch") == "1"
	if len(parts) > 0 && parts[0] == "watch" {
		parts, watch = parts[1:], true
	}
	// A namespace's own subresources are status and finalize; anything
	// else after namespaces/x is a namespaced resource.
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:]
	}
	var req request
	switch len(parts) {
	case 0:
	case 1:
		req.resource = parts[0]
	case 2:
		req.resource, req.name = parts[0], parts[1]
	default:
		req.resource, req.name = parts[0]+"/"+parts[2], parts[1]
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		req.verb = "get"
		if watch {
			req.verb = "watch"
		} else if req.name == "" {
			req.verb = "list"
		}
	case http.MethodPost:
		req.verb = "create"
	case http.MethodPut:
		req.verb = "update"
	case http.MethodPatch:
		req.verb = "patch"
	case http.MethodDelete:
		req.verb = "delete"
		if req.name == "" {
			req.verb = "deletecollection"
		}
	default:
		req.verb = strings.ToLower(method)
	}
	return req
}

// ruleSet holds a proxy's rules and what each did.
type ruleSet struct {
	mu    sync.Mutex
	rules []*rule // in the order added; removed ones stay for the report
}

type rule struct {
	Rule
	id              RuleID
	matched, failed int
	removed         bool
}

func (r *rule) count() RuleCount {
	return RuleCount{ID: r.id, Rule: r.String(), Matched: r.matched, Failed: r.failed, Removed: r.removed}
}

// matches: the request is one the rule is about, its body aside.
func (r *rule) matches(req request) bool {
	return !r.removed && (r.Verb == "" || r.Verb == req.verb) &&
		(r.Resource == "" || r.Resource == req.resource) && (r.Name == "" || r.Name == req.name)
}

func (s *ruleSet) add(r Rule) RuleID {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := RuleID(len(s.rules) + 1)
	s.rules = append(s.rules, &rule{Rule: r, id: id})
	return id
}

func (s *ruleSet) find(id RuleID) *rule {
	if id < 1 || int(id) > len(s.rules) {
		panic(fmt.Sprintf("faultproxy: no rule %d", id))
	}
	return s.rules[id-1]
}

func (s *ruleSet) remove(id RuleID) RuleCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.find(id)
	r.removed = true
	return r.count()
}

func (s *ruleSet) count(id RuleID) RuleCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(id).count()
}

func (s *ruleSet) counts() []RuleCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RuleCount, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.count()
	}
	return out
}

// wantBody: a rule that reads bodies may match req, so its body must be
// read before choose.
func (s *ruleSet) wantBody(req request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.rules, func(r *rule) bool { return r.Body != nil && r.matches(req) })
}

// choose counts req against every rule it matches, each keeping its own
// sequence, and fails it with the fault of the oldest rule whose turn it
// is to fail one. A rule with a Body predicate added after the body was
// left unread does not match.
func (s *ruleSet) choose(req request) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fault Fault
	fail := false
	for _, r := range s.rules {
		if !r.matches(req) || (r.Body != nil && (!req.hasBody || !r.Body(req.body))) {
			continue
		}
		n := r.matched
		r.matched++
		if r.Pass > 0 {
			n = n%(r.Pass+r.Fail) - r.Pass
		}
		if n < 0 || n >= r.Fail {
			continue
		}
		r.failed++
		if !fail {
			fault, fail = r.Fault, true
		}
	}
	return fault, fail
}
