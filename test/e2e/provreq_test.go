package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// TestProvisioningRequestsAsKueueReadsThem serves ProvisioningRequests of
// both classes and reads their conditions as Kueue's provisioning
// admission check does: Provisioned True admits, Provisioned False waits,
// Failed True rejects. The pool launches c7.xlarge (4 cpu) nodes, at most
// 3 (12 cpu), and removes an empty node after 1s; each pod wants 3 cpu.
//   - check-capacity for 2 pods, with no node: Provisioned False
//     CapacityIsNotFound, nothing launched.
//   - best-effort-atomic-scale-up for 4 pods: the limit allows 3 nodes, so
//     nothing is launched and Provisioned is False, CapacityIsNotFound.
//   - best-effort-atomic-scale-up for 3 pods: 3 nodes are launched, and
//     Provisioned is True (CapacityIsProvisioned) once they are up. The
//     nodes stay while empty (booked) long past consolidateAfter.
//   - check-capacity for the same 3 pods: Provisioned False, the room
//     being booked for the other request.
//   - 3 pods made from the template, annotated as Kueue annotates them,
//     run on those 3 nodes, with no other launch.
//   - check-capacity for 3 pods of 100m: Provisioned True,
//     CapacityIsFound, on the room those pods left; no launch.
//   - a request naming a parameter Nodeforge does not act on: Failed True.
func TestProvisioningRequestsAsKueueReadsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{ProvisioningRequests: true})
	prs := provreqClient(t, sb)
	const pool = "provreq"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		onDemandTeamPool(np, pool, []string{"c7.xlarge"})
		np.Spec.Limits = v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("12")}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: "1s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
	})
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	worker := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: "default"}, Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector: map[string]string{"team": pool},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}}
	if _, err := cs.CoreV1().PodTemplates("default").Create(ctx, worker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	provReq(t, prs, "check-none", provreqv1.ClassCheckCapacity, 2, nil)
	awaitProvisioned(t, prs, "check-none", metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound)
	provReq(t, prs, "four", provreqv1.ClassBestEffortAtomicScaleUp, 4, nil)
	awaitProvisioned(t, prs, "four", metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound)
	if claims, err := poolClaims(ctx, kube, pool); err != nil || len(claims) != 0 {
		t.Fatalf("requests that cannot be met whole made %d nodeclaims (%v), want none", len(claims), err)
	}
	// Kueue deletes a request it gives up on: the pool's room is free
	// for the next.
	if err := prs.Delete(ctx, &provreqv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: "four", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	provReq(t, prs, "three", provreqv1.ClassBestEffortAtomicScaleUp, 3, nil)
	three := awaitProvisioned(t, prs, "three", metav1.ConditionTrue, provreqv1.ReasonCapacityIsProvisioned)
	t.Logf("best-effort-atomic-scale-up for 3 pods Provisioned in %s", time.Since(start).Round(100*time.Millisecond))
	names := strings.Split(string(three.Status.ProvisioningClassDetails[provreqv1.DetailNodeClaims]), ",")
	if len(names) != 3 {
		t.Fatalf("the request lists nodeclaims %v, want 3", names)
	}
	// Empty for well past consolidateAfter, the booked nodes stay.
	pollFor(t, time.Minute, "the request's 3 nodes empty for 3s", func() (bool, error) {
		return claimsEmptyFor(ctx, kube, names, 3*time.Second)
	})
	// Room booked for one request is not another's.
	provReq(t, prs, "check-three", provreqv1.ClassCheckCapacity, 3, nil)
	awaitProvisioned(t, prs, "check-three", metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound)

	for i := range 3 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("worker-%d", i), Namespace: "default", Labels: worker.Template.Labels,
			Annotations: map[string]string{provreqv1.AnnotationConsumeRequest: "three", provreqv1.AnnotationProvisioningClass: provreqv1.ClassBestEffortAtomicScaleUp}},
			Spec: *worker.Template.Spec.DeepCopy()}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "the request's 3 pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=worker")
		return n == 3, err
	})
	claims, err := poolClaims(ctx, kube, pool)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range claims {
		got = append(got, c.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, names) {
		t.Errorf("the pool's nodeclaims are %v, want only the request's %v", got, names)
	}

	// The request's pods took their booked nodes: what they leave is
	// anyone's.
	small := worker.DeepCopy()
	small.Name = "small"
	small.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")}
	if _, err := cs.CoreV1().PodTemplates("default").Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	provReqOf(t, prs, "check-small", provreqv1.ClassCheckCapacity, "small", 3, nil)
	awaitProvisioned(t, prs, "check-small", metav1.ConditionTrue, provreqv1.ReasonCapacityIsFound)
	if claims, err := poolClaims(ctx, kube, pool); err != nil || len(claims) != 3 {
		t.Errorf("check-capacity left %d nodeclaims (%v), want the 3 there", len(claims), err)
	}

	provReq(t, prs, "odd", provreqv1.ClassCheckCapacity, 1, map[string]provreqv1.Parameter{"partialCapacityCheck": "bookPartial"})
	odd := awaitCondition(t, prs, "odd", provreqv1.ConditionFailed, metav1.ConditionTrue, provreqv1.ReasonUnsupportedParameter)
	if c := meta.FindStatusCondition(odd.Status.Conditions, provreqv1.ConditionFailed); !strings.Contains(c.Message, `"partialCapacityCheck" is not supported`) {
		t.Errorf("Failed says %q, want it to name the parameter", c.Message)
	}
}

