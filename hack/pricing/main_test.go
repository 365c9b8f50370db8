package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/google/go-cmp/cmp"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

func TestParseKarpenterTable(t *testing.T) {
	src, err := os.ReadFile("testdata/zz_generated.pricing_aws.go")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseKarpenterTable("zz_generated.pricing_aws.go", src)
	if err != nil {
		t.Fatalf("parseKarpenterTable: %v", err)
	}
	want := karpenterTable{
		asOf: "2026-01-02T03:04:05Z",
		regions: map[string]map[string]float64{
			"us-east-1": {"m5.large": 0.096, "m5.xlarge": 0.192, "t4g.nano": 0.0042, "x9.metal": 12},
			"eu-west-1": {"m5.large": 0.107},
		},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(karpenterTable{})); diff != "" {
		t.Errorf("parseKarpenterTable (-want +got):\n%s", diff)
	}
}

func TestParseKarpenterTableRefusesWhatItDoesNotUnderstand(t *testing.T) {
	const header = "package pricing\n\nimport ec2types \"github.com/aws/aws-sdk-go-v2/service/ec2/types\"\n\n"
	tests := []struct {
		name    string
		src     string
		wantErr string
	}{
		{
			name:    "a file with no price map is refused",
			src:     header + "var x = 1\n",
			wantErr: "found 0",
		},
		{
			name: "a file with two price maps is refused",
			src: header + `var A = map[string]map[ec2types.InstanceType]float64{"r": {"t": 1}}
var B = map[string]map[ec2types.InstanceType]float64{"r": {"t": 1}}
`,
			wantErr: "found 2",
		},
		{
			name:    "a price that is a named constant is refused",
			src:     header + "const p = 0.1\nvar A = map[string]map[ec2types.InstanceType]float64{\"r\": {\"t\": p}}\n",
			wantErr: "want a number literal",
		},
		{
			name:    "a price that is an expression is refused",
			src:     header + "var A = map[string]map[ec2types.InstanceType]float64{\"r\": {\"t\": -0.1}}\n",
			wantErr: "want a number literal",
		},
		{
			name:    "an instance type that is a constant is refused",
			src:     header + "var A = map[string]map[ec2types.InstanceType]float64{\"r\": {ec2types.InstanceTypeM5Large: 0.1}}\n",
			wantErr: "want a string literal",
		},
		{
			name:    "a region listed twice is refused",
			src:     header + "var A = map[string]map[ec2types.InstanceType]float64{\"r\": {\"t\": 0.1}, \"r\": {\"u\": 0.1}}\n",
			wantErr: "region r twice",
		},
		{
			name:    "an empty map is refused",
			src:     header + "var A = map[string]map[ec2types.InstanceType]float64{}\n",
			wantErr: "empty",
		},
		{
			name:    "a generated-at comment with a bad time is refused",
			src:     "package pricing\n\n// generated at yesterday for us-east-1\n\nvar A = map[string]map[string]float64{\"r\": {\"t\": 0.1}}\n",
			wantErr: "generated-at",
		},
		{
			name:    "source that is not Go is refused",
			src:     "this is not Go",
			wantErr: "parsing",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseKarpenterTable("x.go", []byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseKarpenterTable error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeModuleInfo(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    moduleInfo
		wantErr string
	}{
		{
			name: "a clean download names the directory",
			out:  `{"Path":"example.com/m","Version":"v1.0.0","Dir":"/cache/example.com/m@v1.0.0","Zip":"/cache/m.zip"}`,
			want: moduleInfo{Path: "example.com/m", Version: "v1.0.0", Dir: "/cache/example.com/m@v1.0.0", Zip: "/cache/m.zip"},
		},
		{
			// What go1.26.8 prints for karpenter-provider-aws@v1.15.1,
			// which asks for go 1.26.10: the zip is there, the Dir is not.
			name: "a complaint about the go version still names the zip",
			out:  `{"Path":"example.com/m","Version":"v1.0.0","Error":"example.com/m@v1.0.0 requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)","Zip":"/cache/m.zip"}`,
			want: moduleInfo{Path: "example.com/m", Version: "v1.0.0", Error: "example.com/m@v1.0.0 requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)", Zip: "/cache/m.zip"},
		},
		{
			name:    "an unknown version is an error",
			out:     `{"Path":"example.com/m","Version":"v9.9.9","Error":"unknown revision v9.9.9"}`,
			wantErr: "unknown revision",
		},
		{
			name:    "no output is an error",
			out:     ``,
			wantErr: "reading its output",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeModuleInfo([]byte(tt.out))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("decodeModuleInfo error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeModuleInfo: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decodeModuleInfo (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeModule lays the testdata tables out as the Karpenter module would
// have them, both as an extracted directory and as a module zip.
func fakeModule(t *testing.T) (dir, zipPath string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "dir")
	zipPath = filepath.Join(root, "module.zip")
	zf, err := os.Create(zipPath)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	for _, name := range karpenterFiles {
		src, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join(dir, filepath.FromSlash(karpenterPricingDir), name)
		if err := os.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rel, src, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(karpenterModule + "@v0.0.1/" + karpenterPricingDir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(src); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, zipPath
}

func TestReadModuleFile(t *testing.T) {
	dir, zipPath := fakeModule(t)
	want, err := os.ReadFile("testdata/zz_generated.pricing_aws.go")
	if err != nil {
		t.Fatal(err)
	}
	rel := karpenterPricingDir + "/zz_generated.pricing_aws.go"
	tests := []struct {
		name    string
		mod     moduleInfo
		rel     string
		wantErr error
	}{
		{name: "a file is read from the extracted directory", mod: moduleInfo{Path: karpenterModule, Version: "v0.0.1", Dir: dir, Zip: zipPath}, rel: rel},
		{name: "a file is read from the zip when there is no directory", mod: moduleInfo{Path: karpenterModule, Version: "v0.0.1", Zip: zipPath}, rel: rel},
		{name: "a file missing from the zip is an error", mod: moduleInfo{Path: karpenterModule, Version: "v0.0.1", Zip: zipPath}, rel: "nope.go", wantErr: os.ErrNotExist},
		{name: "a file missing from the directory is an error", mod: moduleInfo{Path: karpenterModule, Version: "v0.0.1", Dir: dir}, rel: "nope.go", wantErr: os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readModuleFile(tt.mod, tt.rel)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("readModuleFile error = %v, want one wrapping %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readModuleFile: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("readModuleFile returned %d bytes, not the file's %d", len(got), len(want))
			}
		})
	}
}

func TestRunFromKarpenter(t *testing.T) {
	_, zipPath := fakeModule(t)
	now := func() time.Time { return time.Date(2026, 3, 4, 23, 59, 0, 0, time.FixedZone("UTC-5", -5*3600)) }
	download := func(_ context.Context, path, version string) (moduleInfo, error) {
		if path != karpenterModule || version != "v0.0.1" {
			t.Errorf("download(%s, %s), want %s@v0.0.1", path, version, karpenterModule)
		}
		// As the go command answers for a module that asks for a newer
		// go: an Error, and the zip but no Dir.
		return moduleInfo{Path: path, Version: version, Error: "requires go >= 1.99", Zip: zipPath}, nil
	}
	tests := []struct {
		name    string
		regions []string
		want    string
		wantErr string
	}{
		{
			name: "every region of both files is written, sorted, with its date",
			want: `{
  "source": "github.com/aws/karpenter-provider-aws",
  "version": "v0.0.1",
  "generated": "2026-03-05",
  "pricesAsOf": {
    "eu-west-1": "2026-01-02T03:04:05Z",
    "us-east-1": "2026-01-02T03:04:05Z",
    "us-gov-west-1": "2026-02-03T04:05:06Z"
  },
  "currency": "USD",
  "regions": {
    "eu-west-1": {
      "m5.large": 0.107
    },
    "us-east-1": {
      "m5.large": 0.096,
      "m5.xlarge": 0.192,
      "t4g.nano": 0.0042,
      "x9.metal": 12
    },
    "us-gov-west-1": {
      "m5.large": 0.121
    }
  }
}
`,
		},
		{
			name:    "-regions keeps only the regions asked for",
			regions: []string{"us-gov-west-1"},
			want: `{
  "source": "github.com/aws/karpenter-provider-aws",
  "version": "v0.0.1",
  "generated": "2026-03-05",
  "pricesAsOf": {
    "us-gov-west-1": "2026-02-03T04:05:06Z"
  },
  "currency": "USD",
  "regions": {
    "us-gov-west-1": {
      "m5.large": 0.121
    }
  }
}
`,
		},
		{
			name:    "a region the source lacks is an error, not a silent gap",
			regions: []string{"us-east-1", "ap-east-2"},
			wantErr: "no prices for ap-east-2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ondemand.json")
			o := options{source: sourceKarpenter, version: "v0.0.1", regions: tt.regions, out: out, now: now, download: download}
			err := run(context.Background(), o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("run error = %v, want one containing %q", err, tt.wantErr)
				}
				if _, statErr := os.Stat(out); !errors.Is(statErr, os.ErrNotExist) {
					t.Errorf("a failed run left %s behind", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("ondemand.json (-want +got):\n%s", diff)
			}
			// The output is a table the pricing package accepts, and the
			// same run writes the same bytes.
			if _, err := pricing.Parse(got); err != nil {
				t.Errorf("pricing.Parse of the output: %v", err)
			}
			if err := run(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			again, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, again) {
				t.Error("a second run wrote different bytes")
			}
		})
	}
}

// fakePricingAPI answers GetProducts in process with one product per region
// it knows, as the AWS Pricing API would after filtering by regionCode.
type fakePricingAPI struct {
	prices map[string]map[string]string
}

func (f fakePricingAPI) GetProducts(_ context.Context, in *awspricing.GetProductsInput, _ ...func(*awspricing.Options)) (*awspricing.GetProductsOutput, error) {
	var region string
	for _, filter := range in.Filters {
		if sdkaws.ToString(filter.Field) == "regionCode" {
			region = sdkaws.ToString(filter.Value)
		}
	}
	var docs []string
	for instanceType, usd := range f.prices[region] {
		doc, err := json.Marshal(map[string]any{
			"product": map[string]any{"attributes": map[string]string{"instanceType": instanceType, "regionCode": region, "operatingSystem": "Linux"}},
			"terms": map[string]any{"OnDemand": map[string]any{"S.T": map[string]any{
				"priceDimensions": map[string]any{"S.T.R": map[string]any{"unit": "Hrs", "pricePerUnit": map[string]string{"USD": usd}}},
			}}},
		})
		if err != nil {
			return nil, err
		}
		docs = append(docs, string(doc))
	}
	return &awspricing.GetProductsOutput{FormatVersion: sdkaws.String("aws_v1"), PriceList: docs}, nil
}

func TestRunFromPricingAPI(t *testing.T) {
	api := fakePricingAPI{prices: map[string]map[string]string{
		"us-east-1": {"m5.large": "0.0960000000"},
		"eu-west-1": {"m5.large": "0.1070000000", "c5.large": "0.0960000000"},
	}}
	now := func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	out := filepath.Join(t.TempDir(), "ondemand.json")
	o := options{source: sourcePricingAPI, regions: []string{"us-east-1", "eu-west-1"}, out: out, now: now, api: api}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("run: %v", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pricing.DecodeFile(data)
	if err != nil {
		t.Fatal(err)
	}
	want := &pricing.File{
		Source:     "pricing-api",
		Version:    "GetProducts aws_v1",
		Generated:  "2026-03-04",
		PricesAsOf: map[string]string{"us-east-1": "2026-03-04T05:06:07Z", "eu-west-1": "2026-03-04T05:06:07Z"},
		Currency:   "USD",
		Regions: map[string]map[string]float64{
			"us-east-1": {"m5.large": 0.096},
			"eu-west-1": {"m5.large": 0.107, "c5.large": 0.096},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ondemand.json (-want +got):\n%s", diff)
	}

	// A region the API has nothing for fails the run rather than ship a
	// table without it.
	o.regions = []string{"us-east-1", "ap-east-2"}
	if err := run(context.Background(), o); !errors.Is(err, pricing.ErrImplausible) {
		t.Errorf("run with a region the API lacks: error %v, want one wrapping ErrImplausible", err)
	}
}

func TestRunRefusesAnUnknownSource(t *testing.T) {
	err := run(context.Background(), options{source: "guesswork", now: time.Now})
	if err == nil || !strings.Contains(err.Error(), `unknown -source "guesswork"`) {
		t.Errorf("run error = %v", err)
	}
}

func TestGoModDownloadUsesTheModuleCache(t *testing.T) {
	// The real go command, kept off the network: with GOPROXY=off it can
	// only answer from the module cache, so the test skips where the
	// Karpenter module has never been downloaded.
	if testing.Short() {
		t.Skip("runs the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	mod, err := goModDownloadEnv(context.Background(), karpenterModule, defaultKarpenterVersion, []string{"GOPROXY=off"})
	if err != nil {
		t.Skipf("%s@%s is not in the module cache: %v", karpenterModule, defaultKarpenterVersion, err)
	}
	if mod.Path != karpenterModule || mod.Version != defaultKarpenterVersion {
		t.Errorf("go mod download answered for %s@%s", mod.Path, mod.Version)
	}
	src, err := readModuleFile(mod, karpenterPricingDir+"/"+karpenterFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	table, err := parseKarpenterTable(karpenterFiles[0], src)
	if err != nil {
		t.Fatal(err)
	}
	if got := table.regions["us-east-1"]["m5.large"]; got != 0.096 {
		t.Errorf("m5.large in us-east-1 costs %v upstream, want 0.096", got)
	}
}

// TestRunFromPricingAPIFetchesEveryCommercialRegion: without -regions the
// table gets every commercial region and GovCloud, so no cluster's region
// is left to a stand-in; China, priced in CNY, is refused.
func TestRunFromPricingAPIFetchesEveryCommercialRegion(t *testing.T) {
	api := fakePricingAPI{prices: map[string]map[string]string{}}
	want := append(pricing.CommercialRegions(), "us-gov-east-1", "us-gov-west-1")
	for _, r := range want {
		api.prices[r] = map[string]string{"m5.large": "0.1"}
	}
	now := func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	out := filepath.Join(t.TempDir(), "ondemand.json")
	o := options{source: sourcePricingAPI, out: out, now: now, api: api}
	if err := run(context.Background(), o); err != nil {
		t.Fatalf("run: %v", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	table, err := pricing.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	got := table.Regions()
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("regions (-want +got):\n%s", diff)
	}
	for _, r := range []string{"us-east-1", "eu-south-2", "ap-southeast-4", "il-central-1", "mx-central-1"} {
		if !slices.Contains(got, r) {
			t.Errorf("the table lacks %s", r)
		}
	}

	o.regions = []string{"us-east-1", "cn-north-1"}
	if err := run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "CNY") {
		t.Errorf("run with a China region: error %v, want a refusal naming CNY", err)
	}
}
