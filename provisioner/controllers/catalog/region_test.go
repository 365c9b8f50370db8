package catalog

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/regioncatalog"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// maxWrittenBytes is what each catalog object may weigh, JSON-encoded as
// the controller sends it: a third of etcd's 1.5 MiB limit, which leaves
// room for what the API server adds (managedFields, a fraction of it).
const maxWrittenBytes = 512 << 10

// TestRegionCatalogObjectsStayUnderHalfAMebibyte publishes a whole AWS
// region's offering set (internal/sandbox/regioncatalog: every type us-east-1 prices,
// six zones, spot and on-demand) for one pool, and weighs every object the
// controller would write. It logs the largest and the total, and what the
// catalog weighed as one object per pool, as it was published before.
func TestRegionCatalogObjectsStayUnderHalfAMebibyte(t *testing.T) {
	types, err := regioncatalog.InstanceTypes()
	if err != nil {
		t.Fatal(err)
	}
	families := regioncatalog.Families(types)
	// The catalog must stand for a real region for the figures to mean
	// anything: AWS offers about 900 types in about 120 families in a
	// large region, spot and on-demand in 6 zones.
	if len(types) < 850 || len(families) < 110 {
		t.Fatalf("the region catalog has %d types in %d families, want at least 850 in 110", len(types), len(families))
	}
	gpu := 0
	for _, it := range types {
		if len(it.Offerings) != 12 {
			t.Fatalf("%s has %d offerings, want 12 (6 zones × spot, on-demand)", it.Name, len(it.Offerings))
		}
		if _, ok := it.Capacity[aws.ResourceGPU]; ok {
			gpu++
		}
	}
	if gpu == 0 {
		t.Fatalf("no type of the region catalog has %s", aws.ResourceGPU)
	}

	pool := nodePool("default")
	objs := objectsFor(pool, "aws", types)
	largest, largestName, total := 0, "", 0
	for i := range objs {
		o := objs[i]
		o.TypeMeta = typeMeta
		b, err := json.Marshal(&o)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxWrittenBytes {
			t.Errorf("catalog object %s is %d bytes, over %d", o.Name, len(b), maxWrittenBytes)
		}
		if len(b) > largest {
			largest, largestName = len(b), o.Name
		}
		total += len(b)
	}
	// Split is lossless: the objects merge back into the source catalog.
	merged := v1alpha1.ByPool(objs)["default"]
	if merged == nil || !cmp.Equal(types, merged.Spec.InstanceTypes) {
		t.Errorf("the objects do not merge back into the %d types they were made from", len(types))
	}

	unsplit := v1alpha1.InstanceTypeCatalog{TypeMeta: typeMeta, ObjectMeta: objs[0].ObjectMeta, Spec: v1alpha1.InstanceTypeCatalogSpec{
		NodePool: "default", Provider: "aws", InstanceTypeCount: int32(len(types)), InstanceTypes: types}}
	unsplit.Name = "default"
	b, err := json.Marshal(&unsplit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("region catalog: %d instance types in %d families, %d offerings each, %d with %s", len(types), len(families), 12, gpu, aws.ResourceGPU)
	t.Logf("by family: %d objects, largest %s %.1f KiB, total %.1f KiB", len(objs), largestName, kib(largest), kib(total))
	t.Logf("as one object per pool: %.1f KiB (etcd refuses values over 1536 KiB)", kib(len(b)))
}

var typeMeta = v1alpha1.InstanceTypeCatalog{}.TypeMeta

func init() {
	typeMeta.APIVersion, typeMeta.Kind = v1alpha1.SchemeGroupVersion.String(), "InstanceTypeCatalog"
}

func kib(n int) float64 { return float64(n) / 1024 }
