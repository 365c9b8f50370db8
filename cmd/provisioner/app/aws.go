package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// awsOptions are the flags of the aws provider.
type awsOptions struct {
	region          string
	endpoint        string
	clusterName     string
	clusterEndpoint string
	clusterCAFile   string
	serviceCIDR     string
	pricingRefresh  time.Duration
	pricingEndpoint string
	pricingRegion   string
	maxAttempts     int
	vmOverhead      float64
	queue           string
	sqsEndpoint     string
	iamEndpoint     string
	eksEndpoint     string
	ssmEndpoint     string

	// recorder, set before provider, receives the provider's Warning
	// events (instance types offered without their region's price).
	recorder events.EventRecorder

	// set by provider
	sdk    sdkaws.Config
	prices *pricing.Table
}

// inClusterCA is where a pod finds the cluster's CA bundle.
const inClusterCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

func (a *awsOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.region, "aws-region", "", "AWS region to launch in; empty: the SDK's default (AWS_REGION, profile, or instance metadata).")
	fs.StringVar(&a.endpoint, "aws-ec2-endpoint", "", "EC2 endpoint URL; empty: the region's. For tests and private endpoints.")
	fs.StringVar(&a.clusterName, "cluster-name", "", "Name of the cluster (the EKS cluster name): tags every instance and joins nodes; its endpoint, CA, service CIDR and version are read at start with eks:DescribeCluster.")
	fs.StringVar(&a.clusterEndpoint, "cluster-endpoint", "", "API server URL the nodes join; empty: the EKS cluster's endpoint.")
	fs.StringVar(&a.clusterCAFile, "cluster-ca-file", "", "PEM file of the cluster CA the nodes trust; empty: the EKS cluster's CA, else the service account's, or the kubeconfig's.")
	fs.StringVar(&a.serviceCIDR, "cluster-service-cidr", "", "Service CIDR of the cluster, written into the nodes' NodeConfig (nodeadm derives the cluster DNS address from it); empty: the EKS cluster's.")
	fs.DurationVar(&a.pricingRefresh, "aws-pricing-refresh-interval", 12*time.Hour, "How often to refresh on-demand prices from the AWS Pricing API; 0 keeps the shipped table.")
	fs.StringVar(&a.pricingEndpoint, "aws-pricing-endpoint", "", "Pricing API endpoint URL, such as a private (VPC) endpoint's; empty: the public one of --aws-pricing-region.")
	fs.StringVar(&a.pricingRegion, "aws-pricing-region", "", "Region whose Pricing API endpoint is asked (it signs the calls too); empty: the closest that serves it in the cluster's partition (us-east-1, eu-central-1 or ap-south-1; cn-northwest-1 in China), none in GovCloud and the ISO partitions, where the shipped table is all there is.")
	fs.StringVar(&a.queue, "interruption-queue", "", "Name or URL of the SQS queue that EventBridge rules feed with EC2's spot interruption warnings, rebalance recommendations, instance state changes and AWS Health scheduled changes (docs/aws.md); empty: interruptions are not watched.")
	fs.StringVar(&a.sqsEndpoint, "aws-sqs-endpoint", "", "SQS endpoint URL; empty: the region's. For tests and private endpoints.")
	fs.StringVar(&a.eksEndpoint, "aws-eks-endpoint", "", "EKS endpoint URL; empty: the region's. EKS is asked once, at start, for the cluster's facts. For tests and private endpoints.")
	fs.StringVar(&a.ssmEndpoint, "aws-ssm-endpoint", "", "SSM endpoint URL; empty: the region's. An al2023 alias reads the EKS-optimised images' public parameters there. For tests and private endpoints.")
	fs.StringVar(&a.iamEndpoint, "aws-iam-endpoint", "", "IAM endpoint URL; empty: the partition's global one. IAM keeps the instance profiles of EC2NodeClasses with spec.role. For tests and private endpoints.")
	fs.IntVar(&a.maxAttempts, "aws-max-attempts", aws.DefaultMaxAttempts, "Attempts per AWS call; throttling and transient errors are retried with exponential backoff.")
	fs.Float64Var(&a.vmOverhead, "vm-memory-overhead-percent", 0.075, "Share of an instance type's memory (0.075 is 7.5%) its node is assumed not to see, until a node of the type and image has registered: from then on its offerings have the memory that node reported.")
}

