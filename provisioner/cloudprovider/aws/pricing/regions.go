package pricing

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// Partitions, as ARNs spell them.
const (
	PartitionAWS   = "aws"
	PartitionChina = "aws-cn"
	PartitionGov   = "aws-us-gov"
)

// partitionPrefixes map a region's name to its partition. The names are
// AWS's (AWS General Reference, "Regions and Zones", and the partitions the
// SDKs' endpoint rules list: aws-cn for cn-, aws-us-gov for us-gov-, the
// ISO partitions for us-iso-, us-isob-, eu-isoe-, us-isof-, and aws-eusc
// for the European Sovereign Cloud's eusc-). Longer prefixes come first.
var partitionPrefixes = []struct{ prefix, partition string }{
	{"us-isob-", "aws-iso-b"},
	{"us-isof-", "aws-iso-f"},
	{"us-iso-", "aws-iso"},
	{"eu-isoe-", "aws-iso-e"},
	{"us-gov-", PartitionGov},
	{"eusc-", "aws-eusc"},
	{"cn-", PartitionChina},
}

// Partition is the partition of a region, read from its name's prefix;
// every region without one of the prefixes above is in "aws".
func Partition(region string) string {
	for _, p := range partitionPrefixes {
		if strings.HasPrefix(region, p.prefix) {
			return p.partition
		}
	}
	return PartitionAWS
}

// CurrencyOf is the currency the Price List quotes a region's prices in:
// CNY in China ("Amazon Web Services in China is priced and billed in local
// currency (CNY)", Getting Started with Amazon Web Services in China,
// Billing and Payment), USD everywhere else.
func CurrencyOf(region string) string {
	if Partition(region) == PartitionChina {
		return "CNY"
	}
	return Currency
}

// queryAPIRegions are where the Price List Query API (GetProducts) is
// served, per partition. AWS Billing User Guide, "Using the AWS Price List
// Query API", Endpoints: api.pricing.us-east-1.amazonaws.com,
// api.pricing.eu-central-1.amazonaws.com and
// api.pricing.ap-south-1.amazonaws.com; its China edition (docs.amazonaws.cn,
// same page): api.pricing.cn-northwest-1.amazonaws.com.cn. The SDK builds
// those host names from the region (api.pricing.<region>.<DNS suffix>).
// GovCloud, the ISO partitions and the European Sovereign Cloud have no
// Price List Query API: there the shipped table is all there is.
var queryAPIRegions = map[string][]string{
	PartitionAWS:   {"us-east-1", "eu-central-1", "ap-south-1"},
	PartitionChina: {"cn-northwest-1"},
}

// QueryAPIRegion is the region whose Price List Query API endpoint serves
// the prices of region: in the region's partition, the closest one that
// has the API. ok is false in a partition without it.
func QueryAPIRegion(region string) (apiRegion string, ok bool) {
	served := queryAPIRegions[Partition(region)]
	if len(served) == 0 {
		return "", false
	}
	if closest, ok := Closest(region, served); ok {
		return closest, true
	}
	return served[0], true
}

// regionSite is where a region's data centres are, as the city AWS names
// it after, in degrees. These are the cities' coordinates, not AWS's (it
// does not publish them), which is close enough to tell near from far.
type regionSite struct{ lat, lon float64 }

