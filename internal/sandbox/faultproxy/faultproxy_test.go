package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestProxyFailsTheShareAskedAndAppliesWhatItTimesOut: of 400 writes with
// half failed, about half are, each way; a write timed out after it was
// applied reached the server, the others did not; reads pass.
func TestProxyFailsTheShareAskedAndAppliesWhatItTimesOut(t *testing.T) {
	var applied atomic.Int64
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			applied.Add(1)
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := New(u, upstream.Client().Transport.(*http.Transport).TLSClientConfig, Config{WriteShare: 0.5, Hold: 10 * time.Millisecond, Seed: 1})
	front := httptest.NewTLSServer(p)
	defer front.Close()
	client := front.Client()
	client.Timeout = 5 * time.Second
	seen := map[string]int{}
	const writes = 400
	for range writes {
		resp, err := client.Post(front.URL+"/api/v1/namespaces/default/pods/web/eviction", "application/json", strings.NewReader(`{}`))
		switch {
		case err != nil:
			seen["error"]++
		default:
			seen[resp.Status]++
			_ = resp.Body.Close()
		}
	}
	for range 50 {
		resp, err := client.Get(front.URL + "/api/v1/nodes")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a read failed (%s) with ReadShare 0", resp.Status)
		}
	}
	r := p.Report()
	if r.Writes != writes || r.Reads != 50 {
		t.Errorf("counted %d writes and %d reads, want %d and 50", r.Writes, r.Reads, writes)
	}
	if total := r.Total(); total < writes*4/10 || total > writes*6/10 {
		t.Errorf("%d of %d writes failed, want about half", total, writes)
	}
	for _, f := range All {
		if r.Injected[f] < writes/16 {
			t.Errorf("fault %s injected %d times of %d, want about an eighth", f, r.Injected[f], writes)
		}
	}
	if seen["429 Too Many Requests"] != r.Injected[TooManyRequests] || seen["500 Internal Server Error"] != r.Injected[InternalError] {
		t.Errorf("client saw %v; proxy injected %v", seen, r.Injected)
	}
	if seen["error"] != r.Injected[Drop]+r.Injected[TimeoutAfterApply] {
		t.Errorf("client saw %d broken connections; proxy dropped %d and timed out %d", seen["error"], r.Injected[Drop], r.Injected[TimeoutAfterApply])
	}
	if want := int64(writes - r.Injected[TooManyRequests] - r.Injected[InternalError] - r.Injected[Drop]); applied.Load() != want {
		t.Errorf("server applied %d writes, want %d: every write but those refused or dropped before it", applied.Load(), want)
	}
	if r.WritesFailed["POST pods/eviction"] != r.Total() {
		t.Errorf("writes failed by resource %v, want all on POST pods/eviction", r.WritesFailed)
	}
}