// provider builds the EC2 provider: credentials from the SDK's default
// chain (environment, IRSA or EKS Pod Identity, profile, instance role),
// and the cluster's facts from EKS and the flags (cluster).
func (a *awsOptions) provider(ctx context.Context, cfg *rest.Config, kube client.Client) (*aws.Provider, error) {
	if a.clusterName == "" {
		return nil, errors.New("--cloud-provider=aws needs --cluster-name")
	}
	sdk, err := a.loadSDKConfig(ctx)
	if err != nil {
		return nil, err
	}
	// Every client built from sdk (EKS, EC2, IAM, SSM, SQS, Pricing) sends
	// through the guard. It is set after loading, not with
	// config.WithHTTPClient: the SDK puts AWS_CA_BUNDLE only into a client
	// of its own type.
	sdk.HTTPClient = sdkhttp.GuardClosedBodyRace(sdk.HTTPClient)
	a.sdk = sdk
	// The same configuration, and so the same retryer and attempts, as
	// EC2's.
	eksClient := eks.NewFromConfig(sdk, func(o *eks.Options) {
		if a.eksEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.eksEndpoint)
		}
	})
	cluster, err := a.cluster(ctx, eksClient, sdk.Region, cfg)
	if err != nil {
		return nil, err
	}
	if a.prices, err = pricing.Shipped(); err != nil {
		return nil, err
	}
	if standIn, ok := a.prices.StandIn(sdk.Region); ok {
		klog.InfoS("The shipped price table has no prices for this region; the closest region's stand in, to keep the order of types, until the Pricing API answers",
			"region", sdk.Region, "standInRegion", standIn, "pricingRefreshInterval", a.pricingRefresh)
	} else if !slices.Contains(a.prices.Regions(), sdk.Region) {
		klog.InfoS("The shipped price table has no prices for this region's partition; on-demand offerings are priced last until the Pricing API answers",
			"region", sdk.Region, "partition", pricing.Partition(sdk.Region), "unknownPrice", pricing.UnknownPrice, "pricingRefreshInterval", a.pricingRefresh)
	}
	client := ec2.NewFromConfig(sdk, func(o *ec2.Options) {
		if a.endpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.endpoint)
		}
	})
	// The same configuration, and so the same retryer and attempts, as
	// EC2's.
	iamClient := iam.NewFromConfig(sdk, func(o *iam.Options) {
		if a.iamEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.iamEndpoint)
		}
	})
	ssmClient := ssm.NewFromConfig(sdk, func(o *ssm.Options) {
		if a.ssmEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.ssmEndpoint)
		}
	})
	klog.InfoS("Using the aws provider", "region", sdk.Region, "clusterName", a.clusterName, "clusterEndpoint", cluster.Endpoint,
		"kubernetesVersion", cluster.Version, "ec2Endpoint", a.endpoint, "iamEndpoint", a.iamEndpoint, "eksEndpoint", a.eksEndpoint,
		"ssmEndpoint", a.ssmEndpoint, "prices", a.prices.Source())
	// cluster.SecurityGroupID is not added to launches: instances get the
	// security groups their EC2NodeClass selects, and nothing else.
	return aws.New(client, kube, a.prices, aws.Options{
		Region: sdk.Region, ClusterName: a.clusterName, ClusterEndpoint: cluster.Endpoint, ClusterCA: cluster.CA,
		ClusterServiceCIDR: cluster.ServiceCIDR, KubernetesVersion: cluster.Version,
		IAM: iamClient, SSM: ssmClient, Recorder: a.recorder, VMMemoryOverheadPercent: &a.vmOverhead,
	})
}

// imdsRegionTimeout bounds the question to instance metadata for the
// region: off EC2 nothing answers at its link-local address, and the
// provisioner should say so in seconds rather than hang.
const imdsRegionTimeout = 2 * time.Second

