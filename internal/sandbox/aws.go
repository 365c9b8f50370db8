package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/eksfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/eksnode"
	"github.com/nodeforge/nodeforge/internal/sandbox/iamfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/sqsfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
)

// awsRegion is the sandbox's fake EC2 region, in the sandbox's own process
// so that it outlives provisioner restarts, and the kubelets of its
// instances: each instance boots from the user data of its launch template
// and, after a delay, registers a kwok node with the labels, taints and
// kubelet settings its NodeConfig says. What joins is what the provisioner's
// user data asks for.
type awsRegion struct {
	EC2  *ec2fake.Server
	URL  string
	stop func()
	// SQS holds the interruption queue, at SQSURL.
	SQS     *sqsfake.Server
	SQSURL  string
	sqsStop func()
	// EKS describes the cluster ClusterName (addCluster): the provisioner
	// discovers the sandbox's API server, CA, service CIDR and version
	// there, as it would on EKS.
	EKS *eksfake.Server
	// SSM publishes the EKS-optimised images' public parameters, naming
	// the fake region's images: an al2023 alias resolves through it.
	SSM *ssmfake.Server
	// IAM holds the node role (NodeRole), at IAMURL: the provisioner
	// keeps instance profiles there for EC2NodeClasses with spec.role.
	IAM     *iamfake.Server
	IAMURL  string
	iamStop func()
	cs      atomic.Pointer[kubernetes.Clientset] // set by connect
	delay   time.Duration
	types   map[string]ec2fake.InstanceType

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NodeRole is the role of the sandbox's nodes in its fake IAM, for
// EC2NodeClasses with spec.role.
const NodeRole = "NodeforgeNodeRole"

// ClusterName is the sandbox's cluster, in its fake EKS.
const ClusterName = "sandbox"

// startAWSRegion starts the fake EC2, SQS, IAM and EKS endpoints. They
// listen at once, on ports the kernel picks, before the sandbox reserves
// the ports of its other components, so that they can never take one of
// those; connect gives them the API server, which they need only once the
// provisioner launches or terminates an instance, and addCluster describes
// it in EKS once its address and CA exist.
func startAWSRegion(delay time.Duration) (*awsRegion, error) {
	var err error
	world := ec2fake.DefaultWorld()
	r := &awsRegion{EC2: ec2fake.New(world), delay: delay, types: map[string]ec2fake.InstanceType{}}
	for _, it := range world.InstanceTypes {
		r.types[it.Name] = it
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.EC2.OnLaunch(func(in ec2fake.Instance) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(r.delay):
			}
			if err := r.boot(r.ctx, in); err != nil {
				fmt.Printf("sandbox: instance %s did not join: %v\n", in.ID, err)
			}
		}()
	})
	// As the cloud controller manager would, delete the node of an
	// instance that is gone.
	// As EventBridge's state-change rule would, tell the interruption
	// queue.
	r.EC2.OnTerminate(func(in ec2fake.Instance) {
		_ = r.cs.Load().CoreV1().Nodes().Delete(r.ctx, in.PrivateDNSName, metav1.DeleteOptions{})
		_, _ = r.SQS.Send(InterruptionQueue, ec2Event("EC2 Instance State-change Notification", in.ID, map[string]string{"state": "terminated"}, time.Now()))
	})
	r.SQS = sqsfake.New()
	if r.SQSURL, r.sqsStop, err = r.SQS.Start(); err != nil {
		return nil, err
	}
	r.SQS.CreateQueue(InterruptionQueue)
	r.IAM = iamfake.New()
	r.IAM.AddRole(NodeRole)
	if r.IAMURL, r.iamStop, err = r.IAM.Start(); err != nil {
		r.sqsStop()
		return nil, err
	}
	// The region the provisioner is given, which the fake checks
	// signatures against.
	if r.EKS, err = eksfake.New("us-west-2"); err != nil {
		r.sqsStop()
		r.iamStop()
		return nil, err
	}
	if r.SSM, err = ssmfake.New("us-west-2"); err != nil {
		r.sqsStop()
		r.iamStop()
		r.EKS.Close()
		return nil, err
	}
	byName := map[string]string{}
	for _, im := range world.Images {
		byName[im.Name] = im.ID
	}
	if _, err := r.SSM.SeedEKSOptimizedAL2023("1.37", []string{"v20261001", "v20261101"}, ssmfake.ImageIDsByName(byName)); err != nil {
		r.sqsStop()
		r.iamStop()
		r.EKS.Close()
		r.SSM.Close()
		return nil, err
	}
	if r.URL, r.stop, err = r.EC2.Start(); err != nil {
		r.sqsStop()
		r.iamStop()
		r.EKS.Close()
		r.SSM.Close()
		return nil, err
	}
	return r, nil
}

// addCluster makes EKS describe the sandbox as cluster ClusterName: its API
// server, the CA in caFile, its service range and the Kubernetes version
// of its components (such as v1.37.2; EKS's default when it cannot be
// read).
func (r *awsRegion) addCluster(server, caFile, serviceCIDR, kubernetesVersion string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	version := ""
	if parts := strings.SplitN(strings.TrimPrefix(kubernetesVersion, "v"), ".", 3); len(parts) >= 2 {
		version = parts[0] + "." + parts[1]
	}
	_, err = r.EKS.AddCluster(eksfake.Cluster{
		Name: ClusterName, Endpoint: server, CertificateAuthority: ca, ServiceIPv4CIDR: serviceCIDR, Version: version,
	})
	return err
}

