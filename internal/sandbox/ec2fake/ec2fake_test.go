package ec2fake_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// These tests drive every action through the real SDK client over loopback
// HTTP and check what the SDK decodes, which is the proof that the fake
// speaks the same wire shapes as EC2.

var (
	world       = ec2fake.DefaultWorld()
	subnetA     = world.Subnets[0].ID // us-west-2a, tagged
	subnetB     = world.Subnets[1].ID // us-west-2b, tagged
	subnetC     = world.Subnets[2].ID // us-west-2c, tagged
	untagged    = world.Subnets[3].ID // us-west-2a, no tags
	nodesGroup  = world.SecurityGroups[0].ID
	amiX86      = world.Images[0].ID
	amiARM      = world.Images[1].ID
	zoneOf      = map[string]string{subnetA: "us-west-2a", subnetB: "us-west-2b", subnetC: "us-west-2c", untagged: "us-west-2a"}
	taggedZones = []string{subnetA, subnetB, subnetC}
)

// fastRetryer is the SDK's standard retryer without the waiting, so tests
// that exercise retries stay quick.
func fastRetryer(attempts int) sdkaws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attempts
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

func newClient(url string, retryer sdkaws.Retryer) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       "us-west-2",
		BaseEndpoint: sdkaws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		Retryer:      retryer,
	})
}

// start serves a fake of w and returns it with a client using the standard
// retryer.
func start(t *testing.T, w ec2fake.World) (*ec2fake.Server, *ec2.Client, string) {
	t.Helper()
	s := ec2fake.New(w)
	url, stop, err := s.Start()
	if err != nil {
		t.Fatalf("starting the fake: %v", err)
	}
	t.Cleanup(stop)
	return s, newClient(url, fastRetryer(3)), url
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	if got := errorCode(err); got != code {
		t.Fatalf("error = %v; want code %s", err, code)
	}
}

func tagMap(tags []ec2types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range tags {
		m[sdkaws.ToString(t.Key)] = sdkaws.ToString(t.Value)
	}
	return m
}

func filter(name string, values ...string) ec2types.Filter {
	return ec2types.Filter{Name: sdkaws.String(name), Values: values}
}

var ctx = context.Background()

func TestDescribeAvailabilityZones(t *testing.T) {
	_, c, _ := start(t, world)
	out, err := c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range out.AvailabilityZones {
		got = append(got, sdkaws.ToString(z.ZoneName)+"="+sdkaws.ToString(z.ZoneId))
		if z.State != ec2types.AvailabilityZoneStateAvailable || sdkaws.ToString(z.RegionName) != "us-west-2" {
			t.Errorf("zone %s: state %q region %q", sdkaws.ToString(z.ZoneName), z.State, sdkaws.ToString(z.RegionName))
		}
	}
	if want := []string{"us-west-2a=usw2-az1", "us-west-2b=usw2-az2", "us-west-2c=usw2-az3"}; !slices.Equal(got, want) {
		t.Errorf("zones = %v; want %v", got, want)
	}

	out, err = c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{Filters: []ec2types.Filter{filter("zone-id", "usw2-az2")}})
	if err != nil || len(out.AvailabilityZones) != 1 || sdkaws.ToString(out.AvailabilityZones[0].ZoneName) != "us-west-2b" {
		t.Errorf("zone-id filter: %v, %+v", err, out)
	}
	_, err = c.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"us-west-2z"}})
	wantCode(t, err, "InvalidParameterValue")
}

func TestDescribeInstanceTypes(t *testing.T) {
	_, c, _ := start(t, world)

	t.Run("a named type is described with its published figures", func(t *testing.T) {
		out, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{"m5.large", "g4dn.xlarge", "m6g.large"}})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[ec2types.InstanceType]ec2types.InstanceTypeInfo{}
		for _, it := range out.InstanceTypes {
			byName[it.InstanceType] = it
		}
		m5 := byName["m5.large"]
		if sdkaws.ToInt32(m5.VCpuInfo.DefaultVCpus) != 2 || sdkaws.ToInt32(m5.VCpuInfo.DefaultCores) != 1 || sdkaws.ToInt32(m5.VCpuInfo.DefaultThreadsPerCore) != 2 {
			t.Errorf("m5.large vCPU info = %+v", *m5.VCpuInfo)
		}
		if sdkaws.ToInt64(m5.MemoryInfo.SizeInMiB) != 8192 {
			t.Errorf("m5.large memory = %d", sdkaws.ToInt64(m5.MemoryInfo.SizeInMiB))
		}
		if sdkaws.ToInt32(m5.NetworkInfo.MaximumNetworkInterfaces) != 3 || sdkaws.ToInt32(m5.NetworkInfo.Ipv4AddressesPerInterface) != 10 {
			t.Errorf("m5.large network = %+v", *m5.NetworkInfo)
		}
		if len(m5.NetworkInfo.NetworkCards) != 1 || sdkaws.ToInt32(m5.NetworkInfo.DefaultNetworkCardIndex) != 0 {
			t.Errorf("m5.large network cards = %+v", m5.NetworkInfo.NetworkCards)
		}
		if !slices.Equal(m5.ProcessorInfo.SupportedArchitectures, []ec2types.ArchitectureType{"x86_64"}) {
			t.Errorf("m5.large architectures = %v", m5.ProcessorInfo.SupportedArchitectures)
		}
		if !slices.Equal(m5.SupportedUsageClasses, []ec2types.UsageClassType{"on-demand", "spot"}) {
			t.Errorf("m5.large usage classes = %v", m5.SupportedUsageClasses)
		}
		if m5.Hypervisor != ec2types.InstanceTypeHypervisorNitro || sdkaws.ToBool(m5.BareMetal) || !sdkaws.ToBool(m5.CurrentGeneration) || sdkaws.ToBool(m5.InstanceStorageSupported) {
			t.Errorf("m5.large hypervisor %q bare metal %v current %v storage %v", m5.Hypervisor, sdkaws.ToBool(m5.BareMetal), sdkaws.ToBool(m5.CurrentGeneration), sdkaws.ToBool(m5.InstanceStorageSupported))
		}
		if m5.GpuInfo != nil {
			t.Errorf("m5.large has GPU info %+v", m5.GpuInfo)
		}
		g4 := byName["g4dn.xlarge"]
		if g4.GpuInfo == nil || len(g4.GpuInfo.Gpus) != 1 {
			t.Fatalf("g4dn.xlarge GPU info = %+v", g4.GpuInfo)
		}
		gpu := g4.GpuInfo.Gpus[0]
		if sdkaws.ToString(gpu.Name) != "T4" || sdkaws.ToString(gpu.Manufacturer) != "NVIDIA" || sdkaws.ToInt32(gpu.Count) != 1 || sdkaws.ToInt32(gpu.MemoryInfo.SizeInMiB) != 16384 {
			t.Errorf("g4dn.xlarge GPU = %+v", gpu)
		}
		if sdkaws.ToInt32(g4.GpuInfo.TotalGpuMemoryInMiB) != 16384 {
			t.Errorf("g4dn.xlarge total GPU memory = %d", sdkaws.ToInt32(g4.GpuInfo.TotalGpuMemoryInMiB))
		}
		if !slices.Equal(byName["m6g.large"].ProcessorInfo.SupportedArchitectures, []ec2types.ArchitectureType{"arm64"}) {
			t.Errorf("m6g.large architectures = %v", byName["m6g.large"].ProcessorInfo.SupportedArchitectures)
		}
	})

	tests := []struct {
		name    string
		filters []ec2types.Filter
		want    []string
	}{
		{"a wildcard instance-type filter matches a family", []ec2types.Filter{filter("instance-type", "m5.*")}, []string{"m5.2xlarge", "m5.large", "m5.xlarge"}},
		{"filter values are ORed", []ec2types.Filter{filter("instance-type", "c5.large", "c6g.large")}, []string{"c5.large", "c6g.large"}},
		{"filters are ANDed", []ec2types.Filter{filter("instance-type", "*.xlarge"), filter("processor-info.supported-architecture", "arm64")}, []string{"c7g.xlarge", "m6g.xlarge"}},
		{"a question mark matches one character", []ec2types.Filter{filter("instance-type", "c?i.large")}, []string{"c7i.large"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{Filters: tc.filters})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range out.InstanceTypes {
				got = append(got, string(it.InstanceType))
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("types = %v; want %v", got, tc.want)
			}
		})
	}

	t.Run("the paginator walks every page", func(t *testing.T) {
		p := ec2.NewDescribeInstanceTypesPaginator(c, &ec2.DescribeInstanceTypesInput{MaxResults: sdkaws.Int32(5)})
		pages, seen := 0, map[ec2types.InstanceType]bool{}
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(out.InstanceTypes) > 5 {
				t.Errorf("page %d has %d types; MaxResults was 5", pages, len(out.InstanceTypes))
			}
			for _, it := range out.InstanceTypes {
				if seen[it.InstanceType] {
					t.Errorf("%s seen twice", it.InstanceType)
				}
				seen[it.InstanceType] = true
			}
		}
		if want := len(world.InstanceTypes); len(seen) != want || pages != (want+4)/5 {
			t.Errorf("saw %d types in %d pages; want %d in %d", len(seen), pages, want, (want+4)/5)
		}
	})

	t.Run("an unknown type is an error", func(t *testing.T) {
		_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{"m5.huge"}})
		wantCode(t, err, "InvalidInstanceType")
	})
	t.Run("MaxResults out of range is an error", func(t *testing.T) {
		_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{MaxResults: sdkaws.Int32(500)})
		wantCode(t, err, "InvalidParameterValue")
	})
	t.Run("an unknown filter is an error", func(t *testing.T) {
		_, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{Filters: []ec2types.Filter{filter("instance-typo", "m5.large")}})
		wantCode(t, err, "InvalidParameterValue")
	})
}

