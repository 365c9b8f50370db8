package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// ResourceGauges is a gauge per pool and resource (labels nodepool,
// resource) whose series follow a resource list: cpu in cores, memory and
// storage in bytes, others in their own units. It is safe for concurrent
// use.
type ResourceGauges struct {
	*prometheus.GaugeVec

	mu sync.Mutex
	// set is, per pool, the resources it has series for.
	set map[string][]corev1.ResourceName
}

func newResourceGauges(name, help string) *ResourceGauges {
	return &ResourceGauges{
		GaugeVec: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"nodepool", "resource"}),
		set:      map[string][]corev1.ResourceName{},
	}
}

// Set makes pool's series those of list: each resource's is set, and
// those of resources no longer in list are deleted after, so that no
// scrape finds the pool without its series midway.
func (g *ResourceGauges) Set(pool string, list corev1.ResourceList) {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]corev1.ResourceName, 0, len(list))
	for name, q := range list {
		g.WithLabelValues(pool, string(name)).Set(q.AsApproximateFloat64())
		names = append(names, name)
	}
	for _, name := range g.set[pool] {
		if _, ok := list[name]; !ok {
			g.DeleteLabelValues(pool, string(name))
		}
	}
	g.set[pool] = names
}

// Delete deletes every series of pool.
func (g *ResourceGauges) Delete(pool string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range g.set[pool] {
		g.DeleteLabelValues(pool, string(name))
	}
	delete(g.set, pool)
}