// provreqClient is a client that knows ProvisioningRequests.
func provreqClient(t *testing.T, sb *sandbox.Sandbox) client.Client {
	t.Helper()
	c, err := clientKnowing(sb, provreqv1.AddToScheme)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientKnowing is a client of the sandbox that knows the built-in kinds
// and those adds add.
func clientKnowing(sb *sandbox.Sandbox, adds ...func(*runtime.Scheme) error) (client.Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, adds...) {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return client.New(sb.Config, client.Options{Scheme: scheme})
}

// provReq creates ProvisioningRequest default/<name> of class for count
// pods of PodTemplate worker, as Kueue makes one.
func provReq(t *testing.T, c client.Client, name, class string, count int32, params map[string]provreqv1.Parameter) {
	t.Helper()
	provReqOf(t, c, name, class, "worker", count, params)
}

// provReqOf creates ProvisioningRequest default/<name> of class for count
// pods of PodTemplate template.
func provReqOf(t *testing.T, c client.Client, name, class, template string, count int32, params map[string]provreqv1.Parameter) {
	t.Helper()
	pr := &provreqv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: provreqv1.ProvisioningRequestSpec{
		ProvisioningClassName: class, Parameters: params,
		PodSets: []provreqv1.PodSet{{PodTemplateRef: provreqv1.Reference{Name: template}, Count: count}},
	}}
	if err := c.Create(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
}

// awaitProvisioned waits for the request's Provisioned condition.
func awaitProvisioned(t *testing.T, c client.Client, name string, status metav1.ConditionStatus, reason string) *provreqv1.ProvisioningRequest {
	t.Helper()
	return awaitCondition(t, c, name, provreqv1.ConditionProvisioned, status, reason)
}

// awaitCondition waits for condition typ of request default/<name> to
// have status and reason, and returns the request.
func awaitCondition(t *testing.T, c client.Client, name, typ string, status metav1.ConditionStatus, reason string) *provreqv1.ProvisioningRequest {
	t.Helper()
	var pr provreqv1.ProvisioningRequest
	var last string
	pollFor(t, 2*time.Minute, fmt.Sprintf("ProvisioningRequest %s %s=%s (%s)", name, typ, status, reason), func() (bool, error) {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, &pr); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(pr.Status.Conditions, typ)
		if cond == nil {
			return false, nil
		}
		if s := fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message); s != last {
			t.Logf("ProvisioningRequest %s %s: %s", name, typ, s)
			last = s
		}
		return cond.Status == status && cond.Reason == reason, nil
	})
	if !meta.IsStatusConditionTrue(pr.Status.Conditions, provreqv1.ConditionAccepted) {
		t.Errorf("ProvisioningRequest %s is not Accepted: %v", name, pr.Status.Conditions)
	}
	return &pr
}