func TestDescribeInstanceTypeOfferings(t *testing.T) {
	_, c, _ := start(t, world)
	offered := func(in *ec2.DescribeInstanceTypeOfferingsInput) map[string][]string {
		t.Helper()
		got := map[string][]string{}
		p := ec2.NewDescribeInstanceTypeOfferingsPaginator(c, in)
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range out.InstanceTypeOfferings {
				got[string(o.InstanceType)] = append(got[string(o.InstanceType)], sdkaws.ToString(o.Location))
			}
		}
		return got
	}

	byZone := offered(&ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZone, MaxResults: sdkaws.Int32(7)})
	if got := byZone["g4dn.xlarge"]; !slices.Equal(got, []string{"us-west-2a", "us-west-2b"}) {
		t.Errorf("g4dn.xlarge offered in %v; want us-west-2a and us-west-2b", got)
	}
	if got := byZone["m5.large"]; len(got) != 3 {
		t.Errorf("m5.large offered in %v; want every zone", got)
	}
	inC := offered(&ec2.DescribeInstanceTypeOfferingsInput{
		LocationType: ec2types.LocationTypeAvailabilityZone,
		Filters:      []ec2types.Filter{filter("location", "us-west-2c"), filter("instance-type", "g4dn.*", "m5.large")},
	})
	if len(inC) != 1 || inC["m5.large"] == nil {
		t.Errorf("offerings in us-west-2c = %v; want only m5.large", inC)
	}
	byRegion := offered(&ec2.DescribeInstanceTypeOfferingsInput{})
	if len(byRegion) != len(world.InstanceTypes) || byRegion["t3.medium"][0] != "us-west-2" {
		t.Errorf("region offerings = %v", byRegion)
	}
	byID := offered(&ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZoneId, Filters: []ec2types.Filter{filter("instance-type", "g4dn.xlarge")}})
	if got := byID["g4dn.xlarge"]; !slices.Equal(got, []string{"usw2-az1", "usw2-az2"}) {
		t.Errorf("g4dn.xlarge zone IDs = %v", got)
	}
}

func TestDescribeSpotPriceHistory(t *testing.T) {
	s, c, _ := start(t, world)
	out, err := c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes:       []ec2types.InstanceType{"m5.large", "c6g.large"},
		ProductDescriptions: []string{"Linux/UNIX"},
		StartTime:           sdkaws.Time(time.Now()),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.SpotPriceHistory) != 6 {
		t.Fatalf("got %d prices; want one per type and zone (6)", len(out.SpotPriceHistory))
	}
	for _, p := range out.SpotPriceHistory {
		price, err := strconv.ParseFloat(sdkaws.ToString(p.SpotPrice), 64)
		if err != nil {
			t.Fatal(err)
		}
		od := world.OnDemandPrices[string(p.InstanceType)]
		if price < 0.29*od || price > 0.41*od {
			t.Errorf("%s in %s costs %v; want 30-40%% of %v", p.InstanceType, sdkaws.ToString(p.AvailabilityZone), price, od)
		}
		if want := world.SpotPrices[string(p.InstanceType)][sdkaws.ToString(p.AvailabilityZone)]; math.Abs(price-want) > 1e-9 {
			t.Errorf("%s in %s costs %v; the world says %v", p.InstanceType, sdkaws.ToString(p.AvailabilityZone), price, want)
		}
		if p.ProductDescription != "Linux/UNIX" || p.Timestamp == nil || p.Timestamp.After(time.Now()) {
			t.Errorf("price %+v: product %q timestamp %v", p, p.ProductDescription, p.Timestamp)
		}
	}

	s.SetSpotPrice("m5.large", "us-west-2b", 0.5)
	out, err = c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes: []ec2types.InstanceType{"m5.large"},
		Filters:       []ec2types.Filter{filter("availability-zone", "us-west-2b")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.SpotPriceHistory) != 1 || sdkaws.ToString(out.SpotPriceHistory[0].SpotPrice) != "0.500000" {
		t.Errorf("after SetSpotPrice: %+v", out.SpotPriceHistory)
	}
	out, err = c.DescribeSpotPriceHistory(ctx, &ec2.DescribeSpotPriceHistoryInput{ProductDescriptions: []string{"Windows"}})
	if err != nil || len(out.SpotPriceHistory) != 0 {
		t.Errorf("Windows prices: %v, %d; want none", err, len(out.SpotPriceHistory))
	}
}

func TestDescribeSubnets(t *testing.T) {
	_, c, _ := start(t, world)
	tests := []struct {
		name    string
		in      ec2.DescribeSubnetsInput
		want    []string
		wantErr string
	}{
		{"a tag filter matches the tagged subnets", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/discovery", "sandbox")}}, taggedZones, ""},
		{"a tag value may be a wildcard", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/discovery", "sand*")}}, taggedZones, ""},
		{"tag-key matches any value", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("tag-key", "nodeforge.dev/discovery")}}, taggedZones, ""},
		{"a tag filter with another value matches nothing", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/discovery", "prod")}}, nil, ""},
		{"a zone filter and a tag filter are ANDed", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("availability-zone", "us-west-2a"), filter("tag-key", "Name")}}, []string{subnetA}, ""},
		{"no filter lists every subnet", ec2.DescribeSubnetsInput{}, []string{subnetA, subnetB, subnetC, untagged}, ""},
		{"subnet IDs select subnets", ec2.DescribeSubnetsInput{SubnetIds: []string{untagged, subnetB}}, []string{subnetB, untagged}, ""},
		{"vpc-id matches", ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("vpc-id", world.Subnets[0].VpcID), filter("subnet-id", subnetC)}}, []string{subnetC}, ""},
		{"an unknown subnet ID is an error", ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-0123456789abcdef0"}}, nil, "InvalidSubnetID.NotFound"},
		{"a malformed subnet ID is an error", ec2.DescribeSubnetsInput{SubnetIds: []string{"sub-1"}}, nil, "InvalidSubnetID.Malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeSubnets(ctx, &tc.in)
			if tc.wantErr != "" {
				wantCode(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sn := range out.Subnets {
				got = append(got, sdkaws.ToString(sn.SubnetId))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("subnets = %v; want %v", got, tc.want)
			}
		})
	}

	out, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnetA}})
	if err != nil {
		t.Fatal(err)
	}
	sn := out.Subnets[0]
	if sdkaws.ToString(sn.AvailabilityZone) != "us-west-2a" || sdkaws.ToString(sn.AvailabilityZoneId) != "usw2-az1" ||
		sdkaws.ToString(sn.CidrBlock) != "10.0.0.0/20" || sdkaws.ToInt32(sn.AvailableIpAddressCount) != 4091 ||
		sdkaws.ToString(sn.VpcId) != world.Subnets[0].VpcID || tagMap(sn.Tags)["nodeforge.dev/discovery"] != "sandbox" {
		t.Errorf("subnet = %+v", sn)
	}
}

