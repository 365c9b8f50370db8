package imdsfake

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/google/go-cmp/cmp"
)

// These tests drive the fake with the SDK's own IMDS client over loopback
// HTTP, and with plain HTTP where the point is what the fake refuses.

var node = Instance{
	AvailabilityZone:   "us-west-2b",
	AvailabilityZoneID: "usw2-az2",
	InstanceID:         "i-0a1b2c3d4e5f60718",
	InstanceType:       "m7i.large",
	ImageID:            "ami-0e7a1d2c3b4f50001",
	AccountID:          "111122223333",
	PrivateIP:          "10.0.16.12",
	Architecture:       "x86_64",
	PendingTime:        time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC),
}

func start(t *testing.T, inst Instance) *Server {
	t.Helper()
	s, err := New(inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// client is the SDK's client at the fake, IMDSv2 only (no fallback to v1,
// so a token the SDK cannot get is an error rather than a silent
// downgrade), retrying without waiting: DisableDefaultMaxBackoff keeps the
// client from wrapping the retryer in its own one-second backoff.
func client(s *Server) *imds.Client {
	return imds.New(imds.Options{
		Endpoint:                 s.URL(),
		EnableFallback:           sdkaws.FalseTernary,
		DisableDefaultMaxBackoff: true,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		}),
	})
}

