package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/regioncatalog"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/controllers/catalog"
)

// regionSource offers a whole AWS region's catalog (internal/sandbox/regioncatalog),
// fresh copies each time.
type regionSource []v1alpha1.InstanceType

func (s regionSource) Name() string { return "aws" }

func (s regionSource) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	out := make([]v1alpha1.InstanceType, len(s))
	for i := range s {
		s[i].DeepCopyInto(&out[i])
	}
	return out, nil
}

// TestRegionCatalogIsPublishedAndOneMarkWritesOneObjectPerPool runs the
// catalog controller against the real API server with a whole AWS
// region's offering set and three pools (any type, amd64 only, arm64
// only). Each pool's catalog is written whole, every object as stored
// (managedFields included) under 512 KiB. Then one offering of m5.large is
// marked unavailable: the API server's watch must show exactly one write
// of the m5 object of each pool offering m5.large (any and amd64), none of
// the arm64 pool's, and no other write.
func TestRegionCatalogIsPublishedAndOneMarkWritesOneObjectPerPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	types, err := regioncatalog.InstanceTypes()
	if err != nil {
		t.Fatal(err)
	}
	arch := func(a string) []v1alpha1.NodeSelectorRequirementWithMinValues {
		return []v1alpha1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{a}}}
	}
	pools := map[string][]v1alpha1.NodeSelectorRequirementWithMinValues{"region-any": nil, "region-amd": arch("amd64"), "region-arm": arch("arm64")}
	want := map[string]int{} // pool → instance types
	for _, it := range types {
		want["region-any"]++
		want["region-"+it.Labels[corev1.LabelArchStable][:3]]++
	}
	for name, reqs := range pools {
		np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodePoolSpec{
			Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{
				NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"},
				Requirements: reqs,
			}},
			Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"},
		}}
		if err := kube.Create(ctx, np); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// No garbage collector runs here: the pool's objects go by label.
			_ = kube.Delete(context.Background(), np)
			_ = kube.DeleteAllOf(context.Background(), &v1alpha1.InstanceTypeCatalog{}, client.MatchingLabels{v1alpha1.LabelNodePool: name})
		})
	}
	unavailable := cloudprovider.NewUnavailableOfferings(time.Hour)
	startCatalog(t, ctx, regionSource(types), unavailable)

	// The whole catalog of every pool, read back as the provisioner does.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for name, n := range want {
			got, err := cluster.InstanceTypesOf(ctx, kube, name)
			if err != nil || len(got) != n {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the pools' catalogs were not published whole (%v types): %v", want, err)
	}
	var stored v1alpha1.InstanceTypeCatalogList
	if err := kube.List(ctx, &stored, client.MatchingLabels{v1alpha1.LabelNodePool: "region-any"}); err != nil {
		t.Fatal(err)
	}
	largest, largestName, total := 0, "", 0
	for i := range stored.Items {
		b, err := json.Marshal(&stored.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 512<<10 {
			t.Errorf("catalog %s is stored as %d bytes, over 512 KiB", stored.Items[i].Name, len(b))
		}
		if len(b) > largest {
			largest, largestName = len(b), stored.Items[i].Name
		}
		total += len(b)
	}
	t.Logf("pool region-any: %d instance types in %d objects as stored (managedFields included): largest %s %.1f KiB, total %.1f KiB",
		want["region-any"], len(stored.Items), largestName, float64(largest)/1024, float64(total)/1024)

	// Watch every catalog from here on: each MODIFIED event is one write
	// the API server accepted.
	w, err := watcher(ctx, stored.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writes := map[string]int{} // "MODIFIED region-any.m5" → 1
	written := 0               // bytes of the objects written, as stored
	drain := func(until func() bool, quiet time.Duration) {
		timeout := time.After(time.Minute)
		for {
			var idle <-chan time.Time
			if until() {
				idle = time.After(quiet)
			}
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("the watch closed")
				}
				if cat, ok := ev.Object.(*v1alpha1.InstanceTypeCatalog); ok {
					if _, mine := pools[cat.Spec.NodePool]; mine {
						writes[string(ev.Type)+" "+cat.Name]++
						b, _ := json.Marshal(cat)
						written += len(b)
					}
				}
			case <-idle:
				return
			case <-timeout:
				t.Fatalf("writes seen so far: %v", writes)
			}
		}
	}

	m5 := types[indexOf(t, types, "m5.large")]
	unavailable.Mark(cloudprovider.Offer{InstanceType: m5, Zone: regioncatalog.Zones[1], CapacityType: v1alpha1.CapacityTypeSpot})
	published := func() bool {
		for _, pool := range []string{"region-any", "region-amd"} {
			got, err := cluster.InstanceTypesOf(ctx, kube, pool)
			if err != nil {
				return false
			}
			for _, it := range got {
				for _, o := range it.Offerings {
					if it.Name == m5.Name && o.Zone == regioncatalog.Zones[1] && o.CapacityType == v1alpha1.CapacityTypeSpot && o.Available {
						return false
					}
				}
			}
		}
		return true
	}
	// Every pool is reconciled within milliseconds of the mark; two quiet
	// seconds after the mark is published leave room for any other write.
	drain(published, 2*time.Second)
	wantWrites := map[string]int{"MODIFIED region-any.m5": 1, "MODIFIED region-amd.m5": 1}
	if fmt.Sprint(writes) != fmt.Sprint(wantWrites) {
		t.Errorf("writes after one mark: %v, want %v", writes, wantWrites)
	}
	t.Logf("one mark of %s in %s (spot): %d writes, %v, %.1f KiB in all", m5.Name, regioncatalog.Zones[1], len(writes), writes, float64(written)/1024)

	// Before catalogs were split, the mark rewrote each such pool's whole
	// catalog as one object; a region's does not fit in one.
	whole := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "region-unsplit", Labels: map[string]string{v1alpha1.LabelNodePool: "region-any"}},
		Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: "region-any", Provider: "aws", InstanceTypeCount: int32(len(types)), InstanceTypes: types}}
	b, _ := json.Marshal(whole)
	err = kube.Create(ctx, whole)
	if err == nil {
		_ = kube.Delete(ctx, whole)
	}
	t.Logf("the region's catalog as one object (%.1f KiB): create returned %v", float64(len(b))/1024, err)
}

func indexOf(t *testing.T, types []v1alpha1.InstanceType, name string) int {
	t.Helper()
	for i := range types {
		if types[i].Name == name {
			return i
		}
	}
	t.Fatalf("the region catalog has no %s", name)
	return -1
}

// watcher watches every InstanceTypeCatalog from resourceVersion on.
func watcher(ctx context.Context, resourceVersion string) (watch.Interface, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return c.Watch(ctx, &v1alpha1.InstanceTypeCatalogList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
}

// startCatalog runs the provisioner's catalog controller until ctx ends.
func startCatalog(t *testing.T, ctx context.Context, source catalog.Source, unavailable *cloudprovider.UnavailableOfferings) {
	t.Helper()
	mgr := newManager(t)
	if err := catalog.NewController(mgr.GetClient(), source, unavailable, nil).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { <-done })
}
