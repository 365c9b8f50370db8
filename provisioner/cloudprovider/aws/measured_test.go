package aws

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// TestMeasuredMemoryTellsTheCatalogs: a registered node that changes what
// an instance type offers (its first measurement, or a lower figure) calls
// what OnMeasured registered, so the pools' catalogs are published again
// at once; the same figure again, or a higher one, changes nothing and
// calls nothing.
func TestMeasuredMemoryTellsTheCatalogs(t *testing.T) {
	p := &Provider{}
	var told int
	p.OnMeasured(func() { told++ })
	in := &cloudprovider.Instance{InstanceType: "m5.large", ImageID: "ami-1"}
	register := func(mem string) {
		p.RegisteredNode(context.Background(), in, &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}}})
	}
	for _, step := range []struct {
		mem  string
		want int
	}{
		{"7800Mi", 1}, // first measured
		{"7800Mi", 1}, // the same again
		{"7900Mi", 1}, // higher: the lowest is kept
		{"7700Mi", 2}, // lower
	} {
		register(step.mem)
		if told != step.want {
			t.Fatalf("after a node of %s: told %d times, want %d", step.mem, told, step.want)
		}
	}
}
