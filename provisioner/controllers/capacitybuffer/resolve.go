package capacitybuffer

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
)

// resolved is what a buffer's spec comes to: the PodTemplate of its
// chunks and their number, or why it cannot be kept (reason, message).
type resolved struct {
	template *corev1.PodTemplate
	count    Count
	reason   string
	message  string
}

// workloadKinds are the scalableRef kinds Nodeforge reads, of group apps:
// each has spec.replicas and spec.template.
var workloadKinds = map[string]func() client.Object{
	"Deployment":  func() client.Object { return &appsv1.Deployment{} },
	"StatefulSet": func() client.Object { return &appsv1.StatefulSet{} },
	"ReplicaSet":  func() client.Object { return &appsv1.ReplicaSet{} },
}

// resolve reads the buffer's PodTemplate, or its workload and the
// PodTemplate made from it, and counts its chunks.
func (c *Controller) resolve(ctx context.Context, b *bufferv1beta1.CapacityBuffer) (resolved, error) {
	var tpl corev1.PodTemplate
	workload := int32(0)
	switch {
	case b.Spec.PodTemplateRef != nil:
		key := types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PodTemplateRef.Name}
		if err := c.kube.Get(ctx, key, &tpl); err != nil {
			if isGone(err) {
				return resolved{reason: bufferv1beta1.ReasonPodTemplateNotFound, message: fmt.Sprintf("PodTemplate %s does not exist", key)}, nil
			}
			return resolved{}, fmt.Errorf("reading pod template %s: %w", key, err)
		}
	case b.Spec.ScalableRef != nil:
		r, replicas, ok, err := c.workloadTemplate(ctx, b)
		if err != nil || !ok {
			return r, err
		}
		tpl, workload = *r.template, replicas
	default:
		// The CRD refuses it; a buffer written before its validation.
		return resolved{reason: bufferv1beta1.ReasonPodTemplateNotFound, message: "neither podTemplateRef nor scalableRef is set"}, nil
	}
	chunk := resourcehelper.PodRequests(&corev1.Pod{Spec: tpl.Template.Spec}, resourcehelper.PodResourcesOptions{})
	n := Replicas(&b.Spec, workload, chunk)
	if n.Unbounded {
		return resolved{reason: bufferv1beta1.ReasonUnboundedReplicas, message: "neither replicas nor percentage is set, and the limits cap no resource a chunk requests: the number of chunks has no bound"}, nil
	}
	if n.Replicas > bufferv1beta1.MaxChunks {
		return resolved{reason: bufferv1beta1.ReasonTooManyChunks, message: fmt.Sprintf("%d chunks are more than Nodeforge keeps room for in one buffer (%d)", n.Replicas, bufferv1beta1.MaxChunks)}, nil
	}
	return resolved{template: &tpl, count: n}, nil
}

// workloadTemplate reads the scalableRef's workload and makes, or brings
// up to date, the PodTemplate <buffer>-capacitybuffer from its pod
// template, owned by the buffer. ok is false, with the reason in r, when
// the kind is not one Nodeforge reads or the workload does not exist.
func (c *Controller) workloadTemplate(ctx context.Context, b *bufferv1beta1.CapacityBuffer) (r resolved, replicas int32, ok bool, err error) {
	ref := b.Spec.ScalableRef
	newObj, known := workloadKinds[ref.Kind]
	if !known || ref.APIGroup != appsv1.GroupName {
		return resolved{reason: bufferv1beta1.ReasonUnsupportedScalableRef,
			message: fmt.Sprintf("scalableRef of kind %s (apiGroup %q) is not supported yet: Nodeforge reads Deployment, StatefulSet and ReplicaSet of apiGroup apps", ref.Kind, ref.APIGroup)}, 0, false, nil
	}
	key := types.NamespacedName{Namespace: b.Namespace, Name: ref.Name}
	obj := newObj()
	if err := c.live.Get(ctx, key, obj); err != nil {
		if isGone(err) {
			return resolved{reason: bufferv1beta1.ReasonScalableRefNotFound, message: fmt.Sprintf("%s %s does not exist", ref.Kind, key)}, 0, false, nil
		}
		return resolved{}, 0, false, fmt.Errorf("reading %s %s: %w", ref.Kind, key, err)
	}
	var spec *corev1.PodTemplateSpec
	var want *int32
	switch w := obj.(type) {
	case *appsv1.Deployment:
		spec, want = &w.Spec.Template, w.Spec.Replicas
	case *appsv1.StatefulSet:
		spec, want = &w.Spec.Template, w.Spec.Replicas
	case *appsv1.ReplicaSet:
		spec, want = &w.Spec.Template, w.Spec.Replicas
	}
	tpl, err := c.ensureTemplate(ctx, b, spec)
	if err != nil {
		return resolved{}, 0, false, err
	}
	// The API server defaults spec.replicas of each kind to 1.
	return resolved{template: tpl}, ptr.Deref(want, 1), true, nil
}

// ensureTemplate makes the buffer's own PodTemplate hold spec.
func (c *Controller) ensureTemplate(ctx context.Context, b *bufferv1beta1.CapacityBuffer, spec *corev1.PodTemplateSpec) (*corev1.PodTemplate, error) {
	key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name + TemplateSuffix}
	var tpl corev1.PodTemplate
	err := c.kube.Get(ctx, key, &tpl)
	switch {
	case isGone(err):
		tpl = corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Template: *spec.DeepCopy()}
		if err := c.setOwner(b, &tpl); err != nil {
			return nil, err
		}
		if err := c.kube.Create(ctx, &tpl); err != nil {
			return nil, fmt.Errorf("creating pod template %s: %w", key, err)
		}
		klog.FromContext(ctx).V(1).Info("Made the capacity buffer's pod template", "capacityBuffer", klog.KObj(b), "podTemplate", klog.KObj(&tpl))
		return &tpl, nil
	case err != nil:
		return nil, fmt.Errorf("reading pod template %s: %w", key, err)
	}
	if equality.Semantic.DeepEqual(tpl.Template, *spec) && metav1.IsControlledBy(&tpl, b) {
		return &tpl, nil
	}
	tpl.Template = *spec.DeepCopy()
	if err := c.setOwner(b, &tpl); err != nil {
		return nil, err
	}
	if err := c.kube.Update(ctx, &tpl); err != nil {
		return nil, fmt.Errorf("updating pod template %s: %w", key, err)
	}
	return &tpl, nil
}
