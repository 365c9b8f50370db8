package pricing

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestShippedTable(t *testing.T) {
	table, err := Shipped()
	if err != nil {
		t.Fatalf("Shipped: %v", err)
	}
	tests := []struct {
		name         string
		region       string
		instanceType string
		wantPrice    float64
		wantOK       bool
	}{
		// Figures from github.com/aws/karpenter-provider-aws@v1.15.1,
		// pkg/providers/pricing/zz_generated.pricing_aws*.go.
		{name: "m5.large in us-east-1 costs 9.6 cents an hour", region: "us-east-1", instanceType: "m5.large", wantPrice: 0.096, wantOK: true},
		{name: "a price with four decimals survives", region: "us-east-1", instanceType: "c6g.metal", wantPrice: 2.3066, wantOK: true},
		{name: "GovCloud has figures of its own", region: "us-gov-west-1", instanceType: "m5.large", wantPrice: 0.121, wantOK: true},
		{name: "an unknown instance type is not found", region: "us-east-1", instanceType: "m99.huge", wantOK: false},
		{name: "an unknown region is not found", region: "mars-north-1", instanceType: "m5.large", wantOK: false},
		{name: "the China regions are left out because their prices are in yuan", region: "cn-north-1", instanceType: "m5.large", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			price, ok := table.OnDemand(tt.region, tt.instanceType)
			if ok != tt.wantOK || price != tt.wantPrice {
				t.Errorf("OnDemand(%q, %q) = %v, %v; want %v, %v", tt.region, tt.instanceType, price, ok, tt.wantPrice, tt.wantOK)
			}
		})
	}
	if got, want := table.Source(), "github.com/aws/karpenter-provider-aws@v1.15.1, generated "; !strings.HasPrefix(got, want) {
		t.Errorf("Source() = %q, want it to start with %q", got, want)
	}
	if diff := cmp.Diff([]string{"us-east-1", "us-gov-east-1", "us-gov-west-1"}, table.Regions()); diff != "" {
		t.Errorf("Regions() (-want +got):\n%s", diff)
	}
}

