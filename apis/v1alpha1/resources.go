package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Extended resources nodes advertise for their devices and interfaces, as
// the device plugins and the VPC resource controller name them. The cloud
// providers put them in an instance type's capacity so that the virtual
// node holds what the registered node will.
const (
	// ResourceNVIDIAGPU is one NVIDIA GPU (NVIDIA's device plugin).
	ResourceNVIDIAGPU corev1.ResourceName = "nvidia.com/gpu"
	// ResourceAMDGPU is one AMD GPU (AMD's device plugin).
	ResourceAMDGPU corev1.ResourceName = "amd.com/gpu"
	// ResourceHabanaGaudi is one Habana Gaudi accelerator (Habana's device
	// plugin).
	ResourceHabanaGaudi corev1.ResourceName = "habana.ai/gaudi"
	// ResourceNeuron is one whole Neuron device, Inferentia or Trainium,
	// with all its cores (the Neuron device plugin).
	ResourceNeuron corev1.ResourceName = "aws.amazon.com/neuron"
	// ResourceNeuronCore is one NeuronCore (the Neuron device plugin).
	ResourceNeuronCore corev1.ResourceName = "aws.amazon.com/neuroncore"
	// ResourceEFA is one Elastic Fabric Adapter interface (the EFA device
	// plugin).
	ResourceEFA corev1.ResourceName = "vpc.amazonaws.com/efa"
	// ResourcePodENI is one branch network interface for a pod with its own
	// security groups (the VPC resource controller, on trunk-capable
	// types, where security groups for pods are enabled).
	ResourcePodENI corev1.ResourceName = "vpc.amazonaws.com/pod-eni"
)
