package eksfake_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeforge/nodeforge/internal/sandbox/eksfake"
)

// These tests drive the fake through the real SDK client over loopback HTTP
// and check what the SDK decodes: the proof that the fake speaks EKS's
// wire shapes.

const region = "us-west-2"

// caPEM stands for a cluster CA; the fake only carries the bytes.
var caPEM = []byte("-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAVMRMwEQYDVQQDEwprdWJlcm5ldGVz\n-----END CERTIFICATE-----\n")

// start serves a fake and returns it with the real client built as
// production builds it (NewFromConfig, BaseEndpoint at the fake), with a
// retryer that retries up to four attempts without waiting.
func start(t *testing.T) (*eksfake.Server, *eks.Client) {
	t.Helper()
	s, err := eksfake.New(region)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, client(s.URL(), region)
}

func client(url, region string) *eks.Client {
	cfg := sdkaws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		Retryer: func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 4
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			})
		},
	}
	return eks.NewFromConfig(cfg, func(o *eks.Options) { o.BaseEndpoint = sdkaws.String(url) })
}

// fromSDK turns what the SDK decoded back into the fake's Cluster, so that
// a round trip can be compared whole.
func fromSDK(t *testing.T, c *ekstypes.Cluster) eksfake.Cluster {
	t.Helper()
	out := eksfake.Cluster{
		Name:            sdkaws.ToString(c.Name),
		ARN:             sdkaws.ToString(c.Arn),
		Status:          string(c.Status),
		Version:         sdkaws.ToString(c.Version),
		PlatformVersion: sdkaws.ToString(c.PlatformVersion),
		Endpoint:        sdkaws.ToString(c.Endpoint),
		CreatedAt:       sdkaws.ToTime(c.CreatedAt),
	}
	if c.CertificateAuthority != nil {
		pem, err := base64.StdEncoding.DecodeString(sdkaws.ToString(c.CertificateAuthority.Data))
		if err != nil {
			t.Fatalf("certificateAuthority.data is not base64: %v", err)
		}
		out.CertificateAuthority = pem
	}
	if n := c.KubernetesNetworkConfig; n != nil {
		out.IPFamily, out.ServiceIPv4CIDR, out.ServiceIPv6CIDR = string(n.IpFamily), sdkaws.ToString(n.ServiceIpv4Cidr), sdkaws.ToString(n.ServiceIpv6Cidr)
	}
	if v := c.ResourcesVpcConfig; v != nil {
		out.VpcID, out.SubnetIDs, out.SecurityGroupIDs, out.ClusterSecurityGroupID = sdkaws.ToString(v.VpcId), v.SubnetIds, v.SecurityGroupIds, sdkaws.ToString(v.ClusterSecurityGroupId)
	}
	if a := c.AccessConfig; a != nil {
		out.AuthenticationMode = string(a.AuthenticationMode)
	}
	return out
}

// createdAt goes over the wire as epoch seconds with milliseconds.
var approxTime = cmpopts.EquateApproxTime(time.Millisecond)

func describe(t *testing.T, c *eks.Client, name string) (*ekstypes.Cluster, error) {
	t.Helper()
	out, err := c.DescribeCluster(context.Background(), &eks.DescribeClusterInput{Name: sdkaws.String(name)})
	if err != nil {
		return nil, err
	}
	return out.Cluster, nil
}

