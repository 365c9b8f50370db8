package nodeshape

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nodeforge/nodeforge/test/testobj"
)

func fitNode(cpu, memory, pods, gpus string) *corev1.Node {
	n := testobj.Node("n").Allocatable("cpu", cpu, "memory", memory, "pods", pods)
	if gpus != "" {
		n.Allocatable("cpu", cpu, "memory", memory, "pods", pods, "nvidia.com/gpu", gpus)
	}
	return n.Obj()
}

func fitPod(name, cpu, memory, gpus string) *corev1.Pod {
	p := testobj.Pod(name).Req("cpu", cpu, "memory", memory)
	if gpus != "" {
		p.Req("nvidia.com/gpu", gpus)
	}
	return p.Obj()
}

// TestHoldsCountsEveryResourceAndThePods: a node holds pods when their
// requests together, extended resources too, and their number are
// within its allocatable; FitsBeside, asked a pod at a time, agrees.
func TestHoldsCountsEveryResourceAndThePods(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *corev1.Node
		pods []*corev1.Pod
		want bool
	}{
		{"within cpu and memory", fitNode("2", "4Gi", "110", ""), []*corev1.Pod{fitPod("a", "1", "2Gi", ""), fitPod("b", "1", "2Gi", "")}, true},
		{"cpu over by one milli", fitNode("2", "4Gi", "110", ""), []*corev1.Pod{fitPod("a", "1", "1Gi", ""), fitPod("b", "1001m", "1Gi", "")}, false},
		{"memory over", fitNode("2", "4Gi", "110", ""), []*corev1.Pod{fitPod("a", "1", "3Gi", ""), fitPod("b", "1", "2Gi", "")}, false},
		{"more pods than the node allows", fitNode("2", "4Gi", "1", ""), []*corev1.Pod{fitPod("a", "10m", "1Mi", ""), fitPod("b", "10m", "1Mi", "")}, false},
		{"a GPU the node does not have", fitNode("8", "32Gi", "110", ""), []*corev1.Pod{fitPod("a", "1", "1Gi", "1")}, false},
		{"GPUs within the node's", fitNode("8", "32Gi", "110", "2"), []*corev1.Pod{fitPod("a", "1", "1Gi", "1"), fitPod("b", "1", "1Gi", "1")}, true},
		{"GPUs over the node's", fitNode("8", "32Gi", "110", "2"), []*corev1.Pod{fitPod("a", "1", "1Gi", "2"), fitPod("b", "1", "1Gi", "1")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Holds(tc.node, tc.pods); got != tc.want {
				t.Errorf("Holds = %v, want %v", got, tc.want)
			}
			alloc, used, ok := framework.NewResource(tc.node.Status.Allocatable), &framework.Resource{}, true
			for i, p := range tc.pods {
				req := Requested([]*corev1.Pod{p})
				ok = ok && FitsBeside(alloc, used, req, i+1)
				used.Add(p.Spec.Containers[0].Resources.Requests)
			}
			if ok != tc.want {
				t.Errorf("FitsBeside, a pod at a time = %v, want %v", ok, tc.want)
			}
		})
	}
}

// TestRequestListIsWhatTheClaimAsksFor: cpu, memory and extended
// resources summed over the pods, and the pod count.
func TestRequestListIsWhatTheClaimAsksFor(t *testing.T) {
	got := RequestList([]*corev1.Pod{fitPod("a", "500m", "1Gi", "1"), fitPod("b", "1", "512Mi", "")})
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1500m", corev1.ResourceMemory: "1536Mi", corev1.ResourcePods: "2", "nvidia.com/gpu": "1"} {
		if q := got[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %s, want %s", name, q.String(), want)
		}
	}
}
