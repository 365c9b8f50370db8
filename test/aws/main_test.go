// Package aws tests the EC2 cloud provider through the real aws-sdk-go-v2
// client, on the wire, against the fake EC2 endpoint on loopback
// (internal/sandbox/ec2fake), with EC2NodeClasses and NodeClaims in a real
// kube-apiserver. Every assertion about what was sent to EC2 reads the
// request as the fake received it.
package aws

import (
	"context"
	"net/http"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// kube is an admin client of the package's control plane.
var kube client.Client

func TestMain(m *testing.M) { sandboxtest.ControlPlaneMain(m, &kube, nil) }

// region is one test's fake EC2 region and a provider launching into it.
type region struct {
	ec2      *ec2fake.Server
	ssm      *ssmfake.Server
	url      string
	client   *ec2.Client
	provider *aws.Provider
	class    *v1alpha1.EC2NodeClass
}

// clientFor is the real SDK client, signing with static credentials,
// sending through the provisioner's sdkhttp.GuardClosedBodyRace, with the
// standard retryer (exponential backoff, here with a short cap so that
// retried tests stay quick) making at most attempts tries.
func clientFor(url string, attempts int) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       "us-west-2",
		BaseEndpoint: sdkaws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""),
		HTTPClient:   sdkhttp.GuardClosedBodyRace(&http.Client{Timeout: 10 * time.Second}),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = attempts
			o.MaxBackoff = 50 * time.Millisecond
		}),
	})
}

// newRegion starts a fake region with world (DefaultWorld when nil) and a
// provider for cluster "conformance", and creates and resolves an
// EC2NodeClass named after the test with the given spec (the sandbox's
// discovery tags and the al2023 alias when nil).
func newRegion(t *testing.T, world *ec2fake.World, spec *v1alpha1.EC2NodeClassSpec) *region {
	t.Helper()
	w := ec2fake.DefaultWorld()
	if world != nil {
		w = *world
	}
	r := &region{ec2: ec2fake.New(w)}
	var stop func()
	var err error
	if r.url, stop, err = r.ec2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r.client = clientFor(r.url, 3)
	// The EKS-optimised images' public parameters, naming the world's
	// images by their names.
	if r.ssm, err = ssmfake.New("us-west-2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.ssm.Close)
	byName := map[string]string{}
	for _, im := range w.Images {
		byName[im.Name] = im.ID
	}
	if _, err := r.ssm.SeedEKSOptimizedAL2023("1.37", []string{"v20261001", "v20261101"}, ssmfake.ImageIDsByName(byName)); err != nil {
		t.Fatal(err)
	}
	ssmClient := ssm.New(ssm.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(r.ssm.URL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATEST", "secret", ""), HTTPClient: sdkhttp.GuardClosedBodyRace(nil)})
	prices, err := pricing.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	r.provider, err = aws.New(r.client, kube, prices, aws.Options{
		Region: "us-west-2", ClusterName: "conformance", ClusterEndpoint: "https://api.conformance.example",
		ClusterCA: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), ClusterServiceCIDR: "10.100.0.0/16",
		KubernetesVersion: "1.37", SSM: ssmClient,
	})
	if err != nil {
		t.Fatal(err)
	}
	if spec == nil {
		spec = &v1alpha1.EC2NodeClassSpec{
			InstanceProfile:            "NodeforgeNodeInstanceProfile",
			SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
			SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
			AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
		}
	}
	r.class = r.resolve(t, className(t), *spec)
	return r
}

// className is a name for the test's objects the API server accepts.
func className(t *testing.T) string {
	name := []byte{}
	for _, c := range []byte(t.Name()) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			name = append(name, c)
		case c >= 'A' && c <= 'Z':
			name = append(name, c+'a'-'A')
		default:
			name = append(name, '-')
		}
	}
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	return "t-" + string(name)
}

// resolve creates an EC2NodeClass and runs the node class controller on it
// once, against the API server, and returns it as stored.
func (r *region) resolve(t *testing.T, name string, spec v1alpha1.EC2NodeClassSpec) *v1alpha1.EC2NodeClass {
	t.Helper()
	ctx := context.Background()
	class := &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := kube.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), class) })
	ctrl := aws.NewNodeClassController(kube, r.provider)
	if _, err := ctrl.Reconcile(ctx, reconcileRequest(name)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: name}, class); err != nil {
		t.Fatal(err)
	}
	return class
}

func ready(class *v1alpha1.EC2NodeClass) *metav1.Condition {
	return meta.FindStatusCondition(class.Status.Conditions, aws.ConditionReady)
}

// pool is a NodePool of the test's class; not stored, the provider only
// reads its node class reference.
func (r *region) pool() *v1alpha1.NodePool {
	return &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{
		Spec: v1alpha1.NodeClaimTemplateSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: r.class.Name}},
	}}}
}

func mustPrices(t *testing.T) *pricing.Table {
	t.Helper()
	p, err := pricing.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
