package cloudprovider

import (
	"context"
	"fmt"
	"time"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// WithDeadline decorates a provider so that no call runs longer than d: a
// cloud that stops answering fails the call (the caller retries it with
// backoff) instead of holding a controller worker, and with it the claims
// queued behind it, for ever. The SDK's own retries happen inside d.
func WithDeadline(cp CloudProvider, d time.Duration) CloudProvider {
	return &deadline{CloudProvider: cp, d: d}
}

type deadline struct {
	CloudProvider
	d time.Duration
}

// Within runs call with no more than d (no bound when d is 0) and says,
// in the error, what ran out of time: for the calls to the cloud that are
// not a CloudProvider's (an interruption queue, a node class's
// resolution), bound by the same --cloud-call-timeout.
func Within(ctx context.Context, d time.Duration, what string, call func(context.Context) error) error {
	if d <= 0 {
		return call(ctx)
	}
	_, err := bound(ctx, d, what, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}

// bound runs call under the deadline and says which call ran out of time.
func bound[T any](ctx context.Context, d time.Duration, method string, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := call(ctx)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("cloud provider %s did not answer within %s: %w", method, d, err)
	}
	return out, err
}

func (c *deadline) Create(ctx context.Context, l Launch) (*Instance, error) {
	return bound(ctx, c.d, "Create", func(ctx context.Context) (*Instance, error) { return c.CloudProvider.Create(ctx, l) })
}

func (c *deadline) Delete(ctx context.Context, providerID string) error {
	_, err := bound(ctx, c.d, "Delete", func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.CloudProvider.Delete(ctx, providerID)
	})
	return err
}

func (c *deadline) Get(ctx context.Context, providerID string) (*Instance, error) {
	return bound(ctx, c.d, "Get", func(ctx context.Context) (*Instance, error) { return c.CloudProvider.Get(ctx, providerID) })
}

func (c *deadline) List(ctx context.Context) ([]*Instance, error) {
	return bound(ctx, c.d, "List", c.CloudProvider.List)
}

func (c *deadline) InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return bound(ctx, c.d, "InstanceTypes", func(ctx context.Context) ([]v1alpha1.InstanceType, error) {
		return c.CloudProvider.InstanceTypes(ctx, pool)
	})
}
