package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestCapacityBufferStatusIsWrittenWithTheChartsPermissions: with
// Options.CapacityBuffers, the provisioner, with only the permissions
// capacitybuffers/rbac.yaml grants, resolves a buffer of 20% of a
// 10-replica Deployment of 2-cpu pods, limited to 3 cpu: it makes the
// PodTemplate web-capacitybuffer owned by the buffer, and writes
// ReadyForProvisioning True with 1 chunk, LimitedByQuotas True, and
// Provisioning saying no chunk has room (the cluster has only its
// tainted control-plane node). A buffer of a Job is ReadyForProvisioning
// False UnsupportedScalableRef.
func TestCapacityBufferStatusIsWrittenWithTheChartsPermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, _, kube := startSandbox(t, sandbox.Options{CapacityBuffers: true})
	cbs := bufferClient(t, sb)
	// Pods no scheduler places: the buffer reads the Deployment only.
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](10),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{SchedulerName: "no-scheduler", Containers: []corev1.Container{{Name: "c", Image: "web",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}}}}}
	if err := kube.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	limits := bufferv1beta1.ResourceList{"cpu": resource.MustParse("3")}
	for _, b := range []*bufferv1beta1.CapacityBuffer{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: bufferv1beta1.CapacityBufferSpec{
			ScalableRef: &bufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}, Percentage: ptr.To[int32](20), Limits: &limits}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job"}, Spec: bufferv1beta1.CapacityBufferSpec{
			ScalableRef: &bufferv1beta1.ScalableRef{APIGroup: "batch", Kind: "Job", Name: "j"}, Replicas: ptr.To[int32](1)}},
	} {
		if err := cbs.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	web := awaitBuffer(t, cbs, "web", bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionTrue, bufferv1beta1.ReasonResolved)
	if web.Status.PodTemplateRef == nil || web.Status.PodTemplateRef.Name != "web-capacitybuffer" || ptr.Deref(web.Status.Replicas, -1) != 1 {
		t.Errorf("buffer web resolved to template %v, replicas %v; want web-capacitybuffer, 1", web.Status.PodTemplateRef, web.Status.Replicas)
	}
	if !meta.IsStatusConditionTrue(web.Status.Conditions, bufferv1beta1.ConditionLimitedByQuotas) {
		t.Errorf("buffer web is not LimitedByQuotas: %v", web.Status.Conditions)
	}
	if c := meta.FindStatusCondition(web.Status.Conditions, bufferv1beta1.ConditionProvisioning); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "0 of 1 chunks have room") {
		t.Errorf("buffer web's Provisioning is %+v, want True saying 0 of 1 chunks have room", c)
	}
	var tpl corev1.PodTemplate
	if err := kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web-capacitybuffer"}, &tpl); err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(&tpl); owner == nil || owner.UID != web.UID {
		t.Errorf("PodTemplate web-capacitybuffer is controlled by %+v, want buffer web (uid %s)", owner, web.UID)
	}
	job := awaitBuffer(t, cbs, "job", bufferv1beta1.ConditionReadyForProvisioning, metav1.ConditionFalse, bufferv1beta1.ReasonUnsupportedScalableRef)
	if c := meta.FindStatusCondition(job.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning); !strings.Contains(c.Message, "not supported yet") {
		t.Errorf("buffer job's ReadyForProvisioning says %q, want it to say the kind is not supported yet", c.Message)
	}
}

// awaitBuffer waits for condition typ of buffer default/<name> to have
// status and reason, and returns the buffer.
func awaitBuffer(t *testing.T, c client.Client, name, typ string, status metav1.ConditionStatus, reason string) *bufferv1beta1.CapacityBuffer {
	t.Helper()
	var b bufferv1beta1.CapacityBuffer
	pollFor(t, time.Minute, fmt.Sprintf("CapacityBuffer %s %s=%s (%s)", name, typ, status, reason), func() (bool, error) {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, &b); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, typ)
		return cond != nil && cond.Status == status && cond.Reason == reason, nil
	})
	return &b
}
