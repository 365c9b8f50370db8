package nodeclaim

import (
	"context"
	"maps"
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
	"github.com/nodeforge/nodeforge/test/testobj"
)

// deletedClaimOn is a claim of instance i-1 on node n1, with the
// termination finalizer, deleted; its node is Ready as given.
func deletedClaimOn(t *testing.T, ready corev1.ConditionStatus, objs ...client.Object) (*steps, *v1alpha1.NodeClaim, *corev1.Node) {
	t.Helper()
	nc := poolClaim().Phase(v1alpha1.NodeClaimInitialized).ProviderID("fake:///zone-a/i-1").NodeName("n1").Finalizer(v1alpha1.FinalizerTermination).Obj()
	node := testobj.Node("n1").ProviderID(nc.Status.ProviderID).Condition(corev1.NodeReady, ready).Obj()
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
		pod := testobj.Pod("web").UID("uid-web").Node("n1").Obj()
		s, nc, node := deletedClaimOn(t, corev1.ConditionUnknown, pod)
		live := kubefake.NewClientset(pod.DeepCopy())
		s.pods = live
		s.build()
		if alive {
			s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
		}
		res, err := s.c.terminator.reconcile(ctx, nc)
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
	pod := testobj.Pod("web").UID("uid-web").Label("app", "web").Node("n1").Obj()
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
	s.pods = live
	rec := events.NewFakeRecorder(100)
	s.recorder = rec
	s.build()
	for range 3 {
		if res, err := s.c.terminator.drain(ctx, nc); err != nil || res.IsZero() {
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
		if e := <-rec.Events; strings.Contains(e, v1alpha1.ReasonEvictionBlocked) {
			blocked = append(blocked, e)
		}
	}
	// One on the pod and one on the claim.
	if len(blocked) != 2 || !strings.Contains(blocked[0], "PodDisruptionBudget default/web") {
		t.Errorf("EvictionBlocked Events over three refusals in 30s: %q; want one on the pod and one on the claim, naming PodDisruptionBudget default/web", blocked)
	}
}

// TestRepairDeletesEachPodWithItsOwnGrace: past repair's drain deadline
// (nodeforge.dev/drain-deadline) each pod, a do-not-disrupt one too, is
// deleted rather than evicted, with its own terminationGracePeriodSeconds,
// not a second; the drain is over once their grace has passed, not at
// the annotation's instant. The annotation does not move the claim's
// drain deadline, which is its terminationGracePeriod's alone.
func TestRepairDeletesEachPodWithItsOwnGrace(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	nc := poolClaim().Phase(v1alpha1.NodeClaimInitialized).Obj()
	nc.DeletionTimestamp = &metav1.Time{Time: now}
	if _, capped := drainDeadline(nc); capped {
		t.Error("a claim with no terminationGracePeriod has a drain deadline")
	}
	nc.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Hour}
	nc.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: now.UTC().Format(time.RFC3339)}
	if d, _ := drainDeadline(nc); !d.Equal(now.Add(time.Hour)) {
		t.Errorf("deadline %s, want the terminationGracePeriod's %s", d, now.Add(time.Hour))
	}

	ctx := context.Background()
	web, keep := podOn("web", 120), podOn("keep", 30)
	keep.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
	s, deleted, _ := deletedClaimOn(t, corev1.ConditionTrue, web, keep)
	deleted.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: s.now.Add(-time.Minute).UTC().Format(time.RFC3339)}
	live := refusingEvictions(web, keep)
	s.pods = live
	rec := events.NewFakeRecorder(100)
	s.recorder = rec
	s.build()
	if res, err := s.c.terminator.drain(ctx, deleted); err != nil || res.IsZero() {
		t.Errorf("drain as its pods are deleted: %+v %v; want it to wait for them", res, err)
	}
	if len(evictions(live)) > 0 {
		t.Error("a pod was evicted past repair's deadline; want it deleted")
	}
	if got, want := podDeletes(live), map[string]int64{"web": 120, "keep": 30}; !maps.Equal(got, want) {
		t.Errorf("deleted %v (name: grace seconds); want %v, each pod's own grace", got, want)
	}
	if n := countEvents(rec, v1alpha1.ReasonNodeUnhealthy); n != 4 {
		t.Errorf("%d %s Events; want one on each pod and one on the claim for each", n, v1alpha1.ReasonNodeUnhealthy)
	}
	// The cache sees them terminating; the fake stamps the deletion when
	// it happens, taken here as when their grace ends.
	end := terminate(t, s, web, keep)
	s.now = end.Add(-10 * time.Second)
	if res, err := s.c.terminator.drain(ctx, deleted); err != nil || res.IsZero() {
		t.Errorf("drain with pods inside their grace: %+v %v; want it to wait", res, err)
	}
	s.now = end.Add(time.Second)
	if res, err := s.c.terminator.drain(ctx, deleted); err != nil || !res.IsZero() {
		t.Errorf("drain with every pod past its grace: %+v %v; want it over", res, err)
	}
}

