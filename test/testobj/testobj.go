// Package testobj builds the objects unit tests start from: pods, nodes,
// NodeClaims, NodePools, instance types and their catalogs, each through a
// wrapper whose methods chain, as kube-scheduler's testing wrappers do
// (k8s.io/kubernetes/pkg/scheduler/testing):
//
//	pod := testobj.Pod("web").Req("cpu", "1", "memory", "1Gi").Nominated("pool-abcde").Obj()
//	nc := testobj.Claim("pool-abcde").Pool("pool").Phase(v1alpha1.NodeClaimLaunched).Obj()
//
// and the one fake client the controllers' tests read and write through
// (Client). A wrapper sets only what its methods are asked for, beside the
// name (and a pod's namespace, "default"); Obj returns a copy, so one
// wrapper can make several objects.
//
// Only tests import it: hack/importrules refuses an import from any other
// package.
package testobj

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Resources is a resource list from name and quantity pairs:
// Resources("cpu", "2", "memory", "4Gi"). It panics on an odd count or a
// quantity that does not parse, as a test's own typo should.
func Resources(pairs ...string) corev1.ResourceList {
	if len(pairs)%2 != 0 {
		panic(fmt.Sprintf("testobj.Resources: %d strings, want name and quantity pairs", len(pairs)))
	}
	out := make(corev1.ResourceList, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}
