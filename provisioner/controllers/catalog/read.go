package catalog

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// InstanceTypesOf returns the instance types of a pool's published
// catalog, merged from its objects (v1alpha1.ByPool) and sorted by name.
// It returns none when the pool has published none: no catalog yet, or
// nothing the pool may launch (its node class is not ready, say). Objects
// are found by the label nodeforge.dev/nodepool and kept only if their
// spec.nodePool names the pool, whatever their names.
func InstanceTypesOf(ctx context.Context, c client.Reader, pool string) ([]v1alpha1.InstanceType, error) {
	var list v1alpha1.InstanceTypeCatalogList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelNodePool: pool}); err != nil {
		return nil, fmt.Errorf("listing catalog of nodepool %s: %w", pool, err)
	}
	if cat := v1alpha1.ByPool(list.Items)[pool]; cat != nil {
		return cat.Spec.InstanceTypes, nil
	}
	return nil, nil
}
