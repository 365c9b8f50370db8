package capacitybuffer

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/simulator"
	"github.com/nodeforge/nodeforge/test/testobj"
)

func podSpec(cpu string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       *testobj.Pod("x").Req("cpu", cpu).Obj().Spec.DeepCopy(),
	}
}

func buffer(edit func(*bufferv1beta1.CapacityBuffer)) *bufferv1beta1.CapacityBuffer {
	b := &bufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web", Generation: 1}}
	edit(b)
	return b
}

// reconciled runs one reconcile of buffer default/web over objs (one
// 4-cpu node running a 1-cpu pod, besides) and returns the buffer and
// the client.
func reconciled(t *testing.T, objs ...client.Object) (*bufferv1beta1.CapacityBuffer, client.Client) {
	t.Helper()
	ctx := context.Background()
	node := testobj.Node("n1").Label(corev1.LabelHostname, "n1").Capacity("cpu", "4", "memory", "16Gi", "pods", "110").Ready().Obj()
	running := testobj.Pod("running").Node("n1").Req("cpu", "1").Phase(corev1.PodRunning).Obj()
	kube := testobj.Client(append(objs, node, running)...)
	sched, err := simulator.DefaultScheduler(ctx, kubefake.NewClientset())
	if err != nil {
		t.Fatal(err)
	}
	c := New(kube, kube, sched)
	res, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}})
	if err != nil {
		t.Fatal(err)
	}
	var got bufferv1beta1.CapacityBuffer
	if err := kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, &got); err != nil {
		t.Fatal(err)
	}
	want := Resync
	if !cluster.ServesBuffer(&got) {
		want = 0 // left alone, not looked at again
	}
	if res.RequeueAfter != want {
		t.Errorf("requeued after %s, want %s: whether chunks have room changes with pods nothing watches", res.RequeueAfter, want)
	}
	return &got, kube
}

func condition(t *testing.T, b *bufferv1beta1.CapacityBuffer, typ string, status metav1.ConditionStatus, reason, inMsg string) {
	t.Helper()
	c := meta.FindStatusCondition(b.Status.Conditions, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, b.Status.Conditions)
	}
	if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, inMsg) {
		t.Errorf("%s = %s %s %q; want %s %s, a message saying %q", typ, c.Status, c.Reason, c.Message, status, reason, inMsg)
	}
}

// TestPodTemplateBufferCountsItsRoom: a buffer of 4 one-cpu chunks of a
// PodTemplate resolves to that template and 4 replicas; on a 4-cpu node
// running a 1-cpu pod, 3 chunks have room, and the claim made for the
// buffer is said to be launching for the rest.
func TestPodTemplateBufferCountsItsRoom(t *testing.T) {
	tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shape", Generation: 3}, Template: podSpec("1")}
	b := buffer(func(b *bufferv1beta1.CapacityBuffer) {
		b.Spec.PodTemplateRef = &bufferv1beta1.LocalObjectRef{Name: "shape"}
		b.Spec.Replicas = ptr.To[int32](4)
	})
	launching := testobj.Claim("p-abcde").Annotation(v1alpha1.AnnotationCapacityBuffer, "default/web").Obj()
	got, _ := reconciled(t, tpl, b, launching)
	want := bufferv1beta1.CapacityBufferStatus{
		PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "shape"}, Replicas: ptr.To[int32](4),
		PodTemplateGeneration: ptr.To[int64](3), ProvisioningStrategy: ptr.To(bufferv1beta1.StrategyActiveCapacity),
	}
	if diff := cmp.Diff(want, got.Status, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Conditions" }, cmp.Ignore())); diff != "" {
		t.Errorf("status (-want,+got)\n%s", diff)
	}
	condition(t, got, bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionTrue, bufferv1beta1.ReasonResolved, "4 chunks of PodTemplate shape")
	condition(t, got, bufferv1beta1.ConditionProvisioning, metav1.ConditionTrue, bufferv1beta1.ReasonRoomShort, "3 of 4 chunks have room on the nodes now; 1 NodeClaim is launching for the rest")
	condition(t, got, bufferv1beta1.ConditionLimitedByQuotas, metav1.ConditionFalse, bufferv1beta1.ReasonWithinLimits, "")
}

