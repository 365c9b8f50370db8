package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
)

// priceListServer speaks the part of the AWS Price List Service's JSON 1.1
// protocol that GetProducts uses, as documented in the GetProducts API
// reference and in the SDK's own request and response snapshots
// (service/pricing/request_snapshot/GetProducts.request.snap): a POST to /
// with X-Amz-Target: AWSPriceListService.GetProducts and Content-Type
// application/x-amz-json-1.1, a JSON body with ServiceCode, FormatVersion,
// Filters, MaxResults and NextToken, and a JSON answer with FormatVersion,
// NextToken and PriceList, an array of JSON documents as strings. Errors
// come back as {"__type": "...", "message": "..."} with a 4xx status.
type priceListServer struct {
	t *testing.T
	// pages are the PriceList entries of each page: the first answers a
	// call without NextToken, page n a call with NextToken "page-n".
	pages [][]string
	// failPage, if non-zero, is the 1-based page answered with failure.
	failPage   int
	failStatus int
	failBody   string
	mu         sync.Mutex
	// requests are the first attempts at each call, in order. Retries are
	// only counted: the SDK (smithy-go v1.28.8) closes a request's body as
	// soon as the response headers arrive, and when net/http has not yet
	// made its final read of that body, the closed body's WriteTo answers
	// io.EOF as an error, so the transport drops the connection under the
	// response being read. The default retryer sends the call again; the
	// race is rare on a real network but shows on loopback.
	requests    []getProductsRequest
	retries     int
	badRequests []string
}

type getProductsRequest struct {
	ServiceCode   string
	FormatVersion string
	MaxResults    int
	NextToken     string
	Filters       []struct{ Field, Type, Value string }
}