// loadSDKConfig loads the SDK's configuration. Its region comes from
// --aws-region, else the SDK's default chain (AWS_REGION, the profile),
// else instance metadata: EKS Pod Identity, unlike IRSA, sets no
// AWS_REGION, and the node the pod runs on knows its region. The IMDS
// client honours AWS_EC2_METADATA_DISABLED=true (it then asks nothing) and
// AWS_EC2_METADATA_SERVICE_ENDPOINT.
func (a *awsOptions) loadSDKConfig(ctx context.Context) (sdkaws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = a.maxAttempts
				o.MaxBackoff = 20 * time.Second
			})
		}),
	}
	if a.region != "" {
		opts = append(opts, config.WithRegion(a.region))
	}
	sdk, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return sdkaws.Config{}, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if sdk.Region != "" {
		return sdk, nil
	}
	// Not config.WithEC2IMDSRegion: it fails the whole load with IMDS's
	// error and has no deadline of its own.
	ictx, cancel := context.WithTimeout(ctx, imdsRegionTimeout)
	defer cancel()
	out, err := imds.NewFromConfig(sdk).GetRegion(ictx, nil)
	if err == nil && out.Region == "" {
		err = errors.New("it gave an empty region")
	}
	if err != nil {
		return sdkaws.Config{}, fmt.Errorf("no AWS region: set --aws-region or AWS_REGION (instance metadata did not answer: %w)", err)
	}
	klog.FromContext(ctx).Info("Took the AWS region from instance metadata", "region", out.Region)
	sdk.Region = out.Region
	return sdk, nil
}

// Where each of the cluster's facts came from, as the log line at start
// says.
const (
	fromEKS            = "eks"
	fromFlag           = "flag"
	fromAPIServer      = "apiServer"
	fromServiceAccount = "serviceAccount"
	fromKubeconfig     = "kubeconfig"
)

// clusterDescribeTimeout bounds the one DescribeCluster at start, retries
// included.
const clusterDescribeTimeout = time.Minute

