package limits

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gopkg.in/inf.v0"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	cloudfake "github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// FuzzReserveNeverPassesTheLimit reserves launches, each with up to three
// fallback offers of arbitrary cpu and memory, against limits written in
// any form a NodePool's spec.limits accepts ("1500m", "2Gi", "1e3",
// "0.5"...). After every Reserve the pool's usage stays within each
// limit; every offer handed back fits on top of what was in use before;
// and a refusal happens only when no offer fits.
func FuzzReserveNeverPassesTheLimit(f *testing.F) {
	f.Add("4", "16Gi", []byte{10, 2, 20, 4, 40, 8})
	f.Add("1500m", "1e10", []byte{5, 1, 1, 1, 200, 255})
	f.Add("0.5", "512Mi", []byte{1, 1})
	f.Add("3", "0", []byte{30, 0, 10, 0, 10, 0, 10, 0})
	f.Add("10k", "1Ei", []byte{255, 255, 128, 3})
	f.Fuzz(func(t *testing.T, cpuLimit, memLimit string, shapes []byte) {
		limits := v1alpha1.Limits{}
		for name, raw := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpuLimit, corev1.ResourceMemory: memLimit} {
			q, err := resource.ParseQuantity(raw)
			if err != nil || q.Sign() < 0 {
				continue // the API server refuses these
			}
			limits[name] = q
		}
		if len(limits) == 0 || len(shapes) > 64 {
			return
		}
		pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Spec: v1alpha1.NodePoolSpec{Limits: limits}}
		// Each pair of bytes is one offer: cpu in tenths of a core (as
		// millicores), memory in 256Mi steps; three offers per launch.
		var launches [][]cloudprovider.Offer
		for i := 0; i+1 < len(shapes); i += 2 {
			capacity := corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(shapes[i])*100, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(shapes[i+1])<<28, resource.BinarySI),
			}
			o := cloudprovider.Offer{InstanceType: v1alpha1.InstanceType{Name: fmt.Sprintf("t%d", i), Capacity: capacity, Allocatable: capacity}, Zone: "z", CapacityType: "on-demand"}
			if len(launches) == 0 || len(launches[len(launches)-1]) == 3 {
				launches = append(launches, nil)
			}
			launches[len(launches)-1] = append(launches[len(launches)-1], o)
		}
		var objs []client.Object
		for i := range launches {
			objs = append(objs, capped(fmt.Sprintf("c%d", i)).Obj())
		}
		ctx := context.Background()
		l := NewLedger(testobj.Client(objs...), cloudfake.New())
		for i, offers := range launches {
			before, err := l.Usage(ctx, "capped")
			if err != nil {
				t.Fatal(err)
			}
			allowed, err := l.Reserve(ctx, pool, objs[i].(*v1alpha1.NodeClaim), offers)
			var exceeded *ExceededError
			if err != nil && !errors.As(err, &exceeded) {
				t.Fatal(err)
			}
			for _, o := range offers {
				fits := within(limits, before, o.InstanceType.Capacity)
				handed := false
				for _, a := range allowed {
					handed = handed || a.InstanceType.Name == o.InstanceType.Name
				}
				if fits != handed {
					t.Fatalf("limits %v, in use %v: offer %s (%v) fits=%v but handed back=%v", limits, before, o.InstanceType.Name, o.InstanceType.Capacity, fits, handed)
				}
			}
			after, err := l.Usage(ctx, "capped")
			if err != nil {
				t.Fatal(err)
			}
			for name, limit := range limits {
				if used := after[name]; used.Cmp(limit) > 0 {
					t.Fatalf("after launch %d the pool reserves %s %s, over its limit %s", i, name, used.String(), limit.String())
				}
			}
		}
	})
}

// within says whether used + more stays within every limit, computed
// apart from the Ledger's own arithmetic.
func within(limits v1alpha1.Limits, used, more corev1.ResourceList) bool {
	for name, limit := range limits {
		u, m := used[name], more[name]
		if new(inf.Dec).Add(u.AsDec(), m.AsDec()).Cmp(limit.AsDec()) > 0 {
			return false
		}
	}
	return true
}
