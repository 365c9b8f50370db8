package nodeshape

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestWithinLimitsAgreesWithTheMessage: WithinLimits is true exactly when
// ExceedsLimits has nothing to say, and the message names only the limit
// crossed, in the units a person writes.
func TestWithinLimitsAgreesWithTheMessage(t *testing.T) {
	q := resource.MustParse
	limits := v1alpha1.Limits{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")}
	used := corev1.ResourceList{corev1.ResourceCPU: q("3"), corev1.ResourceMemory: q("3584Mi")}
	for _, tc := range []struct {
		name string
		more corev1.ResourceList
		want string
	}{
		{"up to the limit", corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")}, ""},
		{"cpu over", corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("2Gi")}, "cpu 3 in use or launching + 2 for t > limit 4"},
		{"memory over", corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("13Gi")}, "memory 3.5Gi in use or launching + 13Gi for t > limit 16Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExceedsLimits(limits, used, tc.more, "t"); got != tc.want {
				t.Errorf("ExceedsLimits = %q, want %q", got, tc.want)
			}
			if got := WithinLimits(limits, used, tc.more); got != (tc.want == "") {
				t.Errorf("WithinLimits = %v, want %v", got, tc.want == "")
			}
			if used.Cpu().String() != "3" {
				t.Fatal("a check changed the usage it was given")
			}
		})
	}
}