func (s *priceListServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(format string, args ...any) {
		s.mu.Lock()
		s.badRequests = append(s.badRequests, fmt.Sprintf(format, args...))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"__type":"InvalidParameterException","message":"test server refused the request"}`)
	}
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		fail("%s %s, want POST /", r.Method, r.URL.Path)
		return
	}
	if got := r.Header.Get("X-Amz-Target"); got != "AWSPriceListService.GetProducts" {
		fail("X-Amz-Target %q", got)
		return
	}
	if got := r.Header.Get("Content-Type"); got != "application/x-amz-json-1.1" {
		fail("Content-Type %q", got)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=a/") {
		fail("Authorization %q, want a SigV4 signature with access key a", r.Header.Get("Authorization"))
		return
	}
	var req getProductsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail("body: %v", err)
		return
	}
	s.mu.Lock()
	// The SDK numbers its attempts at a call in this header, e.g.
	// "attempt=1; max=3".
	if strings.HasPrefix(r.Header.Get("Amz-Sdk-Request"), "attempt=1;") {
		s.requests = append(s.requests, req)
	} else {
		s.retries++
	}
	s.mu.Unlock()

	page := 1
	if req.NextToken != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(req.NextToken, "page-"))
		if err != nil || n < 1 || n > len(s.pages) {
			fail("NextToken %q", req.NextToken)
			return
		}
		page = n
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if page == s.failPage {
		w.WriteHeader(s.failStatus)
		io.WriteString(w, s.failBody)
		return
	}
	resp := map[string]any{"FormatVersion": "aws_v1", "PriceList": []string{}}
	if page <= len(s.pages) {
		resp["PriceList"] = s.pages[page-1]
	}
	if page < len(s.pages) {
		resp["NextToken"] = "page-" + strconv.Itoa(page+1)
	}
	body, err := json.Marshal(resp)
	if err != nil {
		s.t.Errorf("writing response: %v", err)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// start serves s on loopback and returns a real SDK client aimed at it.
func (s *priceListServer) start(t *testing.T) *awspricing.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return awspricing.New(awspricing.Options{
		Region:       "us-east-1",
		BaseEndpoint: sdkaws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("a", "b", ""),
	})
}

// instanceDoc writes a PriceList document for an instance type's on-demand
// hourly price in the shape of testdata/m5.large-us-east-1.json.
func instanceDoc(t *testing.T, region, instanceType, os, usd string) string {
	t.Helper()
	sku := strings.ToUpper(strings.ReplaceAll(instanceType, ".", "")) + "SKU"
	doc := map[string]any{
		"product": map[string]any{
			"productFamily": "Compute Instance",
			"sku":           sku,
			"attributes": map[string]string{
				"servicecode":     "AmazonEC2",
				"regionCode":      region,
				"instanceType":    instanceType,
				"operatingSystem": os,
				"tenancy":         "Shared",
				"preInstalledSw":  "NA",
				"licenseModel":    "No License required",
				"capacitystatus":  "Used",
				"marketoption":    "OnDemand",
			},
		},
		"serviceCode": "AmazonEC2",
		"terms": map[string]any{
			"OnDemand": map[string]any{
				sku + ".JRTCKXETXF": map[string]any{
					"offerTermCode": "JRTCKXETXF",
					"priceDimensions": map[string]any{
						sku + ".JRTCKXETXF.6YS6EN2CT7": map[string]any{
							"unit":         "Hrs",
							"pricePerUnit": map[string]string{"USD": usd},
						},
					},
				},
			},
		},
		"version":         "20261101000000",
		"publicationDate": "2026-11-01T00:00:00Z",
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// smallTable has two regions so a test can see that refreshing one leaves
// the other alone.
func smallTable(t *testing.T) *Table {
	t.Helper()
	table, err := Parse([]byte(`{"source":"test","version":"v0","generated":"2026-01-02","currency":"USD","regions":{
		"us-east-1":{"m5.large":0.096,"c5.large":0.085,"t2.nano":0.0058},
		"eu-west-1":{"m5.large":0.107}}}`))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func TestRefreshThroughTheSDK(t *testing.T) {
	type lookup struct {
		region, instanceType string
		price                float64
		ok                   bool
	}
	accessDenied := `{"__type":"AccessDeniedException","message":"User: arn:aws:iam::123456789012:user/test is not authorized to perform: pricing:GetProducts"}`
	unchanged := []lookup{
		{"us-east-1", "m5.large", 0.096, true},
		{"us-east-1", "c5.large", 0.085, true},
		{"us-east-1", "t2.nano", 0.0058, true},
		{"us-east-1", "m7i.large", 0, false},
		{"eu-west-1", "m5.large", 0.107, true},
	}
	tests := []struct {
		name string
		// pages get filled by the test with documents for us-east-1.
		pages       func(t *testing.T) [][]string
		failPage    int
		failStatus  int
		failBody    string
		wantUpdated int
		wantErr     func(error) bool
		wantPages   int
		want        []lookup
	}{
		{
			name: "every page is read and a changed price replaces the shipped one",
			pages: func(t *testing.T) [][]string {
				return [][]string{
					{instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.1000000000"), instanceDoc(t, "us-east-1", "c5.large", "Linux", "0.0850000000")},
					// A document the server should have filtered out is
					// skipped, not taken for the Linux price.
					{instanceDoc(t, "us-east-1", "m5.large", "Windows", "0.1880000000"), instanceDoc(t, "us-east-1", "t2.nano", "Linux", "0.0058000000")},
					{instanceDoc(t, "us-east-1", "m7i.large", "Linux", "0.1008000000")},
				}
			},
			// m5.large changed and m7i.large is new.
			wantUpdated: 2,
			wantPages:   3,
			want: []lookup{
				{"us-east-1", "m5.large", 0.1, true},
				{"us-east-1", "c5.large", 0.085, true},
				{"us-east-1", "t2.nano", 0.0058, true},
				{"us-east-1", "m7i.large", 0.1008, true},
				{"eu-west-1", "m5.large", 0.107, true},
			},
		},
		{
			name: "an access denied answer leaves the table unchanged",
			pages: func(t *testing.T) [][]string {
				return [][]string{{instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.2")}}
			},
			failPage:   1,
			failStatus: http.StatusBadRequest,
			failBody:   accessDenied,
			wantErr: func(err error) bool {
				var denied *pricingtypes.AccessDeniedException
				return errors.As(err, &denied) && strings.Contains(denied.ErrorMessage(), "not authorized")
			},
			wantPages: 1,
			want:      unchanged,
		},
		{
			name: "a failure on a later page leaves the table unchanged",
			pages: func(t *testing.T) [][]string {
				return [][]string{
					{instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.2")},
					{instanceDoc(t, "us-east-1", "c5.large", "Linux", "0.2")},
				}
			},
			failPage:   2,
			failStatus: http.StatusBadRequest,
			failBody:   `{"__type":"InvalidNextTokenException","message":"The pagination token is invalid."}`,
			wantErr: func(err error) bool {
				var invalid *pricingtypes.InvalidNextTokenException
				return errors.As(err, &invalid)
			},
			wantPages: 2,
			want:      unchanged,
		},
		{
			name:      "an empty price list leaves the table unchanged",
			pages:     func(t *testing.T) [][]string { return [][]string{{}} },
			wantErr:   func(err error) bool { return errors.Is(err, ErrImplausible) },
			wantPages: 1,
			want:      unchanged,
		},
		{
			name: "a list much shorter than the table's leaves the table unchanged",
			pages: func(t *testing.T) [][]string {
				return [][]string{{instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.2")}}
			},
			wantErr:   func(err error) bool { return errors.Is(err, ErrImplausible) },
			wantPages: 1,
			want:      unchanged,
		},
		{
			name: "an unreadable document leaves the table unchanged",
			pages: func(t *testing.T) [][]string {
				return [][]string{{instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.2"), "{not json"}}
			},
			wantErr: func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "decoding price list document")
			},
			wantPages: 1,
			want:      unchanged,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &priceListServer{t: t, pages: tt.pages(t), failPage: tt.failPage, failStatus: tt.failStatus, failBody: tt.failBody}
			client := srv.start(t)
			table := smallTable(t)
			sourceBefore := table.Source()

			updated, err := table.Refresh(context.Background(), client, "us-east-1")

			if tt.wantErr == nil && err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if tt.wantErr != nil && !tt.wantErr(err) {
				t.Fatalf("Refresh error = %v, not the one expected", err)
			}
			if updated != tt.wantUpdated {
				t.Errorf("Refresh updated %d, want %d", updated, tt.wantUpdated)
			}
			for _, l := range tt.want {
				if price, ok := table.OnDemand(l.region, l.instanceType); price != l.price || ok != l.ok {
					t.Errorf("OnDemand(%s, %s) = %v, %v; want %v, %v", l.region, l.instanceType, price, ok, l.price, l.ok)
				}
			}
			if tt.wantErr != nil {
				if got := table.Source(); got != sourceBefore {
					t.Errorf("Source() after a failed refresh = %q, want %q", got, sourceBefore)
				}
			} else if got := table.Source(); !strings.HasPrefix(got, sourceBefore+"; refreshed from the AWS Pricing API: us-east-1 at ") {
				t.Errorf("Source() after a refresh = %q", got)
			}

			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.badRequests) > 0 {
				t.Errorf("the server refused requests: %v", srv.badRequests)
			}
			if len(srv.requests) != tt.wantPages {
				t.Errorf("the server saw %d calls, want %d", len(srv.requests), tt.wantPages)
			}
			if srv.retries > 0 {
				t.Logf("the SDK retried %d times", srv.retries)
			}
			for i, req := range srv.requests {
				checkRequest(t, req, "us-east-1")
				wantToken := ""
				if i > 0 {
					wantToken = "page-" + strconv.Itoa(i+1)
				}
				if req.NextToken != wantToken {
					t.Errorf("request %d has NextToken %q, want %q", i+1, req.NextToken, wantToken)
				}
			}
		})
	}
}

// checkRequest checks that a GetProducts request asks for what the package
// documents: EC2, format aws_v1, full pages, and the product filters.
func checkRequest(t *testing.T, req getProductsRequest, region string) {
	t.Helper()
	if req.ServiceCode != "AmazonEC2" || req.FormatVersion != "aws_v1" || req.MaxResults != 100 {
		t.Errorf("request asks for ServiceCode %q, FormatVersion %q, MaxResults %d", req.ServiceCode, req.FormatVersion, req.MaxResults)
	}
	want := map[string]string{
		"regionCode":      region,
		"operatingSystem": "Linux",
		"tenancy":         "Shared",
		"preInstalledSw":  "NA",
		"capacitystatus":  "Used",
		"licenseModel":    "No License required",
		"marketoption":    "OnDemand",
	}
	got := map[string]string{}
	for _, f := range req.Filters {
		if f.Type != "TERM_MATCH" {
			t.Errorf("filter on %s has type %q, want TERM_MATCH", f.Field, f.Type)
		}
		got[f.Field] = f.Value
	}
	for field, value := range want {
		if got[field] != value {
			t.Errorf("filter %s = %q, want %q", field, got[field], value)
		}
	}
	if len(got) != len(want) {
		t.Errorf("filters %v, want exactly %v", got, want)
	}
}

func TestRefreshOfANewRegion(t *testing.T) {
	// A region the shipped table lacks gets its figures on the first
	// successful refresh, whatever their number.
	srv := &priceListServer{t: t, pages: [][]string{{instanceDoc(t, "eu-south-2", "m5.large", "Linux", "0.1130000000")}}}
	client := srv.start(t)
	table := smallTable(t)
	if _, ok := table.OnDemand("eu-south-2", "m5.large"); ok {
		t.Fatal("eu-south-2 is in the table before the refresh")
	}
	updated, err := table.Refresh(context.Background(), client, "eu-south-2")
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if updated != 1 {
		t.Errorf("Refresh updated %d, want 1", updated)
	}
	if price, ok := table.OnDemand("eu-south-2", "m5.large"); !ok || price != 0.113 {
		t.Errorf("OnDemand(eu-south-2, m5.large) = %v, %v; want 0.113, true", price, ok)
	}
	// Documents for another region, which a server ignoring the regionCode
	// filter would send, are not taken.
	if _, ok := table.OnDemand("us-east-1", "m7i.large"); ok {
		t.Error("a refresh of eu-south-2 added prices to us-east-1")
	}
}

func TestRefreshOfTheShippedTableKeepsUnchangedPrices(t *testing.T) {
	// Feeding the shipped us-east-1 figures back through the SDK changes
	// nothing: the parse of a full-size answer agrees with the table.
	table, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	var page []string
	var pages [][]string
	table.mu.RLock()
	for instanceType, price := range table.prices["us-east-1"] {
		page = append(page, instanceDoc(t, "us-east-1", instanceType, "Linux", strconv.FormatFloat(price, 'f', 10, 64)))
		if len(page) == 100 {
			pages = append(pages, page)
			page = nil
		}
	}
	want := len(table.prices["us-east-1"])
	table.mu.RUnlock()
	if len(page) > 0 {
		pages = append(pages, page)
	}
	srv := &priceListServer{t: t, pages: pages}
	updated, err := table.Refresh(context.Background(), srv.start(t), "us-east-1")
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if updated != 0 {
		t.Errorf("Refresh updated %d prices, want 0", updated)
	}
	if len(srv.requests) != len(pages) {
		t.Errorf("the server saw %d calls for %d pages", len(srv.requests), len(pages))
	}
	if got := len(table.prices["us-east-1"]); got != want {
		t.Errorf("us-east-1 has %d prices after the refresh, want %d", got, want)
	}
}
