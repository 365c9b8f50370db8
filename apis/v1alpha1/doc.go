// Package v1alpha1 holds Nodeforge's API, group nodeforge.dev: NodePool (what
// may be launched), NodeClaim (one virtual node, then one real node),
// InstanceTypeCatalog (what a pool can launch, published in parts by
// instance-type family; ByPool puts the parts back together), and the node
// classes EC2NodeClass and SimulatedNodeClass (launch settings).
//
// NodePool field names follow the Karpenter v1 NodePool wherever the meaning
// is the same, so an existing NodePool moves over by changing its apiVersion.
// Validation lives in the CRD (OpenAPI and CEL markers below), so the API
// server refuses a bad object with a readable message before any controller
// sees it.
//
// +kubebuilder:object:generate=true
// +groupName=nodeforge.dev
package v1alpha1
