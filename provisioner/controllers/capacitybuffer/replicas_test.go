package capacitybuffer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
)

func limits(pairs ...string) *bufferv1beta1.ResourceList {
	l := bufferv1beta1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		l[bufferv1beta1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return &l
}

func TestReplicas(t *testing.T) {
	chunk := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	for _, tc := range []struct {
		name     string
		spec     bufferv1beta1.CapacityBufferSpec
		workload int32
		chunk    corev1.ResourceList
		want     Count
	}{
		{name: "replicas alone", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](4)}, want: Count{Replicas: 4}},
		{name: "replicas 0 keeps no chunk", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](0)}, want: Count{Replicas: 0}},
		{name: "a percentage is rounded up: 25% of 10 is 3", spec: bufferv1beta1.CapacityBufferSpec{Percentage: ptr.To[int32](25)}, workload: 10, want: Count{Replicas: 3}},
		{name: "a percentage above 0 keeps at least 1: 1% of 10", spec: bufferv1beta1.CapacityBufferSpec{Percentage: ptr.To[int32](1)}, workload: 10, want: Count{Replicas: 1}},
		{name: "a percentage above 0 of a workload scaled to 0 keeps 1", spec: bufferv1beta1.CapacityBufferSpec{Percentage: ptr.To[int32](50)}, workload: 0, want: Count{Replicas: 1}},
		{name: "percentage 0 keeps none", spec: bufferv1beta1.CapacityBufferSpec{Percentage: ptr.To[int32](0)}, workload: 10, want: Count{Replicas: 0}},
		{name: "with replicas and a percentage, the larger: replicas", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](5), Percentage: ptr.To[int32](20)}, workload: 10, want: Count{Replicas: 5}},
		{name: "with replicas and a percentage, the larger: percentage", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](2), Percentage: ptr.To[int32](30)}, workload: 10, want: Count{Replicas: 3}},
		{name: "limits cut replicas, rounded down: 5 cpu of 2-cpu chunks is 2",
			spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](4), Limits: limits("cpu", "5")}, chunk: chunk, want: Count{Replicas: 2, Limited: true}},
		{name: "the tightest limit caps: memory 8Gi of 4Gi chunks is 2, cpu 100 would allow 50",
			spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](10), Limits: limits("cpu", "100", "memory", "8Gi")}, chunk: chunk, want: Count{Replicas: 2, Limited: true}},
		{name: "limits above replicas do not cut", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](2), Limits: limits("cpu", "100")}, chunk: chunk, want: Count{Replicas: 2}},
		{name: "limits equal to replicas do not cut", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](2), Limits: limits("cpu", "4")}, chunk: chunk, want: Count{Replicas: 2}},
		{name: "limits alone: as many as they allow (exactly: 0.3 cpu of 100m chunks is 3)",
			spec: bufferv1beta1.CapacityBufferSpec{Limits: limits("cpu", "300m")}, chunk: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}, want: Count{Replicas: 3}},
		{name: "limits alone on a resource chunks do not request: unbounded",
			spec: bufferv1beta1.CapacityBufferSpec{Limits: limits("nvidia.com/gpu", "4")}, chunk: chunk, want: Count{Unbounded: true}},
		{name: "a limit on a resource chunks do not request caps nothing",
			spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](3), Limits: limits("nvidia.com/gpu", "1")}, chunk: chunk, want: Count{Replicas: 3}},
		{name: "neither replicas, percentage nor limits: unbounded", spec: bufferv1beta1.CapacityBufferSpec{}, chunk: chunk, want: Count{Unbounded: true}},
		{name: "limits smaller than one chunk allow none", spec: bufferv1beta1.CapacityBufferSpec{Replicas: ptr.To[int32](1), Limits: limits("cpu", "1")}, chunk: chunk, want: Count{Replicas: 0, Limited: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Replicas(&tc.spec, tc.workload, tc.chunk)); diff != "" {
				t.Errorf("(-want,+got)\n%s", diff)
			}
		})
	}
}