// TestDescribeCluster: every modelled field reaches the SDK, for an IPv4
// and an IPv6 cluster, and the defaults are what the fake documents.
func TestDescribeCluster(t *testing.T) {
	s, c := start(t)
	created := time.Date(2026, 11, 2, 9, 30, 15, 250e6, time.UTC)
	full := eksfake.Cluster{
		Name:                   "sandbox",
		ARN:                    "arn:aws:eks:us-west-2:111122223333:cluster/sandbox",
		Status:                 "ACTIVE",
		Version:                "1.37",
		PlatformVersion:        "eks.4",
		Endpoint:               "https://127.0.0.1:6443",
		CertificateAuthority:   caPEM,
		IPFamily:               "ipv4",
		ServiceIPv4CIDR:        "10.100.0.0/16",
		VpcID:                  "vpc-0a1b2c3d4e5f60718",
		SubnetIDs:              []string{"subnet-0c1a4f3e2d5b60a01", "subnet-0c1a4f3e2d5b60b02"},
		SecurityGroupIDs:       []string{"sg-0e5d4c3b2a1f09871"},
		ClusterSecurityGroupID: "sg-0e5d4c3b2a1f0eks1",
		AuthenticationMode:     "API_AND_CONFIG_MAP",
		CreatedAt:              created,
	}
	v6 := eksfake.Cluster{
		Name:            "dual",
		IPFamily:        "ipv6",
		ServiceIPv6CIDR: "fd8e:6ad5:2ef1::/108",
		VpcID:           "vpc-0a1b2c3d4e5f60718",
	}
	for _, tc := range []struct {
		name string
		add  eksfake.Cluster
		want eksfake.Cluster
	}{
		{name: "a cluster with every field set comes back as set", add: full, want: full},
		{name: "an IPv6 cluster reports its family and IPv6 service CIDR, and the defaults", add: v6, want: eksfake.Cluster{
			Name: "dual", ARN: "arn:aws:eks:us-west-2:000000000000:cluster/dual", Status: "ACTIVE", Version: eksfake.DefaultVersion,
			IPFamily: "ipv6", ServiceIPv6CIDR: "fd8e:6ad5:2ef1::/108", VpcID: "vpc-0a1b2c3d4e5f60718",
			AuthenticationMode: "CONFIG_MAP", SubnetIDs: []string{}, SecurityGroupIDs: []string{},
		}},
		{name: "an IPv4 cluster without a service CIDR gets EKS's 172.20.0.0/16", add: eksfake.Cluster{Name: "bare"}, want: eksfake.Cluster{
			Name: "bare", ARN: "arn:aws:eks:us-west-2:000000000000:cluster/bare", Status: "ACTIVE", Version: eksfake.DefaultVersion,
			IPFamily: "ipv4", ServiceIPv4CIDR: "172.20.0.0/16", AuthenticationMode: "CONFIG_MAP", SubnetIDs: []string{}, SecurityGroupIDs: []string{},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			stored, err := s.AddCluster(tc.add)
			if err != nil {
				t.Fatal(err)
			}
			if tc.add.CreatedAt.IsZero() {
				if stored.CreatedAt.Before(before) || stored.CreatedAt.After(time.Now()) {
					t.Errorf("CreatedAt = %v, want the time AddCluster ran", stored.CreatedAt)
				}
				tc.want.CreatedAt = stored.CreatedAt
			}
			got, err := describe(t, c, tc.add.Name)
			if err != nil {
				t.Fatalf("DescribeCluster: %v", err)
			}
			if diff := cmp.Diff(tc.want, fromSDK(t, got), approxTime); diff != "" {
				t.Errorf("DescribeCluster as the SDK decodes it (-want,+got):\n%s", diff)
			}
		})
	}
	if got := s.Requests(); len(got) != 3 || got[0].Action != "DescribeCluster" || got[0].Method != http.MethodGet || got[0].Path != "/clusters/sandbox" {
		t.Errorf("Requests = %+v, want three GET /clusters/<name> DescribeCluster calls", got)
	}
}