func TestDescribeSecurityGroups(t *testing.T) {
	_, c, _ := start(t, world)
	tests := []struct {
		name    string
		in      ec2.DescribeSecurityGroupsInput
		want    []string
		wantErr string
	}{
		{"a tag filter matches the tagged group", ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/discovery", "sandbox")}}, []string{"sandbox-nodes"}, ""},
		{"tag-key matches the tagged group", ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{filter("tag-key", "nodeforge.dev/*")}}, []string{"sandbox-nodes"}, ""},
		{"group-name matches", ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{filter("group-name", "default")}}, []string{"default"}, ""},
		{"group-id matches", ec2.DescribeSecurityGroupsInput{Filters: []ec2types.Filter{filter("group-id", nodesGroup)}}, []string{"sandbox-nodes"}, ""},
		{"group IDs select groups", ec2.DescribeSecurityGroupsInput{GroupIds: []string{nodesGroup}}, []string{"sandbox-nodes"}, ""},
		{"an unknown group ID is an error", ec2.DescribeSecurityGroupsInput{GroupIds: []string{"sg-0123456789abcdef0"}}, nil, "InvalidGroup.NotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeSecurityGroups(ctx, &tc.in)
			if tc.wantErr != "" {
				wantCode(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range out.SecurityGroups {
				got = append(got, sdkaws.ToString(g.GroupName))
				if sdkaws.ToString(g.VpcId) == "" || sdkaws.ToString(g.GroupId) == "" {
					t.Errorf("group %+v lacks an ID or VPC", g)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("groups = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestDescribeImages(t *testing.T) {
	_, c, _ := start(t, world)
	tests := []struct {
		name    string
		in      ec2.DescribeImagesInput
		want    []string
		wantErr string
	}{
		{
			"a name wildcard and the amazon owner alias find the EKS images of one architecture",
			ec2.DescribeImagesInput{Owners: []string{"amazon"}, Filters: []ec2types.Filter{filter("name", "amazon-eks-node-al2023-x86_64-standard-1.37-*")}},
			[]string{"amazon-eks-node-al2023-x86_64-standard-1.37-v20261001", "amazon-eks-node-al2023-x86_64-standard-1.37-v20261101"}, "",
		},
		{
			"the EKS account ID is an owner too",
			ec2.DescribeImagesInput{Owners: []string{ec2fake.EKSAccountID}, Filters: []ec2types.Filter{filter("architecture", "arm64")}},
			[]string{"amazon-eks-node-al2023-arm64-nvidia-1.37-v20261101", "amazon-eks-node-al2023-arm64-standard-1.37-v20261001", "amazon-eks-node-al2023-arm64-standard-1.37-v20261101"}, "",
		},
		{"self is the caller's account", ec2.DescribeImagesInput{Owners: []string{"self"}}, []string{"nodeforge-custom-al2023-x86_64-20261115"}, ""},
		{"a tag filter finds the custom image", ec2.DescribeImagesInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/discovery", "sandbox")}}, []string{"nodeforge-custom-al2023-x86_64-20261115"}, ""},
		{"another owner sees nothing", ec2.DescribeImagesInput{Owners: []string{"999999999999"}}, nil, ""},
		{"an image ID selects an image", ec2.DescribeImagesInput{ImageIds: []string{amiARM}}, []string{"amazon-eks-node-al2023-arm64-standard-1.37-v20261101"}, ""},
		{"an unknown image ID is an error", ec2.DescribeImagesInput{ImageIds: []string{"ami-0123456789abcdef0"}}, nil, "InvalidAMIID.NotFound"},
		{"a malformed image ID is an error", ec2.DescribeImagesInput{ImageIds: []string{"image-1"}}, nil, "InvalidAMIID.Malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := c.DescribeImages(ctx, &tc.in)
			if tc.wantErr != "" {
				wantCode(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, im := range out.Images {
				got = append(got, sdkaws.ToString(im.Name))
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("images = %v; want %v", got, tc.want)
			}
		})
	}

	out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{amiX86}})
	if err != nil {
		t.Fatal(err)
	}
	im := out.Images[0]
	if sdkaws.ToString(im.CreationDate) != "2026-11-01T00:00:00.000Z" || im.Architecture != ec2types.ArchitectureValuesX8664 ||
		sdkaws.ToString(im.OwnerId) != ec2fake.EKSAccountID || im.State != ec2types.ImageStateAvailable || sdkaws.ToString(im.ImageOwnerAlias) != "amazon" {
		t.Errorf("image = creation %q arch %q owner %q state %q alias %q", sdkaws.ToString(im.CreationDate), im.Architecture,
			sdkaws.ToString(im.OwnerId), im.State, sdkaws.ToString(im.ImageOwnerAlias))
	}
}

// createTemplate makes a launch template for fleets to use.
func createTemplate(t *testing.T, c *ec2.Client, name, image, userData string) string {
	t.Helper()
	out, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
		LaunchTemplateName: sdkaws.String(name),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{
			ImageId:            sdkaws.String(image),
			UserData:           sdkaws.String(base64.StdEncoding.EncodeToString([]byte(userData))),
			SecurityGroupIds:   []string{nodesGroup},
			IamInstanceProfile: &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: sdkaws.String("sandbox-node")},
			MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
				HttpTokens: ec2types.LaunchTemplateHttpTokensStateRequired, HttpPutResponseHopLimit: sdkaws.Int32(1),
				HttpEndpoint: ec2types.LaunchTemplateInstanceMetadataEndpointStateEnabled,
			},
			BlockDeviceMappings: []ec2types.LaunchTemplateBlockDeviceMappingRequest{{
				DeviceName: sdkaws.String("/dev/xvda"),
				Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{
					VolumeSize: sdkaws.Int32(20), VolumeType: ec2types.VolumeTypeGp3, Encrypted: sdkaws.Bool(true), DeleteOnTermination: sdkaws.Bool(true),
				},
			}},
			TagSpecifications: []ec2types.LaunchTemplateTagSpecificationRequest{{
				ResourceType: ec2types.ResourceTypeInstance,
				Tags:         []ec2types.Tag{{Key: sdkaws.String("from-template"), Value: sdkaws.String("yes")}},
			}},
		},
		TagSpecifications: []ec2types.TagSpecification{{
			ResourceType: ec2types.ResourceTypeLaunchTemplate,
			Tags:         []ec2types.Tag{{Key: sdkaws.String("nodeforge.dev/nodeclass"), Value: sdkaws.String(name)}},
		}},
	})
	if err != nil {
		t.Fatalf("creating launch template %s: %v", name, err)
	}
	return sdkaws.ToString(out.LaunchTemplate.LaunchTemplateId)
}

func TestLaunchTemplates(t *testing.T) {
	s, c, _ := start(t, world)
	id := createTemplate(t, c, "nodes-default", amiX86, "#!/bin/bash\necho hello\n")
	if !strings.HasPrefix(id, "lt-") || len(id) != len("lt-")+17 {
		t.Errorf("template ID %q is not lt- and 17 hex digits", id)
	}

	t.Run("a duplicate name is refused", func(t *testing.T) {
		_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: sdkaws.String("nodes-default"),
			LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: sdkaws.String(amiX86)},
		})
		wantCode(t, err, "InvalidLaunchTemplateName.AlreadyExistsException")
	})

	t.Run("a retried create with the same client token returns the same template", func(t *testing.T) {
		in := &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: sdkaws.String("nodes-retried"), ClientToken: sdkaws.String("token-1"),
			LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: sdkaws.String(amiX86)},
		}
		first, err := c.CreateLaunchTemplate(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.CreateLaunchTemplate(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if sdkaws.ToString(first.LaunchTemplate.LaunchTemplateId) != sdkaws.ToString(again.LaunchTemplate.LaunchTemplateId) {
			t.Errorf("IDs differ: %s, %s", sdkaws.ToString(first.LaunchTemplate.LaunchTemplateId), sdkaws.ToString(again.LaunchTemplate.LaunchTemplateId))
		}
	})

	t.Run("describing by name and by tag finds it", func(t *testing.T) {
		for _, in := range []*ec2.DescribeLaunchTemplatesInput{
			{LaunchTemplateNames: []string{"nodes-default"}},
			{LaunchTemplateIds: []string{id}},
			{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/nodeclass", "nodes-*")}},
		} {
			out, err := c.DescribeLaunchTemplates(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.LaunchTemplates) != 1 || sdkaws.ToString(out.LaunchTemplates[0].LaunchTemplateId) != id {
				t.Fatalf("templates = %+v; want only %s", out.LaunchTemplates, id)
			}
			lt := out.LaunchTemplates[0]
			if sdkaws.ToInt64(lt.LatestVersionNumber) != 1 || lt.CreateTime == nil || tagMap(lt.Tags)["nodeforge.dev/nodeclass"] != "nodes-default" {
				t.Errorf("template = %+v", lt)
			}
		}
	})

	t.Run("an unknown name is NotFoundException", func(t *testing.T) {
		_, err := c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{"nope"}})
		wantCode(t, err, "InvalidLaunchTemplateName.NotFoundException")
	})

	t.Run("the version reads back the data", func(t *testing.T) {
		out, err := c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
			LaunchTemplateName: sdkaws.String("nodes-default"), Versions: []string{"$Latest"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.LaunchTemplateVersions) != 1 {
			t.Fatalf("versions = %d; want 1", len(out.LaunchTemplateVersions))
		}
		v := out.LaunchTemplateVersions[0]
		d := v.LaunchTemplateData
		ud, _ := base64.StdEncoding.DecodeString(sdkaws.ToString(d.UserData))
		if string(ud) != "#!/bin/bash\necho hello\n" || sdkaws.ToString(d.ImageId) != amiX86 ||
			!slices.Equal(d.SecurityGroupIds, []string{nodesGroup}) || sdkaws.ToString(d.IamInstanceProfile.Name) != "sandbox-node" {
			t.Errorf("data = user data %q image %q groups %v profile %+v", ud, sdkaws.ToString(d.ImageId), d.SecurityGroupIds, d.IamInstanceProfile)
		}
		if md := d.MetadataOptions; md.HttpTokens != ec2types.LaunchTemplateHttpTokensStateRequired || sdkaws.ToInt32(md.HttpPutResponseHopLimit) != 1 ||
			md.HttpEndpoint != ec2types.LaunchTemplateInstanceMetadataEndpointStateEnabled {
			t.Errorf("metadata options = %+v", md)
		}
		if len(d.BlockDeviceMappings) != 1 || sdkaws.ToInt32(d.BlockDeviceMappings[0].Ebs.VolumeSize) != 20 ||
			d.BlockDeviceMappings[0].Ebs.VolumeType != ec2types.VolumeTypeGp3 || !sdkaws.ToBool(d.BlockDeviceMappings[0].Ebs.Encrypted) {
			t.Errorf("block devices = %+v", d.BlockDeviceMappings)
		}
		if len(d.TagSpecifications) != 1 || tagMap(d.TagSpecifications[0].Tags)["from-template"] != "yes" {
			t.Errorf("tag specifications = %+v", d.TagSpecifications)
		}
		if sdkaws.ToInt64(v.VersionNumber) != 1 || !sdkaws.ToBool(v.DefaultVersion) {
			t.Errorf("version %d default %v", sdkaws.ToInt64(v.VersionNumber), sdkaws.ToBool(v.DefaultVersion))
		}
		_, err = c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: sdkaws.String(id), Versions: []string{"7"}})
		wantCode(t, err, "InvalidLaunchTemplateId.VersionNotFound")
	})

	t.Run("the server keeps the decoded data", func(t *testing.T) {
		lts := s.LaunchTemplates()
		i := slices.IndexFunc(lts, func(lt ec2fake.LaunchTemplate) bool { return lt.ID == id })
		if i < 0 {
			t.Fatalf("template %s not kept", id)
		}
		lt := lts[i]
		if lt.UserData != "#!/bin/bash\necho hello\n" || lt.MetadataOptions.HTTPTokens != "required" ||
			lt.IAMInstanceProfileName != "sandbox-node" || lt.Data.Get("BlockDeviceMapping.1.Ebs.VolumeType") != "gp3" {
			t.Errorf("kept template = %+v", lt)
		}
	})

	t.Run("user data that is not base64 is refused", func(t *testing.T) {
		_, err := c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: sdkaws.String("bad-user-data"),
			LaunchTemplateData: &ec2types.RequestLaunchTemplateData{UserData: sdkaws.String("not base64!")},
		})
		wantCode(t, err, "InvalidUserData.Malformed")
	})

	t.Run("a deleted template is gone", func(t *testing.T) {
		out, err := c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: sdkaws.String(id)})
		if err != nil {
			t.Fatal(err)
		}
		if sdkaws.ToString(out.LaunchTemplate.LaunchTemplateName) != "nodes-default" {
			t.Errorf("deleted %+v", out.LaunchTemplate)
		}
		_, err = c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateIds: []string{id}})
		wantCode(t, err, "InvalidLaunchTemplateId.NotFound")
		_, err = c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: sdkaws.String("nodes-default")})
		wantCode(t, err, "InvalidLaunchTemplateName.NotFoundException")
	})
}

