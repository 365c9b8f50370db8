package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/manifests"
)

// TestSchedulerNamespacePolicyExample applies
// examples/scheduler-namespaces.yaml to the API server and checks what
// docs/security.md says of it: a pod with schedulerName
// nodeforge-scheduler is refused, with the policy's message, in a
// namespace without the label nodeforge.dev/scheduler=allowed, and
// accepted in one with it; a pod of the default scheduler is accepted
// anywhere. The binding is narrowed to this test's namespaces (a label of
// its own), so that other tests' pods are not judged by it.
func TestSchedulerNamespacePolicyExample(t *testing.T) {
	ctx := context.Background()
	raw, err := manifests.FS.ReadFile("examples/scheduler-namespaces.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const scope = "nodeforge-test-policy"
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			if err := unstructured.SetNestedStringMap(u.Object, map[string]string{scope: "true"}, "spec", "matchResources", "namespaceSelector", "matchLabels"); err != nil {
				t.Fatal(err)
			}
		}
		if err := kube.Create(ctx, u); err != nil {
			t.Fatalf("examples/scheduler-namespaces.yaml: %s %s refused: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() { _ = kube.Delete(context.Background(), u) })
	}
	for name, labels := range map[string]map[string]string{
		"policy-unlabelled": {scope: "true"},
		"policy-allowed":    {scope: "true", "nodeforge.dev/scheduler": "allowed"},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if err := kube.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kube.Delete(context.Background(), ns) })
		if err := kube.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}); err != nil {
			t.Fatal(err)
		}
	}
	// create asks the API server, dry run, to create a pod of scheduler in
	// namespace.
	create := func(ctx context.Context, namespace, scheduler string) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: namespace}, Spec: corev1.PodSpec{
			SchedulerName: scheduler, Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		}}
		return kube.Create(ctx, pod, client.DryRunAll)
	}
	const message = "schedulerName nodeforge-scheduler is allowed only in namespaces labelled nodeforge.dev/scheduler=allowed"
	// The API server enforces a policy once it has read and type-checked
	// it, a moment after it is created.
	var refusal error
	waitFor(t, ctx, "the policy to refuse a nodeforge-scheduler pod in an unlabelled namespace", func(ctx context.Context) (bool, error) {
		refusal = create(ctx, "policy-unlabelled", "nodeforge-scheduler")
		return refusal != nil, nil
	})
	if !apierrors.IsForbidden(refusal) || !strings.Contains(refusal.Error(), message) {
		t.Errorf("refusal %v; want Forbidden saying %q", refusal, message)
	}
	for _, tc := range []struct{ namespace, scheduler string }{
		{"policy-unlabelled", corev1.DefaultSchedulerName},
		{"policy-allowed", "nodeforge-scheduler"},
	} {
		if err := create(ctx, tc.namespace, tc.scheduler); err != nil {
			t.Errorf("a %s pod in namespace %s refused: %v", tc.scheduler, tc.namespace, err)
		}
	}
}
