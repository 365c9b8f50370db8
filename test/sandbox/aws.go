package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/test/ec2fake"
)

// awsRegion is the sandbox's fake EC2 region, in the sandbox's own process
// so that it outlives provisioner restarts, and the kubelets of its
// instances: each instance boots from the user data of its launch template
// and, after a delay, registers a kwok node with the labels, taints and
// kubelet settings its NodeConfig says. What joins is what the provisioner's
// user data asks for.
type awsRegion struct {
	EC2   *ec2fake.Server
	URL   string
	stop  func()
	cs    kubernetes.Interface
	delay time.Duration
	types map[string]ec2fake.InstanceType

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startAWSRegion(cfg *rest.Config, delay time.Duration) (*awsRegion, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	world := ec2fake.DefaultWorld()
	r := &awsRegion{EC2: ec2fake.New(world), cs: cs, delay: delay, types: map[string]ec2fake.InstanceType{}}
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
	r.EC2.OnTerminate(func(in ec2fake.Instance) {
		_ = cs.CoreV1().Nodes().Delete(r.ctx, in.PrivateDNSName, metav1.DeleteOptions{})
	})
	if r.URL, r.stop, err = r.EC2.Start(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *awsRegion) close() {
	r.cancel()
	r.wg.Wait()
	r.stop()
}

// boot registers the instance's node as its kubelet would.
func (r *awsRegion) boot(ctx context.Context, in ec2fake.Instance) error {
	nc, labels, taints, err := aws.ParseNodeConfig(in.UserData)
	if err != nil {
		return err
	}
	it, ok := r.types[in.Type]
	if !ok {
		return fmt.Errorf("unknown instance type %s", in.Type)
	}
	var kubelet v1alpha1.KubeletConfiguration
	if raw, err := json.Marshal(nc.Spec.Kubelet.Config); err == nil {
		_ = json.Unmarshal(raw, &kubelet)
	}
	capacity := aws.Capacity(infoOf(it), &kubelet, 20, 0.075)
	arch := "amd64"
	if len(it.Architectures) > 0 && it.Architectures[0] == "arm64" {
		arch = "arm64"
	}
	labels[corev1.LabelInstanceTypeStable] = in.Type
	labels[corev1.LabelTopologyZone] = in.Zone
	labels[corev1.LabelTopologyRegion] = strings.TrimRight(in.Zone, "abcdefghijklmnopqrstuvwxyz")
	labels[corev1.LabelArchStable] = arch
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelHostname] = in.PrivateDNSName
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: in.PrivateDNSName, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///" + in.Zone + "/" + in.ID, Taints: taints},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: aws.Allocatable(capacity, &kubelet)},
	}
	if _, err := r.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// infoOf is the fake's instance type as DescribeInstanceTypes reports it.
func infoOf(it ec2fake.InstanceType) ec2types.InstanceTypeInfo {
	info := ec2types.InstanceTypeInfo{
		InstanceType: ec2types.InstanceType(it.Name),
		VCpuInfo:     &ec2types.VCpuInfo{DefaultVCpus: sdkaws.Int32(it.VCPUs)},
		MemoryInfo:   &ec2types.MemoryInfo{SizeInMiB: sdkaws.Int64(it.MemoryMiB)},
		NetworkInfo:  &ec2types.NetworkInfo{MaximumNetworkInterfaces: sdkaws.Int32(it.MaxENIs), Ipv4AddressesPerInterface: sdkaws.Int32(it.IPv4PerENI)},
	}
	if len(it.GPUs) > 0 {
		info.GpuInfo = &ec2types.GpuInfo{}
		for _, g := range it.GPUs {
			info.GpuInfo.Gpus = append(info.GpuInfo.Gpus, ec2types.GpuDeviceInfo{Name: sdkaws.String(g.Name), Manufacturer: sdkaws.String(g.Manufacturer), Count: sdkaws.Int32(g.Count)})
		}
	}
	return info
}
