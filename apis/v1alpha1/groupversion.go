package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of every Nodeforge object.
const Group = "nodeforge.dev"

var (
	// SchemeGroupVersion is group version used to register these objects.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme:
	// apimachinery's, as Kubernetes' own API packages do, so importing
	// the API does not bring in controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &NodePool{}, &NodePoolList{}, &NodeClaim{}, &NodeClaimList{}, &SimulatedNodeClass{}, &SimulatedNodeClassList{},
		&InstanceTypeCatalog{}, &InstanceTypeCatalogList{}, &EC2NodeClass{}, &EC2NodeClassList{}, &DeviceTemplate{}, &DeviceTemplateList{},
		&NodeOverlay{}, &NodeOverlayList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
