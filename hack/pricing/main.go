// Command pricing writes the EC2 on-demand price table that the AWS cloud
// provider ships (provisioner/cloudprovider/aws/pricing/ondemand.json).
// Run it from the repository root:
//
//	go run ./hack/pricing
//
// By default it reads the figures the Karpenter AWS provider publishes in its
// Go module (github.com/aws/karpenter-provider-aws, generated there from the
// AWS Pricing API), fetched through `go mod download`, so it needs nothing
// but the Go module proxy. With -source=pricing-api it asks the AWS Pricing
// API itself, with the default AWS credential chain.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	"k8s.io/klog/v2"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

const (
	sourceKarpenter  = "karpenter"
	sourcePricingAPI = "pricing-api"

	// maxFileSize is where the table stops being "reasonably small" for a
	// file compiled into every provisioner binary.
	maxFileSize = 1536 << 10
)

// defaultAPIRegions are what -source=pricing-api fetches when -regions is
// not given: every commercial region (pricing.CommercialRegions, the AWS
// region table as the package records it) and the two GovCloud regions,
// whose prices the aws partition's Price List also holds and which can
// never refresh at run time (no Pricing API in GovCloud). A cluster in a
// region the file lacks prices by a stand-in until its refresh answers, so
// every region belongs in the file. China is left out: its prices are CNY.
func defaultAPIRegions() []string {
	return append(pricing.CommercialRegions(), "us-gov-east-1", "us-gov-west-1")
}

// options are the command line, plus seams for tests.
type options struct {
	source    string
	version   string
	regions   []string
	out       string
	apiRegion string

	now func() time.Time
	// download fetches a module; goModDownload unless a test says otherwise.
	download func(ctx context.Context, path, version string) (moduleInfo, error)
	// api is the Pricing API client; built from the default credential
	// chain unless a test says otherwise.
	api pricing.API
}

