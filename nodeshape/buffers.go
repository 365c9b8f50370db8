package nodeshape

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
)

// BufferPodPrefix starts the UID of every chunk of a CapacityBuffer: they
// are pods that are never created.
const BufferPodPrefix = "capacitybuffer:"

// IsBufferPod says whether pod is a CapacityBuffer's chunk.
func IsBufferPod(pod *corev1.Pod) bool {
	return strings.HasPrefix(string(pod.UID), BufferPodPrefix)
}

// BufferPods are the chunks of buffer b whose status is resolved: its
// status.replicas pods made from tpl (status.podTemplateRef), named
// <buffer>-chunk-<i>, of the lowest priority, as both programs decide
// them: VirtualNodes keeps room for them, and disruption keeps the nodes
// that room is on.
func BufferPods(b *bufferv1beta1.CapacityBuffer, tpl *corev1.PodTemplate) []*corev1.Pod {
	if b.Status.Replicas == nil || tpl == nil {
		return nil
	}
	n := int(*b.Status.Replicas)
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: *tpl.Template.ObjectMeta.DeepCopy(), Spec: *tpl.Template.Spec.DeepCopy()}
		pod.Namespace, pod.Name = b.Namespace, fmt.Sprintf("%s-chunk-%d", b.Name, i)
		pod.UID = types.UID(fmt.Sprintf("%s%s/%d", BufferPodPrefix, b.UID, i))
		pod.CreationTimestamp = b.CreationTimestamp
		lowest := int32(math.MinInt32)
		pod.Spec.Priority, pod.Spec.PriorityClassName = &lowest, ""
		pod.Spec.NodeName = ""
		pods = append(pods, pod)
	}
	return pods
}
