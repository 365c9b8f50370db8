package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// EKSAPI is the part of the EKS client the provisioner calls, once at
// start, to learn what nodes need to join the cluster; *eks.Client
// implements it.
type EKSAPI interface {
	DescribeCluster(context.Context, *eks.DescribeClusterInput, ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
}

var _ EKSAPI = (*eks.Client)(nil)

// Cluster is what EKS says of a cluster that its nodes need: where to
// join, whom to trust, and the addresses of its services.
type Cluster struct {
	// ARN is the cluster's, e.g. arn:aws:eks:us-west-2:111122223333:cluster/prod.
	ARN string
	// Endpoint is the API server's URL.
	Endpoint string
	// CA is the cluster's certificate authority in PEM (EKS sends it
	// base64-encoded; this is decoded).
	CA []byte
	// ServiceCIDR is the range Services take their addresses from: the
	// IPv6 one when IPFamily is ipv6, else the IPv4 one. nodeadm derives
	// the cluster DNS address from it, so a wrong one leaves pods without
	// DNS.
	ServiceCIDR string
	// IPFamily is ipv4 or ipv6.
	IPFamily string
	// Version is the Kubernetes minor version, e.g. "1.37".
	Version string
	// SecurityGroupID is the cluster security group EKS made for the
	// control plane and managed nodes (resourcesVpcConfig's
	// clusterSecurityGroupId). It is reported, not used: instances get the
	// security groups their EC2NodeClass selects, so that the class alone
	// says what a node may reach; a class selects this group by tagging it
	// (docs/aws.md).
	SecurityGroupID string
}

// ErrClusterNotFound says EKS has no cluster of the name asked for in the
// region asked (ResourceNotFoundException).
var ErrClusterNotFound = errors.New("no such EKS cluster")

// DescribeCluster reads cluster name's facts with one eks:DescribeCluster.
// A cluster EKS does not know is ErrClusterNotFound and a refused call an
// AccessDeniedError; a field EKS leaves out is left empty, for the caller
// to fill from its flags or refuse.
func DescribeCluster(ctx context.Context, api EKSAPI, name string) (Cluster, error) {
	out, err := api.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: sdkaws.String(name)})
	if err != nil {
		if _, ok := errors.AsType[*ekstypes.ResourceNotFoundException](err); ok {
			return Cluster{}, fmt.Errorf("DescribeCluster %s: %w: %w", name, ErrClusterNotFound, err)
		}
		return Cluster{}, classify("DescribeCluster", err)
	}
	c := out.Cluster
	if c == nil {
		return Cluster{}, fmt.Errorf("DescribeCluster %s: the answer holds no cluster", name)
	}
	got := Cluster{
		ARN:      sdkaws.ToString(c.Arn),
		Endpoint: sdkaws.ToString(c.Endpoint),
		Version:  sdkaws.ToString(c.Version),
		IPFamily: string(ekstypes.IpFamilyIpv4),
	}
	if ca := c.CertificateAuthority; ca != nil && sdkaws.ToString(ca.Data) != "" {
		if got.CA, err = base64.StdEncoding.DecodeString(sdkaws.ToString(ca.Data)); err != nil {
			return Cluster{}, fmt.Errorf("DescribeCluster %s: certificateAuthority.data is not base64: %w", name, err)
		}
	}
	if n := c.KubernetesNetworkConfig; n != nil {
		if n.IpFamily != "" {
			got.IPFamily = string(n.IpFamily)
		}
		got.ServiceCIDR = sdkaws.ToString(n.ServiceIpv4Cidr)
		if n.IpFamily == ekstypes.IpFamilyIpv6 {
			got.ServiceCIDR = sdkaws.ToString(n.ServiceIpv6Cidr)
		}
	}
	if v := c.ResourcesVpcConfig; v != nil {
		got.SecurityGroupID = sdkaws.ToString(v.ClusterSecurityGroupId)
	}
	return got, nil
}
