package faultproxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	claims = "/apis/nodeforge.dev/v1alpha1/nodeclaims"
	claim  = claims + "/c1"
	nodes  = "/api/v1/nodes"
)

// apiServer stands in for kube-apiserver: it answers every request 200 and
// records what reached it.
type apiServer struct {
	mu   sync.Mutex
	seen []string // "METHOD path body"
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.seen = append(a.seen, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
	a.mu.Unlock()
	_, _ = io.WriteString(w, `{}`)
}

func (a *apiServer) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// startProxy runs a proxy with cfg in front of an apiServer, and returns
// a function that sends one request through it and answers its status
// code, 0 for a broken connection.
func startProxy(t *testing.T, cfg Config) (*Proxy, *apiServer, func(method, path, body string) int) {
	t.Helper()
	api := &apiServer{}
	upstream := httptest.NewTLSServer(api)
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	if cfg.Hold == 0 {
		cfg.Hold = 10 * time.Millisecond
	}
	p := New(u, upstream.Client().Transport.(*http.Transport).TLSClientConfig, cfg)
	front := httptest.NewTLSServer(p)
	t.Cleanup(front.Close)
	client := front.Client()
	client.Timeout = 5 * time.Second
	send := func(method, path, body string) int {
		req, err := http.NewRequest(method, front.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	return p, api, send
}

// TestRuleFailsTheNextMatchingRequests: "the next 7 patches of
// nodeclaims fail" fails the first 7 of 10 such patches and nothing else:
// not updates or gets of the claim, nor patches of its status or of
// nodes.
func TestRuleFailsTheNextMatchingRequests(t *testing.T) {
	p, api, send := startProxy(t, Config{})
	id := p.AddRule(Rule{Resource: "nodeclaims", Verb: "patch", Fail: 7})
	var failed []string
	sent := 0
	for i := range 10 {
		for _, r := range [][2]string{{"PATCH", claim}, {"PUT", claim}, {"PATCH", claim + "/status"}, {"PATCH", nodes + "/n1"}, {"GET", claim}, {"GET", claims}, {"POST", claims}} {
			sent++
			if code := send(r[0], r[1], `{}`); code != http.StatusOK {
				failed = append(failed, fmt.Sprintf("%d: %s %s %d", i, r[0], r[1], code))
			}
		}
	}
	var want []string
	for i := range 7 {
		want = append(want, fmt.Sprintf("%d: PATCH %s 500", i, claim))
	}
	if diff := cmp.Diff(want, failed); diff != "" {
		t.Errorf("requests failed (-want,+got):\n%s", diff)
	}
	if got := len(api.received()); got != sent-7 {
		t.Errorf("the API server received %d requests, want %d: all but the 7 failed", got, sent-7)
	}
	wantCount := RuleCount{ID: id, Rule: "patch nodeclaims: the next 7 fail with 500", Matched: 10, Failed: 7}
	if diff := cmp.Diff(wantCount, p.RuleCount(id)); diff != "" {
		t.Errorf("rule count (-want,+got):\n%s", diff)
	}
	r := p.Report()
	if diff := cmp.Diff(Report{Reads: 20, Writes: 50, Injected: map[Fault]int{InternalError: 7},
		WritesFailed: map[string]int{"PATCH nodeclaims": 7}, Rules: []RuleCount{wantCount}}, r); diff != "" {
		t.Errorf("report (-want,+got):\n%s", diff)
	}
}

// TestRuleFailsBursts: with Pass 3 and Fail 2, node updates go pass,
// pass, pass, fail, fail, over and over, with the rule's fault (a 429
// with Retry-After); node reads between them are not counted.
func TestRuleFailsBursts(t *testing.T) {
	p, _, send := startProxy(t, Config{})
	id := p.AddRule(Rule{Resource: "nodes", Verb: "update", Pass: 3, Fail: 2, Fault: TooManyRequests})
	var got strings.Builder
	for range 15 {
		switch send("PUT", nodes+"/n1", `{}`) {
		case http.StatusOK:
			got.WriteString(".")
		case http.StatusTooManyRequests:
			got.WriteString("x")
		default:
			got.WriteString("?")
		}
		if code := send("GET", nodes+"/n1", ""); code != http.StatusOK {
			t.Errorf("a node read failed with %d", code)
		}
	}
	if want := "...xx...xx...xx"; got.String() != want {
		t.Errorf("node updates went %s, want %s (. passed, x failed with 429)", got.String(), want)
	}
	if c := p.RuleCount(id); c.Matched != 15 || c.Failed != 6 {
		t.Errorf("rule matched %d and failed %d, want 15 and 6", c.Matched, c.Failed)
	}
}

// TestRuleBody: a rule on the body fails only the writes it describes,
// a claim's status update that sets phase Disrupting and the taint of
// node n2, and every write that passes reaches the API server with its
// body unchanged.
func TestRuleBody(t *testing.T) {
	p, api, send := startProxy(t, Config{})
	disrupting := p.AddRule(Rule{Resource: "nodeclaims/status", Verb: "update", Body: Contains(`"phase":"Disrupting"`), Fail: 1})
	taint := p.AddRule(Rule{Resource: "nodes", Verb: "update", Name: "n2", Body: Contains(`"key":"nodeforge.dev/disrupted"`), Fail: 1})
	const (
		initialized = `{"status":{"phase":"Initialized"}}`
		disrupted   = `{"status":{"phase":"Disrupting"}}`
		tainted     = `{"spec":{"taints":[{"key":"nodeforge.dev/disrupted","effect":"NoSchedule"}]}}`
	)
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"PUT", claim + "/status", initialized, http.StatusOK},
		{"PUT", claim, disrupted, http.StatusOK},               // not the status
		{"PATCH", claim + "/status", disrupted, http.StatusOK}, // not an update
		{"PUT", claim + "/status", disrupted, http.StatusInternalServerError},
		{"PUT", claim + "/status", disrupted, http.StatusOK}, // the rule is spent
		{"PUT", nodes + "/n1", tainted, http.StatusOK},       // another node
		{"PUT", nodes + "/n2", `{"spec":{}}`, http.StatusOK},
		{"PUT", nodes + "/n2", tainted, http.StatusInternalServerError},
	} {
		if got := send(c.method, c.path, c.body); got != c.want {
			t.Errorf("%s %s %s: %d, want %d", c.method, c.path, c.body, got, c.want)
		}
	}
	want := []string{
		"PUT " + claim + "/status " + initialized,
		"PUT " + claim + " " + disrupted,
		"PATCH " + claim + "/status " + disrupted,
		"PUT " + claim + "/status " + disrupted,
		"PUT " + nodes + "/n1 " + tainted,
		"PUT " + nodes + "/n2 " + `{"spec":{}}`,
	}
	if diff := cmp.Diff(want, api.received()); diff != "" {
		t.Errorf("the API server received (-want,+got):\n%s", diff)
	}
	for id, want := range map[RuleID][2]int{disrupting: {2, 1}, taint: {1, 1}} {
		if c := p.RuleCount(id); c.Matched != want[0] || c.Failed != want[1] {
			t.Errorf("rule %s matched %d and failed %d, want %d and %d", c.Rule, c.Matched, c.Failed, want[0], want[1])
		}
	}
}

// TestRemoveRule: a rule removed fails nothing more, and the report keeps
// what it did.
func TestRemoveRule(t *testing.T) {
	p, _, send := startProxy(t, Config{})
	id := p.AddRule(Rule{Resource: "nodes", Verb: "get", Fail: 100, Fault: Drop})
	for range 3 {
		if code := send("GET", nodes+"/n1", ""); code != 0 {
			t.Errorf("a node read under the rule answered %d, want a dropped connection", code)
		}
	}
	gone := p.RemoveRule(id)
	for range 3 {
		if code := send("GET", nodes+"/n1", ""); code != http.StatusOK {
			t.Errorf("a node read after the rule was removed answered %d", code)
		}
	}
	want := RuleCount{ID: id, Rule: "get nodes: the next 100 fail with drop", Matched: 3, Failed: 3, Removed: true}
	if diff := cmp.Diff(want, gone); diff != "" {
		t.Errorf("RemoveRule (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]RuleCount{want}, p.Report().Rules); diff != "" {
		t.Errorf("report's rules (-want,+got):\n%s", diff)
	}
}

// TestRulesConcurrently: 8 clients create 200 pods at once while a
// quarter of writes fail at random with 500 and rules come and go on
// nodes: the rule on pods fails exactly 50 with its 429, whatever the
// random share chose for them, and every count adds up.
func TestRulesConcurrently(t *testing.T) {
	p, api, send := startProxy(t, Config{WriteShare: 0.25, Faults: []Fault{InternalError}, Seed: 2})
	id := p.AddRule(Rule{Resource: "pods", Verb: "create", Fail: 50, Fault: TooManyRequests})
	const clients, each = 8, 25
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
		done  = make(chan struct{})
	)
	for range clients {
		wg.Go(func() {
			for range each {
				code := send("POST", "/api/v1/namespaces/default/pods", `{}`)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	churn := make(chan struct{})
	go func() {
		defer close(churn)
		for {
			select {
			case <-done:
				return
			default:
			}
			other := p.AddRule(Rule{Resource: "nodes", Fail: 1})
			_ = p.Report()
			p.RemoveRule(other)
		}
	}()
	wg.Wait()
	close(done)
	<-churn

	r := p.Report()
	if codes[http.StatusTooManyRequests] != 50 {
		t.Errorf("%d creates answered 429, want the rule's 50", codes[http.StatusTooManyRequests])
	}
	if codes[http.StatusInternalServerError] != r.Injected[InternalError] || codes[http.StatusOK]+codes[http.StatusInternalServerError]+50 != clients*each {
		t.Errorf("clients saw %v; proxy injected %v", codes, r.Injected)
	}
	if c := p.RuleCount(id); c.Matched != clients*each || c.Failed != 50 {
		t.Errorf("rule matched %d and failed %d, want %d and 50", c.Matched, c.Failed, clients*each)
	}
	if got := len(api.received()); got != codes[http.StatusOK] {
		t.Errorf("the API server received %d creates, want the %d answered 200", got, codes[http.StatusOK])
	}
}

func TestRequestOf(t *testing.T) {
	for _, c := range []struct {
		method, url string
		want        request
	}{
		{"GET", "/api/v1/nodes", request{verb: "list", resource: "nodes"}},
		{"GET", "/api/v1/nodes/n1", request{verb: "get", resource: "nodes", name: "n1"}},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=7", request{verb: "watch", resource: "pods"}},
		{"GET", "/api/v1/watch/namespaces/x/pods", request{verb: "watch", resource: "pods"}},
		{"POST", "/api/v1/namespaces/default/pods/web/eviction", request{verb: "create", resource: "pods/eviction", name: "web"}},
		{"POST", "/api/v1/namespaces/default/events", request{verb: "create", resource: "events"}},
		{"PUT", claim + "/status", request{verb: "update", resource: "nodeclaims/status", name: "c1"}},
		{"PATCH", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", request{verb: "patch", resource: "leases", name: "l"}},
		{"DELETE", "/api/v1/namespaces/x/pods", request{verb: "deletecollection", resource: "pods"}},
		{"DELETE", "/api/v1/namespaces/x", request{verb: "delete", resource: "namespaces", name: "x"}},
		{"PUT", "/api/v1/namespaces/x/finalize", request{verb: "update", resource: "namespaces/finalize", name: "x"}},
		{"GET", "/version", request{verb: "get", resource: "/version"}},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, requestOf(c.method, u.Path, u.Query()), cmp.AllowUnexported(request{})); diff != "" {
			t.Errorf("%s %s (-want,+got):\n%s", c.method, c.url, diff)
		}
	}
}
