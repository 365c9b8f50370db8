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
	hash, _, ok, err = nodeClassState(ctx, kube, classes, ref, nil)
	return hash, ok, err
}

// NodeClassDrift reads the claim's node class once and returns its Hash
// and why the claim's instance has drifted from it beyond that hash
// (NodeClass.Drifted; "" when it has not or the kind declares no such
// check), with ok and err as NodeClassHash's.
func NodeClassDrift(ctx context.Context, kube client.Reader, classes []NodeClass, nc *v1alpha1.NodeClaim) (hash, why string, ok bool, err error) {
	return nodeClassState(ctx, kube, classes, nc.Spec.NodeClassRef, nc)
}

func nodeClassState(ctx context.Context, kube client.Reader, classes []NodeClass, ref v1alpha1.NodeClassReference, nc *v1alpha1.NodeClaim) (hash, why string, ok bool, err error) {
	declared, ok := ClassOf(classes, ref)
	if !ok {
		return "", "", false, nil
	}
	class := declared.New()
	if err := kube.Get(ctx, types.NamespacedName{Name: ref.Name}, class); err != nil {
		return "", "", true, fmt.Errorf("getting %s %s: %w", ref.Kind, ref.Name, err)
	}
	if hash, err = declared.Hash(class); err != nil {
		return "", "", true, fmt.Errorf("hashing %s %s: %w", ref.Kind, ref.Name, err)
	}
	if nc != nil && declared.Drifted != nil {
		why = declared.Drifted(class, nc)
	}
	return hash, why, true, nil
}