// connect gives the region the sandbox's API server: an instance that
// boots registers its node there.
func (r *awsRegion) connect(cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r.cs.Store(cs)
	return nil
}

func (r *awsRegion) close() {
	r.cancel()
	r.wg.Wait()
	r.stop()
	r.sqsStop()
	r.iamStop()
	r.EKS.Close()
	r.SSM.Close()
}

// InterruptionQueue is the name of the sandbox's interruption queue.
const InterruptionQueue = "nodeforge-sandbox"

// ec2Event is an EventBridge event of source aws.ec2 about one instance,
// in the shape EC2's user guide gives its events.
func ec2Event(detailType, instanceID string, detail map[string]string, at time.Time) string {
	d := map[string]string{"instance-id": instanceID}
	maps.Copy(d, detail)
	raw, _ := json.Marshal(map[string]any{
		"version": "0", "id": fmt.Sprintf("sandbox-%d", at.UnixNano()), "detail-type": detailType, "source": "aws.ec2",
		"account": sqsfake.Account, "time": at.UTC().Format(time.RFC3339), "region": "us-west-2",
		"resources": []string{"arn:aws:ec2:us-west-2:" + sqsfake.Account + ":instance/" + instanceID}, "detail": d,
	})
	return string(raw)
}

// SpotInterruption sends the interruption queue a spot interruption
// warning for the instance, as if EC2 had sent it at sent (its two
// minutes' notice counting from then), through the real SQS client as
// EventBridge would deliver it.
func (s *Sandbox) SpotInterruption(ctx context.Context, instanceID string, sent time.Time) error {
	if s.region == nil {
		return fmt.Errorf("the sandbox has no AWS region")
	}
	// The provisioner's guard: a retry after the race it prevents would
	// send the interruption twice.
	c := sqs.New(sqs.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(s.region.SQSURL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIASANDBOX", "sandbox", ""), HTTPClient: sdkhttp.GuardClosedBodyRace(nil)})
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String(InterruptionQueue)})
	if err != nil {
		return err
	}
	body := ec2Event("EC2 Spot Instance Interruption Warning", instanceID, map[string]string{"instance-action": "terminate"}, sent)
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url.QueueUrl, MessageBody: sdkaws.String(body)})
	return err
}

// boot registers the instance's node as its kubelet would, with what
// nodeadm, the kubelet, the device plugins and the VPC resource controller
// would give it (package eksnode), security groups for pods on, and the
// cloud provider's uninitialised taint, which it lifts after a moment as
// the cloud controller manager does once it has initialised the node;
// then the ResourceSlices of the DRA drivers the node runs (the NVIDIA
// GPU driver's on a node labelled for it) are published, as their
// kubelet plugins publish them once they start.
func (r *awsRegion) boot(ctx context.Context, in ec2fake.Instance) error {
	it, ok := r.types[in.Type]
	if !ok {
		return fmt.Errorf("unknown instance type %s", in.Type)
	}
	joined, err := eksnode.Join(it, eksnode.BootOf(in, r.EC2.LaunchTemplates(), true))
	if err != nil {
		return err
	}
	arch := "amd64"
	if len(it.Architectures) > 0 && it.Architectures[0] == "arm64" {
		arch = "arm64"
	}
	labels := joined.Labels
	labels[corev1.LabelInstanceTypeStable] = in.Type
	labels[corev1.LabelTopologyZone] = in.Zone
	labels[corev1.LabelTopologyRegion] = strings.TrimRight(in.Zone, "abcdefghijklmnopqrstuvwxyz")
	labels[corev1.LabelArchStable] = arch
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelHostname] = in.PrivateDNSName
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: in.PrivateDNSName, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///" + in.Zone + "/" + in.ID, Taints: joined.Taints},
		Status:     corev1.NodeStatus{Capacity: joined.Capacity, Allocatable: joined.Allocatable},
	}
	cs := r.cs.Load()
	created, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(cloudInitDelay):
	}
	if err := initialize(ctx, cs, node.Name); err != nil {
		return err
	}
	return publishSlices(ctx, cs, joined.Slices(created))
}

// publishSlices creates the ResourceSlices the node's DRA drivers
// publish once their kubelet plugins run on it (eksnode.Node.Slices).
func publishSlices(ctx context.Context, cs kubernetes.Interface, published []resourcev1.ResourceSlice) error {
	for i := range published {
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, &published[i], metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ResourceSlice %s: %w", published[i].Name, err)
		}
	}
	return nil
}

// cloudInitDelay is how long the sandbox's cloud controller manager takes
// to initialise a node after it registers.
const cloudInitDelay = 500 * time.Millisecond

// initialize lifts the cloud provider's uninitialised taint from the
// node, as the cloud controller manager does.
func initialize(ctx context.Context, cs kubernetes.Interface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider })
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		_, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}
