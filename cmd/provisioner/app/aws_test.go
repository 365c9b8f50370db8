package app

import (
	"context"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/nodeforge/nodeforge/internal/sandbox/eksfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/imdsfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// These tests resolve the aws provider's cluster and region as provider
// does, through the real SDK clients: EKS's against internal/sandbox/eksfake, IMDS's
// against internal/sandbox/imdsfake, and the discovery client against an API server
// that answers only /version.

const (
	testRegion  = "us-west-2"
	testCluster = "prod"
)

// eksCA stands for the cluster CA EKS reports; only its bytes travel.
var eksCA = []byte("-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAVMRMwEQYDVQQDEwprdWJlcm5ldGVz\n-----END CERTIFICATE-----\n")

// awsFlags parses args into fresh awsOptions, with the shipped defaults.
func awsFlags(t *testing.T, args ...string) *awsOptions {
	t.Helper()
	var a awsOptions
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	a.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &a
}

// clusterEnv is an EKS fake with the real client at it, and an API server
// reporting a version, whose serving certificate is the kubeconfig's CA.
type clusterEnv struct {
	eks    *eksfake.Server
	api    *eks.Client
	cfg    *rest.Config
	kubeCA []byte
}

func newClusterEnv(t *testing.T, apiServerMinor string, clusters ...eksfake.Cluster) *clusterEnv {
	t.Helper()
	s, err := eksfake.New(testRegion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, c := range clusters {
		if _, err := s.AddCluster(c); err != nil {
			t.Fatal(err)
		}
	}
	apiServer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"major":"1","minor":%q,"gitVersion":"v1.%s.2"}`, apiServerMinor, strings.TrimSuffix(apiServerMinor, "+"))
	}))
	t.Cleanup(apiServer.Close)
	kubeCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiServer.Certificate().Raw})
	return &clusterEnv{
		eks: s,
		api: eks.New(eks.Options{
			Region: testRegion, BaseEndpoint: sdkaws.String(s.URL()),
			Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
			HTTPClient:  sdkhttp.GuardClosedBodyRace(nil),
			Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = aws.DefaultMaxAttempts
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			}),
		}),
		cfg:    &rest.Config{Host: apiServer.URL, TLSClientConfig: rest.TLSClientConfig{CAData: kubeCA}},
		kubeCA: kubeCA,
	}
}

// logged returns a context whose logger keeps what is logged, and a
// function that returns the key/value pairs of each line logged with msg.
func logged(t *testing.T) (context.Context, func(msg string) []map[string]any) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func(msg string) []map[string]any {
		var out []map[string]any
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			if e.Message != msg {
				continue
			}
			kv := map[string]any{}
			for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
				kv[fmt.Sprint(e.ParameterKVList[i])] = e.ParameterKVList[i+1]
			}
			out = append(out, kv)
		}
		return out
	}
}

const (
	discovered   = "Discovered the cluster"
	flagDisagree = "A flag disagrees with the EKS cluster; using the flag"
)

var prod = eksfake.Cluster{
	Name: testCluster, Version: "1.37", Endpoint: "https://ABCD.gr7.us-west-2.eks.amazonaws.com", CertificateAuthority: eksCA,
	ServiceIPv4CIDR: "172.20.0.0/16", ClusterSecurityGroupID: "sg-0c1u5te7",
}

// TestClusterFromEKS: with only --cluster-name, one DescribeCluster gives
// the endpoint, CA, service CIDR and cluster security group, and one line
// says each value and where it came from.
func TestClusterFromEKS(t *testing.T) {
	env := newClusterEnv(t, "37", prod)
	ctx, lines := logged(t)
	got, err := awsFlags(t, "--cluster-name="+testCluster).cluster(ctx, env.api, testRegion, env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := aws.Cluster{
		ARN: "arn:aws:eks:us-west-2:" + eksfake.Account + ":cluster/prod", Endpoint: prod.Endpoint, CA: eksCA,
		ServiceCIDR: "172.20.0.0/16", IPFamily: "ipv4", Version: "1.37", SecurityGroupID: "sg-0c1u5te7",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster (-want,+got):\n%s", diff)
	}
	if n := len(env.eks.Requests()); n != 1 {
		t.Errorf("%d EKS requests, want one DescribeCluster", n)
	}
	l := lines(discovered)
	if len(l) != 1 {
		t.Fatalf("logged %q %d times, want once", discovered, len(l))
	}
	wantSource := map[string]string{"endpoint": "eks", "ca": "eks", "serviceCIDR": "eks", "kubernetesVersion": "apiServer"}
	if diff := cmp.Diff(wantSource, l[0]["source"]); diff != "" {
		t.Errorf("logged sources (-want,+got):\n%s", diff)
	}
	if l[0]["serviceCIDR"] != "172.20.0.0/16" || l[0]["endpoint"] != prod.Endpoint || l[0]["clusterSecurityGroup"] != "sg-0c1u5te7" {
		t.Errorf("logged %v, want the discovered values", l[0])
	}
	if d := lines(flagDisagree); len(d) != 0 {
		t.Errorf("logged disagreements without flags: %v", d)
	}
}

// TestClusterFlagsOverrideEKS: a flag that is set wins over EKS, and is
// logged when it says something else; the API server's version wins over
// EKS's.
func TestClusterFlagsOverrideEKS(t *testing.T) {
	dir := t.TempDir()
	sameCA, otherCA := filepath.Join(dir, "same.crt"), filepath.Join(dir, "other.crt")
	// The same certificate with other line breaks is the same CA.
	if err := os.WriteFile(sameCA, append(append([]byte{}, eksCA...), '\n', '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	env := newClusterEnv(t, "37+", prod)
	if err := os.WriteFile(otherCA, env.kubeCA, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		flags        []string
		eksVersion   string
		want         aws.Cluster
		wantDisagree map[string][2]string // flag → flagValue, clusterValue
	}{{
		name:  "flags that say what EKS says are used and not called disagreements",
		flags: []string{"--cluster-endpoint=" + prod.Endpoint + "/", "--cluster-ca-file=" + sameCA, "--cluster-service-cidr=172.20.0.0/16"},
		want: aws.Cluster{Endpoint: prod.Endpoint + "/", CA: append(append([]byte{}, eksCA...), '\n', '\n'), ServiceCIDR: "172.20.0.0/16",
			IPFamily: "ipv4", Version: "1.37", SecurityGroupID: prod.ClusterSecurityGroupID},
		wantDisagree: map[string][2]string{},
	}, {
		name:  "flags that disagree with EKS win, and each is logged with both values",
		flags: []string{"--cluster-endpoint=https://private.example:443", "--cluster-ca-file=" + otherCA, "--cluster-service-cidr=10.100.0.0/16"},
		want: aws.Cluster{Endpoint: "https://private.example:443", CA: env.kubeCA, ServiceCIDR: "10.100.0.0/16",
			IPFamily: "ipv4", Version: "1.37", SecurityGroupID: prod.ClusterSecurityGroupID},
		wantDisagree: map[string][2]string{
			"--cluster-endpoint":     {"https://private.example:443", prod.Endpoint},
			"--cluster-ca-file":      {otherCA + " " + fingerprint(env.kubeCA), fingerprint(eksCA)},
			"--cluster-service-cidr": {"10.100.0.0/16", "172.20.0.0/16"},
		},
	}, {
		name:         "the API server's version wins over EKS's",
		eksVersion:   "1.36",
		want:         aws.Cluster{Endpoint: prod.Endpoint, CA: eksCA, ServiceCIDR: "172.20.0.0/16", IPFamily: "ipv4", Version: "1.37", SecurityGroupID: prod.ClusterSecurityGroupID},
		wantDisagree: map[string][2]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := prod
			if tc.eksVersion != "" {
				c.Version = tc.eksVersion
			}
			if _, err := env.eks.SetCluster(c); err != nil {
				t.Fatal(err)
			}
			ctx, lines := logged(t)
			got, err := awsFlags(t, append([]string{"--cluster-name=" + testCluster}, tc.flags...)...).cluster(ctx, env.api, testRegion, env.cfg)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.ARN = "arn:aws:eks:us-west-2:" + eksfake.Account + ":cluster/prod"
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cluster (-want,+got):\n%s", diff)
			}
			disagree := map[string][2]string{}
			for _, kv := range lines(flagDisagree) {
				disagree[fmt.Sprint(kv["flag"])] = [2]string{fmt.Sprint(kv["flagValue"]), fmt.Sprint(kv["clusterValue"])}
			}
			if diff := cmp.Diff(tc.wantDisagree, disagree); diff != "" {
				t.Errorf("logged disagreements (-want,+got):\n%s", diff)
			}
			versions := lines("The API server and EKS disagree on the Kubernetes version; using the API server's, which the nodes join")
			if wantLogged := tc.eksVersion != ""; wantLogged != (len(versions) == 1) {
				t.Errorf("version disagreement logged %v, want %v", versions, wantLogged)
			}
			for _, kv := range lines(discovered) {
				if src := kv["source"].(map[string]string); len(tc.flags) > 0 && (src["endpoint"] != "flag" || src["ca"] != "flag" || src["serviceCIDR"] != "flag") {
					t.Errorf("logged sources %v, want flag for each flag set", src)
				}
			}
		})
	}
}

// TestClusterWithoutEKS: when EKS does not describe the cluster, flags that
// give all it would let the provisioner start (the error logged); else it
// refuses, naming what is missing, the permission and the flags.
func TestClusterWithoutEKS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    []string
		denied   bool // else the cluster does not exist
		want     aws.Cluster
		wantErr  []string
		notInErr string
	}{{
		name:   "no permission, the flags give the endpoint and service CIDR: they and the kubeconfig's CA are used",
		flags:  []string{"--cluster-endpoint=https://10.0.0.1:6443", "--cluster-service-cidr=10.96.0.0/12"},
		denied: true,
		want:   aws.Cluster{Endpoint: "https://10.0.0.1:6443", ServiceCIDR: "10.96.0.0/12", IPFamily: "ipv4", Version: "1.37"},
	}, {
		name:    "no permission and no flags: refused, naming the permission and both flags",
		denied:  true,
		wantErr: []string{"AccessDeniedException", "the API server endpoint (--cluster-endpoint), the service CIDR (--cluster-service-cidr)", "allow eks:DescribeCluster on arn:aws:eks:us-west-2:<account>:cluster/prod", "or set --cluster-endpoint and --cluster-service-cidr"},
	}, {
		name:     "not an EKS cluster and only the endpoint given: refused, naming the service CIDR alone",
		flags:    []string{"--cluster-endpoint=https://10.0.0.1:6443"},
		wantErr:  []string{"ResourceNotFoundException", "no flag gives the service CIDR (--cluster-service-cidr)", "eks:DescribeCluster on arn:aws:eks:us-west-2:<account>:cluster/prod"},
		notInErr: "--cluster-endpoint",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newClusterEnv(t, "37", eksfake.Cluster{Name: "another"})
			if tc.denied {
				env.eks.FailNext("DescribeCluster", 1, http.StatusForbidden, "AccessDeniedException")
			}
			ctx, lines := logged(t)
			got, err := awsFlags(t, append([]string{"--cluster-name=" + testCluster}, tc.flags...)...).cluster(ctx, env.api, testRegion, env.cfg)
			if len(tc.wantErr) > 0 {
				for _, want := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("err = %v, want it to say %q", err, want)
					}
				}
				if err != nil && tc.notInErr != "" && strings.Contains(err.Error(), tc.notInErr) {
					t.Errorf("err = %v, which names %s though it is set", err, tc.notInErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.CA = env.kubeCA
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cluster (-want,+got):\n%s", diff)
			}
			if l := lines("EKS did not describe the cluster; the flags give all it would"); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["err"]), "AccessDeniedException") {
				t.Errorf("logged %v, want EKS's error once", l)
			}
			if l := lines(discovered); len(l) != 1 || l[0]["source"].(map[string]string)["ca"] != "kubeconfig" {
				t.Errorf("logged %v, want the CA's source kubeconfig", l)
			}
		})
	}
}

// TestServiceCIDRHasNoDefault: the service CIDR comes from EKS or the
// flag, never from a default that is wrong for many clusters; a malformed
// flag is refused.
func TestServiceCIDRHasNoDefault(t *testing.T) {
	if got := awsFlags(t).serviceCIDR; got != "" {
		t.Errorf("--cluster-service-cidr defaults to %q, want empty: the cluster's", got)
	}
	// An IPv6 cluster whose answer lacks the IPv6 range; the IPv4 one
	// must not stand in for it.
	noRange := eksfake.Cluster{Name: testCluster, Endpoint: prod.Endpoint, CertificateAuthority: eksCA, IPFamily: "ipv6", ServiceIPv4CIDR: "172.20.0.0/16"}
	for _, tc := range []struct {
		name    string
		flags   []string
		want    string // the ServiceCIDR, or
		wantErr string
	}{
		{name: "neither EKS nor a flag gives it: refused", wantErr: "EKS does not give the service CIDR (--cluster-service-cidr): set --cluster-service-cidr"},
		{name: "the flag gives it", flags: []string{"--cluster-service-cidr=fd30:1c53:5f8a::/108"}, want: "fd30:1c53:5f8a::/108"},
		{name: "a malformed flag is refused", flags: []string{"--cluster-service-cidr=10.100.0.0"}, wantErr: "--cluster-service-cidr=10.100.0.0: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newClusterEnv(t, "37", noRange)
			ctx, _ := logged(t)
			got, err := awsFlags(t, append([]string{"--cluster-name=" + testCluster}, tc.flags...)...).cluster(ctx, env.api, testRegion, env.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want it to say %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ServiceCIDR != tc.want || got.IPFamily != "ipv6" {
				t.Errorf("service CIDR %q, family %q; want %q, ipv6", got.ServiceCIDR, got.IPFamily, tc.want)
			}
		})
	}
}

// isolateAWSEnv leaves the SDK no region but what a test sets, and points
// its IMDS client at imdsURL.
func isolateAWSEnv(t *testing.T, imdsURL string) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": imdsURL, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "",
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
}

func startIMDS(t *testing.T, region string) *imdsfake.Server {
	t.Helper()
	s, err := imdsfake.New(imdsfake.Instance{Region: region, InstanceID: "i-0a1b2c3d4e5f60718"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestRegionFromInstanceMetadata: with no region in the flag or the SDK's
// chain (as under EKS Pod Identity), the instance's region is read from
// IMDS (v2: a session token first) at AWS_EC2_METADATA_SERVICE_ENDPOINT;
// a region named otherwise wins, and IMDS is not asked.
func TestRegionFromInstanceMetadata(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     []string
		env       string // AWS_REGION
		want      string
		wantAsked bool
	}{
		{name: "nothing names a region: the instance's", want: "eu-central-1", wantAsked: true},
		{name: "--aws-region wins", flags: []string{"--aws-region=us-west-2"}, want: "us-west-2"},
		{name: "AWS_REGION wins", env: "ap-south-1", want: "ap-south-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startIMDS(t, "eu-central-1")
			isolateAWSEnv(t, s.URL())
			t.Setenv("AWS_REGION", tc.env)
			ctx, _ := logged(t)
			sdk, err := awsFlags(t, tc.flags...).loadSDKConfig(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sdk.Region != tc.want {
				t.Errorf("region %q, want %q", sdk.Region, tc.want)
			}
			reqs := s.Requests()
			if asked := len(reqs) > 0; asked != tc.wantAsked {
				t.Errorf("IMDS requests %+v; want asked %v", reqs, tc.wantAsked)
			}
			if tc.wantAsked && (reqs[0].Method != http.MethodPut || reqs[0].Path != "/latest/api/token") {
				t.Errorf("first IMDS request %+v, want a session token (IMDSv2)", reqs[0])
			}
		})
	}
}

// TestNoRegion: when IMDS is disabled (it is then not asked) or does not
// answer (asked within the timeout), the provisioner refuses to start,
// saying how to name a region and what IMDS said.
func TestNoRegion(t *testing.T) {
	const want = "no AWS region: set --aws-region or AWS_REGION (instance metadata did not answer: "
	t.Run("IMDS disabled", func(t *testing.T) {
		s := startIMDS(t, "eu-central-1")
		isolateAWSEnv(t, s.URL())
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		_, err := awsFlags(t).loadSDKConfig(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "AWS_EC2_METADATA_DISABLED") {
			t.Errorf("err = %v, want %q... naming AWS_EC2_METADATA_DISABLED", err, want)
		}
		if reqs := s.Requests(); len(reqs) != 0 {
			t.Errorf("IMDS was asked though disabled: %+v", reqs)
		}
	})
	t.Run("IMDS failing", func(t *testing.T) {
		s := startIMDS(t, "eu-central-1")
		s.FailNext("", 1000, http.StatusServiceUnavailable)
		isolateAWSEnv(t, s.URL())
		start := time.Now()
		_, err := awsFlags(t).loadSDKConfig(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("err = %v, want %q...", err, want)
		}
		if took := time.Since(start); took > imdsRegionTimeout+3*time.Second {
			t.Errorf("took %v, want about the IMDS timeout, %v", took, imdsRegionTimeout)
		}
		if len(s.Requests()) == 0 {
			t.Error("IMDS was not asked")
		}
	})
}
