// Package aws is the cloud provider for Amazon EC2. It launches instances
// with CreateFleet (type instant, one instance a claim, claims with the
// same request that arrive together in one fleet, up to 60 instance type ×
// subnet overrides, a ClientToken derived from the claims), describes the
// region's instance types, offerings and spot prices, prices on-demand
// capacity from the shipped table in package pricing, and resolves each
// EC2NodeClass's subnets, security groups, images and capacity reservations
// by selector terms, launches into those reservations first, and keeps an
// IAM instance profile for each class that names a role.
//
// Everything goes through aws-sdk-go-v2; the tests drive the real SDK
// clients against Query endpoints on loopback (internal/sandbox/ec2fake,
// internal/sandbox/iamfake).
package aws

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// EC2API is the part of the EC2 client the provider calls; *ec2.Client
// implements it.
type EC2API interface {
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeInstanceTypeOfferings(context.Context, *ec2.DescribeInstanceTypeOfferingsInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypeOfferingsOutput, error)
	DescribeSpotPriceHistory(context.Context, *ec2.DescribeSpotPriceHistoryInput, ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeCapacityReservations(context.Context, *ec2.DescribeCapacityReservationsInput, ...func(*ec2.Options)) (*ec2.DescribeCapacityReservationsOutput, error)
	DescribeLaunchTemplates(context.Context, *ec2.DescribeLaunchTemplatesInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	DeleteLaunchTemplate(context.Context, *ec2.DeleteLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateOutput, error)
	CreateFleet(context.Context, *ec2.CreateFleetInput, ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	// RunInstances is only called with DryRun, to check a class's launch
	// permissions (dryrun.go).
	RunInstances(context.Context, *ec2.RunInstancesInput, ...func(*ec2.Options)) (*ec2.RunInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
}

// IAMAPI is the part of the IAM client the provider calls, to keep the
// instance profiles of classes with spec.role; *iam.Client implements it.
type IAMAPI interface {
	GetInstanceProfile(context.Context, *iam.GetInstanceProfileInput, ...func(*iam.Options)) (*iam.GetInstanceProfileOutput, error)
	CreateInstanceProfile(context.Context, *iam.CreateInstanceProfileInput, ...func(*iam.Options)) (*iam.CreateInstanceProfileOutput, error)
	TagInstanceProfile(context.Context, *iam.TagInstanceProfileInput, ...func(*iam.Options)) (*iam.TagInstanceProfileOutput, error)
	AddRoleToInstanceProfile(context.Context, *iam.AddRoleToInstanceProfileInput, ...func(*iam.Options)) (*iam.AddRoleToInstanceProfileOutput, error)
	RemoveRoleFromInstanceProfile(context.Context, *iam.RemoveRoleFromInstanceProfileInput, ...func(*iam.Options)) (*iam.RemoveRoleFromInstanceProfileOutput, error)
	DeleteInstanceProfile(context.Context, *iam.DeleteInstanceProfileInput, ...func(*iam.Options)) (*iam.DeleteInstanceProfileOutput, error)
}

var _ IAMAPI = (*iam.Client)(nil)

// Tags Nodeforge puts on what it launches. TagCluster scopes List (and so
// garbage collection) to one cluster; the claim tags tie an instance to its
// NodeClaim, by name for people and by UID for idempotency.
const (
	TagCluster      = v1alpha1.Group + "/cluster"
	TagNodePool     = v1alpha1.Group + "/nodepool"
	TagNodeClaim    = v1alpha1.Group + "/nodeclaim"
	TagNodeClaimUID = v1alpha1.Group + "/nodeclaim-uid"
	TagNodeClass    = v1alpha1.Group + "/ec2nodeclass"
	// TagEKSClusterName is the tag EKS puts on its nodes' instances.
	TagEKSClusterName = "eks:eks-cluster-name"
)

// DefaultMaxAttempts is how many times the provisioner's AWS clients try
// a call unless --aws-max-attempts says otherwise, with the SDK's standard
// retryer: throttling and transient errors are retried with exponential
// backoff. Tests of the provider use the same number.
const DefaultMaxAttempts = 8

// Options configure the provider for one cluster in one region.
type Options struct {
	// Region the provider launches in, such as us-west-2.
	Region string
	// ClusterName tags every resource and goes into the nodes' NodeConfig.
	ClusterName string
	// ClusterEndpoint is the API server URL the nodes join.
	ClusterEndpoint string
	// ClusterCA is the PEM bundle the nodes trust the API server with.
	ClusterCA []byte
	// ClusterServiceCIDR is the cluster's service CIDR (nodeadm derives
	// the cluster DNS address from it).
	ClusterServiceCIDR string
	// KubernetesVersion, "1.37", picks the EKS-optimised image of an alias.
	KubernetesVersion string
	// VMMemoryOverheadPercent of an instance type's memory is assumed
	// taken by the hypervisor and the kernel, never showing in the node's
	// capacity, until a node of the type has registered (measured.go).
	// Nil: 0.075.
	VMMemoryOverheadPercent *float64
	// InstanceTypesTTL is how long the region's instance types and
	// offerings are cached (default 1h); SpotPricesTTL the spot prices
	// (default 15m).
	InstanceTypesTTL time.Duration
	SpotPricesTTL    time.Duration
	// IAM keeps the instance profiles of classes with spec.role
	// (instanceprofile.go). Nil: such classes are not Ready, and classes
	// with spec.instanceProfile work as ever.
	IAM IAMAPI
	// SSM resolves al2023 aliases through the public parameters AWS
	// publishes for the EKS-optimised images, per architecture and
	// variant (images.go). Nil: an alias finds the standard image by
	// name with DescribeImages.
	SSM SSMAPI
	// LaunchCheckInterval is how long a class's launch check (dryrun.go)
	// that found nothing wrong stands before it is made again (default
	// 1h); one that found a denial or no spot service-linked role is made
	// again at every resolution after LaunchCheckRetry (default 5m).
	LaunchCheckInterval time.Duration
	LaunchCheckRetry    time.Duration
	// Recorder, if set, receives the Warning events that name the
	// instance types offered without their region's on-demand price
	// (prices.go). Nil: those go to the log only.
	Recorder events.EventRecorder
}

// Provider is the EC2 cloud provider.
type Provider struct {
	ec2    EC2API
	kube   client.Reader
	prices *pricing.Table
	opts   Options
	now    func() time.Time

	mu      sync.Mutex
	catalog regionCatalog
	// templates remembers launch templates known to exist, by name, and
	// templateUsed when a launch last used each (launchtemplates.go).
	templates    map[string]string
	templateUsed map[string]time.Time
	// templateFlight makes each template once for the launches that
	// need it at the same time.
	templateFlight singleflight.Group
	// fleetErrors counts, per claim UID, fleets that launched nothing for
	// other reasons than capacity (clientToken).
	fleetErrors map[string]int
	// subnetRooms is what is known of the free addresses of the subnets
	// launched into (subnets.go).
	subnetRooms subnetRooms
	// measured is the memory registered nodes reported (measured.go).
	measured measuredMemory
	// checks are the classes' launch checks, by class name (dryrun.go).
	checks map[string]launchCheck
	// gaps remembers the on-demand price gaps last logged (prices.go).
	gaps priceGapReporter
	// gets and terminations send the Gets and Deletes that arrive
	// together as one request each (batch.go, instances.go).
	gets         *batcher[string, *cloudprovider.Instance]
	terminations *batcher[string, bool]
	// launched answers launchedFor (launched.go).
	launched launchedList
	// fleets are the fleets open to more claims (fleet.go).
	fleets fleetMerger
	// reservations counts the room left in capacity reservations
	// (reservations.go).
	reservations reservationLedger
	// unknownGPUModels are the NVIDIA GPU models already logged as
	// having no DRA template (dra.go).
	unknownGPUModels sync.Map
}

var _ cloudprovider.CloudProvider = &Provider{}

// New returns a provider calling api, reading EC2NodeClasses through kube
// and pricing on-demand capacity from prices.
func New(api EC2API, kube client.Reader, prices *pricing.Table, opts Options) (*Provider, error) {
	if opts.Region == "" || opts.ClusterName == "" {
		return nil, errors.New("aws provider: region and cluster name are required")
	}
	if opts.VMMemoryOverheadPercent == nil {
		opts.VMMemoryOverheadPercent = ptr.To(0.075)
	}
	if o := *opts.VMMemoryOverheadPercent; o < 0 || o >= 1 {
		return nil, fmt.Errorf("aws provider: the VM memory overhead is a share of the memory, from 0 up to 1 (0.075 is 7.5%%); %v is not", o)
	}
	if opts.InstanceTypesTTL == 0 {
		opts.InstanceTypesTTL = time.Hour
	}
	if opts.SpotPricesTTL == 0 {
		opts.SpotPricesTTL = 15 * time.Minute
	}
	opts.LaunchCheckInterval = cmp.Or(opts.LaunchCheckInterval, time.Hour)
	opts.LaunchCheckRetry = cmp.Or(opts.LaunchCheckRetry, 5*time.Minute)
	p := &Provider{ec2: api, kube: kube, prices: prices, opts: opts, now: time.Now, templates: map[string]string{}, templateUsed: map[string]time.Time{}, fleetErrors: map[string]int{}, checks: map[string]launchCheck{}}
	p.gets = &batcher[string, *cloudprovider.Instance]{max: maxInstanceIDs, do: p.describeIDs}
	p.terminations = &batcher[string, bool]{max: maxInstanceIDs, do: p.terminateIDs}
	return p, nil
}

// Name is "aws".
func (p *Provider) Name() string { return "aws" }

// nodeClass reads the EC2NodeClass a pool or claim refers to, and refuses
// one that has not resolved.
func (p *Provider) nodeClass(ctx context.Context, ref v1alpha1.NodeClassReference) (*v1alpha1.EC2NodeClass, error) {
	if ref.Kind != "EC2NodeClass" {
		return nil, &cloudprovider.NodeClassNotReadyError{NodeClass: ref.Kind + "/" + ref.Name, Reason: "the aws provider launches only from EC2NodeClasses"}
	}
	var class v1alpha1.EC2NodeClass
	if err := p.kube.Get(ctx, client.ObjectKey{Name: ref.Name}, &class); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, &cloudprovider.NodeClassNotReadyError{NodeClass: ref.Name, Reason: "it does not exist"}
		}
		return nil, err
	}
	if why := notReady(&class); why != "" {
		return nil, &cloudprovider.NodeClassNotReadyError{NodeClass: ref.Name, Reason: why}
	}
	return &class, nil
}

// Error codes of EC2 (from the EC2 API reference's error code list) that
// the provider acts on.
var (
	// capacityCodes refuse one offering for now; another may launch.
	// InsufficientFreeAddressesInSubnet is not one: it says a subnet is
	// full, and another subnet of the zone may have room (subnets.go).
	capacityCodes = map[string]bool{
		"InsufficientInstanceCapacity": true,
		"InsufficientHostCapacity":     true,
		"InsufficientCapacity":         true,
		"MaxSpotInstanceCountExceeded": true,
		"VcpuLimitExceeded":            true,
		"UnfulfillableCapacity":        true,
		"Unsupported":                  true,
		"SpotMaxPriceTooLow":           true,
		// The reservation a reserved launch named is full, or gone
		// (reservations.go).
		codeReservationFull:                     true,
		"InvalidCapacityReservationId.NotFound": true,
	}
	// deniedCodes need an operator: credentials or policy are wrong. IAM
	// says AccessDenied.
	deniedCodes = map[string]bool{
		"UnauthorizedOperation":       true,
		"AuthFailure":                 true,
		"AccessDenied":                true,
		"AccessDeniedException":       true,
		"InvalidClientTokenId":        true,
		"SignatureDoesNotMatch":       true,
		"OptInRequired":               true,
		"Blocked":                     true,
		"PendingVerification":         true,
		"UnrecognizedClientException": true,
	}
)

// classify wraps an API error the caller must act on in the provider's
// typed errors; the SDK has already retried throttling with backoff.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch {
		case deniedCodes[api.ErrorCode()]:
			return &cloudprovider.AccessDeniedError{Op: op, Err: err}
		case strings.HasSuffix(api.ErrorCode(), ".NotFound"), api.ErrorCode() == "NoSuchEntity":
			return fmt.Errorf("%s: %w: %w", op, cloudprovider.ErrNotFound, err)
		case api.ErrorCode() == "EntityAlreadyExists":
			return fmt.Errorf("%s: %w: %w", op, errAlreadyExists, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// errAlreadyExists says a create found its object there already (IAM's
// EntityAlreadyExists): another writer got there first.
var errAlreadyExists = errors.New("already exists")

// providerID is what the node of an instance reports: aws:///zone/id.
func providerID(zone, id string) string { return "aws:///" + zone + "/" + id }

// instanceID reads the instance id out of a provider ID.
func instanceID(providerID string) (string, error) {
	i := strings.LastIndex(providerID, "/")
	if !strings.HasPrefix(providerID, "aws://") || i < 0 || !strings.HasPrefix(providerID[i+1:], "i-") {
		return "", fmt.Errorf("provider ID %q is not an EC2 instance (aws:///zone/i-...)", providerID)
	}
	return providerID[i+1:], nil
}