// TestClusterChanges: SetCluster changes what DescribeCluster reports and
// keeps the creation time; AddCluster refuses a taken name and SetCluster
// an unknown one; a deleted cluster is not found.
func TestClusterChanges(t *testing.T) {
	s, c := start(t)
	first, err := s.AddCluster(eksfake.Cluster{Name: "sandbox", Version: "1.36"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCluster(eksfake.Cluster{Name: "sandbox"}); err == nil {
		t.Error("AddCluster of a taken name succeeded")
	}
	if _, err := s.SetCluster(eksfake.Cluster{Name: "other"}); err == nil {
		t.Error("SetCluster of an unknown cluster succeeded")
	}
	if _, err := s.SetCluster(eksfake.Cluster{Name: "sandbox", Version: "1.37", Status: "UPDATING"}); err != nil {
		t.Fatal(err)
	}
	got, err := describe(t, c, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	if sdkaws.ToString(got.Version) != "1.37" || got.Status != ekstypes.ClusterStatusUpdating {
		t.Errorf("after SetCluster: version %s, status %s; want 1.37, UPDATING", sdkaws.ToString(got.Version), got.Status)
	}
	if !cmp.Equal(first.CreatedAt, sdkaws.ToTime(got.CreatedAt), approxTime) {
		t.Errorf("createdAt = %v after SetCluster, want the creation time %v", sdkaws.ToTime(got.CreatedAt), first.CreatedAt)
	}
	s.DeleteCluster("sandbox")
	if _, err := describe(t, c, "sandbox"); !errors.As(err, new(*ekstypes.ResourceNotFoundException)) {
		t.Errorf("DescribeCluster of a deleted cluster = %v, want ResourceNotFoundException", err)
	}
}

// TestNotFound: an unknown name is a 404 ResourceNotFoundException with
// EKS's message, which the SDK decodes into its typed error.
func TestNotFound(t *testing.T) {
	s, c := start(t)
	_, err := describe(t, c, "missing")
	var nf *ekstypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("DescribeCluster(missing) = %v, want *types.ResourceNotFoundException", err)
	}
	if nf.ErrorMessage() != "No cluster found for name: missing." {
		t.Errorf("message = %q", nf.ErrorMessage())
	}
	if status := httpStatus(err); status != http.StatusNotFound {
		t.Errorf("HTTP status = %d, want 404", status)
	}
	if n := len(s.Requests()); n != 1 {
		t.Errorf("%d requests, want 1: a not-found error is not retried", n)
	}
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestFaults: an injected AccessDeniedException reaches the caller at
// once; ThrottlingException (429) is retried by the SDK until it passes,
// or until the retryer gives up; a fault for one action leaves others be.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	s, c := start(t)
	if _, err := s.AddCluster(eksfake.Cluster{Name: "sandbox"}); err != nil {
		t.Fatal(err)
	}
	calls := func() int { return len(s.Requests()) }

	s.FailNext("DescribeCluster", 1, http.StatusForbidden, "AccessDeniedException")
	_, err := describe(t, c, "sandbox")
	if !errors.As(err, new(*ekstypes.AccessDeniedException)) || httpStatus(err) != http.StatusForbidden {
		t.Errorf("with an access-denied fault: %v, want a 403 *types.AccessDeniedException", err)
	}
	if calls() != 1 {
		t.Errorf("%d calls, want 1: access denied is not retried", calls())
	}

	s.FailNext("", 2, http.StatusTooManyRequests, "ThrottlingException")
	if _, err := describe(t, c, "sandbox"); err != nil {
		t.Errorf("two throttles then success: %v, want the SDK to retry through them", err)
	}
	if calls() != 4 {
		t.Errorf("%d calls, want 4: one denied, then two throttled and one answered", calls())
	}

	s.FailNext("DescribeCluster", 10, http.StatusTooManyRequests, "ThrottlingException")
	_, err = describe(t, c, "sandbox")
	if errorCode(err) != "ThrottlingException" || httpStatus(err) != http.StatusTooManyRequests {
		t.Errorf("throttled past the retryer: %v, want ThrottlingException 429", err)
	}
	if calls() != 8 {
		t.Errorf("%d calls, want 8: the retryer's four attempts", calls())
	}
	s.FailNext("DescribeCluster", 0, 0, "")

	s.FailNext("ListClusters", 5, http.StatusForbidden, "AccessDeniedException")
	if _, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: sdkaws.String("sandbox")}); err != nil {
		t.Errorf("a fault for ListClusters failed DescribeCluster: %v", err)
	}
}

// TestAuthorization: unsigned requests and requests signed for another
// region are refused as EKS refuses them; an operation the fake does not
// model is refused by name.
func TestAuthorization(t *testing.T) {
	s, c := start(t)
	if _, err := s.AddCluster(eksfake.Cluster{Name: "sandbox"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL() + "/clusters/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Amzn-ErrorType") != "MissingAuthenticationTokenException" {
		t.Errorf("unsigned GET = %d %s, want 403 MissingAuthenticationTokenException", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"))
	}

	_, err = describe(t, client(s.URL(), "eu-west-1"), "sandbox")
	if errorCode(err) != "InvalidSignatureException" {
		t.Errorf("signed for eu-west-1: %v, want InvalidSignatureException", err)
	}

	_, err = c.ListClusters(context.Background(), &eks.ListClustersInput{})
	if errorCode(err) != "UnknownOperationException" {
		t.Errorf("ListClusters = %v, want UnknownOperationException", err)
	}
}