// override is one launch template override.
func override(instanceType, subnet string) ec2types.FleetLaunchTemplateOverridesRequest {
	return ec2types.FleetLaunchTemplateOverridesRequest{InstanceType: ec2types.InstanceType(instanceType), SubnetId: sdkaws.String(subnet), AvailabilityZone: sdkaws.String(zoneOf[subnet])}
}

// fleet is an instant fleet request for total instances of capacityType.
func fleet(template string, total int32, capacityType ec2types.DefaultTargetCapacityType, overrides ...ec2types.FleetLaunchTemplateOverridesRequest) *ec2.CreateFleetInput {
	return &ec2.CreateFleetInput{
		Type: ec2types.FleetTypeInstant,
		LaunchTemplateConfigs: []ec2types.FleetLaunchTemplateConfigRequest{{
			LaunchTemplateSpecification: &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateName: sdkaws.String(template), Version: sdkaws.String("$Latest")},
			Overrides:                   overrides,
		}},
		TargetCapacitySpecification: &ec2types.TargetCapacitySpecificationRequest{TotalTargetCapacity: sdkaws.Int32(total), DefaultTargetCapacityType: capacityType},
		SpotOptions:                 &ec2types.SpotOptionsRequest{AllocationStrategy: ec2types.SpotAllocationStrategyPriceCapacityOptimized},
		OnDemandOptions:             &ec2types.OnDemandOptionsRequest{AllocationStrategy: ec2types.FleetOnDemandAllocationStrategyLowestPrice},
		TagSpecifications: []ec2types.TagSpecification{{
			ResourceType: ec2types.ResourceTypeInstance,
			Tags:         []ec2types.Tag{{Key: sdkaws.String("nodeforge.dev/nodepool"), Value: sdkaws.String("default")}},
		}},
	}
}

// pool is an instance type in a subnet, as the fleet's response names it.
type pool struct{ instanceType, subnet string }

func (p pool) String() string { return p.instanceType + "@" + zoneOf[p.subnet] }

func overridePool(lo *ec2types.LaunchTemplateAndOverridesResponse) pool {
	return pool{string(lo.Overrides.InstanceType), sdkaws.ToString(lo.Overrides.SubnetId)}
}

// launchedPools returns how many instances each pool launched.
func launchedPools(out *ec2.CreateFleetOutput) map[pool]int {
	got := map[pool]int{}
	for _, fi := range out.Instances {
		got[overridePool(fi.LaunchTemplateAndOverrides)] += len(fi.InstanceIds)
	}
	return got
}

// failedPools returns each failed pool's error code.
func failedPools(out *ec2.CreateFleetOutput) map[pool]string {
	got := map[pool]string{}
	for _, e := range out.Errors {
		got[overridePool(e.LaunchTemplateAndOverrides)] = sdkaws.ToString(e.ErrorCode)
	}
	return got
}