// TestUnreachableNodeIsDrainedPastTheNodeMonitorGracePeriod: a node whose
// Ready condition has been Unknown for longer than the node monitor grace
// period (50s), with its instance running and no terminationGracePeriod,
// has its pods deleted (a do-not-disrupt one too, and one that tolerates
// the unreachable taint, whose PDB refuses its eviction) with their own
// grace, with Events naming the node; once their grace is over they are
// deleted for good and the instance is terminated. Within the grace
// period the PDB holds. A terminationGracePeriod still caps the grace.
func TestUnreachableNodeIsDrainedPastTheNodeMonitorGracePeriod(t *testing.T) {
	ctx := context.Background()
	web, keep := podOn("web", 30), podOn("keep", 45)
	web.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	keep.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
	s, nc, _ := deletedClaimOn(t, corev1.ConditionUnknown, web, keep)
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
	live := refusingEvictions(web, keep)
	s.pods = live
	rec := events.NewFakeRecorder(100)
	s.recorder = rec
	s.build()
	terminated := func() bool {
		_, err := s.cloud.Get(ctx, nc.Status.ProviderID)
		return err != nil
	}

	notReadySince(t, s, s.now.Add(-40*time.Second))
	if res, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil || res.IsZero() {
		t.Fatalf("finalize 40s after the node went Unknown: %+v %v; want the drain to wait", res, err)
	}
	if got := podDeletes(live); len(got) > 0 || terminated() {
		t.Fatalf("40s after the node went Unknown: deleted %v, instance terminated %v; want the PDB to hold", got, terminated())
	}
	notReadySince(t, s, s.now.Add(-2*time.Minute))
	if res, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil || res.IsZero() {
		t.Fatalf("finalize as the pods are deleted: %+v %v; want the drain to wait for them", res, err)
	}
	if got, want := podDeletes(live), map[string]int64{"web": 30, "keep": 45}; !maps.Equal(got, want) || terminated() {
		t.Fatalf("2m after the node went Unknown: deleted %v (instance terminated %v); want %v, each pod's own grace", got, terminated(), want)
	}
	var named int
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "Warning "+v1alpha1.ReasonNodeUnreachable) && strings.Contains(e, "n1") {
			named++
		}
	}
	if named != 4 {
		t.Errorf("%d Warning %s Events naming node n1; want one on each pod and one on the claim for each", named, v1alpha1.ReasonNodeUnreachable)
	}
	end := terminate(t, s, web, keep)
	s.now = end.Add(time.Second)
	if res, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil || !res.IsZero() {
		t.Fatalf("finalize with the pods' grace over: %+v %v", res, err)
	}
	if got := podDeletes(live); got["web"] != 0 || got["keep"] != 0 {
		t.Errorf("last deletes %v; want both pods deleted for good (grace 0) once their grace was over", got)
	}
	if !terminated() {
		t.Error("the instance of an unreachable node was not terminated once its pods' grace was over")
	}

	t.Run("terminationGracePeriod caps the grace", func(t *testing.T) {
		slow := podOn("slow", 300)
		s, nc, _ := deletedClaimOn(t, corev1.ConditionFalse, slow)
		nc.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Minute}
		live := refusingEvictions(slow)
		s.pods = live
		s.build()
		notReadySince(t, s, nc.DeletionTimestamp.Add(-time.Hour))
		s.now = nc.DeletionTimestamp.Add(10 * time.Second)
		if _, err := s.c.terminator.drain(ctx, nc); err != nil {
			t.Fatal(err)
		}
		if got := podDeletes(live); got["slow"] != 50 {
			t.Errorf("deleted %v 10s into a 60s terminationGracePeriod; want slow with the 50s left as its grace", got)
		}
	})
	t.Run("the grace period is an option", func(t *testing.T) {
		s, nc, _ := deletedClaimOn(t, corev1.ConditionUnknown, podOn("web", 30))
		s.opts.NodeMonitorGracePeriod = 5 * time.Minute
		live := refusingEvictions(podOn("web", 30))
		s.pods = live
		s.build()
		notReadySince(t, s, s.now.Add(-2*time.Minute))
		if _, err := s.c.terminator.drain(ctx, nc); err != nil {
			t.Fatal(err)
		}
		if got := podDeletes(live); len(got) > 0 {
			t.Errorf("deleted %v 2m into a 5m node monitor grace period; want the PDB to hold", got)
		}
	})
}

