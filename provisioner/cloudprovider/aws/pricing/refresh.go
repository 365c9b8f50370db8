package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
	"k8s.io/klog/v2"
)

// API is the part of the AWS Pricing API client that Refresh uses;
// *github.com/aws/aws-sdk-go-v2/service/pricing.Client satisfies it. Mind
// that the Pricing API is served from a few regions only, whatever
// region's prices are asked for (QueryAPIRegion), and not at all in
// GovCloud or the ISO partitions.
type API interface {
	GetProducts(ctx context.Context, params *awspricing.GetProductsInput, optFns ...func(*awspricing.Options)) (*awspricing.GetProductsOutput, error)
}

const (
	// serviceCode and formatVersion are the values the GetProducts API
	// reference documents for EC2 and for the only format there is.
	serviceCode   = "AmazonEC2"
	formatVersion = "aws_v1"
	// pageSize is the largest MaxResults GetProducts accepts (1–100, per
	// the API reference).
	pageSize = 100
	// maxPages bounds the walk through NextToken: a region has about a
	// thousand products that match, so this is far more than enough, and a
	// server handing out tokens forever cannot keep us here.
	maxPages = 500
	// hourlyUnit is the unit of an on-demand instance's price dimension.
	hourlyUnit = "Hrs"
)

// productFilters select Linux, shared-tenancy, on-demand instance hours
// with no pre-installed software or licence, in the one region whose
// products we want. Field names are Price List attribute names; the same
// attributes appear under product.attributes in every document, and
// matchesFilters checks them there as well, so a server that ignored a
// filter cannot slip, say, Windows prices in.
//
// capacitystatus=Used leaves out the "UnusedCapacityReservation" and
// "AllocatedCapacityReservation" rows that share an instance type's
// attributes. marketoption=OnDemand leaves out Capacity Block offers, which
// are also sold by the hour under OnDemand terms; the Karpenter AWS provider
// filters on the same attribute for the same reason
// (github.com/aws/karpenter-provider-aws, pkg/providers/pricing/pricing.go).
func productFilters(region string) []pricingtypes.Filter {
	match := func(field, value string) pricingtypes.Filter {
		return pricingtypes.Filter{Type: pricingtypes.FilterTypeTermMatch, Field: sdkaws.String(field), Value: sdkaws.String(value)}
	}
	return []pricingtypes.Filter{
		match("regionCode", region),
		match("operatingSystem", "Linux"),
		match("tenancy", "Shared"),
		match("preInstalledSw", "NA"),
		match("capacitystatus", "Used"),
		match("licenseModel", "No License required"),
		match("marketoption", "OnDemand"),
	}
}

// Refresh replaces the table's figures for one region (the region whose
// instances are priced, not the Pricing API endpoint's) with what the AWS
// Pricing API says now. It changes nothing unless it got a plausible,
// complete price list: on any error, which it returns for the caller to log,
// the figures the table had stay. updated counts the instance types whose
// price was added, changed or removed.
func (t *Table) Refresh(ctx context.Context, api API, region string) (updated int, err error) {
	fresh, err := FetchOnDemand(ctx, api, region)
	if err != nil {
		return 0, err
	}
	updated, err = t.replaceRegion(region, fresh, time.Now())
	if err != nil {
		return 0, fmt.Errorf("refreshing on-demand prices for %s: %w", region, err)
	}
	klog.FromContext(ctx).V(2).Info("Refreshed on-demand prices", "region", region, "instanceTypes", len(fresh), "updated", updated)
	return updated, nil
}

