// Package faultproxy is a reverse proxy, on loopback, between a client and
// kube-apiserver that fails a share of the client's requests the way a
// production control plane does on a bad day: API priority and fairness
// answering 429, an internal error (500), a connection dropped before the
// request reached the server, and a timeout after the server applied a
// write (the client sees an error though the change is made). The sandbox
// puts it in front of the provisioner (sandbox.Options.ProvisionerFaults)
// so that tests can prove every disruption finishes or is undone under
// such faults. Beside that random share, rules (Rule) fail chosen
// requests, by resource, verb, name and body, a number in a row: what a
// test needs to reach a path that random faults reach too rarely.
package faultproxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is one way a request fails.
type Fault string

// The faults the proxy injects.
const (
	// TooManyRequests: 429 with Retry-After 1, as API priority and
	// fairness answers when a flow's queue is full. Nothing is applied.
	TooManyRequests Fault = "429"
	// InternalError: 500, as when etcd or a webhook fails. Nothing is
	// applied.
	InternalError Fault = "500"
	// Drop: the connection (or HTTP/2 stream) is closed before the
	// request is forwarded. Nothing is applied.
	Drop Fault = "drop"
	// TimeoutAfterApply: the request is forwarded and applied, then its
	// answer is held for Config.Hold and the stream closed: the client
	// sees a timeout for a write that was made. Reads chosen for it are
	// dropped instead.
	TimeoutAfterApply Fault = "timeoutAfterApply"
)

// All are every fault.
var All = []Fault{TooManyRequests, InternalError, Drop, TimeoutAfterApply}

// Config says which requests fail, and how.
type Config struct {
	// WriteShare is the share of writes (POST, PUT, PATCH, DELETE) that
	// fail, from 0 to 1.
	WriteShare float64
	// ReadShare is the share of reads (GET, including watches) that fail.
	ReadShare float64
	// Faults are chosen among evenly; empty means All.
	Faults []Fault
	// Hold is how long a TimeoutAfterApply answer is held before its
	// stream is closed (default 2s).
	Hold time.Duration
	// Seed makes the choice of failed requests repeatable.
	Seed uint64
	// Except: requests whose path contains one of these are never failed
	// at random (rules still apply).
	Except []string
}

// String says what the proxy injects, for a test's log and report.
func (c Config) String() string {
	faults := c.Faults
	if len(faults) == 0 {
		faults = All
	}
	names := make([]string, len(faults))
	for i, f := range faults {
		names[i] = string(f)
	}
	return fmt.Sprintf("%.1f%% of writes and %.1f%% of reads failed with %s", 100*c.WriteShare, 100*c.ReadShare, strings.Join(names, ", "))
}

// Proxy forwards requests to an API server and fails some of them.
type Proxy struct {
	cfg   Config
	proxy *httputil.ReverseProxy
	rules ruleSet

	mu       sync.Mutex
	rng      *rand.Rand
	reads    int
	writes   int
	injected map[Fault]int
	// writesFailed counts injected faults on writes, by verb and
	// resource ("PATCH nodes"), for the report.
	writesFailed map[string]int
}

// New returns a proxy to upstream (https), reached with upstreamTLS (the
// client's own certificate, so the API server sees the same identity).
func New(upstream *url.URL, upstreamTLS *tls.Config, cfg Config) *Proxy {
	if len(cfg.Faults) == 0 {
		cfg.Faults = All
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 2 * time.Second
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = &http.Transport{TLSClientConfig: upstreamTLS, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	rp.FlushInterval = -1 // watches stream
	// A client gone or a stream reset is what this proxy is for: not news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return &Proxy{cfg: cfg, proxy: rp, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		injected: map[Fault]int{}, writesFailed: map[string]int{}}
}

// Config is what the proxy was made with.
func (p *Proxy) Config() Config { return p.cfg }

func isWrite(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete
}

// choose decides whether r fails, and how: by a rule, or else by the
// random share.
func (p *Proxy) choose(r *http.Request, req request) (Fault, bool) {
	f, fail := p.rules.choose(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	write := isWrite(r.Method)
	share := p.cfg.ReadShare
	if write {
		p.writes++
		share = p.cfg.WriteShare
	} else {
		p.reads++
	}
	if !fail {
		if share <= 0 || slices.ContainsFunc(p.cfg.Except, func(s string) bool { return strings.Contains(r.URL.Path, s) }) {
			return "", false
		}
		if p.rng.Float64() >= share {
			return "", false
		}
		f = p.cfg.Faults[p.rng.IntN(len(p.cfg.Faults))]
	}
	if f == TimeoutAfterApply && !write {
		// A read applies nothing, and a watch held would stream into
		// nothing for minutes: cut it instead.
		f = Drop
	}
	p.injected[f]++
	if write {
		p.writesFailed[r.Method+" "+req.resource]++
	}
	return f, true
}

// ServeHTTP forwards the request, or fails it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := requestOf(r.Method, r.URL.Path, r.URL.Query())
	if p.rules.wantBody(req) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			panic(http.ErrAbortHandler) // the client is gone
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		req.body, req.hasBody = body, true
	}
	f, fail := p.choose(r, req)
	if !fail {
		p.proxy.ServeHTTP(w, r)
		return
	}
	switch f {
	case TooManyRequests:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by faultproxy: too many requests, please try again later","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}`)
	case InternalError:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by faultproxy: internal error","reason":"InternalError","code":500}`)
	case Drop:
		panic(http.ErrAbortHandler)
	case TimeoutAfterApply:
		p.proxy.ServeHTTP(discard{header: http.Header{}}, r)
		select {
		case <-r.Context().Done():
		case <-time.After(p.cfg.Hold):
		}
		panic(http.ErrAbortHandler)
	}
}

// discard is a ResponseWriter that keeps nothing: the answer the client
// never gets.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// Report is what the proxy saw and did.
type Report struct {
	Reads, Writes int
	Injected      map[Fault]int
	// WritesFailed: injected faults on writes by verb and resource.
	WritesFailed map[string]int
	// Rules: what each rule added did, removed ones included, in the
	// order added. Injected and WritesFailed count their failures too.
	Rules []RuleCount
}

// Total is how many requests were failed.
func (r Report) Total() int {
	n := 0
	for _, v := range r.Injected {
		n += v
	}
	return n
}

// Report returns the counts so far.
func (p *Proxy) Report() Report {
	rules := p.rules.counts()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Report{Reads: p.reads, Writes: p.writes, Injected: map[Fault]int{}, WritesFailed: map[string]int{}, Rules: rules}
	for k, v := range p.injected {
		out.Injected[k] = v
	}
	for k, v := range p.writesFailed {
		out.WritesFailed[k] = v
	}
	return out
}
