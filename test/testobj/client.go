package testobj

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// Scheme returns a new scheme of client-go's kinds, the Nodeforge API and
// the autoscaling.x-k8s.io kinds Nodeforge serves.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := provreqv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := bufferv1beta1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Client returns a controller-runtime fake client holding objs, which
// serves them as the provisioner's cache and the API server would: with
// Scheme; with the status subresource of every Nodeforge kind that has one
// (an Update leaves status as it was, a Status().Update everything else),
// as their CRDs declare; and with every field index the controllers read
// through (cluster.Indexes). A test that must fail or count calls wraps it
// with interceptor.NewClient.
func Client(objs ...client.Object) client.WithWatch {
	b := crfake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.NodeClaim{}, &v1alpha1.NodePool{}, &v1alpha1.EC2NodeClass{}, &v1alpha1.SimulatedNodeClass{}, &v1alpha1.NodeOverlay{}, &bufferv1beta1.CapacityBuffer{})
	for _, i := range cluster.Indexes() {
		b = b.WithIndex(i.Object, i.Field, i.Extract)
	}
	return b.Build()
}
