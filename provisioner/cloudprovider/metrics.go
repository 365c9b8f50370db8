package cloudprovider

import (
	"context"
	"errors"
	"time"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
)

// WithMetrics decorates a provider so that every call is counted by result
// and timed.
func WithMetrics(cp CloudProvider) CloudProvider { return &measured{cp} }

type measured struct{ CloudProvider }

func (m *measured) observe(method string, start time.Time, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		result = "not_found"
	case IsInsufficientCapacity(err):
		result = "insufficient_capacity"
	case IsAccessDenied(err):
		result = "access_denied"
	default:
		result = "error"
	}
	metrics.CloudCalls.WithLabelValues(m.Name(), method, result).Inc()
	metrics.CloudCallDuration.WithLabelValues(m.Name(), method).Observe(time.Since(start).Seconds())
}

func (m *measured) Create(ctx context.Context, l Launch) (*Instance, error) {
	start := time.Now()
	in, err := m.CloudProvider.Create(ctx, l)
	m.observe("Create", start, err)
	return in, err
}

func (m *measured) Delete(ctx context.Context, providerID string) error {
	start := time.Now()
	err := m.CloudProvider.Delete(ctx, providerID)
	m.observe("Delete", start, err)
	return err
}

func (m *measured) Get(ctx context.Context, providerID string) (*Instance, error) {
	start := time.Now()
	in, err := m.CloudProvider.Get(ctx, providerID)
	m.observe("Get", start, err)
	return in, err
}

func (m *measured) List(ctx context.Context) ([]*Instance, error) {
	start := time.Now()
	in, err := m.CloudProvider.List(ctx)
	m.observe("List", start, err)
	return in, err
}

func (m *measured) InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	start := time.Now()
	its, err := m.CloudProvider.InstanceTypes(ctx, pool)
	m.observe("InstanceTypes", start, err)
	return its, err
}
