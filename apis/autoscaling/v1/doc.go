// Package v1 is the ProvisioningRequest API (autoscaling.x-k8s.io/v1),
// which Kueue's provisioning admission check uses to ask an autoscaler for
// capacity. It is written here from the API's published schema (the
// Cluster Autoscaler repository defines it); the module that holds it is
// not imported. Nodeforge serves two of its classes (docs/api.md):
// check-capacity.autoscaling.x-k8s.io and
// best-effort-atomic-scale-up.autoscaling.x-k8s.io.
//
// The CRD is generated from these types into
// manifests/crd-optional/, and the chart installs it only when asked
// (provisioningRequests.installCRD): Cluster Autoscaler may own it.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1