// FetchOnDemand asks the AWS Pricing API for the on-demand Linux,
// shared-tenancy prices of every instance type in a region, per hour in
// the region's currency (CurrencyOf: dollars, yuan in China), walking all
// pages of GetProducts. It fails rather than return a
// partial or empty list. The generator under hack/pricing uses it too.
func FetchOnDemand(ctx context.Context, api API, region string) (map[string]float64, error) {
	if region == "" {
		return nil, errors.New("fetching on-demand prices: no region")
	}
	if api == nil {
		return nil, errors.New("fetching on-demand prices: no Pricing API client")
	}
	filters := productFilters(region)
	currency := CurrencyOf(region)
	input := &awspricing.GetProductsInput{
		ServiceCode:   sdkaws.String(serviceCode),
		FormatVersion: sdkaws.String(formatVersion),
		Filters:       filters,
		MaxResults:    sdkaws.Int32(pageSize),
	}
	pages := awspricing.NewGetProductsPaginator(api, input, func(o *awspricing.GetProductsPaginatorOptions) {
		o.StopOnDuplicateToken = true
	})
	logger := klog.FromContext(ctx)
	prices := map[string]float64{}
	var documents, skipped, conflicts int
	for page := 0; pages.HasMorePages(); page++ {
		if page == maxPages {
			return nil, fmt.Errorf("fetching on-demand prices for %s: still more after %d pages", region, maxPages)
		}
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("fetching on-demand prices for %s: %w", region, err)
		}
		for _, doc := range out.PriceList {
			documents++
			offer, err := parsePriceListDocument(doc, currency)
			if err != nil {
				// One unreadable document means we do not understand the
				// answer, so none of it is trusted.
				return nil, fmt.Errorf("fetching on-demand prices for %s: document %d: %w", region, documents, err)
			}
			if !offer.usable(filters) {
				skipped++
				continue
			}
			if was, ok := prices[offer.instanceType]; ok && was != offer.price {
				// Two products for one type should not pass the filters;
				// if they do, keep the dearer so costs are not understated.
				conflicts++
				offer.price = max(was, offer.price)
			}
			prices[offer.instanceType] = offer.price
		}
		logger.V(4).Info("Read a page of the price list", "region", region, "page", page, "documents", len(out.PriceList))
	}
	if len(prices) == 0 {
		return nil, fmt.Errorf("%w: the Pricing API has no on-demand Linux prices in %s for %s (%d documents, %d skipped)", ErrImplausible, currency, region, documents, skipped)
	}
	logger.V(2).Info("Read on-demand prices", "region", region, "instanceTypes", len(prices), "documents", documents, "skipped", skipped, "conflicts", conflicts)
	return prices, nil
}

// priceListDocument is the part of one GetProducts PriceList entry that we
// read. The API returns PriceList as an array of strings, each a JSON
// document (API reference: GetProducts, "PriceList: Array of strings"). The
// aws_v1 document looks like this, per the AWS CLI's example output for
// `aws pricing get-products` (github.com/aws/aws-cli,
// awscli/examples/pricing/get-products.rst) and the Price List offer file
// format the Billing User Guide describes:
//
//	{"product": {"productFamily": "Compute Instance", "sku": "…",
//	             "attributes": {"instanceType": "m5.large", "regionCode": "us-east-1",
//	                            "operatingSystem": "Linux", …}},
//	 "serviceCode": "AmazonEC2",
//	 "terms": {"OnDemand": {"<sku>.<offerTermCode>": {
//	              "priceDimensions": {"<sku>.<offerTermCode>.<rateCode>": {
//	                  "unit": "Hrs", "pricePerUnit": {"USD": "0.0960000000"}, …}},
//	              "effectiveDate": "…", …}},
//	           "Reserved": {…}},
//	 "version": "…", "publicationDate": "…"}
//
// Attribute values and prices are all strings.
type priceListDocument struct {
	Product struct {
		Attributes map[string]string `json:"attributes"`
	} `json:"product"`
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// offer is what one document tells us.
type offer struct {
	instanceType string
	attributes   map[string]string
	// price is the hourly on-demand price in USD; zero when the document
	// has none (a product with only reserved terms, say).
	price float64
}

// usable says whether the offer is a priced instance that the filters
// asked for. An attribute the document does not carry is not held against
// it; one it carries with another value is.
func (o offer) usable(filters []pricingtypes.Filter) bool {
	if o.instanceType == "" || o.price == 0 {
		return false
	}
	for _, f := range filters {
		if v, ok := o.attributes[sdkaws.ToString(f.Field)]; ok && !strings.EqualFold(v, sdkaws.ToString(f.Value)) {
			return false
		}
	}
	return true
}

// parsePriceListDocument reads one PriceList entry's hourly price in
// currency. Prices of zero are ignored (AWS lists some dimensions at $0); a
// price that does not parse, or that is not plausible for an instance hour,
// is an error.
func parsePriceListDocument(doc, currency string) (offer, error) {
	var d priceListDocument
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return offer{}, fmt.Errorf("decoding price list document: %w", err)
	}
	o := offer{
		instanceType: d.Product.Attributes["instanceType"],
		attributes:   d.Product.Attributes,
	}
	for termCode, term := range d.Terms.OnDemand {
		for rateCode, dim := range term.PriceDimensions {
			if dim.Unit != hourlyUnit {
				continue
			}
			figure, ok := dim.PricePerUnit[currency]
			if !ok {
				continue
			}
			price, err := strconv.ParseFloat(figure, 64)
			if err != nil {
				return offer{}, fmt.Errorf("term %s, rate %s: price %q: %w", termCode, rateCode, figure, err)
			}
			if price == 0 {
				continue
			}
			if !plausiblePrice(price) {
				return offer{}, fmt.Errorf("%w: term %s, rate %s: %s %s per hour", ErrImplausible, termCode, rateCode, figure, currency)
			}
			o.price = max(o.price, price)
		}
	}
	return o, nil
}
