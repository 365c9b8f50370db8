package simulator

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestTheDRAManagerIsTheSchedulers: the provisioner's DRA manager is
// made as kube-scheduler's is (1.37 defaults): a DeviceTaintRule's taint
// is on the device the simulation lists, and an extended resource a
// DeviceClass names resolves to that class.
func TestTheDRAManagerIsTheSchedulers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubefake.NewClientset(
		&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fpga.example.com"}, Spec: resourcev1.DeviceClassSpec{ExtendedResourceName: ptr.To("example.com/fpga")}},
		&resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-fpga"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "fpga.example.com", NodeName: ptr.To("n1"), Pool: resourcev1.ResourcePool{Name: "n1", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "fpga-0"}},
		}},
		&resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("fpga.example.com"), Device: ptr.To("fpga-0")},
			Taint:          resourcev1.DeviceTaint{Key: "example.com/broken", Effect: resourcev1.DeviceTaintEffectNoSchedule},
		}},
	)
	inf := informers.NewSharedInformerFactory(cs, 0)
	dra, err := newDRAManager(ctx, cs, inf)
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		slices, err := dra.ResourceSlices().ListWithDeviceTaintRules()
		if err != nil || len(slices) != 1 || len(slices[0].Spec.Devices) != 1 {
			return false, err
		}
		taints := slices[0].Spec.Devices[0].Taints
		return len(taints) == 1 && taints[0].Key == "example.com/broken", nil
	})
	if err != nil {
		t.Errorf("the DeviceTaintRule's taint never reached the listed device: %v", err)
	}
	// The cache is fed by the informer's event handler, which may run
	// after the informer says it has synced.
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		class := dra.DeviceClassResolver().GetDeviceClass(corev1.ResourceName("example.com/fpga"))
		return class != nil && class.Name == "fpga.example.com", nil
	})
	if err != nil {
		t.Errorf("example.com/fpga never resolved to DeviceClass fpga.example.com: %v", err)
	}
}