// bySpotPrice returns the pools cheapest first.
func bySpotPrice(pools ...pool) []pool {
	out := slices.Clone(pools)
	slices.SortStableFunc(out, func(a, b pool) int {
		pa, pb := world.SpotPrices[a.instanceType][zoneOf[a.subnet]], world.SpotPrices[b.instanceType][zoneOf[b.subnet]]
		return int(math.Copysign(1, pa-pb))
	})
	return out
}

func TestCreateFleet(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "#!/bin/bash\n/etc/eks/bootstrap.sh sandbox\n")
	all := []pool{{"m5.large", subnetA}, {"m5.large", subnetB}, {"m5.large", subnetC}, {"c5.large", subnetA}, {"c5.large", subnetB}, {"c5.large", subnetC}}
	overrides := func(pools ...pool) []ec2types.FleetLaunchTemplateOverridesRequest {
		var out []ec2types.FleetLaunchTemplateOverridesRequest
		for _, p := range pools {
			out = append(out, override(p.instanceType, p.subnet))
		}
		return out
	}
	cheapest := bySpotPrice(all...)

	t.Run("a spot fleet launches in the cheapest pool", func(t *testing.T) {
		out, err := c.CreateFleet(ctx, fleet("nodes", 2, ec2types.DefaultTargetCapacityTypeSpot, overrides(all...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); len(got) != 1 || got[cheapest[0]] != 2 {
			t.Fatalf("launched %v; want 2 in %v", got, cheapest[0])
		}
		if len(out.Errors) != 0 {
			t.Errorf("errors = %v; want none", failedPools(out))
		}
		fi := out.Instances[0]
		if fi.Lifecycle != ec2types.InstanceLifecycleSpot || string(fi.InstanceType) != cheapest[0].instanceType || sdkaws.ToString(fi.SubnetId) != cheapest[0].subnet {
			t.Errorf("fleet instance = %+v", fi)
		}
		spec := fi.LaunchTemplateAndOverrides.LaunchTemplateSpecification
		if !strings.HasPrefix(sdkaws.ToString(spec.LaunchTemplateId), "lt-") || sdkaws.ToString(spec.Version) != "1" {
			t.Errorf("launch template specification = %+v", spec)
		}
		if !strings.HasPrefix(sdkaws.ToString(out.FleetId), "fleet-") {
			t.Errorf("fleet ID = %q", sdkaws.ToString(out.FleetId))
		}

		desc, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: fi.InstanceIds})
		if err != nil {
			t.Fatal(err)
		}
		var insts []ec2types.Instance
		for _, r := range desc.Reservations {
			insts = append(insts, r.Instances...)
		}
		if len(insts) != 2 {
			t.Fatalf("described %d instances; want 2", len(insts))
		}
		cidr := netip.MustParsePrefix(world.Subnets[slices.IndexFunc(world.Subnets, func(sn ec2fake.Subnet) bool { return sn.ID == cheapest[0].subnet })].CIDR)
		for _, inst := range insts {
			id := sdkaws.ToString(inst.InstanceId)
			if len(id) != len("i-")+17 {
				t.Errorf("instance ID %q is not i- and 17 hex digits", id)
			}
			ip := netip.MustParseAddr(sdkaws.ToString(inst.PrivateIpAddress))
			if !cidr.Contains(ip) {
				t.Errorf("%s has address %s outside %s", id, ip, cidr)
			}
			if want := "ip-" + strings.ReplaceAll(ip.String(), ".", "-") + ".us-west-2.compute.internal"; sdkaws.ToString(inst.PrivateDnsName) != want {
				t.Errorf("%s private DNS name = %q; want %q", id, sdkaws.ToString(inst.PrivateDnsName), want)
			}
			if inst.State.Name != ec2types.InstanceStateNameRunning || sdkaws.ToInt32(inst.State.Code) != 16 {
				t.Errorf("%s state = %+v", id, *inst.State)
			}
			if inst.InstanceLifecycle != ec2types.InstanceLifecycleTypeSpot || sdkaws.ToString(inst.ImageId) != amiX86 ||
				sdkaws.ToString(inst.Placement.AvailabilityZone) != zoneOf[cheapest[0].subnet] || inst.LaunchTime == nil {
				t.Errorf("%s = lifecycle %q image %q zone %q", id, inst.InstanceLifecycle, sdkaws.ToString(inst.ImageId), sdkaws.ToString(inst.Placement.AvailabilityZone))
			}
			tags := tagMap(inst.Tags)
			if tags["nodeforge.dev/nodepool"] != "default" || tags["from-template"] != "yes" || tags["aws:ec2:fleet-id"] != sdkaws.ToString(out.FleetId) {
				t.Errorf("%s tags = %v", id, tags)
			}
			if len(inst.SecurityGroups) != 1 || sdkaws.ToString(inst.SecurityGroups[0].GroupName) != "sandbox-nodes" {
				t.Errorf("%s groups = %+v", id, inst.SecurityGroups)
			}
		}
		for _, inst := range s.Instances() {
			if inst.FleetID == sdkaws.ToString(out.FleetId) && inst.UserData != "#!/bin/bash\n/etc/eks/bootstrap.sh sandbox\n" {
				t.Errorf("%s user data = %q", inst.ID, inst.UserData)
			}
		}
	})

	t.Run("capacity faults on the cheapest pools launch the next one and report them", func(t *testing.T) {
		defer s.ClearFaults()
		s.FailCapacity(ec2fake.CapacityFault{InstanceType: cheapest[0].instanceType, Zone: zoneOf[cheapest[0].subnet], CapacityType: "spot"})
		s.FailCapacity(ec2fake.CapacityFault{InstanceType: cheapest[1].instanceType, Zone: zoneOf[cheapest[1].subnet], Code: "MaxSpotInstanceCountExceeded"})
		out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeSpot, overrides(all...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); len(got) != 1 || got[cheapest[2]] != 1 {
			t.Errorf("launched %v; want 1 in %v", got, cheapest[2])
		}
		want := map[pool]string{cheapest[0]: "InsufficientInstanceCapacity", cheapest[1]: "MaxSpotInstanceCountExceeded"}
		if got := failedPools(out); !mapsEqual(got, want) {
			t.Errorf("errors = %v; want %v", got, want)
		}
		for _, e := range out.Errors {
			if e.Lifecycle != ec2types.InstanceLifecycleSpot || sdkaws.ToString(e.ErrorMessage) == "" {
				t.Errorf("error %+v lacks lifecycle or message", e)
			}
		}
	})

	t.Run("a fleet with no capacity anywhere fails wholly but answers 200", func(t *testing.T) {
		defer s.ClearFaults()
		s.FailCapacity(ec2fake.CapacityFault{})
		before := len(s.Instances())
		out, err := c.CreateFleet(ctx, fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeOnDemand, overrides(all...)...))
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Instances) != 0 || len(out.Errors) != len(all) || len(s.Instances()) != before {
			t.Errorf("instances %d errors %d; want none and %d", len(out.Instances), len(out.Errors), len(all))
		}
		for _, e := range out.Errors {
			if sdkaws.ToString(e.ErrorCode) != "InsufficientInstanceCapacity" || e.Lifecycle != ec2types.InstanceLifecycleOnDemand {
				t.Errorf("error = %s %s", sdkaws.ToString(e.ErrorCode), e.Lifecycle)
			}
		}
	})

	t.Run("a capacity limit fulfils the fleet partially", func(t *testing.T) {
		defer s.ClearFaults()
		s.LimitCapacity("r5.large", "", "on-demand", 2)
		p := pool{"r5.large", subnetB}
		out, err := c.CreateFleet(ctx, fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeOnDemand, overrides(p)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); got[p] != 2 {
			t.Errorf("launched %v; want 2 in %v", got, p)
		}
		if got := failedPools(out); got[p] != "InsufficientInstanceCapacity" {
			t.Errorf("errors = %v; want InsufficientInstanceCapacity for %v", got, p)
		}
	})

	t.Run("a limit spills over into the next pool", func(t *testing.T) {
		defer s.ClearFaults()
		s.LimitCapacity(cheapest[0].instanceType, zoneOf[cheapest[0].subnet], "spot", 1)
		out, err := c.CreateFleet(ctx, fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeSpot, overrides(all...)...))
		if err != nil {
			t.Fatal(err)
		}
		want := map[pool]int{cheapest[0]: 1, cheapest[1]: 2}
		if got := launchedPools(out); !mapsEqual(got, want) {
			t.Errorf("launched %v; want %v", got, want)
		}
	})

	t.Run("a type not offered in a zone is Unsupported there", func(t *testing.T) {
		pools := []pool{{"g4dn.xlarge", subnetC}, {"g4dn.xlarge", subnetA}}
		out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeOnDemand, overrides(pools...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedPools(out); got[pools[0]] != "Unsupported" {
			t.Errorf("errors = %v; want Unsupported for %v", got, pools[0])
		}
		if got := launchedPools(out); got[pools[1]] != 1 {
			t.Errorf("launched %v; want 1 in %v", got, pools[1])
		}
	})

	t.Run("an arm64 type with an x86_64 image fails that pool", func(t *testing.T) {
		pools := []pool{{"m6g.large", subnetA}, {"m5.large", subnetA}}
		out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeOnDemand, overrides(pools...)...))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedPools(out); got[pools[0]] != "InvalidParameterValue" {
			t.Errorf("errors = %v; want InvalidParameterValue for %v", got, pools[0])
		}
		if got := launchedPools(out); got[pools[1]] != 1 {
			t.Errorf("launched %v", got)
		}
	})

	t.Run("an image override replaces the template's", func(t *testing.T) {
		o := override("m6g.large", subnetB)
		o.ImageId = sdkaws.String(amiARM)
		out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeOnDemand, o))
		if err != nil || len(out.Instances) != 1 {
			t.Fatalf("fleet: %v, %+v", err, out)
		}
		id := out.Instances[0].InstanceIds[0]
		for _, inst := range s.Instances() {
			if inst.ID == id && (inst.ImageID != amiARM || inst.Architecture != "arm64") {
				t.Errorf("%s image %s architecture %s", id, inst.ImageID, inst.Architecture)
			}
		}
	})

	t.Run("prioritized on-demand follows priorities, not prices", func(t *testing.T) {
		expensive, cheap := override("m5.2xlarge", subnetA), override("t3.medium", subnetA)
		expensive.Priority, cheap.Priority = sdkaws.Float64(0), sdkaws.Float64(1)
		in := fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeOnDemand, cheap, expensive)
		in.OnDemandOptions.AllocationStrategy = ec2types.FleetOnDemandAllocationStrategyPrioritized
		out, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); got[pool{"m5.2xlarge", subnetA}] != 1 {
			t.Errorf("launched %v; want the priority 0 pool", got)
		}
		in.OnDemandOptions.AllocationStrategy = ec2types.FleetOnDemandAllocationStrategyLowestPrice
		// The SDK wrote the ClientToken it generated into in; sending
		// changed parameters with it would be IdempotentParameterMismatch.
		in.ClientToken = nil
		out, err = c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := launchedPools(out); got[pool{"t3.medium", subnetA}] != 1 {
			t.Errorf("launched %v; want the cheapest pool", got)
		}
	})

	t.Run("on-demand and spot targets split the fleet", func(t *testing.T) {
		in := fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeSpot, overrides(all...)...)
		in.TargetCapacitySpecification.OnDemandTargetCapacity = sdkaws.Int32(1)
		out, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		n := map[ec2types.InstanceLifecycle]int{}
		for _, fi := range out.Instances {
			n[fi.Lifecycle] += len(fi.InstanceIds)
		}
		if n[ec2types.InstanceLifecycleOnDemand] != 1 || n[ec2types.InstanceLifecycleSpot] != 2 {
			t.Errorf("launched %v; want 1 on-demand and 2 spot", n)
		}
	})

	t.Run("diversified spreads spot instances over the pools", func(t *testing.T) {
		pools := []pool{{"m5.large", subnetA}, {"m5.large", subnetB}, {"m5.large", subnetC}}
		in := fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeSpot, overrides(pools...)...)
		in.SpotOptions.AllocationStrategy = ec2types.SpotAllocationStrategyDiversified
		out, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		want := map[pool]int{pools[0]: 1, pools[1]: 1, pools[2]: 1}
		if got := launchedPools(out); !mapsEqual(got, want) {
			t.Errorf("launched %v; want one in each pool", got)
		}
	})

	t.Run("a spot max price below the market fails the pool", func(t *testing.T) {
		o := override(cheapest[0].instanceType, cheapest[0].subnet)
		o.MaxPrice = sdkaws.String("0.001")
		out, err := c.CreateFleet(ctx, fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeSpot, o))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedPools(out); got[cheapest[0]] != "SpotMaxPriceTooLow" || len(out.Instances) != 0 {
			t.Errorf("errors %v instances %d", got, len(out.Instances))
		}
	})

	t.Run("the same client token returns the same fleet and launches nothing", func(t *testing.T) {
		in := fleet("nodes", 2, ec2types.DefaultTargetCapacityTypeSpot, overrides(all...)...)
		in.ClientToken = sdkaws.String("nodeclaim-abc")
		first, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		before := len(s.Instances())
		again, err := c.CreateFleet(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if sdkaws.ToString(first.FleetId) != sdkaws.ToString(again.FleetId) ||
			!slices.Equal(first.Instances[0].InstanceIds, again.Instances[0].InstanceIds) || len(s.Instances()) != before {
			t.Errorf("replay: fleet %s vs %s, instances %v vs %v, %d new",
				sdkaws.ToString(first.FleetId), sdkaws.ToString(again.FleetId), first.Instances[0].InstanceIds, again.Instances[0].InstanceIds, len(s.Instances())-before)
		}
		in.TargetCapacitySpecification.TotalTargetCapacity = sdkaws.Int32(3)
		_, err = c.CreateFleet(ctx, in)
		wantCode(t, err, "IdempotentParameterMismatch")
	})

	tooMany := make([]ec2types.FleetLaunchTemplateOverridesRequest, 301)
	for i := range tooMany {
		tooMany[i] = override(fmt.Sprintf("x%d.large", i), subnetA)
	}
	invalid := []struct {
		name   string
		modify func(*ec2.CreateFleetInput)
		code   string
	}{
		{"a fleet that is not instant is refused", func(in *ec2.CreateFleetInput) { in.Type = "" }, "UnsupportedOperation"},
		{"an unknown subnet is InvalidSubnetID.NotFound", func(in *ec2.CreateFleetInput) {
			in.LaunchTemplateConfigs[0].Overrides[0].SubnetId = sdkaws.String("subnet-0123456789abcdef0")
			in.LaunchTemplateConfigs[0].Overrides[0].AvailabilityZone = nil
		}, "InvalidSubnetID.NotFound"},
		{"an unknown launch template name is refused", func(in *ec2.CreateFleetInput) {
			in.LaunchTemplateConfigs[0].LaunchTemplateSpecification.LaunchTemplateName = sdkaws.String("missing")
		}, "InvalidLaunchTemplateName.NotFoundException"},
		{"an unknown launch template ID is refused", func(in *ec2.CreateFleetInput) {
			in.LaunchTemplateConfigs[0].LaunchTemplateSpecification = &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateId: sdkaws.String("lt-0123456789abcdef0"), Version: sdkaws.String("$Latest")}
		}, "InvalidLaunchTemplateId.NotFound"},
		{"more than 300 overrides are refused", func(in *ec2.CreateFleetInput) { in.LaunchTemplateConfigs[0].Overrides = tooMany }, "InvalidParameterValue"},
		{"a pool given twice is refused", func(in *ec2.CreateFleetInput) {
			in.LaunchTemplateConfigs[0].Overrides = append(in.LaunchTemplateConfigs[0].Overrides, in.LaunchTemplateConfigs[0].Overrides[0])
		}, "InvalidFleetConfig"},
		{"a zone that disagrees with the subnet is refused", func(in *ec2.CreateFleetInput) {
			in.LaunchTemplateConfigs[0].Overrides[0].AvailabilityZone = sdkaws.String("us-west-2c")
		}, "InvalidParameterValue"},
		{"targets larger than the total are refused", func(in *ec2.CreateFleetInput) {
			in.TargetCapacitySpecification.OnDemandTargetCapacity = sdkaws.Int32(2)
		}, "InvalidParameterValue"},
		{"an unknown allocation strategy is refused", func(in *ec2.CreateFleetInput) { in.SpotOptions.AllocationStrategy = "cheapest" }, "InvalidParameterValue"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			in := fleet("nodes", 1, ec2types.DefaultTargetCapacityTypeSpot, override("m5.large", subnetA))
			tc.modify(in)
			_, err := c.CreateFleet(ctx, in)
			wantCode(t, err, tc.code)
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// launch creates n on-demand m5.large instances in subnet with extra
// instance tags and returns their IDs.
func launch(t *testing.T, c *ec2.Client, n int32, subnet string, tags map[string]string) []string {
	t.Helper()
	in := fleet("nodes", n, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", subnet))
	for k, v := range tags {
		in.TagSpecifications[0].Tags = append(in.TagSpecifications[0].Tags, ec2types.Tag{Key: sdkaws.String(k), Value: sdkaws.String(v)})
	}
	out, err := c.CreateFleet(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, fi := range out.Instances {
		ids = append(ids, fi.InstanceIds...)
	}
	if len(ids) != int(n) {
		t.Fatalf("launched %d instances; want %d (errors %v)", len(ids), n, failedPools(out))
	}
	return ids
}

func describeIDs(t *testing.T, c *ec2.Client, in *ec2.DescribeInstancesInput) []string {
	t.Helper()
	var ids []string
	p := ec2.NewDescribeInstancesPaginator(c, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Reservations {
			if !strings.HasPrefix(sdkaws.ToString(r.ReservationId), "r-") {
				t.Errorf("reservation ID %q", sdkaws.ToString(r.ReservationId))
			}
			for _, inst := range r.Instances {
				ids = append(ids, sdkaws.ToString(inst.InstanceId))
			}
		}
	}
	return ids
}

func TestDescribeInstances(t *testing.T) {
	_, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "")
	blue := launch(t, c, 7, subnetA, map[string]string{"team": "blue"})
	green := launch(t, c, 5, subnetB, map[string]string{"team": "green", "nodeforge.dev/claim": "claim-1"})
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: green[:1]}); err != nil {
		t.Fatal(err)
	}
	everyone := append(slices.Clone(blue), green...)

	tests := []struct {
		name string
		in   ec2.DescribeInstancesInput
		want []string
	}{
		{"the paginator walks every page", ec2.DescribeInstancesInput{MaxResults: sdkaws.Int32(5)}, everyone},
		{"a tag filter selects by value", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag:team", "green")}}, green},
		{"a tag filter takes wildcards", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag:team", "gr*")}}, green},
		{"tag-key selects by key", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag-key", "nodeforge.dev/claim")}}, green},
		{"instance-state-name running leaves out the terminated", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag:team", "green"), filter("instance-state-name", "running", "pending")}}, green[1:]},
		{"terminated instances stay visible", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("instance-state-name", "terminated")}}, green[:1]},
		{"instance-id selects", ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("instance-id", blue[2], green[3])}}, []string{blue[2], green[3]}},
		{"instance IDs select", ec2.DescribeInstancesInput{InstanceIds: []string{green[4], blue[0]}}, []string{blue[0], green[4]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := describeIDs(t, c, &tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("instances = %v; want %v", got, tc.want)
			}
		})
	}

	errs := []struct {
		name string
		in   ec2.DescribeInstancesInput
		code string
	}{
		{"an unknown instance ID is InvalidInstanceID.NotFound", ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, "InvalidInstanceID.NotFound"},
		{"a malformed instance ID is InvalidInstanceID.Malformed", ec2.DescribeInstancesInput{InstanceIds: []string{"instance-1"}}, "InvalidInstanceID.Malformed"},
		{"instance IDs and MaxResults do not mix", ec2.DescribeInstancesInput{InstanceIds: blue[:1], MaxResults: sdkaws.Int32(5)}, "InvalidParameterCombination"},
		{"a bad token is refused", ec2.DescribeInstancesInput{NextToken: sdkaws.String("garbage")}, "InvalidPaginationToken"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.DescribeInstances(ctx, &tc.in)
			wantCode(t, err, tc.code)
		})
	}
}