// claimsEmptyFor says whether each named claim is there, not being
// disrupted, and has been Empty for at least d.
func claimsEmptyFor(ctx context.Context, kube client.Client, names []string, d time.Duration) (bool, error) {
	for _, name := range names {
		var nc v1alpha1.NodeClaim
		if err := kube.Get(ctx, types.NamespacedName{Name: name}, &nc); err != nil {
			return false, fmt.Errorf("nodeclaim %s of the booked request: %w", name, err)
		}
		if nc.DeletionTimestamp != nil {
			return false, fmt.Errorf("nodeclaim %s of the booked request is being deleted", name)
		}
		e := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionEmpty)
		if e == nil || e.Status != metav1.ConditionTrue || time.Since(e.LastTransitionTime.Time) < d {
			return false, nil
		}
	}
	return true, nil
}

// TestAProvisioningRequestWhoseClaimCannotLaunchLeavesNothing: a
// best-effort-atomic-scale-up request for two pods of 3 cpu and one of 6
// gets two c7.xlarge claims and a c7.2xlarge one, which the cloud refuses
// (insufficient capacity). The request's other claims are released with
// it, any instance terminated; decided afresh without the c7.2xlarge, the
// request cannot be met whole, so nothing of it is left launched or billed,
// and Provisioned says why.
func TestAProvisioningRequestWhoseClaimCannotLaunchLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{ProvisioningRequests: true})
	prs := provreqClient(t, sb)
	const pool = "provfail"
	poolFromDefault(t, kube, pool, func(np *v1alpha1.NodePool) {
		onDemandTeamPool(np, pool, []string{"c7.xlarge", "c7.2xlarge"}, "zone-a")
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
	})
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	update(t, kube, class, func() {
		class.Spec.Faults = []v1alpha1.SimulatedFault{{Kind: v1alpha1.FaultInsufficientCapacity, InstanceTypes: []string{"c7.2xlarge"}}}
	})
	poll(t, "pool "+pool+"'s catalog", func() (bool, error) { return catalogPublished(ctx, kube, pool) })
	for name, cpu := range map[string]string{"small": "3", "big": "6"} {
		tpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"team": pool},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}}
		if _, err := cs.CoreV1().PodTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pr := &provreqv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: "mixed", Namespace: "default"}, Spec: provreqv1.ProvisioningRequestSpec{
		ProvisioningClassName: provreqv1.ClassBestEffortAtomicScaleUp,
		PodSets:               []provreqv1.PodSet{{PodTemplateRef: provreqv1.Reference{Name: "small"}, Count: 2}, {PodTemplateRef: provreqv1.Reference{Name: "big"}, Count: 1}},
	}}
	if err := prs.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	awaitProvisioned(t, prs, "mixed", metav1.ConditionFalse, provreqv1.ReasonNodeClaimsLaunching)
	awaitProvisioned(t, prs, "mixed", metav1.ConditionFalse, provreqv1.ReasonCapacityIsNotFound)
	pollFor(t, 3*time.Minute, "no nodeclaim, node or instance of the request left, and the request decided again", func() (bool, error) {
		if left, err := poolLeftNothing(ctx, cs, kube, pool); !left || err != nil {
			return false, err
		}
		if err := prs.Get(ctx, client.ObjectKeyFromObject(pr), pr); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(pr.Status.Conditions, provreqv1.ConditionProvisioned)
		return c != nil && c.Reason == provreqv1.ReasonCapacityIsNotFound && strings.Contains(c.Message, "2 of its 3 pods can have a node"), nil
	})
	t.Logf("the request's claims released and nothing left %s after it was made", time.Since(start).Round(time.Second))
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonGroupReleased})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind == "NodeClaim" && strings.Contains(e.Note, "of ProvisioningRequest default/mixed")
	}) {
		t.Error("no GroupReleased Event on a nodeclaim of the request")
	}
}
