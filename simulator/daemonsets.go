package simulator

import (
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
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
func DaemonSetPods(dss []*appsv1.DaemonSet, node *v1.Node) []*v1.Pod {
	var out []*v1.Pod
	for _, ds := range dss {
		pod := &v1.Pod{ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(), Spec: *ds.Spec.Template.Spec.DeepCopy()}
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
		if _, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.TODO(), node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, false); untolerated {
			continue
		}
		out = append(out, pod)
	}
	return out
}
