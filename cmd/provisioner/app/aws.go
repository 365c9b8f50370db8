package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	maxAttempts     int
	queue           string
	sqsEndpoint     string
	iamEndpoint     string

	// set by provider
	sdk    sdkaws.Config
	prices *pricing.Table
}

// inClusterCA is where a pod finds the cluster's CA bundle.
const inClusterCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

func (a *awsOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&a.region, "aws-region", "", "AWS region to launch in; empty: the SDK's default (AWS_REGION, profile, or instance metadata).")
	fs.StringVar(&a.endpoint, "aws-ec2-endpoint", "", "EC2 endpoint URL; empty: the region's. For tests and private endpoints.")
	fs.StringVar(&a.clusterName, "cluster-name", "", "Name of the cluster (the EKS cluster name): tags every instance and joins nodes.")
	fs.StringVar(&a.clusterEndpoint, "cluster-endpoint", "", "API server URL the nodes join, such as the EKS cluster endpoint.")
	fs.StringVar(&a.clusterCAFile, "cluster-ca-file", "", "PEM file of the cluster CA the nodes trust; empty: the service account's CA, or the kubeconfig's.")
	fs.StringVar(&a.serviceCIDR, "cluster-service-cidr", "10.100.0.0/16", "Service CIDR of the cluster, written into the nodes' NodeConfig.")
	fs.DurationVar(&a.pricingRefresh, "aws-pricing-refresh-interval", 12*time.Hour, "How often to refresh on-demand prices from the AWS Pricing API; 0 keeps the shipped table.")
	fs.StringVar(&a.pricingEndpoint, "aws-pricing-endpoint", "", "Pricing API endpoint URL; empty: the public one in us-east-1.")
	fs.StringVar(&a.queue, "interruption-queue", "", "Name or URL of the SQS queue that EventBridge rules feed with EC2's spot interruption warnings, rebalance recommendations, instance state changes and AWS Health scheduled changes (docs/aws.md); empty: interruptions are not watched.")
	fs.StringVar(&a.sqsEndpoint, "aws-sqs-endpoint", "", "SQS endpoint URL; empty: the region's. For tests and private endpoints.")
	fs.StringVar(&a.iamEndpoint, "aws-iam-endpoint", "", "IAM endpoint URL; empty: the partition's global one. IAM keeps the instance profiles of EC2NodeClasses with spec.role. For tests and private endpoints.")
	fs.IntVar(&a.maxAttempts, "aws-max-attempts", 8, "Attempts per AWS call; throttling and transient errors are retried with exponential backoff.")
}

// provider builds the EC2 provider: credentials from the SDK's default
// chain (environment, IRSA or EKS Pod Identity, profile, instance role).
func (a *awsOptions) provider(ctx context.Context, cfg *rest.Config, kube client.Client) (*aws.Provider, error) {
	if a.clusterName == "" || a.clusterEndpoint == "" {
		return nil, errors.New("--cloud-provider=aws needs --cluster-name and --cluster-endpoint")
	}
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
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if sdk.Region == "" {
		return nil, errors.New("no AWS region: set --aws-region or AWS_REGION")
	}
	a.sdk = sdk
	ca, err := a.clusterCA(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's Kubernetes version: %w", err)
	}
	if a.prices, err = pricing.Shipped(); err != nil {
		return nil, err
	}
	if !slices.Contains(a.prices.Regions(), sdk.Region) {
		klog.InfoS("The shipped price table has no prices for this region; us-east-1's stand in until the Pricing API answers", "region", sdk.Region, "pricingRefreshInterval", a.pricingRefresh)
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
	klog.InfoS("Using the aws provider", "region", sdk.Region, "clusterName", a.clusterName, "clusterEndpoint", a.clusterEndpoint,
		"kubernetesVersion", v.Major+"."+strings.TrimSuffix(v.Minor, "+"), "ec2Endpoint", a.endpoint, "iamEndpoint", a.iamEndpoint, "prices", a.prices.Source())
	return aws.New(client, kube, a.prices, aws.Options{
		Region: sdk.Region, ClusterName: a.clusterName, ClusterEndpoint: a.clusterEndpoint, ClusterCA: ca,
		ClusterServiceCIDR: a.serviceCIDR, KubernetesVersion: v.Major + "." + strings.TrimSuffix(v.Minor, "+"),
		IAM: iamClient,
	})
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

func (a *awsOptions) clusterCA(cfg *rest.Config) ([]byte, error) {
	file := a.clusterCAFile
	if file == "" {
		if _, err := os.Stat(inClusterCA); err == nil {
			file = inClusterCA
		}
	}
	if file == "" {
		file = cfg.CAFile
	}
	if file != "" {
		ca, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading cluster CA: %w", err)
		}
		return ca, nil
	}
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	return nil, errors.New("no cluster CA: set --cluster-ca-file")
}

// refreshPrices updates on-demand prices from the Pricing API now and then;
// where it cannot be reached the shipped table stays in use.
func (a *awsOptions) refreshPrices(ctx context.Context) error {
	if a.pricingRefresh <= 0 || a.prices == nil {
		return nil
	}
	api := awspricing.NewFromConfig(a.sdk, func(o *awspricing.Options) {
		o.Region = "us-east-1" // the Price List API's home region
		if a.pricingEndpoint != "" {
			o.BaseEndpoint = sdkaws.String(a.pricingEndpoint)
		}
	})
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
