package nodeclaim

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// deletedClaimOn is a claim of instance i-1 on node n1, with the
// termination finalizer, deleted; its node is Ready as given.
func deletedClaimOn(t *testing.T, ready corev1.ConditionStatus, objs ...client.Object) (*steps, *v1alpha1.NodeClaim, *corev1.Node) {
	t.Helper()
	nc := claim(v1alpha1.NodeClaimInitialized)
	nc.Status.ProviderID, nc.Status.NodeName = "fake:///zone-a/i-1", "n1"
	nc.Finalizers = []string{v1alpha1.FinalizerTermination}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	s := newSteps(t, append([]client.Object{nc, node}, objs...)...)
	if err := s.kube.Delete(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	return s, s.get(t, nc), node
}

func evictions(cs *kubefake.Clientset) []clienttesting.CreateActionImpl {
	var out []clienttesting.CreateActionImpl
	for _, a := range cs.Actions() {
		if c, ok := a.(clienttesting.CreateActionImpl); ok && a.GetSubresource() == "eviction" {
			out = append(out, c)
		}
	}
	return out
}

// TestTerminationSkipsTheDrainOfADeadNode (issue 31, defect 4): a node
// that is not Ready, whose instance the cloud no longer has, is not
// drained (an eviction a PDB refuses would hold it for ever): its
// instance and Node go at once. The same node with its instance alive is
// drained.
func TestTerminationSkipsTheDrainOfADeadNode(t *testing.T) {
	for _, alive := range []bool{false, true} {
		ctx := context.Background()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}, Spec: corev1.PodSpec{NodeName: "n1"}}
		s, nc, node := deletedClaimOn(t, corev1.ConditionUnknown, pod)
		live := kubefake.NewClientset(pod.DeepCopy())
		s.c.pods = live
		if alive {
			s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
		}
		res, err := s.c.finalize(ctx, nc)
		if err != nil {
			t.Fatal(err)
		}
		gone := apierrors.IsNotFound(s.kube.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{}))
		if alive {
			if len(evictions(live)) != 1 || res.IsZero() || gone {
				t.Errorf("instance alive: %d evictions, result %+v, node gone %v; want the pod evicted and the drain waited for", len(evictions(live)), res, gone)
			}
			continue
		}
		if n := len(evictions(live)); n > 0 || !gone {
			t.Errorf("instance gone: %d evictions, node gone %v; want no drain and the node removed", n, gone)
		}
	}
}

// TestEvictionIsPreconditionedAndARefusalNamesTheBudget (issue 31,
// defect 4): the eviction names the pod's UID, so that a pod recreated
// under the same name is not evicted; a refusal gets one Event on the pod
// naming the PodDisruptionBudget, not one on every retry.
func TestEvictionIsPreconditionedAndARefusalNamesTheBudget(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1}}
	s, nc, _ := deletedClaimOn(t, corev1.ConditionTrue, pod, pdb)
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
	live := kubefake.NewClientset(pod.DeepCopy())
	live.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		// As the eviction subresource answers: 429 with the cause.
		refused := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		refused.ErrStatus.Details.Causes = append(refused.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 1 healthy pods and has 1 currently"})
		return true, nil, refused
	})
	s.c.pods = live
	rec := events.NewFakeRecorder(100)
	s.c.recorder = rec
	for range 3 {
		if res, err := s.c.drain(ctx, nc); err != nil || res.IsZero() {
			t.Fatalf("drain with a refused eviction: %+v %v; want a retry", res, err)
		}
		s.now = s.now.Add(10 * time.Second)
	}
	ev := evictions(live)
	if len(ev) != 3 {
		t.Fatalf("%d evictions, want 3", len(ev))
	}
	e := ev[0].GetObject().(*policyv1.Eviction)
	if e.DeleteOptions == nil || e.DeleteOptions.Preconditions == nil || ptr.Deref(e.DeleteOptions.Preconditions.UID, "") != pod.UID {
		t.Errorf("eviction without the pod's UID as precondition: %+v", e.DeleteOptions)
	}
	var blocked []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "EvictionBlocked") {
			blocked = append(blocked, e)
		}
	}
	// One on the pod and one on the claim.
	if len(blocked) != 2 || !strings.Contains(blocked[0], "PodDisruptionBudget default/web") {
		t.Errorf("EvictionBlocked Events over three refusals in 30s: %q; want one on the pod and one on the claim, naming PodDisruptionBudget default/web", blocked)
	}
}

