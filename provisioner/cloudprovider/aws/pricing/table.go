package pricing

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Currency is the currency of the shipped file. The Pricing API quotes the
// China regions in CNY only (CurrencyOf), so those regions are never in the
// file; a running table refreshed in China holds its region in CNY, which
// is also what EC2 quotes spot prices there in, so the order of offerings
// within the region holds.
const Currency = "USD"

// UnknownPrice is the hourly price an offering is published with when its
// price is not known: above any plausible price (maxHourlyPrice), so that
// cheapest-first choices take it after every priced offering. It is a
// marker, not a cost: docs/aws.md says so, and the provider names the
// types it stands for.
const UnknownPrice = 99999

// maxHourlyPrice bounds what we believe an instance can cost per hour. The
// dearest on-demand EC2 instances cost a few hundred dollars an hour; a
// figure far beyond that means a misread document, not a price.
const maxHourlyPrice = 10000

// ErrImplausible is wrapped by errors for figures that look wrong: an empty
// price list, a price that is not a positive number, or a refresh that would
// drop most of a region's instance types.
var ErrImplausible = errors.New("implausible on-demand prices")

//go:embed ondemand.json
var shippedJSON []byte

// File is the shape of ondemand.json. The generator under hack/pricing
// writes it with Encode and this package reads it with DecodeFile, so the
// two cannot drift apart.
type File struct {
	// Source names where the figures came from: a module path such as
	// github.com/aws/karpenter-provider-aws, or "pricing-api".
	Source string `json:"source"`
	// Version of the source: the module version, or the Pricing API's
	// format version.
	Version string `json:"version"`
	// Generated is the UTC date (YYYY-MM-DD) the file was written.
	Generated string `json:"generated"`
	// PricesAsOf says per region when the figures were read from the AWS
	// Pricing API (RFC 3339), as far as the source tells.
	PricesAsOf map[string]string `json:"pricesAsOf,omitempty"`
	// Currency is always USD; it is spelled out so that a reader of the
	// file does not have to guess.
	Currency string `json:"currency"`
	// Regions maps region → instance type → on-demand dollars per hour for
	// Linux, shared tenancy.
	Regions map[string]map[string]float64 `json:"regions"`
}

// Validate reports the first thing wrong with f, if any.
func (f *File) Validate() error {
	if f.Source == "" {
		return errors.New("price table has no source")
	}
	if f.Currency != Currency {
		return fmt.Errorf("price table is in %q, want %q", f.Currency, Currency)
	}
	if len(f.Regions) == 0 {
		return fmt.Errorf("%w: price table has no regions", ErrImplausible)
	}
	for region, prices := range f.Regions {
		if err := validatePrices(region, prices); err != nil {
			return err
		}
	}
	return nil
}

// validatePrices checks one region's figures.
func validatePrices(region string, prices map[string]float64) error {
	if region == "" {
		return errors.New("price table has a region with no name")
	}
	if len(prices) == 0 {
		return fmt.Errorf("%w: region %s has no prices", ErrImplausible, region)
	}
	for instanceType, price := range prices {
		if instanceType == "" {
			return fmt.Errorf("region %s has an instance type with no name", region)
		}
		if !plausiblePrice(price) {
			return fmt.Errorf("%w: %s in %s costs %v per hour", ErrImplausible, instanceType, region, price)
		}
	}
	return nil
}

func plausiblePrice(p float64) bool {
	return p > 0 && p <= maxHourlyPrice && !math.IsNaN(p)
}

// Encode renders f as the bytes of ondemand.json. The output depends only on
// f: encoding/json sorts map keys and writes each float in its shortest
// round-tripping form, so regenerating from the same figures on the same day
// yields the same file.
func (f *File) Encode() ([]byte, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding price table: %w", err)
	}
	return append(data, '\n'), nil
}

// DecodeFile parses and validates the bytes of a price table.
func DecodeFile(data []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decoding price table: %w", err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("decoding price table: %w", err)
	}
	return &f, nil
}