// cluster resolves what nodes need to join the cluster. EKS's
// DescribeCluster gives the endpoint, CA, service CIDR and version; a flag
// that is set wins over EKS (and is logged when it disagrees), so that a
// private endpoint or a cluster that is not EKS can be run. The version the
// API server reports wins over EKS's, as it is the one the nodes join.
// Without EKS (no permission, or no such cluster) the flags must give the
// endpoint and service CIDR; the CA falls back to the one this pod trusts
// the API server with. There is no default service CIDR: a wrong one gives
// nodes the wrong cluster DNS address.
func (a *awsOptions) cluster(ctx context.Context, api aws.EKSAPI, region string, cfg *rest.Config) (aws.Cluster, error) {
	log := klog.FromContext(ctx)
	dctx, cancel := context.WithTimeout(ctx, clusterDescribeTimeout)
	found, eksErr := aws.DescribeCluster(dctx, api, a.clusterName)
	cancel()
	disagrees := func(flag, flagValue, clusterValue string) {
		log.Info("A flag disagrees with the EKS cluster; using the flag", "cluster", a.clusterName, "flag", flag, "flagValue", flagValue, "clusterValue", clusterValue)
	}
	got := aws.Cluster{ARN: found.ARN, IPFamily: found.IPFamily, SecurityGroupID: found.SecurityGroupID}
	source := map[string]string{}
	var missing []string // what neither EKS nor a flag gave, as "what (--flag)"

	switch {
	case a.clusterEndpoint != "":
		got.Endpoint, source["endpoint"] = a.clusterEndpoint, fromFlag
		if found.Endpoint != "" && strings.TrimRight(found.Endpoint, "/") != strings.TrimRight(a.clusterEndpoint, "/") {
			disagrees("--cluster-endpoint", a.clusterEndpoint, found.Endpoint)
		}
	case found.Endpoint != "":
		got.Endpoint, source["endpoint"] = found.Endpoint, fromEKS
	default:
		missing = append(missing, "the API server endpoint (--cluster-endpoint)")
	}

	switch {
	case a.clusterCAFile != "":
		ca, err := os.ReadFile(a.clusterCAFile)
		if err != nil {
			return aws.Cluster{}, fmt.Errorf("reading --cluster-ca-file: %w", err)
		}
		got.CA, source["ca"] = ca, fromFlag
		if len(found.CA) > 0 && fingerprint(ca) != fingerprint(found.CA) {
			disagrees("--cluster-ca-file", a.clusterCAFile+" "+fingerprint(ca), fingerprint(found.CA))
		}
	case len(found.CA) > 0:
		got.CA, source["ca"] = found.CA, fromEKS
	default:
		ca, from, err := localCA(cfg)
		if err != nil {
			return aws.Cluster{}, err
		}
		if len(ca) == 0 {
			missing = append(missing, "the cluster CA (--cluster-ca-file)")
			break
		}
		got.CA, source["ca"] = ca, from
	}

	switch {
	case a.serviceCIDR != "":
		flagCIDR, err := netip.ParsePrefix(a.serviceCIDR)
		if err != nil {
			return aws.Cluster{}, fmt.Errorf("--cluster-service-cidr=%s: %w", a.serviceCIDR, err)
		}
		got.ServiceCIDR, source["serviceCIDR"] = a.serviceCIDR, fromFlag
		got.IPFamily = "ipv4"
		if flagCIDR.Addr().Is6() {
			got.IPFamily = "ipv6"
		}
		if eksCIDR, err := netip.ParsePrefix(found.ServiceCIDR); found.ServiceCIDR != "" && (err != nil || eksCIDR.Masked() != flagCIDR.Masked()) {
			disagrees("--cluster-service-cidr", a.serviceCIDR, found.ServiceCIDR)
		}
	case found.ServiceCIDR != "":
		got.ServiceCIDR, source["serviceCIDR"] = found.ServiceCIDR, fromEKS
	default:
		missing = append(missing, "the service CIDR (--cluster-service-cidr)")
	}

	apiVersion, apiErr := serverVersion(cfg)
	switch {
	case apiErr == nil:
		got.Version, source["kubernetesVersion"] = apiVersion, fromAPIServer
		if found.Version != "" && found.Version != apiVersion {
			log.Info("The API server and EKS disagree on the Kubernetes version; using the API server's, which the nodes join", "cluster", a.clusterName, "apiServerVersion", apiVersion, "clusterValue", found.Version)
		}
	case found.Version != "":
		log.Info("The API server did not say its version; using EKS's", "cluster", a.clusterName, "err", apiErr.Error(), "clusterValue", found.Version)
		got.Version, source["kubernetesVersion"] = found.Version, fromEKS
	default:
		return aws.Cluster{}, fmt.Errorf("reading the cluster's Kubernetes version: %w", apiErr)
	}

	switch {
	case eksErr != nil && len(missing) > 0:
		return aws.Cluster{}, fmt.Errorf("cluster %s: EKS did not describe it (%w), and no flag gives %s: allow eks:DescribeCluster on %s, or set %s",
			a.clusterName, eksErr, strings.Join(missing, ", "), clusterARN(region, a.clusterName), strings.Join(flagsOf(missing), " and "))
	case eksErr != nil:
		log.Info("EKS did not describe the cluster; the flags give all it would", "cluster", a.clusterName, "err", eksErr.Error())
	case len(missing) > 0:
		return aws.Cluster{}, fmt.Errorf("cluster %s: EKS does not give %s: set %s", a.clusterName, strings.Join(missing, ", "), strings.Join(flagsOf(missing), " and "))
	}
	log.Info("Discovered the cluster", "cluster", a.clusterName, "arn", got.ARN, "endpoint", got.Endpoint, "ca", fingerprint(got.CA),
		"serviceCIDR", got.ServiceCIDR, "ipFamily", got.IPFamily, "kubernetesVersion", got.Version, "clusterSecurityGroup", got.SecurityGroupID, "source", source)
	return got, nil
}

// flagsOf picks "--flag" out of each "what (--flag)".
func flagsOf(missing []string) []string {
	var out []string
	for _, m := range missing {
		if i := strings.Index(m, "(--"); i >= 0 {
			out = append(out, strings.TrimSuffix(m[i+1:], ")"))
		}
	}
	return out
}

// clusterARN is the ARN of an EKS cluster, with the account left for the
// reader to fill in (knowing it would take one more call, sts:GetCallerIdentity).
func clusterARN(region, name string) string {
	partition := "aws"
	switch {
	case strings.HasPrefix(region, "cn-"):
		partition = "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		partition = "aws-us-gov"
	}
	return "arn:" + partition + ":eks:" + region + ":<account>:cluster/" + name
}