// TestRepairDrainsByItsDeadline: a claim with a drain deadline (repair
// sets it to the moment it decides) is drained by then, whatever its
// terminationGracePeriod, and one with neither has no deadline.
func TestRepairDrainsByItsDeadline(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	nc := claim(v1alpha1.NodeClaimInitialized)
	nc.DeletionTimestamp = &metav1.Time{Time: now}
	if _, capped := drainDeadline(nc); capped {
		t.Error("a claim with no terminationGracePeriod and no drain deadline has a deadline")
	}
	nc.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Hour}
	if d, _ := drainDeadline(nc); !d.Equal(now.Add(time.Hour)) {
		t.Errorf("deadline %s, want the terminationGracePeriod's %s", d, now.Add(time.Hour))
	}
	nc.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: now.UTC().Format(time.RFC3339)}
	if d, capped := drainDeadline(nc); !capped || !d.Equal(now) {
		t.Errorf("deadline %s (capped %v), want the annotation's %s", d, capped, now)
	}
	// Drained with no terminationGracePeriod at all: the pod is deleted,
	// not evicted, and the drain is over.
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	s, deleted, _ := deletedClaimOn(t, corev1.ConditionTrue, pod)
	deleted.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: s.now.Add(-time.Second).UTC().Format(time.RFC3339)}
	live := kubefake.NewClientset(pod.DeepCopy())
	s.c.pods = live
	if res, err := s.c.drain(ctx, deleted); err != nil || !res.IsZero() {
		t.Errorf("drain past its deadline: %+v %v; want it over", res, err)
	}
	if len(evictions(live)) > 0 {
		t.Error("a pod was evicted past the drain deadline; want it deleted")
	}
	if _, err := live.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod was not deleted past the drain deadline: %v", err)
	}
}

// TestTerminationWaitsForVolumesToDetach (issue 31, defect 7): the
// instance is terminated only once the volume attached to its node for a
// drained pod is detached; a volume of a daemonset pod, which stays, is
// not waited for; past the drain deadline nothing is waited for.
func TestTerminationWaitsForVolumesToDetach(t *testing.T) {
	ctx := context.Background()
	va := func(name, pv string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "ebs.csi.aws.com", NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}}}
	}
	ds := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system", UID: "uid-agent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "agent-state"}}}}}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "agent-state", Namespace: "kube-system"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-agent"}}
	data := va("va-data", "pv-data")
	s, nc, _ := deletedClaimOn(t, corev1.ConditionTrue, ds, pvc, data, va("va-agent", "pv-agent"))
	s.c.pods = kubefake.NewClientset()
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
	terminated := func() bool {
		_, err := s.cloud.Get(ctx, nc.Status.ProviderID)
		return err != nil
	}
	res, err := s.c.finalize(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsZero() || terminated() {
		t.Fatalf("instance terminated (%v) with a drained pod's volume still attached; result %+v", terminated(), res)
	}
	t.Run("past the drain deadline", func(t *testing.T) {
		late := nc.DeepCopy()
		late.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: s.now.Add(-time.Second).UTC().Format(time.RFC3339)}
		if res, err := s.c.awaitDetach(ctx, late); err != nil || !res.IsZero() {
			t.Errorf("waited for volumes past the drain deadline: %+v %v", res, err)
		}
	})
	if err := s.kube.Delete(ctx, data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.finalize(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if !terminated() {
		t.Error("instance not terminated once the drained pod's volume was detached (the daemonset's volume stays attached)")
	}
}