func TestTerminateInstances(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "")
	var mu sync.Mutex
	var terminated []string
	s.OnTerminate(func(inst ec2fake.Instance) {
		mu.Lock()
		defer mu.Unlock()
		terminated = append(terminated, inst.ID)
	})
	free := func() int32 {
		out, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnetC}})
		if err != nil {
			t.Fatal(err)
		}
		return sdkaws.ToInt32(out.Subnets[0].AvailableIpAddressCount)
	}
	before := free()
	ids := launch(t, c, 2, subnetC, nil)
	if got := free(); got != before-2 {
		t.Errorf("free addresses after launching 2: %d; want %d", got, before-2)
	}

	out, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range out.TerminatingInstances {
		if ch.PreviousState.Name != ec2types.InstanceStateNameRunning || ch.CurrentState.Name != ec2types.InstanceStateNameShuttingDown || sdkaws.ToInt32(ch.CurrentState.Code) != 32 {
			t.Errorf("%s: %s -> %s", sdkaws.ToString(ch.InstanceId), ch.PreviousState.Name, ch.CurrentState.Name)
		}
	}
	if got := free(); got != before {
		t.Errorf("free addresses after terminating: %d; want %d", got, before)
	}

	out, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids[:1]})
	if err != nil {
		t.Fatalf("terminating again: %v", err)
	}
	if ch := out.TerminatingInstances[0]; ch.PreviousState.Name != ec2types.InstanceStateNameTerminated || ch.CurrentState.Name != ec2types.InstanceStateNameTerminated {
		t.Errorf("terminating again: %s -> %s; want terminated -> terminated", ch.PreviousState.Name, ch.CurrentState.Name)
	}
	if !slices.Equal(terminated, ids) {
		t.Errorf("OnTerminate saw %v; want %v once each", terminated, ids)
	}

	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}})
	wantCode(t, err, "InvalidInstanceID.NotFound")
	_, err = c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-xyz"}})
	wantCode(t, err, "InvalidInstanceID.Malformed")
}

