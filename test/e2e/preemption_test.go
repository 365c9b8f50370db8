package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestAPodOfHigherPriorityPreemptsBeforeANodeIsBought: the shipped
// profile runs preemption (GatedPreemption) before VirtualNodes, so
// priorities keep their meaning. A pool limited to one 2-vCPU node runs
// a pod of priority 0 using half of it. A pod of priority 1000 that fits
// beside it on no node, and on no new node (the limit), preempts it and
// runs on its node. A pod of priority 0 then finds no pod of lower
// priority to preempt (the gate answers for it), and VirtualNodes refuses
// it for the limit: it waits, and nothing more is bought.
func TestAPodOfHigherPriorityPreemptsBeforeANodeIsBought(t *testing.T) {
	t.Parallel()
	_, cs, kube := startSandbox(t, sandbox.Options{})
	ctx := context.Background()
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createZonalPool(t, kube, "prio")
	var pool v1alpha1.NodePool
	if err := kube.Get(ctx, client.ObjectKey{Name: "prio"}, &pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("2")}
	if err := kube.Update(ctx, &pool); err != nil {
		t.Fatal(err)
	}

	createPriorityPod(t, cs, "low", "")
	low := runningPod(t, cs, "low")

	createPriorityPod(t, cs, "high", "high")
	high := runningPod(t, cs, "high")
	if high.Spec.NodeName != low.Spec.NodeName {
		t.Errorf("the pod of priority 1000 runs on %s, not on %s where it preempted", high.Spec.NodeName, low.Spec.NodeName)
	}
	if _, err := cs.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod of priority 0 was not preempted: %v", err)
	}
	if reasons, notes, err := podEvents(ctx, cs, "low"); err != nil || !slices.Contains(reasons, "Preempted") {
		t.Errorf("the preempted pod's Events %v %q (%v); want Preempted", reasons, notes, err)
	}

	createPriorityPod(t, cs, "same", "")
	poll(t, "pod same refused", func() (bool, error) {
		reasons, notes, err := podEvents(ctx, cs, "same")
		return slices.Contains(reasons, "FailedScheduling") && slices.ContainsFunc(notes, func(n string) bool {
			return strings.Contains(n, "preemption: ") && strings.Contains(n, "limit")
		}), err
	})
	same, err := cs.CoreV1().Pods("default").Get(ctx, "same", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if same.Spec.NodeName != "" || same.Status.NominatedNodeName != "" {
		t.Errorf("pod same: node %q, nominated %q; want it waiting", same.Spec.NodeName, same.Status.NominatedNodeName)
	}
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims, client.MatchingLabels{v1alpha1.LabelNodePool: "prio"}); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 {
		t.Errorf("%d claims in pool prio, want 1", len(claims.Items))
	}
}

// createPriorityPod creates a pod of pool prio asking 1 CPU, of the
// priority class given (none: priority 0).
func createPriorityPod(t *testing.T, cs kubernetes.Interface, name, class string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "prio"}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"pool": "prio"}, PriorityClassName: class,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
		}}
	if _, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningPod waits for the pod to run, and returns it.
func runningPod(t *testing.T, cs kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll(t, "pod "+name+" Running", func() (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, err
	})
	return pod
}