func metadata(t *testing.T, c *imds.Client, path string) (string, error) {
	t.Helper()
	out, err := c.GetMetadata(context.Background(), &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	return string(b), err
}

// TestThroughTheSDK: GetRegion, the identity document and the placement
// metadata, each read with the session token the client fetched first.
func TestThroughTheSDK(t *testing.T) {
	ctx := context.Background()
	s := start(t, node)
	c := client(s)

	region, err := c.GetRegion(ctx, nil)
	if err != nil || region.Region != "us-west-2" {
		t.Fatalf("GetRegion = %+v, %v; want us-west-2, taken from the zone", region, err)
	}
	doc, err := c.GetInstanceIdentityDocument(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := imds.InstanceIdentityDocument{
		AvailabilityZone: "us-west-2b", PrivateIP: "10.0.16.12", Version: "2017-09-30", Region: "us-west-2",
		InstanceID: "i-0a1b2c3d4e5f60718", InstanceType: "m7i.large", AccountID: "111122223333",
		PendingTime: node.PendingTime, ImageID: "ami-0e7a1d2c3b4f50001", Architecture: "x86_64",
	}
	if diff := cmp.Diff(want, doc.InstanceIdentityDocument); diff != "" {
		t.Errorf("identity document (-want,+got):\n%s", diff)
	}
	for path, want := range map[string]string{
		"placement/region":               "us-west-2",
		"placement/availability-zone":    "us-west-2b",
		"placement/availability-zone-id": "usw2-az2",
		"instance-id":                    "i-0a1b2c3d4e5f60718",
		"instance-type":                  "m7i.large",
		"ami-id":                         "ami-0e7a1d2c3b4f50001",
		"local-ipv4":                     "10.0.16.12",
	} {
		if got, err := metadata(t, c, path); err != nil || got != want {
			t.Errorf("meta-data/%s = %q, %v; want %q", path, got, err, want)
		}
	}

	// One token for the whole session, presented on every read.
	reqs := s.Requests()
	if reqs[0].Method != http.MethodPut || reqs[0].Path != "/latest/api/token" {
		t.Fatalf("first request = %+v, want PUT /latest/api/token", reqs[0])
	}
	for _, r := range reqs[1:] {
		if r.Method != http.MethodGet || r.Token == "" || r.Token != reqs[1].Token {
			t.Errorf("request %+v: want a GET with the session's one token", r)
		}
	}

	// A path a test sets is served; a deleted one is not found.
	s.Set("meta-data/spot/instance-action", `{"action":"terminate","time":"2026-11-20T08:02:00Z"}`)
	if got, err := metadata(t, c, "spot/instance-action"); err != nil || !strings.Contains(got, "terminate") {
		t.Errorf("spot/instance-action = %q, %v", got, err)
	}
	s.Delete("meta-data/spot/instance-action")
	if _, err := metadata(t, c, "spot/instance-action"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a deleted path = %v, want a 404", err)
	}
}

// TestLoadDefaultConfig: config.WithEC2IMDSRegion, with the SDK's IMDS
// client pointed at the fake, resolves the region from the instance when
// nothing else names one.
func TestLoadDefaultConfig(t *testing.T) {
	s := start(t, Instance{Region: "eu-central-1"})
	// Nothing else may name a region: no environment, no shared config.
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithEC2IMDSRegion(func(o *config.UseEC2IMDSRegion) {
		o.Client = imds.New(imds.Options{Endpoint: s.URL()})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "eu-central-1" {
		t.Errorf("cfg.Region = %q, want eu-central-1 from the fake", cfg.Region)
	}
	if len(s.Requests()) < 2 {
		t.Errorf("requests = %+v, want a token and the identity document", s.Requests())
	}
}

// TestTokens: reads without a token, with one the fake did not issue, or
// with an expired one are 401; a token is only given for a PUT with a TTL
// from 1 to 21600 seconds, whose answer echoes it.
func TestTokens(t *testing.T) {
	s := start(t, node)
	var mu sync.Mutex
	now := time.Now()
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	do := func(method, path string, header map[string]string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, s.URL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	const region = "/latest/meta-data/placement/region"

	for _, tc := range []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"no TTL", http.MethodPut, nil, http.StatusBadRequest},
		{"a TTL of 0", http.MethodPut, map[string]string{TokenTTLHeader: "0"}, http.StatusBadRequest},
		{"a TTL over six hours", http.MethodPut, map[string]string{TokenTTLHeader: "21601"}, http.StatusBadRequest},
		{"a GET", http.MethodGet, map[string]string{TokenTTLHeader: "60"}, http.StatusMethodNotAllowed},
	} {
		if code, _, _ := do(tc.method, "/latest/api/token", tc.header); code != tc.want {
			t.Errorf("token with %s = %d, want %d", tc.name, code, tc.want)
		}
	}

	code, token, h := do(http.MethodPut, "/latest/api/token", map[string]string{TokenTTLHeader: "60"})
	if code != http.StatusOK || token == "" || h.Get(TokenTTLHeader) != "60" {
		t.Fatalf("PUT token = %d %q, TTL header %q; want 200, a token, 60", code, token, h.Get(TokenTTLHeader))
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"without a token", nil, http.StatusUnauthorized},
		{"with a token not issued", map[string]string{TokenHeader: "made-up"}, http.StatusUnauthorized},
		{"with the token", map[string]string{TokenHeader: token}, http.StatusOK},
	} {
		if code, _, _ := do(http.MethodGet, region, tc.header); code != tc.want {
			t.Errorf("GET %s %s = %d, want %d", region, tc.name, code, tc.want)
		}
	}
	if code, body, _ := do(http.MethodGet, "/latest/dynamic/instance-identity/document", map[string]string{TokenHeader: token}); code != http.StatusOK || !strings.Contains(body, `"region": "us-west-2"`) {
		t.Errorf("document = %d %s", code, body)
	}
	if code, _, _ := do(http.MethodGet, "/latest/meta-data/nothing-here", map[string]string{TokenHeader: token}); code != http.StatusNotFound {
		t.Errorf("an unknown path = %d, want 404", code)
	}
	advance(61 * time.Second)
	if code, _, _ := do(http.MethodGet, region, map[string]string{TokenHeader: token}); code != http.StatusUnauthorized {
		t.Errorf("GET with a token past its TTL = %d, want 401", code)
	}
}

// TestRetries: a revoked token makes the SDK fetch a new one and read
// again; a 503 on the document is retried; a fault past the retryer
// reaches the caller.
func TestRetries(t *testing.T) {
	ctx := context.Background()
	s := start(t, node)
	c := client(s)
	if _, err := c.GetRegion(ctx, nil); err != nil {
		t.Fatal(err)
	}
	puts := func() int {
		n := 0
		for _, r := range s.Requests() {
			if r.Method == http.MethodPut {
				n++
			}
		}
		return n
	}

	s.RevokeTokens()
	if r, err := c.GetRegion(ctx, nil); err != nil || r.Region != "us-west-2" {
		t.Fatalf("GetRegion after the tokens were revoked = %+v, %v", r, err)
	}
	if puts() != 2 {
		t.Errorf("%d tokens fetched, want 2: the 401 makes the SDK fetch another", puts())
	}

	before := len(s.Requests())
	s.FailNext("/latest/dynamic/instance-identity/document", 2, http.StatusServiceUnavailable)
	if r, err := c.GetRegion(ctx, nil); err != nil || r.Region != "us-west-2" {
		t.Errorf("GetRegion through two 503s = %+v, %v; want the SDK to retry", r, err)
	}
	if n := len(s.Requests()) - before; n != 3 {
		t.Errorf("%d requests, want 3: two failed and one answered", n)
	}

	s.FailNext("", 5, http.StatusInternalServerError)
	if _, err := c.GetRegion(ctx, nil); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("GetRegion past the retryer = %v, want the 500", err)
	}
}

// TestNew: the region comes from the zone, or the zone from the region;
// an instance with neither is refused.
func TestNew(t *testing.T) {
	s := start(t, Instance{Region: "ap-south-1"})
	if got, err := metadata(t, client(s), "placement/availability-zone"); err != nil || got != "ap-south-1a" {
		t.Errorf("zone = %q, %v; want ap-south-1a", got, err)
	}
	if _, err := New(Instance{}); err == nil {
		t.Error("New of an instance without a region or zone succeeded")
	}
}