// clock is a settable time source for World.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestInstanceLifecycleFollowsTheClock(t *testing.T) {
	clk := &clock{now: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)}
	w := ec2fake.DefaultWorld()
	w.Now = clk.Now
	w.PendingFor = 30 * time.Second
	w.ShuttingDownFor = time.Minute
	w.TerminatedVisibleFor = time.Hour
	s, c, _ := start(t, w)
	createTemplate(t, c, "nodes", amiX86, "")
	id := launch(t, c, 1, subnetA, nil)[0]

	state := func() string {
		out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		if errorCode(err) == "InvalidInstanceID.NotFound" {
			return "gone"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Reservations[0].Instances[0].State.Name)
	}
	steps := []struct {
		name    string
		advance time.Duration
		act     func()
		want    string
	}{
		{"a new instance is pending", 0, nil, "pending"},
		{"it runs once PendingFor has passed", 30 * time.Second, nil, "running"},
		{"termination starts with shutting-down", 0, func() {
			if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
				t.Fatal(err)
			}
		}, "shutting-down"},
		{"it is terminated once ShuttingDownFor has passed", time.Minute, nil, "terminated"},
		{"it is still listed within TerminatedVisibleFor", 59 * time.Minute, nil, "terminated"},
		{"it is gone after TerminatedVisibleFor", time.Minute, nil, "gone"},
	}
	for _, st := range steps {
		clk.Advance(st.advance)
		if st.act != nil {
			st.act()
		}
		if got := state(); got != st.want {
			t.Fatalf("%s: state = %s; want %s", st.name, got, st.want)
		}
	}
	if insts := s.Instances(); len(insts) != 1 || insts[0].State != "terminated" {
		t.Errorf("Instances() = %+v; want the terminated instance still kept", insts)
	}
}