// TestDoNotDisruptPodHoldsTheDrainUntilTerminationGracePeriod: a pod
// annotated do-not-disrupt is never evicted. Without a
// terminationGracePeriod it holds the drain, said in an Event on the
// claim naming it at most once a minute; with one it is deleted as the
// deadline nears, as any other pod. Other pods are evicted meanwhile.
func TestDoNotDisruptPodHoldsTheDrainUntilTerminationGracePeriod(t *testing.T) {
	ctx := context.Background()
	t.Run("no terminationGracePeriod", func(t *testing.T) {
		keep, web := podOn("keep", 30), podOn("web", 30)
		keep.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
		s, nc, _ := deletedClaimOn(t, corev1.ConditionTrue, keep, web)
		live := kubefake.NewClientset(keep.DeepCopy(), web.DeepCopy())
		s.pods = live
		rec := events.NewFakeRecorder(100)
		s.recorder = rec
		s.build()
		held := 0
		for _, after := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 61 * time.Second, time.Hour} {
			s.now = nc.DeletionTimestamp.Add(after)
			if res, err := s.c.terminator.drain(ctx, nc); err != nil || res.IsZero() {
				t.Fatalf("drain %s in: %+v %v; want it held", after, res, err)
			}
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, v1alpha1.ReasonDrainHeld) && strings.Contains(e, "default/keep") {
					held++
				}
			}
		}
		for _, e := range evictions(live) {
			if e.GetObject().(*policyv1.Eviction).Name == "keep" {
				t.Fatal("the do-not-disrupt pod was evicted")
			}
		}
		if got := podDeletes(live); len(got) > 0 {
			t.Errorf("deleted %v; want the do-not-disrupt pod kept without a terminationGracePeriod", got)
		}
		if len(evictions(live)) == 0 {
			t.Error("the other pod was not evicted")
		}
		if held != 3 {
			t.Errorf("%d %s Events naming default/keep at 0s, 10s, 30s, 61s and 1h; want 3 (at most one a minute)", held, v1alpha1.ReasonDrainHeld)
		}
	})
	t.Run("terminationGracePeriod 60s", func(t *testing.T) {
		keep := podOn("keep", 30)
		keep.Annotations = map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"}
		s, nc, _ := deletedClaimOn(t, corev1.ConditionTrue, keep)
		nc.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Minute}
		live := kubefake.NewClientset(keep.DeepCopy())
		s.pods = live
		s.build()
		s.now = nc.DeletionTimestamp.Add(10 * time.Second)
		if _, err := s.c.terminator.drain(ctx, nc); err != nil {
			t.Fatal(err)
		}
		if len(evictions(live)) > 0 || len(podDeletes(live)) > 0 {
			t.Fatalf("10s into 60s: %d evictions, deleted %v; want the do-not-disrupt pod left alone", len(evictions(live)), podDeletes(live))
		}
		s.now = nc.DeletionTimestamp.Add(30 * time.Second)
		if _, err := s.c.terminator.drain(ctx, nc); err != nil {
			t.Fatal(err)
		}
		if got := podDeletes(live); got["keep"] != 30 || len(evictions(live)) > 0 {
			t.Errorf("30s into 60s: deleted %v, %d evictions; want keep deleted with its 30s grace, not evicted", got, len(evictions(live)))
		}
	})
}