// fingerprint names a CA bundle in logs: the SHA-256 of its certificates
// (so that two encodings of the same certificates match), shortened.
func fingerprint(bundle []byte) string {
	if len(bundle) == 0 {
		return ""
	}
	var der []byte
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		der = append(der, b.Bytes...)
	}
	if der == nil {
		der = bytes.TrimSpace(bundle)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// serverVersion is the API server's Kubernetes minor version, e.g. "1.37"
// (EKS reports minors such as "37+").
func serverVersion(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", err
	}
	return v.Major + "." + strings.TrimSuffix(v.Minor, "+"), nil
}

// interruptionQueue is the SQS queue of --interruption-queue, or nil;
// provider must have run.
func (a *awsOptions) interruptionQueue() *aws.InterruptionQueue {
	if a.queue == "" {
		return nil
	}
	api := sqs.NewFromConfig(a.sdk, func(o *sqs.Options) {
		if a.sqsEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.sqsEndpoint)
		}
	})
	klog.InfoS("Watching the interruption queue", "queue", a.queue, "sqsEndpoint", a.sqsEndpoint)
	return aws.NewInterruptionQueue(api, a.queue)
}

// localCA is the CA this pod trusts the API server with: the service
// account's, else the kubeconfig's; nil if there is none.
func localCA(cfg *rest.Config) (ca []byte, source string, err error) {
	file, source := "", fromKubeconfig
	if _, err := os.Stat(inClusterCA); err == nil {
		file, source = inClusterCA, fromServiceAccount
	} else {
		file = cfg.CAFile
	}
	if file != "" {
		ca, err := os.ReadFile(file)
		if err != nil {
			return nil, "", fmt.Errorf("reading cluster CA: %w", err)
		}
		return ca, source, nil
	}
	return cfg.CAData, source, nil
}

// pricingAPIRegion is the region whose Pricing API endpoint refreshPrices
// asks: --aws-pricing-region, else the closest that serves the Price List
// Query API in the cluster's partition (pricing.QueryAPIRegion). ok is false
// where the partition has none and no flag names one.
func (a *awsOptions) pricingAPIRegion(clusterRegion string) (string, bool) {
	if a.pricingRegion != "" {
		return a.pricingRegion, true
	}
	if r, ok := pricing.QueryAPIRegion(clusterRegion); ok {
		return r, true
	}
	if a.pricingEndpoint != "" {
		// An endpoint given without a region is signed for the cluster's.
		return clusterRegion, true
	}
	return "", false
}

// pricingClient is the Pricing API client refreshPrices uses, or nil with
// the reason where there is none to ask.
func (a *awsOptions) pricingClient() (*awspricing.Client, string) {
	region, ok := a.pricingAPIRegion(a.sdk.Region)
	if !ok {
		return nil, "the Price List Query API is not served in partition " + pricing.Partition(a.sdk.Region) + "; set --aws-pricing-endpoint (and --aws-pricing-region) to reach one"
	}
	return awspricing.NewFromConfig(a.sdk, func(o *awspricing.Options) {
		o.Region = region
		if a.pricingEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.pricingEndpoint)
		}
	}), ""
}

// refreshPrices updates on-demand prices from the Pricing API now and then;
// where it cannot be reached the shipped table stays in use.
func (a *awsOptions) refreshPrices(ctx context.Context) error {
	if a.pricingRefresh <= 0 || a.prices == nil {
		return nil
	}
	api, why := a.pricingClient()
	if api == nil {
		klog.FromContext(ctx).Info("Not refreshing on-demand prices; the shipped table is all there is", "region", a.sdk.Region, "reason", why, "prices", a.prices.Source())
		return nil
	}
	klog.FromContext(ctx).Info("Refreshing on-demand prices from the AWS Pricing API", "region", a.sdk.Region, "pricingRegion", api.Options().Region,
		"pricingEndpoint", a.pricingEndpoint, "interval", a.pricingRefresh)
	for {
		n, err := a.prices.Refresh(ctx, api, a.sdk.Region)
		if err != nil {
			klog.FromContext(ctx).Info("Pricing API unavailable; keeping the prices in use", "source", a.prices.Source(), "err", err.Error())
		} else {
			klog.FromContext(ctx).Info("Refreshed on-demand prices", "region", a.sdk.Region, "instanceTypes", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(a.pricingRefresh):
		}
	}
}
