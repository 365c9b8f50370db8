// Package v1beta1 is the CapacityBuffer API (autoscaling.x-k8s.io/v1beta1),
// SIG Autoscaling's way to keep spare capacity: a pod template or a
// scalable workload, and a number of chunks (replicas, a percentage of the
// workload, or as many as limits allow). It is written here from the API's
// published schema (the Cluster Autoscaler repository defines it); that
// module is not imported. Nodeforge serves the strategy
// buffer.x-k8s.io/active-capacity (docs/api.md).
//
// The CRD is generated into manifests/crd-optional/, and the chart
// installs it only when asked (capacityBuffers.installCRD).
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1beta1
