package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// Group is the API group of every Nodeforge object.
const Group = "nodeforge.dev"

var (
	// SchemeGroupVersion is group version used to register these objects.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: SchemeGroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&NodePool{}, &NodePoolList{}, &NodeClaim{}, &NodeClaimList{}, &SimulatedNodeClass{}, &SimulatedNodeClassList{}, &InstanceTypeCatalog{}, &InstanceTypeCatalogList{}, &EC2NodeClass{}, &EC2NodeClassList{})
}