// regionSites are the regions of the aws partition (and of China and
// GovCloud, for distances within those), named with their
// locations in AWS General Reference, "Regions and Zones" (the region
// table), as of late 2025; `aws ec2 describe-regions --all-regions` lists
// them too. A region not here is still priced (by the shipped table, the
// Pricing API, or a stand-in picked by name); only distances need it here.
var regionSites = map[string]regionSite{
	"us-east-1":      {38.9, -77.4},  // N. Virginia
	"us-east-2":      {40.0, -83.0},  // Ohio
	"us-west-1":      {37.8, -122.4}, // N. California
	"us-west-2":      {45.5, -122.7}, // Oregon
	"ca-central-1":   {45.5, -73.6},  // Canada (Central), Montréal
	"ca-west-1":      {51.0, -114.1}, // Canada West (Calgary)
	"mx-central-1":   {20.6, -100.4}, // Mexico (Central), Querétaro
	"sa-east-1":      {-23.5, -46.6}, // South America (São Paulo)
	"eu-west-1":      {53.3, -6.3},   // Europe (Ireland)
	"eu-west-2":      {51.5, -0.1},   // Europe (London)
	"eu-west-3":      {48.9, 2.4},    // Europe (Paris)
	"eu-central-1":   {50.1, 8.7},    // Europe (Frankfurt)
	"eu-central-2":   {47.4, 8.5},    // Europe (Zurich)
	"eu-south-1":     {45.5, 9.2},    // Europe (Milan)
	"eu-south-2":     {41.6, -0.9},   // Europe (Spain), Aragón
	"eu-north-1":     {59.3, 18.1},   // Europe (Stockholm)
	"il-central-1":   {32.1, 34.8},   // Israel (Tel Aviv)
	"me-south-1":     {26.1, 50.6},   // Middle East (Bahrain)
	"me-central-1":   {25.2, 55.3},   // Middle East (UAE)
	"af-south-1":     {-33.9, 18.4},  // Africa (Cape Town)
	"ap-south-1":     {19.1, 72.9},   // Asia Pacific (Mumbai)
	"ap-south-2":     {17.4, 78.5},   // Asia Pacific (Hyderabad)
	"ap-east-1":      {22.3, 114.2},  // Asia Pacific (Hong Kong)
	"ap-east-2":      {25.0, 121.6},  // Asia Pacific (Taipei)
	"ap-southeast-1": {1.35, 103.8},  // Asia Pacific (Singapore)
	"ap-southeast-2": {-33.9, 151.2}, // Asia Pacific (Sydney)
	"ap-southeast-3": {-6.2, 106.8},  // Asia Pacific (Jakarta)
	"ap-southeast-4": {-37.8, 145.0}, // Asia Pacific (Melbourne)
	"ap-southeast-5": {3.1, 101.7},   // Asia Pacific (Malaysia)
	"ap-southeast-6": {-36.8, 174.8}, // Asia Pacific (New Zealand), Auckland
	"ap-southeast-7": {13.8, 100.5},  // Asia Pacific (Thailand)
	"ap-northeast-1": {35.7, 139.7},  // Asia Pacific (Tokyo)
	"ap-northeast-2": {37.6, 127.0},  // Asia Pacific (Seoul)
	"ap-northeast-3": {34.7, 135.5},  // Asia Pacific (Osaka)
	"cn-north-1":     {39.9, 116.4},  // China (Beijing)
	"cn-northwest-1": {38.5, 106.3},  // China (Ningxia)
	"us-gov-east-1":  {40.0, -83.0},  // AWS GovCloud (US-East), Ohio
	"us-gov-west-1":  {45.5, -122.7}, // AWS GovCloud (US-West), Oregon
}

// CommercialRegions are the regions of the aws partition that
// regionSites knows, sorted: what hack/pricing fetches by default so
// that the shipped table covers every one of them.
func CommercialRegions() []string {
	var out []string
	for r := range regionSites {
		if Partition(r) == PartitionAWS {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// Closest picks the region of candidates, in region's partition, that is
// nearest to region: by great-circle distance between the cities where
// both are known, else the one sharing the longest dash-separated prefix
// of its name ("ap-southeast-9" is closer to "ap-southeast-1" than to
// "ap-northeast-1"), ties broken by name. ok is false when no candidate is
// in the partition: prices are never borrowed across partitions, whose
// currencies and offerings differ.
func Closest(region string, candidates []string) (string, bool) {
	var best string
	var bestKey [2]float64
	site, known := regionSites[region]
	for _, c := range candidates {
		if Partition(c) != Partition(region) {
			continue
		}
		var key [2]float64
		if cs, ok := regionSites[c]; ok && known {
			key = [2]float64{0, distance(site, cs)}
		} else {
			key = [2]float64{1, -float64(commonTokens(region, c))}
		}
		if best == "" || cmp.Or(cmp.Compare(key[0], bestKey[0]), cmp.Compare(key[1], bestKey[1]), cmp.Compare(c, best)) < 0 {
			best, bestKey = c, key
		}
	}
	return best, best != ""
}

// distance is the central angle between two sites, in radians (haversine).
func distance(a, b regionSite) float64 {
	rad := func(d float64) float64 { return d * math.Pi / 180 }
	dLat, dLon := rad(b.lat-a.lat), rad(b.lon-a.lon)
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(rad(a.lat))*math.Cos(rad(b.lat))*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * math.Asin(math.Sqrt(min(h, 1)))
}

// commonTokens counts the leading dash-separated words two names share.
func commonTokens(a, b string) int {
	as, bs := strings.Split(a, "-"), strings.Split(b, "-")
	n := 0
	for n < len(as) && n < len(bs) && as[n] == bs[n] {
		n++
	}
	return n
}