func main() {
	klog.InitFlags(nil)
	o := options{now: time.Now, download: goModDownload}
	var regions string
	flag.StringVar(&o.source, "source", sourceKarpenter, `where the figures come from: "karpenter" (the table published in the Karpenter AWS provider's module, through the Go module proxy) or "pricing-api" (the AWS Pricing API, with the default AWS credential chain)`)
	flag.StringVar(&o.version, "version", defaultKarpenterVersion, `version of github.com/aws/karpenter-provider-aws to read figures from (-source=karpenter); "latest" works too`)
	flag.StringVar(&regions, "regions", "", "comma-separated regions to keep (default: every region the Karpenter table has; for -source=pricing-api, every commercial region and GovCloud: "+strings.Join(defaultAPIRegions(), ",")+")")
	flag.StringVar(&o.out, "out", filepath.FromSlash("provisioner/cloudprovider/aws/pricing/ondemand.json"), "file to write")
	flag.StringVar(&o.apiRegion, "api-region", "us-east-1", "region of the Pricing API endpoint (-source=pricing-api); the API is served from us-east-1, eu-central-1 and ap-south-1")
	flag.Parse()
	if flag.NArg() > 0 {
		klog.ErrorS(nil, "Unexpected arguments", "args", flag.Args())
		os.Exit(2)
	}
	o.regions = splitList(regions)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "Generating the on-demand price table failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// run builds the table from the chosen source and writes it.
func run(ctx context.Context, o options) error {
	var (
		f   *pricing.File
		err error
	)
	switch o.source {
	case sourceKarpenter:
		f, err = fromKarpenter(ctx, o)
	case sourcePricingAPI:
		f, err = fromPricingAPI(ctx, o)
	default:
		return fmt.Errorf("unknown -source %q: want %q or %q", o.source, sourceKarpenter, sourcePricingAPI)
	}
	if err != nil {
		return err
	}
	f.Generated = o.now().UTC().Format(time.DateOnly)
	f.Currency = pricing.Currency
	data, err := f.Encode()
	if err != nil {
		return err
	}
	if len(data) > maxFileSize {
		// Not fatal: the operator asked for these regions. But the file is
		// compiled into every binary, so say so.
		klog.InfoS("The price table is large; consider fewer -regions", "bytes", len(data), "limit", maxFileSize)
	}
	if err := writeFileAtomic(o.out, data); err != nil {
		return err
	}
	if missing := missingCommercial(f); len(missing) > 0 {
		// Not fatal (the Karpenter source has us-east-1 only), but a
		// cluster in one of these regions runs on a stand-in's prices
		// until its Pricing API refresh answers.
		klog.InfoS("The table lacks commercial regions; -source=pricing-api fetches them all", "missing", missing)
	}
	types := 0
	for _, prices := range f.Regions {
		types += len(prices)
	}
	klog.InfoS("Wrote the on-demand price table", "path", o.out, "bytes", len(data), "source", f.Source, "version", f.Version, "regions", len(f.Regions), "prices", types)
	return nil
}

// fromPricingAPI asks the AWS Pricing API for each region's prices.
func fromPricingAPI(ctx context.Context, o options) (*pricing.File, error) {
	api := o.api
	if api == nil {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(o.apiRegion))
		if err != nil {
			return nil, fmt.Errorf("loading AWS configuration: %w", err)
		}
		api = awspricing.NewFromConfig(cfg)
	}
	regions := o.regions
	if len(regions) == 0 {
		regions = defaultAPIRegions()
		klog.InfoS("No -regions given; fetching every commercial region and GovCloud", "regions", regions)
	}
	for _, region := range regions {
		if c := pricing.CurrencyOf(region); c != pricing.Currency {
			return nil, fmt.Errorf("region %s is priced in %s; the shipped table holds %s only", region, c, pricing.Currency)
		}
	}
	f := &pricing.File{
		Source:     sourcePricingAPI,
		Version:    "GetProducts aws_v1",
		PricesAsOf: map[string]string{},
		Regions:    map[string]map[string]float64{},
	}
	for _, region := range regions {
		prices, err := pricing.FetchOnDemand(ctx, api, region)
		if err != nil {
			return nil, err
		}
		f.Regions[region] = prices
		f.PricesAsOf[region] = o.now().UTC().Format(time.RFC3339)
		klog.InfoS("Fetched on-demand prices", "region", region, "instanceTypes", len(prices))
	}
	return f, nil
}

// missingCommercial lists the commercial regions f has no prices for.
func missingCommercial(f *pricing.File) []string {
	var missing []string
	for _, r := range pricing.CommercialRegions() {
		if _, ok := f.Regions[r]; !ok {
			missing = append(missing, r)
		}
	}
	return missing
}

// keepRegions narrows f to the wanted regions, all of which must be there:
// a region silently missing from the shipped table would go unnoticed until
// a cluster there priced every type as unknown.
func keepRegions(f *pricing.File, wanted []string) error {
	if len(wanted) == 0 {
		return nil
	}
	var missing []string
	kept := map[string]map[string]float64{}
	for _, r := range wanted {
		prices, ok := f.Regions[r]
		if !ok {
			missing = append(missing, r)
			continue
		}
		kept[r] = prices
	}
	if len(missing) > 0 {
		have := make([]string, 0, len(f.Regions))
		for r := range f.Regions {
			have = append(have, r)
		}
		slices.Sort(have)
		return fmt.Errorf("the source has no prices for %s (it has %s)", strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	for r := range f.PricesAsOf {
		if _, ok := kept[r]; !ok {
			delete(f.PricesAsOf, r)
		}
	}
	f.Regions = kept
	return nil
}

// writeFileAtomic replaces path with data through a temporary file in the
// same directory, so an interrupted run never leaves half a table behind.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("writing %s (run from the repository root, or pass -out): %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".ondemand-*.json")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// splitList splits a comma-separated flag, dropping blanks and duplicates.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part != "" && !slices.Contains(out, part) {
			out = append(out, part)
		}
	}
	return out
}
