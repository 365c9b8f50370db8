package testobj

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// InstanceTypeWrapper builds a catalog's InstanceType.
type InstanceTypeWrapper struct{ t v1alpha1.InstanceType }

// InstanceType starts an instance type named name.
func InstanceType(name string) *InstanceTypeWrapper {
	return &InstanceTypeWrapper{t: v1alpha1.InstanceType{Name: name}}
}

// Obj returns the instance type built so far.
func (w *InstanceTypeWrapper) Obj() v1alpha1.InstanceType { return *w.t.DeepCopy() }

// Capacity sets capacity and allocatable both, as Resources pairs.
func (w *InstanceTypeWrapper) Capacity(pairs ...string) *InstanceTypeWrapper {
	w.t.Capacity, w.t.Allocatable = Resources(pairs...), Resources(pairs...)
	return w
}

// Allocatable sets allocatable alone, as Resources pairs.
func (w *InstanceTypeWrapper) Allocatable(pairs ...string) *InstanceTypeWrapper {
	w.t.Allocatable = Resources(pairs...)
	return w
}

// Label adds a label every node of the type carries.
func (w *InstanceTypeWrapper) Label(key, value string) *InstanceTypeWrapper {
	w.t.Labels = with(w.t.Labels, key, value)
	return w
}

// Arch sets the kubernetes.io/arch label.
func (w *InstanceTypeWrapper) Arch(arch string) *InstanceTypeWrapper {
	return w.Label(corev1.LabelArchStable, arch)
}

// Offering adds an available offering at price dollars an hour.
func (w *InstanceTypeWrapper) Offering(zone string, ct v1alpha1.CapacityType, price string) *InstanceTypeWrapper {
	w.t.Offerings = append(w.t.Offerings, v1alpha1.Offering{Zone: zone, CapacityType: ct, Price: price, Available: true})
	return w
}

// Catalog is pool's published catalog as one object named after the
// pool and labelled with it, listing types.
func Catalog(pool string, types ...v1alpha1.InstanceType) *v1alpha1.InstanceTypeCatalog {
	return &v1alpha1.InstanceTypeCatalog{
		ObjectMeta: metav1.ObjectMeta{Name: pool, Labels: map[string]string{v1alpha1.LabelNodePool: pool}},
		Spec:       v1alpha1.InstanceTypeCatalogSpec{NodePool: pool, InstanceTypes: types},
	}
}