func TestShippedTablesAreIndependent(t *testing.T) {
	a, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	fresh := map[string]float64{}
	for _, r := range a.Regions() {
		if r != "us-east-1" {
			continue
		}
		for it, p := range a.prices[r] {
			fresh[it] = p * 2
		}
	}
	if _, err := a.replaceRegion("us-east-1", fresh, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.OnDemand("us-east-1", "m5.large"); got != 0.096 {
		t.Errorf("refreshing one shipped table changed another: m5.large costs %v", got)
	}
}

func TestShippedFileIsCanonical(t *testing.T) {
	// The generator writes the file with Encode; a hand edit that does not
	// round-trip (unsorted keys, a float spelled differently) shows here.
	data, err := os.ReadFile("ondemand.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFile(data)
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Errorf("ondemand.json is not what Encode writes for its own contents; regenerate it with go run ./hack/pricing")
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr string
		wantIs  error
	}{
		{
			name: "a well-formed table parses",
			json: `{"source":"s","version":"v1","generated":"2026-01-02","currency":"USD","regions":{"r":{"t.large":0.5}}}`,
		},
		{
			name:    "a table without a source is refused",
			json:    `{"currency":"USD","regions":{"r":{"t.large":0.5}}}`,
			wantErr: "no source",
		},
		{
			name:    "a table in another currency is refused",
			json:    `{"source":"s","currency":"CNY","regions":{"r":{"t.large":0.5}}}`,
			wantErr: `"CNY"`,
		},
		{
			name:   "a table with no regions is refused",
			json:   `{"source":"s","currency":"USD","regions":{}}`,
			wantIs: ErrImplausible,
		},
		{
			name:   "a region with no prices is refused",
			json:   `{"source":"s","currency":"USD","regions":{"r":{}}}`,
			wantIs: ErrImplausible,
		},
		{
			name:   "a free instance is refused",
			json:   `{"source":"s","currency":"USD","regions":{"r":{"t.large":0}}}`,
			wantIs: ErrImplausible,
		},
		{
			name:   "a negative price is refused",
			json:   `{"source":"s","currency":"USD","regions":{"r":{"t.large":-1}}}`,
			wantIs: ErrImplausible,
		},
		{
			name:    "malformed JSON is refused",
			json:    `{"source":`,
			wantErr: "decoding price table",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := Parse([]byte(tt.json))
			switch {
			case tt.wantErr == "" && tt.wantIs == nil:
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if got, ok := table.OnDemand("r", "t.large"); !ok || got != 0.5 {
					t.Errorf("OnDemand = %v, %v; want 0.5, true", got, ok)
				}
				if got, want := table.Source(), "s@v1, generated 2026-01-02"; got != want {
					t.Errorf("Source() = %q, want %q", got, want)
				}
			case err == nil:
				t.Fatalf("Parse succeeded, want an error")
			case tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Errorf("Parse error %v, want one wrapping %v", err, tt.wantIs)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("Parse error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestInstanceTypesAreTheRegionsPricedTypesSorted(t *testing.T) {
	table, err := Parse([]byte(`{"source":"s","currency":"USD","regions":{"r":{"m5.large":0.096,"c5.large":0.085},"q":{"t3.nano":0.0052}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c5.large", "m5.large"}, table.InstanceTypes("r")); diff != "" {
		t.Errorf("InstanceTypes(r) (-want +got):\n%s", diff)
	}
	if got := table.InstanceTypes("nowhere"); len(got) != 0 {
		t.Errorf("InstanceTypes(nowhere) = %v, want none", got)
	}
}

func TestEncodeIsDeterministic(t *testing.T) {
	// Computed at run time, not folded as an exact constant, so that the
	// float is the one that prints as 0.30000000000000004.
	tenth := 0.1
	f := &File{
		Source:     "s",
		Version:    "v1",
		Generated:  "2026-01-02",
		PricesAsOf: map[string]string{"b": "2026-01-01T00:00:00Z", "a": "2026-01-01T00:00:00Z"},
		Currency:   Currency,
		Regions: map[string]map[string]float64{
			"b": {"z.large": 1.5, "a.large": tenth + 0.2, "m.large": 0.0255},
			"a": {"x.large": 12, "c.large": 0.000123},
		},
	}
	first, err := f.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := f.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("Encode is not deterministic:\n%s\n%s", first, again)
		}
	}
	want := `{
  "source": "s",
  "version": "v1",
  "generated": "2026-01-02",
  "pricesAsOf": {
    "a": "2026-01-01T00:00:00Z",
    "b": "2026-01-01T00:00:00Z"
  },
  "currency": "USD",
  "regions": {
    "a": {
      "c.large": 0.000123,
      "x.large": 12
    },
    "b": {
      "a.large": 0.30000000000000004,
      "m.large": 0.0255,
      "z.large": 1.5
    }
  }
}
`
	if diff := cmp.Diff(want, string(first)); diff != "" {
		t.Errorf("Encode (-want +got):\n%s", diff)
	}
}

func TestConcurrentLookupsAndRefreshes(t *testing.T) {
	// Meant for -race: lookups, Source and region swaps at once.
	table, err := Parse([]byte(`{"source":"s","currency":"USD","regions":{"r":{"t.large":0.5}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				if i%2 == 0 {
					if _, err := table.replaceRegion("r", map[string]float64{"t.large": float64(j + 1)}, time.Now()); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if _, ok := table.OnDemand("r", "t.large"); !ok {
					t.Error("t.large vanished during a refresh")
					return
				}
				_ = table.Source()
				_ = table.Regions()
			}
		})
	}
	wg.Wait()
}

func TestParsePriceListDocument(t *testing.T) {
	handWritten, err := os.ReadFile("testdata/m5.large-us-east-1.json")
	if err != nil {
		t.Fatal(err)
	}
	// doc builds a small document around one OnDemand price dimension.
	doc := func(unit, usd string) string {
		return `{"product":{"attributes":{"instanceType":"t3.micro","operatingSystem":"Linux"}},` +
			`"terms":{"OnDemand":{"S.T":{"priceDimensions":{"S.T.R":{"unit":"` + unit + `","pricePerUnit":{"USD":"` + usd + `"}}}}}}}`
	}
	tests := []struct {
		name             string
		doc              string
		wantInstanceType string
		wantPrice        float64
		wantUsable       bool
		wantErr          bool
		wantIs           error
	}{
		{
			name:             "the on-demand price is read and the reserved one ignored",
			doc:              string(handWritten),
			wantInstanceType: "m5.large",
			wantPrice:        0.096,
			wantUsable:       true,
		},
		{
			name:             "a small document with an hourly price is usable",
			doc:              doc("Hrs", "0.0104000000"),
			wantInstanceType: "t3.micro",
			wantPrice:        0.0104,
			wantUsable:       true,
		},
		{
			name:             "a price per something other than hours is ignored",
			doc:              doc("GB-Mo", "0.1380000000"),
			wantInstanceType: "t3.micro",
		},
		{
			name:             "a zero price is ignored",
			doc:              doc("Hrs", "0.0000000000"),
			wantInstanceType: "t3.micro",
		},
		{
			name:    "a price that is not a number is an error",
			doc:     doc("Hrs", "cheap"),
			wantErr: true,
			wantIs:  strconv.ErrSyntax,
		},
		{
			name:    "an absurd price is an error",
			doc:     doc("Hrs", "123456.0"),
			wantErr: true,
			wantIs:  ErrImplausible,
		},
		{
			name:      "a product that is not an instance is not usable",
			wantPrice: 0.1,
			doc:       `{"product":{"productFamily":"Storage","attributes":{"volumeType":"Provisioned IOPS"}},"terms":{"OnDemand":{"S.T":{"priceDimensions":{"S.T.R":{"unit":"Hrs","pricePerUnit":{"USD":"0.1"}}}}}}}`,
		},
		{
			name:    "a document that is not JSON is an error",
			doc:     `not json`,
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePriceListDocument(tt.doc, Currency)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parsePriceListDocument = %+v, want an error", got)
				}
				if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
					t.Errorf("error %v, want one wrapping %v", err, tt.wantIs)
				}
				return
			}
			if err != nil {
				t.Fatalf("parsePriceListDocument: %v", err)
			}
			if got.instanceType != tt.wantInstanceType || got.price != tt.wantPrice {
				t.Errorf("got %s at %v, want %s at %v", got.instanceType, got.price, tt.wantInstanceType, tt.wantPrice)
			}
			if usable := got.usable(productFilters("us-east-1")); usable != tt.wantUsable {
				t.Errorf("usable = %v, want %v", usable, tt.wantUsable)
			}
		})
	}
}

func TestOfferMatchesFilters(t *testing.T) {
	base := map[string]string{
		"instanceType": "m5.large", "regionCode": "us-east-1", "operatingSystem": "Linux",
		"tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
		"licenseModel": "No License required", "marketoption": "OnDemand",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for key, val := range base {
			m[key] = val
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name       string
		attributes map[string]string
		want       bool
	}{
		{name: "a product matching every filter is usable", attributes: base, want: true},
		{name: "a product in another region is not", attributes: with("regionCode", "eu-west-1")},
		{name: "a Windows product is not", attributes: with("operatingSystem", "Windows")},
		{name: "a dedicated product is not", attributes: with("tenancy", "Dedicated")},
		{name: "an unused reservation is not", attributes: with("capacitystatus", "UnusedCapacityReservation")},
		{name: "a capacity block is not", attributes: with("marketoption", "CapacityBlock")},
		{name: "a product with SQL Server installed is not", attributes: with("preInstalledSw", "SQL Std")},
		{name: "case does not matter, as with TERM_MATCH", attributes: with("operatingSystem", "linux"), want: true},
		{name: "an attribute the document lacks is not held against it", attributes: with("marketoption", ""), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := offer{instanceType: "m5.large", attributes: tt.attributes, price: 0.096}
			if got := o.usable(productFilters("us-east-1")); got != tt.want {
				t.Errorf("usable = %v, want %v", got, tt.want)
			}
		})
	}
}
