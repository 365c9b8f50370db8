package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestResourceGaugesFollowTheList: a pool's series are its list's, in
// cores and bytes; a resource that leaves the list loses its series, the
// other pools keep theirs, and Delete drops the pool's.
func TestResourceGaugesFollowTheList(t *testing.T) {
	g := newResourceGauges("test_usage", "test")
	g.Set("a", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("2Gi")})
	g.Set("b", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")})
	want := `
# HELP test_usage test
# TYPE test_usage gauge
test_usage{nodepool="a",resource="cpu"} 1.5
test_usage{nodepool="a",resource="memory"} 2.147483648e+09
test_usage{nodepool="b",resource="cpu"} 4
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	g.Set("a", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")})
	want = `
# HELP test_usage test
# TYPE test_usage gauge
test_usage{nodepool="a",resource="cpu"} 2
test_usage{nodepool="b",resource="cpu"} 4
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want)); err != nil {
		t.Errorf("after memory left a's list: %v", err)
	}
	g.Delete("a")
	want = `
# HELP test_usage test
# TYPE test_usage gauge
test_usage{nodepool="b",resource="cpu"} 4
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want)); err != nil {
		t.Errorf("after a was deleted: %v", err)
	}
}
