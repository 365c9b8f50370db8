package pricing

import (
	"context"
	"strings"
	"testing"

	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
)

func TestPartitionFromTheRegionsName(t *testing.T) {
	for region, want := range map[string]string{
		"us-east-1": "aws", "eu-south-2": "aws", "il-central-1": "aws", "ap-southeast-9": "aws",
		"cn-north-1": "aws-cn", "cn-northwest-1": "aws-cn",
		"us-gov-west-1": "aws-us-gov",
		"us-iso-east-1": "aws-iso", "us-isob-east-1": "aws-iso-b", "eu-isoe-west-1": "aws-iso-e", "us-isof-south-1": "aws-iso-f",
		"eusc-de-east-1": "aws-eusc",
	} {
		if got := Partition(region); got != want {
			t.Errorf("Partition(%s) = %s, want %s", region, got, want)
		}
	}
}

// TestQueryAPIRegionIsTheClosestServingOne: the Price List Query API is
// asked where AWS serves it, nearest the cluster, and the SDK turns that
// region into the endpoint host AWS documents.
func TestQueryAPIRegionIsTheClosestServingOne(t *testing.T) {
	for _, tc := range []struct {
		region, want, host string
	}{
		{"us-west-2", "us-east-1", "api.pricing.us-east-1.amazonaws.com"},
		{"sa-east-1", "us-east-1", "api.pricing.us-east-1.amazonaws.com"},
		{"eu-west-1", "eu-central-1", "api.pricing.eu-central-1.amazonaws.com"},
		{"il-central-1", "eu-central-1", "api.pricing.eu-central-1.amazonaws.com"},
		{"ap-southeast-1", "ap-south-1", "api.pricing.ap-south-1.amazonaws.com"},
		{"me-central-1", "ap-south-1", "api.pricing.ap-south-1.amazonaws.com"},
		{"cn-north-1", "cn-northwest-1", "api.pricing.cn-northwest-1.amazonaws.com.cn"},
		{"cn-northwest-1", "cn-northwest-1", "api.pricing.cn-northwest-1.amazonaws.com.cn"},
		// A region newer than the table of sites goes by its name.
		{"ap-southeast-9", "ap-south-1", "api.pricing.ap-south-1.amazonaws.com"},
		{"us-gov-west-1", "", ""},
		{"us-iso-east-1", "", ""},
	} {
		got, ok := QueryAPIRegion(tc.region)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("QueryAPIRegion(%s) = %q, %v; want %q", tc.region, got, ok, tc.want)
			continue
		}
		if !ok {
			continue
		}
		ep, err := awspricing.NewDefaultEndpointResolverV2().ResolveEndpoint(context.Background(), awspricing.EndpointParameters{Region: &got})
		if err != nil {
			t.Fatal(err)
		}
		if ep.URI.Host != tc.host {
			t.Errorf("the SDK's endpoint for %s is %s, want %s", got, ep.URI.Host, tc.host)
		}
	}
}

func TestStandInIsTheClosestRegionOfThePartition(t *testing.T) {
	table, err := Parse([]byte(`{"source":"test","currency":"USD","regions":{
		"us-east-1":{"m5.large":0.096},"us-west-1":{"m5.large":0.112},"eu-west-1":{"m5.large":0.107},
		"ap-northeast-1":{"m5.large":0.124},"us-gov-west-1":{"m5.large":0.121}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for region, want := range map[string]string{
		"us-west-2":      "us-west-1",
		"us-east-2":      "us-east-1",
		"eu-south-2":     "eu-west-1",
		"ap-northeast-3": "ap-northeast-1",
		"ap-southeast-9": "ap-northeast-1", // unknown site: by name
		"us-gov-east-1":  "us-gov-west-1",
		"us-east-1":      "", // the table has it
		"cn-north-1":     "", // no region of aws-cn: never another currency
		"us-iso-east-1":  "",
	} {
		got, ok := table.StandIn(region)
		if got != want || ok != (want != "") {
			t.Errorf("StandIn(%s) = %q, %v; want %q", region, got, ok, want)
		}
	}
}

func TestCommercialRegionsAreTheAWSPartitionsOnly(t *testing.T) {
	regions := CommercialRegions()
	if len(regions) < 30 {
		t.Errorf("only %d commercial regions: %v", len(regions), regions)
	}
	for _, r := range regions {
		if Partition(r) != PartitionAWS {
			t.Errorf("%s is not in the aws partition", r)
		}
	}
}

// TestRefreshInChinaReadsYuan: the China Price List quotes CNY only, so a
// refresh there reads CNY, where a USD-only reader would find no price.
func TestRefreshInChinaReadsYuan(t *testing.T) {
	doc := strings.Replace(instanceDoc(t, "cn-north-1", "m5.large", "Linux", "0.6720000000"), `"USD"`, `"CNY"`, 1)
	srv := &priceListServer{t: t, pages: [][]string{{doc}}}
	table := smallTable(t)
	if _, err := table.Refresh(context.Background(), srv.start(t), "cn-north-1"); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if price, ok := table.OnDemand("cn-north-1", "m5.large"); !ok || price != 0.672 {
		t.Errorf("OnDemand(cn-north-1, m5.large) = %v, %v; want 0.672 (CNY), true", price, ok)
	}
	// And a USD region does not take a CNY figure.
	srv = &priceListServer{t: t, pages: [][]string{{strings.Replace(instanceDoc(t, "us-east-1", "m5.large", "Linux", "0.7"), `"USD"`, `"CNY"`, 1)}}}
	if _, err := table.Refresh(context.Background(), srv.start(t), "us-east-1"); err == nil {
		t.Error("a us-east-1 refresh took a CNY price")
	}
}
