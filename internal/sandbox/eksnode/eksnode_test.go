package eksnode

import (
	"encoding/base64"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
)

// userData is a NodeConfig part as nodeadm reads it, with kubelet holding
// the spec.kubelet fields.
func userData(kubelet string) string {
	doc := "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: my-cluster\n    apiServerEndpoint: http://localhost\n    certificateAuthority: " +
		base64.StdEncoding.EncodeToString([]byte("ca")) + "\n    cidr: 10.100.0.0/16\n  kubelet:\n" + kubelet
	return "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//nodeforge//\"\n\n--//nodeforge//\nContent-Type: application/node.eks.aws\n\n---\n" + doc + "\n--//nodeforge//--\n"
}

// TestJoinAsNodeadmsOwnCasesSay holds Join against the kubelet
// configurations nodeadm's own end-to-end cases expect
// (nodeadm/test/e2e/cases/custom-max-pods-expression, awslabs/amazon-eks-
// ami): an instance of 4 default-card interfaces of 15 addresses and 2
// vCPUs; a max pods expression sets both the kubelet's max pods and the
// memory kube-reserved for them; a maxPods in the kubelet config wins for
// the kubelet, but not for kube-reserved.
func TestJoinAsNodeadmsOwnCasesSay(t *testing.T) {
	it := ec2fake.InstanceType{Name: "m5.xlarge", VCPUs: 2, MemoryMiB: 16384, MaxENIs: 4, IPv4PerENI: 15}
	for _, tc := range []struct {
		name, kubelet        string
		pods, reservedMemMiB int64
		reservedCPUMilli     int64
	}{
		{name: "standard", kubelet: "    flags: []\n", pods: 58, reservedMemMiB: 11*58 + 255, reservedCPUMilli: 70},
		{name: "custom networking", kubelet: "    maxPodsExpression: ((default_enis -1) * (ips_per_eni - 1)) + 2\n", pods: 44, reservedMemMiB: 739, reservedCPUMilli: 70},
		{name: "kubelet config max pods", kubelet: "    maxPodsExpression: max_pods + 2\n    config:\n      maxPods: 1\n", pods: 1, reservedMemMiB: 915, reservedCPUMilli: 70},
		{name: "an expression that is not a positive number falls back", kubelet: "    maxPodsExpression: default_enis - 10\n", pods: 58, reservedMemMiB: 11*58 + 255, reservedCPUMilli: 70},
		{name: "podsPerCore lowers the kubelet's figure only", kubelet: "    config:\n      podsPerCore: 3\n", pods: 6, reservedMemMiB: 11*58 + 255, reservedCPUMilli: 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := Join(it, Boot{UserData: userData(tc.kubelet), RootGiB: 20})
			if err != nil {
				t.Fatal(err)
			}
			if got := node.Capacity.Pods().Value(); got != tc.pods {
				t.Errorf("pods = %d, want %d", got, tc.pods)
			}
			mem, alloc := node.Capacity[corev1.ResourceMemory], node.Allocatable[corev1.ResourceMemory]
			if got := mem.Value() - alloc.Value(); got != (tc.reservedMemMiB+100)<<20 {
				t.Errorf("memory reserved = %d MiB, want kube-reserved %d + eviction 100", got>>20, tc.reservedMemMiB)
			}
			cpu, allocCPU := node.Capacity[corev1.ResourceCPU], node.Allocatable[corev1.ResourceCPU]
			if got := cpu.MilliValue() - allocCPU.MilliValue(); got != tc.reservedCPUMilli {
				t.Errorf("cpu reserved = %dm, want %dm", got, tc.reservedCPUMilli)
			}
		})
	}
}

// TestReservedCPUByRanges: nodeadm's CPU reservation rounds each range
// down on its own (getCPUMillicoresToReserve).
func TestReservedCPUByRanges(t *testing.T) {
	for cores, want := range map[int64]int64{1: 60, 2: 70, 4: 80, 5: 82, 8: 90, 96: 310, 192: 550} {
		if got := reservedMilliCPU(cores * 1000); got != want {
			t.Errorf("%d cores: %dm reserved, want %dm", cores, got, want)
		}
	}
}

// TestDevicesOfRealTypes: the device plugins' counts for real shapes.
func TestDevicesOfRealTypes(t *testing.T) {
	want := map[string]map[string]int64{
		"p5.48xlarge":   {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32, "vpc.amazonaws.com/pod-eni": 120},
		"trn1.32xlarge": {"aws.amazon.com/neuron": 16, "aws.amazon.com/neuroncore": 32, "vpc.amazonaws.com/efa": 8, "vpc.amazonaws.com/pod-eni": 82},
		"g4ad.16xlarge": {"amd.com/gpu": 4, "vpc.amazonaws.com/pod-eni": 6},
		"dl1.24xlarge":  {"habana.ai/gaudi": 8, "vpc.amazonaws.com/efa": 4, "vpc.amazonaws.com/pod-eni": 62},
		"t3.micro":      {},
	}
	for _, it := range ec2fake.RealInstanceTypes() {
		w, ok := want[it.Name]
		if !ok {
			continue
		}
		got := devices(it, Boot{EFAInterfaces: int64(it.EFAs), PodENI: true}, false)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s devices = %v, want %v", it.Name, got, w)
		}
		delete(want, it.Name)
	}
	if len(want) > 0 {
		t.Errorf("types not in RealInstanceTypes: %v", want)
	}
}

// TestReadUserDataMergesNodeConfigsInOrder: a shell script part is left
// to cloud-init; two NodeConfig parts merge as nodeadm merges them, the
// later one's kubelet config and max pods expression winning and its
// flags added; the flags give the labels and taints.
func TestReadUserDataMergesNodeConfigsInOrder(t *testing.T) {
	const b = "//b//"
	doc := "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"" + b + "\"\n\n" +
		"--" + b + "\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n\n" +
		"--" + b + "\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    maxPodsExpression: max_pods\n    config:\n      podsPerCore: 3\n      maxPods: 20\n    flags:\n    - --node-labels=team=a\n\n" +
		"--" + b + "\nContent-Type: application/node.eks.aws\n\n---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    maxPodsExpression: max_pods - 2\n    config:\n      maxPods: 30\n    flags:\n    - --node-labels=pool=p,team=b\n    - --register-with-taints=gpu=true:NoSchedule,dedicated:NoExecute\n\n" +
		"--" + b + "--\n"
	nc, labels, taints, err := readUserData(doc)
	if err != nil {
		t.Fatal(err)
	}
	k := nc.Spec.Kubelet
	if k.MaxPodsExpression != "max_pods - 2" {
		t.Errorf("maxPodsExpression = %q, want the later part's", k.MaxPodsExpression)
	}
	if fmt.Sprint(k.Config["maxPods"]) != "30" || fmt.Sprint(k.Config["podsPerCore"]) != "3" {
		t.Errorf("kubelet config = %v, want maxPods 30 (later part) and podsPerCore 3 (earlier part)", k.Config)
	}
	if want := map[string]string{"team": "b", "pool": "p"}; fmt.Sprint(labels) != fmt.Sprint(want) {
		t.Errorf("labels = %v, want %v", labels, want)
	}
	want := []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}, {Key: "dedicated", Effect: corev1.TaintEffectNoExecute}}
	if fmt.Sprint(taints) != fmt.Sprint(want) {
		t.Errorf("taints = %v, want %v", taints, want)
	}
	if _, _, _, err := readUserData("#!/bin/sh\necho no MIME\n"); err == nil {
		t.Error("a shell script alone was read as a NodeConfig")
	}
}