func TestTags(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "")
	id := launch(t, c, 1, subnetA, nil)[0]
	_, err := c.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{id, subnetB},
		Tags:      []ec2types.Tag{{Key: sdkaws.String("karpenter.sh/nodeclaim"), Value: sdkaws.String("claim-9")}, {Key: sdkaws.String("Name"), Value: sdkaws.String("node-9")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := describeIDs(t, c, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag:karpenter.sh/nodeclaim", "claim-9")}}); !slices.Equal(got, []string{id}) {
		t.Errorf("tagged instances = %v; want %s", got, id)
	}
	subnets, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []ec2types.Filter{filter("tag:Name", "node-9")}})
	if err != nil || len(subnets.Subnets) != 1 {
		t.Errorf("tagged subnets: %v, %+v", err, subnets)
	}

	_, err = c.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: sdkaws.String("Name"), Value: sdkaws.String("other")}, {Key: sdkaws.String("karpenter.sh/nodeclaim")}}})
	if err != nil {
		t.Fatal(err)
	}
	insts := s.Instances()
	tags := insts[len(insts)-1].Tags
	if _, ok := tags["karpenter.sh/nodeclaim"]; ok || tags["Name"] != "node-9" {
		t.Errorf("tags after DeleteTags = %v; want the claim tag gone and Name kept (its value did not match)", tags)
	}

	_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []ec2types.Tag{{Key: sdkaws.String("aws:reserved"), Value: sdkaws.String("x")}}})
	wantCode(t, err, "InvalidParameterValue")
	_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{"i-0123456789abcdef0"}, Tags: []ec2types.Tag{{Key: sdkaws.String("a"), Value: sdkaws.String("b")}}})
	wantCode(t, err, "InvalidInstanceID.NotFound")
}

func TestThrottling(t *testing.T) {
	s, c, url := start(t, world)

	t.Run("the standard retryer gets through n throttles", func(t *testing.T) {
		s.Throttle("DescribeSubnets", 2)
		before := s.Calls("DescribeSubnets")
		if _, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{}); err != nil {
			t.Fatalf("with retries: %v", err)
		}
		if got := s.Calls("DescribeSubnets") - before; got != 3 {
			t.Errorf("calls = %d; want 2 throttled and 1 that succeeded", got)
		}
	})

	t.Run("without retries the SDK surfaces RequestLimitExceeded", func(t *testing.T) {
		s.Throttle("", 1)
		once := newClient(url, sdkaws.NopRetryer{})
		_, err := once.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
		wantCode(t, err, "RequestLimitExceeded")
		var re *awshttp.ResponseError
		if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusServiceUnavailable {
			t.Errorf("error %v; want HTTP 503", err)
		}
		if _, err := once.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{}); err != nil {
			t.Errorf("after the throttle: %v", err)
		}
	})
}

func TestDeny(t *testing.T) {
	s, c, _ := start(t, world)
	s.Deny("DescribeImages", true)
	_, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	wantCode(t, err, "UnauthorizedOperation")
	var ae smithy.APIError
	if errors.As(err, &ae) && !strings.Contains(ae.ErrorMessage(), "Encoded authorization failure message") {
		t.Errorf("message %q lacks the encoded authorization message", ae.ErrorMessage())
	}
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden {
		t.Errorf("error %v; want HTTP 403", err)
	}
	if _, err := c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{}); err != nil {
		t.Errorf("another action was denied too: %v", err)
	}
	// A permission probe with DryRun tells allowed from denied.
	_, err = c.DescribeImages(ctx, &ec2.DescribeImagesInput{DryRun: sdkaws.Bool(true)})
	wantCode(t, err, "UnauthorizedOperation")
	_, err = c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{DryRun: sdkaws.Bool(true)})
	wantCode(t, err, "DryRunOperation")
	s.Deny("DescribeImages", false)
	if _, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{}); err != nil {
		t.Errorf("after lifting the denial: %v", err)
	}
	// Launches counts the fleets clients tried, refused ones included,
	// and not their dry runs.
	s.Deny("CreateFleet", true)
	probe := fleet("nodes-default", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", "subnet-a"))
	probe.DryRun = sdkaws.Bool(true)
	_, err = c.CreateFleet(ctx, probe)
	wantCode(t, err, "UnauthorizedOperation")
	_, err = c.CreateFleet(ctx, fleet("nodes-default", 1, ec2types.DefaultTargetCapacityTypeOnDemand, override("m5.large", "subnet-a")))
	wantCode(t, err, "UnauthorizedOperation")
	if n, calls := s.Launches(), s.Calls("CreateFleet"); n != 1 || calls != 2 {
		t.Errorf("after a dry run and a launch, both denied: Launches() = %d, Calls = %d; want 1 and 2", n, calls)
	}
}

func TestRequestsMustBeSignedAndKnown(t *testing.T) {
	s, _, url := start(t, world)

	resp, err := http.PostForm(url, map[string][]string{"Action": {"DescribeSubnets"}, "Version": {"2016-11-15"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned request: HTTP %d; want 401", resp.StatusCode)
	}

	wrongRegion := ec2.New(ec2.Options{
		Region: "eu-west-1", BaseEndpoint: sdkaws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""), Retryer: sdkaws.NopRetryer{},
	})
	_, err = wrongRegion.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	wantCode(t, err, "AuthFailure")

	// An action the fake does not model, sent by the real SDK.
	c := newClient(url, sdkaws.NopRetryer{})
	_, err = c.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{})
	wantCode(t, err, "InvalidAction")

	reqs := s.Requests()
	if last := reqs[len(reqs)-1]; last.Action != "DescribeVpcs" || last.Form.Get("Version") != "2016-11-15" {
		t.Errorf("last request = %+v", last)
	}
}

func TestOnLaunchAndAddInstance(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "node bootstrap")
	var seen []ec2fake.Instance
	s.OnLaunch(func(inst ec2fake.Instance) {
		// The lock is not held: reading the server from here must not
		// deadlock.
		_ = s.Instances()
		seen = append(seen, inst)
	})
	ids := launch(t, c, 2, subnetB, nil)
	if len(seen) != 2 || seen[0].ID != ids[0] || seen[0].UserData != "node bootstrap" || seen[0].State != "running" ||
		seen[0].Zone != "us-west-2b" || seen[0].LaunchTemplateName != "nodes" || seen[0].Lifecycle != "on-demand" {
		t.Errorf("OnLaunch saw %+v", seen)
	}

	orphan := s.AddInstance(ec2fake.Instance{Type: "m5.large", SubnetID: subnetC, ImageID: amiX86, Tags: map[string]string{"nodeforge.dev/nodepool": "default"}})
	got := describeIDs(t, c, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("tag:nodeforge.dev/nodepool", "default"), filter("availability-zone", "us-west-2c")}})
	if !slices.Equal(got, []string{orphan.ID}) || orphan.PrivateIP == "" || orphan.State != "running" {
		t.Errorf("orphan %+v; described %v", orphan, got)
	}
	if len(seen) != 2 {
		t.Errorf("AddInstance called OnLaunch")
	}
}

func TestConcurrentFleetsGetDistinctAddresses(t *testing.T) {
	s, c, _ := start(t, world)
	createTemplate(t, c, "nodes", amiX86, "")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.CreateFleet(ctx, fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeOnDemand, override("c5.large", subnetA))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ips := map[string]bool{}
	for _, inst := range s.Instances() {
		if ips[inst.PrivateIP] {
			t.Errorf("address %s given twice", inst.PrivateIP)
		}
		ips[inst.PrivateIP] = true
	}
	if len(ips) != 24 {
		t.Errorf("%d distinct addresses; want 24", len(ips))
	}
}

func TestAFullSubnetFulfilsPartially(t *testing.T) {
	w := ec2fake.DefaultWorld()
	w.Subnets[0].AvailableIPs = 2
	_, c, _ := start(t, w)
	createTemplate(t, c, "nodes", amiX86, "")
	p := pool{"m5.large", subnetA}
	out, err := c.CreateFleet(ctx, fleet("nodes", 3, ec2types.DefaultTargetCapacityTypeOnDemand, override(p.instanceType, p.subnet)))
	if err != nil {
		t.Fatal(err)
	}
	if got := launchedPools(out); got[p] != 2 {
		t.Errorf("launched %v; want 2", got)
	}
	if got := failedPools(out); got[p] != "InsufficientFreeAddressesInSubnet" {
		t.Errorf("errors = %v; want InsufficientFreeAddressesInSubnet", got)
	}
}