// TestDeploymentBufferMakesItsPodTemplate: a buffer of 20% of a
// 10-replica Deployment, capped by limits at 3 cpu of 2-cpu chunks, makes
// the PodTemplate web-capacitybuffer from the Deployment's pod template,
// owned by the buffer, and resolves to 1 chunk (2 wanted, LimitedByQuotas);
// a change to the Deployment's template reaches the PodTemplate.
func TestDeploymentBufferMakesItsPodTemplate(t *testing.T) {
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10), Template: podSpec("2")}}
	b := buffer(func(b *bufferv1beta1.CapacityBuffer) {
		b.Spec.ScalableRef = &bufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "api"}
		b.Spec.Percentage = ptr.To[int32](20)
		b.Spec.Limits = limits("cpu", "3")
	})
	got, kube := reconciled(t, deploy, b)
	if got.Status.PodTemplateRef == nil || got.Status.PodTemplateRef.Name != "web-capacitybuffer" || ptr.Deref(got.Status.Replicas, -1) != 1 {
		t.Fatalf("status names template %v, replicas %v; want web-capacitybuffer, 1", got.Status.PodTemplateRef, got.Status.Replicas)
	}
	condition(t, got, bufferv1beta1.ConditionLimitedByQuotas, metav1.ConditionTrue, bufferv1beta1.ReasonLimitsCutReplicas, "the limits allow 1 chunks")
	condition(t, got, bufferv1beta1.ConditionProvisioning, metav1.ConditionTrue, bufferv1beta1.ReasonRoomKept, "1 of 1 chunks have room")
	ctx := context.Background()
	var tpl corev1.PodTemplate
	if err := kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web-capacitybuffer"}, &tpl); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&tpl); owner == nil || owner.Kind != "CapacityBuffer" || owner.Name != "web" || owner.UID != "uid-web" {
		t.Errorf("the pod template's controller is %+v, want the buffer (so it goes with it)", owner)
	}
	if diff := cmp.Diff(deploy.Spec.Template, tpl.Template); diff != "" {
		t.Errorf("pod template (-want,+got)\n%s", diff)
	}
	deploy.Spec.Template = podSpec("500m")
	if err := kube.Update(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	if _, err := New(kube, kube, nil).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web-capacitybuffer"}, &tpl); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(deploy.Spec.Template, tpl.Template); diff != "" {
		t.Errorf("after the Deployment changed, pod template (-want,+got)\n%s", diff)
	}
}

// TestBufferThatCannotBeKeptSaysWhy: a scalableRef of a kind Nodeforge
// does not read, a PodTemplate or workload that does not exist, and more
// chunks than one buffer keeps, and limits that bound nothing each give ReadyForProvisioning False with its reason,
// and no chunks (no replicas in the status).
func TestBufferThatCannotBeKeptSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   bufferv1beta1.CapacityBufferSpec
		reason string
		inMsg  string
	}{
		{name: "a Job", spec: bufferv1beta1.CapacityBufferSpec{ScalableRef: &bufferv1beta1.ScalableRef{APIGroup: "batch", Kind: "Job", Name: "j"}, Replicas: ptr.To[int32](1)},
			reason: bufferv1beta1.ReasonUnsupportedScalableRef, inMsg: "scalableRef of kind Job (apiGroup \"batch\") is not supported yet"},
		{name: "a Deployment of another group", spec: bufferv1beta1.CapacityBufferSpec{ScalableRef: &bufferv1beta1.ScalableRef{APIGroup: "example.com", Kind: "Deployment", Name: "d"}},
			reason: bufferv1beta1.ReasonUnsupportedScalableRef, inMsg: "is not supported yet"},
		{name: "a missing PodTemplate", spec: bufferv1beta1.CapacityBufferSpec{PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "gone"}, Replicas: ptr.To[int32](1)},
			reason: bufferv1beta1.ReasonPodTemplateNotFound, inMsg: "PodTemplate default/gone does not exist"},
		{name: "more chunks than one buffer keeps", spec: bufferv1beta1.CapacityBufferSpec{PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "shape"}, Replicas: ptr.To[int32](bufferv1beta1.MaxChunks + 1)},
			reason: bufferv1beta1.ReasonTooManyChunks, inMsg: "5001 chunks are more than Nodeforge keeps room for in one buffer (5000)"},
		{name: "limits alone that cap nothing a chunk requests", spec: bufferv1beta1.CapacityBufferSpec{PodTemplateRef: &bufferv1beta1.LocalObjectRef{Name: "shape"}, Limits: limits("nvidia.com/gpu", "2")},
			reason: bufferv1beta1.ReasonUnboundedReplicas, inMsg: "the number of chunks has no bound"},
		{name: "a missing StatefulSet", spec: bufferv1beta1.CapacityBufferSpec{ScalableRef: &bufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "StatefulSet", Name: "db"}},
			reason: bufferv1beta1.ReasonScalableRefNotFound, inMsg: "StatefulSet default/db does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shape"}, Template: podSpec("1")}
			got, _ := reconciled(t, tpl, buffer(func(b *bufferv1beta1.CapacityBuffer) {
				b.Spec = tc.spec
				// Resolved once before: the chunks go.
				b.Status.Replicas, b.Status.PodTemplateRef = ptr.To[int32](2), &bufferv1beta1.LocalObjectRef{Name: "old"}
			}))
			condition(t, got, bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionFalse, tc.reason, tc.inMsg)
			condition(t, got, bufferv1beta1.ConditionProvisioning, metav1.ConditionFalse, bufferv1beta1.ReasonNotReadyForProvisioning, tc.inMsg)
			if got.Status.Replicas != nil || got.Status.PodTemplateRef != nil {
				t.Errorf("a buffer that cannot be kept keeps chunks: replicas %v, template %v", got.Status.Replicas, got.Status.PodTemplateRef)
			}
		})
	}
}

// TestBufferOfAnotherStrategyIsLeftAlone: no status is written.
func TestBufferOfAnotherStrategyIsLeftAlone(t *testing.T) {
	got, _ := reconciled(t, buffer(func(b *bufferv1beta1.CapacityBuffer) {
		b.Spec.ProvisioningStrategy = ptr.To("example.com/someone-else")
		b.Spec.ScalableRef = &bufferv1beta1.ScalableRef{APIGroup: "batch", Kind: "Job", Name: "j"}
	}))
	if !cmp.Equal(got.Status, bufferv1beta1.CapacityBufferStatus{}) {
		t.Errorf("status written for a buffer of another strategy: %+v", got.Status)
	}
}
