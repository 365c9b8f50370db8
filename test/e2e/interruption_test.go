package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// TestSpotInterruptionOnAWS: on the aws provider, the sandbox's
// interruption queue (internal/sandbox/sqsfake, read through the real SQS client)
// gets an EC2 spot interruption warning for the instance running a
// Deployment's pods, sent 30s ago, so the instance goes 90s from now. The
// replacement is Initialized, and every pod Running on a new node, before
// that deadline (read off the objects' own times); the drain never takes
// the Deployment below its PodDisruptionBudget; the interrupted offering
// is published unavailable; the claim's Event says why it went.
func TestSpotInterruptionOnAWS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "aws", AWSRegistrationDelay: 3 * time.Second})
	const app = "spotty"
	d := deployment(app, app, 2, func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{v1alpha1.LabelCapacityType: "spot"}
	})
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var old v1alpha1.NodeClaim
	poll(t, "both pods Running on an Initialized spot node", func() (bool, error) {
		if n, err := runningPods(ctx, cs, "app="+app); err != nil || n != 2 {
			return false, err
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		for _, nc := range claims.Items {
			if nc.Status.NodeName == pods.Items[0].Spec.NodeName && nc.Status.Phase == v1alpha1.NodeClaimInitialized {
				old = nc
				return true, nil
			}
		}
		return false, nil
	})
	if old.Status.CapacityType != "spot" {
		t.Fatalf("claim %s is %s, want spot", old.Name, old.Status.CapacityType)
	}
	instance := old.Status.ProviderID[strings.LastIndex(old.Status.ProviderID, "/")+1:]
	stopPDB := watchPDB(ctx, cs, app, 1)
	sent := time.Now().Add(-30 * time.Second)
	deadline := sent.Add(aws.SpotNotice)
	if err := sb.SpotInterruption(ctx, instance, sent); err != nil {
		t.Fatal(err)
	}
	t.Logf("spot interruption warning for %s (claim %s, node %s) sent; the instance goes at %s", instance, old.Name, old.Status.NodeName, deadline.Format(time.RFC3339))

	var rep v1alpha1.NodeClaim
	pollFor(t, 4*time.Minute, "the interrupted claim gone and both pods Running on its replacement", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&old), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		i := slices.IndexFunc(claims.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Annotations[v1alpha1.AnnotationReplaces] == old.Name })
		if i < 0 {
			return false, nil
		}
		rep = claims.Items[i]
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != old.Status.NodeName {
				n++
			}
		}
		return n == 2, nil
	})
	if v := stopPDB(); len(v) > 0 {
		t.Errorf("the drain took the Deployment below its PodDisruptionBudget: %v", v)
	}
	initialized := findCondition(rep.Status.Conditions, "Initialized")
	if initialized == nil || !initialized.LastTransitionTime.Time.Before(deadline) {
		t.Errorf("replacement %s not Initialized before the instance's deadline %s: %+v", rep.Name, deadline.Format(time.RFC3339), initialized)
	} else {
		t.Logf("replacement %s Initialized %s before the deadline", rep.Name, deadline.Sub(initialized.LastTransitionTime.Time).Round(time.Second))
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		var ready *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady {
				ready = &p.Status.Conditions[i]
			}
		}
		if ready == nil || ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Time.Before(deadline) {
			t.Errorf("pod %s not Ready on a new node before the deadline: %+v", p.Name, ready)
		}
	}
	reasons, notes, err := claimEvents(ctx, cs, old.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(reasons, v1alpha1.ReasonInterrupted) || !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "spot interruption warning for instance "+instance) }) {
		t.Errorf("no Interrupted Event on %s naming the warning; reasons %v, notes %q", old.Name, reasons, notes)
	}
	// The offering is published unavailable, so no new claim chooses it.
	var cats v1alpha1.InstanceTypeCatalogList
	if err := kube.List(ctx, &cats); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cats.Items {
		for _, it := range c.Spec.InstanceTypes {
			if it.Name != old.Status.InstanceType {
				continue
			}
			for _, o := range it.Offerings {
				if o.Zone == old.Status.Zone && o.CapacityType == "spot" {
					found = true
					if o.Available {
						t.Errorf("offering %s spot in %s still published available after its interruption", it.Name, o.Zone)
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("offering %s spot in %s not in any catalog", old.Status.InstanceType, old.Status.Zone)
	}
	if rep.Status.InstanceType == old.Status.InstanceType && rep.Status.Zone == old.Status.Zone && rep.Status.CapacityType == "spot" {
		t.Errorf("the replacement launched in the interrupted offering %s spot in %s", rep.Status.InstanceType, rep.Status.Zone)
	}
}
