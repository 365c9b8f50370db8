package aws

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/google/go-cmp/cmp"

	"github.com/nodeforge/nodeforge/internal/sandbox/eksfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// These tests read clusters through the real EKS client from the loopback
// fake (internal/sandbox/eksfake), which answers in EKS's REST-JSON shapes.

// clusterCA stands for a cluster CA; only its bytes travel.
var clusterCA = []byte("-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAVMRMwEQYDVQQDEwprdWJlcm5ldGVz\n-----END CERTIFICATE-----\n")

// newEKS starts the fake in us-west-2 with the clusters given and returns
// it with the real client at it, built as the provisioner builds it
// (testRetryer).
func newEKS(t *testing.T, clusters ...eksfake.Cluster) (*eksfake.Server, *eks.Client) {
	t.Helper()
	s, err := eksfake.New("us-west-2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, c := range clusters {
		if _, err := s.AddCluster(c); err != nil {
			t.Fatal(err)
		}
	}
	return s, eks.New(eks.Options{
		Region: "us-west-2", BaseEndpoint: sdkaws.String(s.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		HTTPClient:  sdkhttp.GuardClosedBodyRace(nil), Retryer: testRetryer(),
	})
}

// TestDescribeCluster: what nodes need is read from one DescribeCluster,
// the CA decoded from base64, and the service CIDR of the cluster's IP
// family.
func TestDescribeCluster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster eksfake.Cluster
		want    Cluster
	}{{
		name: "an IPv4 cluster gives its IPv4 service range and its cluster security group",
		cluster: eksfake.Cluster{
			Name: testCluster, Version: "1.36", Endpoint: "https://ABCD.gr7.us-west-2.eks.amazonaws.com",
			CertificateAuthority: clusterCA, ServiceIPv4CIDR: "10.100.0.0/16", ClusterSecurityGroupID: "sg-0cluster",
		},
		want: Cluster{
			ARN: "arn:aws:eks:us-west-2:" + eksfake.Account + ":cluster/prod", Endpoint: "https://ABCD.gr7.us-west-2.eks.amazonaws.com",
			CA: clusterCA, ServiceCIDR: "10.100.0.0/16", IPFamily: "ipv4", Version: "1.36", SecurityGroupID: "sg-0cluster",
		},
	}, {
		name: "an IPv6 cluster gives its IPv6 service range, not the IPv4 one",
		cluster: eksfake.Cluster{
			Name: testCluster, Endpoint: "https://EF01.sk1.us-west-2.eks.amazonaws.com", CertificateAuthority: clusterCA,
			IPFamily: "ipv6", ServiceIPv4CIDR: "172.20.0.0/16", ServiceIPv6CIDR: "fd30:1c53:5f8a::/108",
		},
		want: Cluster{
			ARN: "arn:aws:eks:us-west-2:" + eksfake.Account + ":cluster/prod", Endpoint: "https://EF01.sk1.us-west-2.eks.amazonaws.com",
			CA: clusterCA, ServiceCIDR: "fd30:1c53:5f8a::/108", IPFamily: "ipv6", Version: eksfake.DefaultVersion,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s, api := newEKS(t, tc.cluster)
			got, err := DescribeCluster(context.Background(), api, testCluster)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DescribeCluster (-want,+got):\n%s", diff)
			}
			if n := len(s.Requests()); n != 1 {
				t.Errorf("%d requests, want one DescribeCluster", n)
			}
		})
	}
}

// TestDescribeClusterRefusals: a cluster EKS does not know is
// ErrClusterNotFound, and a refused call an AccessDeniedError, each
// keeping EKS's own message.
func TestDescribeClusterRefusals(t *testing.T) {
	t.Run("a cluster that is not there", func(t *testing.T) {
		_, api := newEKS(t, eksfake.Cluster{Name: "other"})
		_, err := DescribeCluster(context.Background(), api, testCluster)
		if !errors.Is(err, ErrClusterNotFound) || cloudprovider.IsAccessDenied(err) || !strings.Contains(err.Error(), "No cluster found for name: prod") {
			t.Errorf("err = %v, want ErrClusterNotFound with EKS's message", err)
		}
	})
	t.Run("no permission", func(t *testing.T) {
		s, api := newEKS(t, eksfake.Cluster{Name: testCluster})
		s.FailNext("DescribeCluster", 1, http.StatusForbidden, "AccessDeniedException")
		_, err := DescribeCluster(context.Background(), api, testCluster)
		if !cloudprovider.IsAccessDenied(err) || errors.Is(err, ErrClusterNotFound) || !strings.Contains(err.Error(), "DescribeCluster") {
			t.Errorf("err = %v, want an AccessDeniedError naming DescribeCluster", err)
		}
	})
}