// Table holds on-demand prices by region and instance type. It is safe for
// concurrent use: lookups share a read lock, and Refresh swaps a region's
// whole map under the write lock, so a reader never sees half a refresh.
type Table struct {
	mu sync.RWMutex
	// source describes the figures the table started from.
	source string
	// prices maps region → instance type → dollars per hour. The inner
	// maps are never written after they are stored.
	prices map[string]map[string]float64
	// refreshed records when Refresh last replaced a region's figures.
	refreshed map[string]time.Time
}

// Shipped returns a new table holding the figures embedded in the binary.
// Each call returns a table of its own, so refreshing one does not change
// another.
func Shipped() (*Table, error) {
	t, err := Parse(shippedJSON)
	if err != nil {
		return nil, fmt.Errorf("shipped price table: %w", err)
	}
	return t, nil
}

// Parse returns a table holding the figures of a file in the ondemand.json
// format.
func Parse(data []byte) (*Table, error) {
	f, err := DecodeFile(data)
	if err != nil {
		return nil, err
	}
	source := f.Source
	if f.Version != "" {
		source += "@" + f.Version
	}
	if f.Generated != "" {
		source += ", generated " + f.Generated
	}
	return &Table{
		source:    source,
		prices:    f.Regions,
		refreshed: map[string]time.Time{},
	}, nil
}

// OnDemand returns the on-demand price in dollars per hour of a Linux,
// shared-tenancy instance of the type in the region, and whether the table
// knows it.
func (t *Table) OnDemand(region, instanceType string) (float64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	price, ok := t.prices[region][instanceType]
	return price, ok
}

// StandIn returns the region whose on-demand prices stand in for region's
// while the table has none for it: the closest region the table has, in
// the same partition (Closest). Prices differ between regions by a
// similar factor for most types, so a stand-in keeps the cheapest-first
// order of a region's types; it is not what they cost there. ok is false
// when the table has region itself, or no region of its partition.
func (t *Table) StandIn(region string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.prices[region]) > 0 {
		return "", false
	}
	have := make([]string, 0, len(t.prices))
	for r := range t.prices {
		have = append(have, r)
	}
	return Closest(region, have)
}

// Regions returns the regions the table has figures for, sorted.
func (t *Table) Regions() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	regions := make([]string, 0, len(t.prices))
	for r := range t.prices {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	return regions
}

// InstanceTypes returns the instance types the table prices in region,
// sorted.
func (t *Table) InstanceTypes(region string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	types := make([]string, 0, len(t.prices[region]))
	for it := range t.prices[region] {
		types = append(types, it)
	}
	slices.Sort(types)
	return types
}

// Source says where the figures came from: the shipped table's source,
// version and generation date, and the regions since refreshed from the AWS
// Pricing API, with when.
func (t *Table) Source() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.refreshed) == 0 {
		return t.source
	}
	regions := make([]string, 0, len(t.refreshed))
	for r := range t.refreshed {
		regions = append(regions, r)
	}
	slices.Sort(regions)
	var b strings.Builder
	b.WriteString(t.source)
	b.WriteString("; refreshed from the AWS Pricing API:")
	for i, r := range regions {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s at %s", r, t.refreshed[r].UTC().Format(time.RFC3339))
	}
	return b.String()
}

// replaceRegion installs fresh figures for a region, unless they would drop
// most of the instance types the region has now: a filter the API stopped
// honouring, or a truncated answer, looks like that, and stale prices for
// every type beat current prices for a few. It returns how many instance
// types were added, changed or removed.
func (t *Table) replaceRegion(region string, fresh map[string]float64, now time.Time) (int, error) {
	if err := validatePrices(region, fresh); err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.prices[region]
	if len(fresh)*2 < len(old) {
		return 0, fmt.Errorf("%w: the Pricing API has %d instance types for %s where the table has %d", ErrImplausible, len(fresh), region, len(old))
	}
	updated := 0
	for instanceType, price := range fresh {
		if was, ok := old[instanceType]; !ok || was != price {
			updated++
		}
	}
	for instanceType := range old {
		if _, ok := fresh[instanceType]; !ok {
			updated++
		}
	}
	t.prices[region] = fresh
	t.refreshed[region] = now
	return updated, nil
}