// podOn is a pod bound to n1 asking grace seconds to stop, with a
// finalizer, so that a fake client's delete leaves it terminating.
func podOn(name string, grace int64) *corev1.Pod {
	return testobj.Pod(name).UID("uid-" + name).Finalizer("example.com/hold").Node("n1").Grace(grace).Obj()
}

// refusingEvictions is a clientset holding pods whose every eviction a
// PodDisruptionBudget refuses.
func refusingEvictions(pods ...*corev1.Pod) *kubefake.Clientset {
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, p.DeepCopy())
	}
	cs := kubefake.NewClientset(objs...)
	cs.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		refused := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		refused.ErrStatus.Details.Causes = append(refused.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause})
		return true, nil, refused
	})
	return cs
}

// podDeletes is the grace period of the last delete of each pod.
func podDeletes(cs *kubefake.Clientset) map[string]int64 {
	out := map[string]int64{}
	for _, a := range cs.Actions() {
		if d, ok := a.(clienttesting.DeleteActionImpl); ok && d.GetResource().Resource == "pods" {
			out[d.GetName()] = ptr.Deref(d.GetDeleteOptions().GracePeriodSeconds, -1)
		}
	}
	return out
}

func countEvents(rec *events.FakeRecorder, reason string) int {
	n := 0
	for len(rec.Events) > 0 {
		if strings.Contains(<-rec.Events, reason) {
			n++
		}
	}
	return n
}

// terminate deletes pods in the cache (their finalizer keeps them) and
// returns the deletionTimestamp the fake stamped.
func terminate(t *testing.T, s *steps, pods ...*corev1.Pod) time.Time {
	t.Helper()
	var at time.Time
	for _, p := range pods {
		if err := s.kube.Delete(context.Background(), p.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		var got corev1.Pod
		if err := s.kube.Get(context.Background(), client.ObjectKeyFromObject(p), &got); err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("pod %s not terminating in the cache: %v", p.Name, err)
		}
		if got.DeletionTimestamp.After(at) {
			at = got.DeletionTimestamp.Time
		}
	}
	return at
}

// notReadySince sets the Ready condition of node n1 in the cache as
// changed to what it is at since.
func notReadySince(t *testing.T, s *steps, since time.Time) {
	t.Helper()
	var node corev1.Node
	if err := s.kube.Get(context.Background(), client.ObjectKey{Name: "n1"}, &node); err != nil {
		t.Fatal(err)
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			node.Status.Conditions[i].LastTransitionTime = metav1.Time{Time: since}
		}
	}
	if err := s.kube.Status().Update(context.Background(), &node); err != nil {
		t.Fatal(err)
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
	s.pods = kubefake.NewClientset()
	s.build()
	s.cloud.Add(&cloudprovider.Instance{ProviderID: nc.Status.ProviderID, NodeClaim: nc.Name})
	terminated := func() bool {
		_, err := s.cloud.Get(ctx, nc.Status.ProviderID)
		return err != nil
	}
	res, err := s.c.terminator.reconcile(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsZero() || terminated() {
		t.Fatalf("instance terminated (%v) with a drained pod's volume still attached; result %+v", terminated(), res)
	}
	t.Run("past the drain deadline", func(t *testing.T) {
		late := nc.DeepCopy()
		late.Annotations = map[string]string{v1alpha1.AnnotationDrainDeadline: s.now.Add(-time.Second).UTC().Format(time.RFC3339)}
		if res, err := s.c.terminator.awaitDetach(ctx, late); err != nil || !res.IsZero() {
			t.Errorf("waited for volumes past the drain deadline: %+v %v", res, err)
		}
	})
	if err := s.kube.Delete(ctx, data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.terminator.reconcile(ctx, s.get(t, nc)); err != nil {
		t.Fatal(err)
	}
	if !terminated() {
		t.Error("instance not terminated once the drained pod's volume was detached (the daemonset's volume stays attached)")
	}
}
