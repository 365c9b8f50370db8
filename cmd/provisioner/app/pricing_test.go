package app

import (
	"context"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
)

// TestPricingClientEndpoint: the Pricing API client asks the endpoint AWS
// serves the cluster's partition from, closest first; a flag overrides it;
// GovCloud has none, and then nothing is asked.
func TestPricingClientEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, region, flagRegion, flagEndpoint string
		wantHost                               string // "" for no client
	}{
		{name: "Europe asks Frankfurt", region: "eu-west-1", wantHost: "api.pricing.eu-central-1.amazonaws.com"},
		{name: "Oregon asks N. Virginia", region: "us-west-2", wantHost: "api.pricing.us-east-1.amazonaws.com"},
		{name: "Singapore asks Mumbai", region: "ap-southeast-1", wantHost: "api.pricing.ap-south-1.amazonaws.com"},
		{name: "China asks Ningxia", region: "cn-north-1", wantHost: "api.pricing.cn-northwest-1.amazonaws.com.cn"},
		{name: "GovCloud has none", region: "us-gov-west-1"},
		{name: "the region flag wins", region: "eu-west-1", flagRegion: "us-east-1", wantHost: "api.pricing.us-east-1.amazonaws.com"},
		{name: "a private endpoint in GovCloud", region: "us-gov-west-1", flagEndpoint: "https://vpce-1.pricing.example", wantHost: "vpce-1.pricing.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &awsOptions{pricingRegion: tc.flagRegion, pricingEndpoint: tc.flagEndpoint, sdk: sdkaws.Config{Region: tc.region}}
			api, why := a.pricingClient()
			if tc.wantHost == "" {
				if api != nil || why == "" {
					t.Fatalf("pricingClient = %v, %q; want none, with a reason", api, why)
				}
				return
			}
			if api == nil {
				t.Fatalf("no client: %s", why)
			}
			o := api.Options()
			params := awspricing.EndpointParameters{Region: &o.Region, Endpoint: o.BaseEndpoint}
			ep, err := awspricing.NewDefaultEndpointResolverV2().ResolveEndpoint(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			if ep.URI.Host != tc.wantHost {
				t.Errorf("endpoint %s, want %s", ep.URI.Host, tc.wantHost)
			}
		})
	}
}
