package cloudprovider

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// ClassOf is the declaration among classes of the kind ref names, if the
// provider serves it.
func ClassOf(classes []NodeClass, ref v1alpha1.NodeClassReference) (NodeClass, bool) {
	i := slices.IndexFunc(classes, func(c NodeClass) bool { return c.Kind == ref.Kind })
	if ref.Group != v1alpha1.Group || i < 0 {
		return NodeClass{}, false
	}
	return classes[i], true
}

// NodeClassHash reads the node class ref names, through the declaration
// of its kind among classes, and returns its Hash: what the nodes launched
// from it now are launched with. ok is false when the provider does not
// serve the kind; a class that does not exist is the reader's NotFound
// error (wrapped; see apierrors.IsNotFound).
func NodeClassHash(ctx context.Context, kube client.Reader, classes []NodeClass, ref v1alpha1.NodeClassReference) (hash string, ok bool, err error) {
	declared, ok := ClassOf(classes, ref)
	if !ok {
		return "", false, nil
	}
	class := declared.New()
	if err := kube.Get(ctx, types.NamespacedName{Name: ref.Name}, class); err != nil {
		return "", true, fmt.Errorf("getting %s %s: %w", ref.Kind, ref.Name, err)
	}
	hash, err = declared.Hash(class)
	if err != nil {
		return "", true, fmt.Errorf("hashing %s %s: %w", ref.Kind, ref.Name, err)
	}
	return hash, true, nil
}

// NodeClassDrifted says why the claim's instance has drifted from its
// class beyond the class's hash (NodeClass.Drifted), or "" when it has
// not, when the kind declares no such check, or when the class is gone.
func NodeClassDrifted(ctx context.Context, kube client.Reader, classes []NodeClass, nc *v1alpha1.NodeClaim) (string, error) {
	declared, ok := ClassOf(classes, nc.Spec.NodeClassRef)
	if !ok || declared.Drifted == nil {
		return "", nil
	}
	class := declared.New()
	if err := kube.Get(ctx, types.NamespacedName{Name: nc.Spec.NodeClassRef.Name}, class); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	return declared.Drifted(class, nc), nil
}
