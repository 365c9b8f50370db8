package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/google/go-cmp/cmp"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// TestFakeEKSDescribesTheSandbox: what the provisioner discovers in the
// sandbox's fake EKS is the sandbox's API server, CA, Service range and
// version; and the chart is given the EKS endpoint in place of the
// endpoint and CA, so that it walks the discovery path.
func TestFakeEKSDescribesTheSandbox(t *testing.T) {
	r, err := startAWSRegion(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.addCluster("https://127.0.0.1:6443", caFile, serviceCIDR, "v1.37.2"); err != nil {
		t.Fatal(err)
	}
	api := eks.New(eks.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(r.EKS.URL()), Credentials: credentials.NewStaticCredentialsProvider("AKIASANDBOX", "sandbox", "")})
	got, err := aws.DescribeCluster(context.Background(), api, ClusterName)
	if err != nil {
		t.Fatal(err)
	}
	got.ARN = ""
	want := aws.Cluster{Endpoint: "https://127.0.0.1:6443", CA: ca, ServiceCIDR: "10.96.0.0/16", IPFamily: "ipv4", Version: "1.37"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the sandbox as EKS describes it (-want,+got):\n%s", diff)
	}

	s := &Sandbox{Dir: t.TempDir(), Server: "https://127.0.0.1:6443", region: r}
	p := s.chartValues(Options{})["provisioner"].(map[string]any)
	args := p["extraArgs"].([]string)
	if !slices.Contains(args, "--aws-eks-endpoint="+r.EKS.URL()) {
		t.Errorf("chart extraArgs %q lack the EKS endpoint", args)
	}
	if _, ok := p["clusterEndpoint"]; ok || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cluster-ca-file") }) {
		t.Errorf("the chart is given the endpoint or CA (%v, %q) that discovery should find", p["clusterEndpoint"], args)
	}
}
