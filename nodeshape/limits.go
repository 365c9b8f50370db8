package nodeshape

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ExceedsLimits says which of a pool's limits adding more (the capacity
// of instance type what) to used would cross, each as "cpu 3 in use or
// launching + 2 for c7.large > limit 4", joined by ", "; "" when none.
// The provisioner's check before a launch and the scheduler plugin's
// forecast before a nomination both ask it, so a pod refused by either
// reads the same.
func ExceedsLimits(limits v1alpha1.Limits, used, more corev1.ResourceList, what string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(limits)) {
		if limit := limits[name]; crosses(limit, used[name], more[name]) {
			parts = append(parts, fmt.Sprintf("%s %s in use or launching + %s for %s > limit %s", name, Readable(name, used[name]), Readable(name, more[name]), what, Readable(name, limit)))
		}
	}
	return strings.Join(parts, ", ")
}

// WithinLimits reports whether adding more to used crosses none of
// limits: ExceedsLimits == "", without sorting or wording anything, for
// the checks that run once per option and pod.
func WithinLimits(limits v1alpha1.Limits, used, more corev1.ResourceList) bool {
	for name, limit := range limits {
		if crosses(limit, used[name], more[name]) {
			return false
		}
	}
	return true
}

// crosses: used plus more is over limit.
func crosses(limit, used, more resource.Quantity) bool {
	used.Add(more) // used is a copy
	return used.Cmp(limit) > 0
}

// Readable prints a quantity the way a person would write it: cpu in
// cores ("95.69"), memory and storage in GiB ("3.5Gi"), the rest as they
// are.
func Readable(name corev1.ResourceName, q resource.Quantity) string {
	switch name {
	case corev1.ResourceCPU:
		return strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', -1, 64)
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return strconv.FormatFloat(float64(q.Value()*100>>30)/100, 'f', -1, 64) + "Gi"
	}
	return q.String()
}
