package simulator

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/daemon/util"
)

// DaemonSetPods are the pods dss would run on node, were it to exist: a
// node that does not yet (a virtual node, a replacement) is sized with
// them. Each carries the tolerations the DaemonSet controller adds; a
// DaemonSet whose required node affinity the node does not match, or
// whose pods do not tolerate its NoSchedule and NoExecute taints, runs
// nothing there.
func DaemonSetPods(dss []*appsv1.DaemonSet, node *corev1.Node) []*corev1.Pod {
	var out []*corev1.Pod
	for _, ds := range dss {
		pod := &corev1.Pod{ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(), Spec: *ds.Spec.Template.Spec.DeepCopy()}
		pod.Namespace = ds.Namespace
		pod.Name = ds.Name + "-daemon"
		pod.UID = types.UID("daemonset-" + string(ds.UID))
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}
		// The DaemonSet controller adds these tolerations and pins the
		// pod to the node; the node's taints and labels decide the rest.
		util.AddOrUpdateDaemonPodTolerations(&pod.Spec)
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
			continue
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.TODO(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false); untolerated {
			continue
		}
		out = append(out, pod)
	}
	return out
}
