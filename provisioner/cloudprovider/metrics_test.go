package cloudprovider

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// scripted is a provider whose calls return what the test says.
type scripted struct{ err error }

func (s scripted) Name() string                                            { return "scripted" }
func (s scripted) Create(context.Context, Launch) (*Instance, error)       { return &Instance{}, s.err }
func (s scripted) Delete(context.Context, string) error                    { return s.err }
func (s scripted) Get(context.Context, string) (*Instance, error)          { return nil, s.err }
func (s scripted) List(context.Context) ([]*Instance, error)               { return nil, s.err }
func (s scripted) NodeClasses() []NodeClass                                { return nil }
func (s scripted) RegisteredNode(context.Context, *Instance, *corev1.Node) {}
func (s scripted) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return nil, s.err
}

func TestWithMetricsCountsResults(t *testing.T) {
	ctx := context.Background()
	count := func(method, result string) float64 {
		return testutil.ToFloat64(metrics.CloudCalls.WithLabelValues("scripted", method, result))
	}
	before := [4]float64{count("Create", "ok"), count("Create", "insufficient_capacity"), count("Delete", "not_found"), count("Get", "error")}
	_, _ = WithMetrics(scripted{}).Create(ctx, Launch{})
	_, _ = WithMetrics(scripted{err: &InsufficientCapacityError{}}).Create(ctx, Launch{})
	_ = WithMetrics(scripted{err: ErrNotFound}).Delete(ctx, "x")
	_, _ = WithMetrics(scripted{err: context.DeadlineExceeded}).Get(ctx, "x")
	after := [4]float64{count("Create", "ok"), count("Create", "insufficient_capacity"), count("Delete", "not_found"), count("Get", "error")}
	for i := range after {
		if after[i]-before[i] != 1 {
			t.Errorf("counter %d moved by %v, want 1 (before %v, after %v)", i, after[i]-before[i], before, after)
		}
	}
}
