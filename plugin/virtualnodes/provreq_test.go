package virtualnodes

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
)

// TestRequestParameters: a request Nodeforge serves is failed for a
// parameter it does not act on, or one it cannot read; ValidUntilSeconds
// counts from the request's creation.
func TestRequestParameters(t *testing.T) {
	created := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	pr := func(class string, params map[string]provreqv1.Parameter) *provreqv1.ProvisioningRequest {
		return &provreqv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Spec: provreqv1.ProvisioningRequestSpec{ProvisioningClassName: class, Parameters: params}}
	}
	for _, tc := range []struct {
		name   string
		pr     *provreqv1.ProvisioningRequest
		refuse string
	}{
		{"no parameter", pr(provreqv1.ClassCheckCapacity, nil), ""},
		{"noRetry on check-capacity", pr(provreqv1.ClassCheckCapacity, map[string]provreqv1.Parameter{"noRetry": "true"}), ""},
		{"noRetry not a boolean", pr(provreqv1.ClassCheckCapacity, map[string]provreqv1.Parameter{"noRetry": "yes"}), `must be "true" or "false"`},
		{"partialCapacityCheck", pr(provreqv1.ClassCheckCapacity, map[string]provreqv1.Parameter{"partialCapacityCheck": "bookPartial"}), `"partialCapacityCheck" is not supported`},
		{"ValidUntilSeconds on atomic", pr(provreqv1.ClassBestEffortAtomicScaleUp, map[string]provreqv1.Parameter{"ValidUntilSeconds": "600"}), ""},
		{"ValidUntilSeconds on check-capacity", pr(provreqv1.ClassCheckCapacity, map[string]provreqv1.Parameter{"ValidUntilSeconds": "600"}), `"ValidUntilSeconds" is not supported`},
		{"ValidUntilSeconds not a number", pr(provreqv1.ClassBestEffortAtomicScaleUp, map[string]provreqv1.Parameter{"ValidUntilSeconds": "10m"}), "whole number of seconds"},
		{"ValidUntilSeconds zero", pr(provreqv1.ClassBestEffortAtomicScaleUp, map[string]provreqv1.Parameter{"ValidUntilSeconds": "0"}), "whole number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unsupportedParameter(tc.pr)
			if tc.refuse == "" && got != "" || tc.refuse != "" && !strings.Contains(got, tc.refuse) {
				t.Errorf("unsupportedParameter = %q, want %q", got, tc.refuse)
			}
		})
	}
	end, ok := validUntil(pr(provreqv1.ClassBestEffortAtomicScaleUp, map[string]provreqv1.Parameter{"ValidUntilSeconds": "600"}))
	if !ok || !end.Equal(created.Add(10*time.Minute)) {
		t.Errorf("validUntil = %s, %v; want %s", end, ok, created.Add(10*time.Minute))
	}
}
