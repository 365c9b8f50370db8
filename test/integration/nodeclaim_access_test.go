package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// schedulerAccount is nodeforge-scheduler's identity, bound by the
// shipped manifests/scheduler/rbac.yaml (installed by the sandbox) to
// create and update NodeClaims.
const schedulerAccount = "system:serviceaccount:nodeforge:nodeforge-scheduler"

// asScheduler is a client acting as nodeforge-scheduler: the admin's
// credentials, impersonating its service account, so every request is
// authorized by the scheduler's RBAC alone.
func asScheduler(t *testing.T) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: schedulerAccount}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSchedulerCannotTakeAClaimOutOfItsPool: nodeforge-scheduler's account
// may create NodeClaims and rewrite what it rewrites as pods are
// nominated (requirements, resources), but the API server refuses it,
// with a sentence saying why, another node class for a claim, a label
// added to one, and a claim carrying a label no kubelet may set.
func TestSchedulerCannotTakeAClaimOutOfItsPool(t *testing.T) {
	ctx := context.Background()
	sched := asScheduler(t)
	nc := launchingClaim("access-abcde", "access", []v1alpha1.InstanceType{instanceType("a2", 2), instanceType("a4", 4)})
	nc.Finalizers = nil
	nc.Spec.Labels = map[string]string{"intent": "apps", v1alpha1.LabelNodePool: "access"}
	if err := sched.Create(ctx, nc); err != nil {
		t.Fatalf("the scheduler's account could not create a claim: %v", err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	// The requests are the scheduler's, not the admin's: it may not delete.
	if err := sched.Delete(ctx, nc.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Fatalf("the scheduler's account deleting a claim: %v; want Forbidden, as its RBAC says", err)
	}

	// Its own writes: the claim narrowed to one type, resources grown.
	nc.Spec.Requirements[0].Values = []string{"a4"}
	nc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	if err := sched.Update(ctx, nc); err != nil {
		t.Fatalf("the scheduler's account could not narrow its claim: %v", err)
	}

	for _, tc := range []struct {
		name    string
		edit    func(*v1alpha1.NodeClaim)
		wantErr []string
	}{
		{"another node class", func(nc *v1alpha1.NodeClaim) { nc.Spec.NodeClassRef.Name = "privileged" },
			[]string{"spec.nodeClassRef", "nodeClassRef is immutable: it is the pool's template's, copied when the claim is made"}},
		{"a node-restriction label", func(nc *v1alpha1.NodeClaim) { nc.Spec.Labels["node-restriction.kubernetes.io/pci"] = "true" },
			[]string{"spec.labels", "labels are immutable: they are the pool's template labels, copied when the claim is made",
				"a kubelet may not set node-role or node-restriction labels"}},
		{"a label of its own", func(nc *v1alpha1.NodeClaim) { nc.Spec.Labels["example.com/trusted"] = "true" },
			[]string{"spec.labels", "labels are immutable"}},
		{"a startup taint added", func(nc *v1alpha1.NodeClaim) {
			nc.Spec.StartupTaints = []corev1.Taint{{Key: "example.com/held", Effect: corev1.TaintEffectNoSchedule}}
		}, []string{"spec.startupTaints", "startupTaints are immutable"}},
	} {
		t.Run("an update with "+tc.name, func(t *testing.T) {
			var cur v1alpha1.NodeClaim
			if err := sched.Get(ctx, client.ObjectKeyFromObject(nc), &cur); err != nil {
				t.Fatal(err)
			}
			tc.edit(&cur)
			err := sched.Update(ctx, &cur)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refused with %q, which does not say %q", err, want)
				}
			}
		})
	}

	for _, key := range []string{"node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/pci"} {
		t.Run("a new claim labelled "+key, func(t *testing.T) {
			bad := launchingClaim("access-role", "access", []v1alpha1.InstanceType{instanceType("a2", 2)})
			bad.Finalizers = nil
			bad.Spec.Labels = map[string]string{key: ""}
			err := sched.Create(ctx, bad)
			if err == nil {
				_ = kube.Delete(ctx, bad)
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "spec.labels") || !strings.Contains(err.Error(), "a kubelet may not set node-role or node-restriction labels") {
				t.Errorf("refused with %q; want the labels' sentence on node-role and node-restriction keys", err)
			}
		})
	}
}

// TestAClaimTheSchedulerWroteReadsAsNominating: the scheduler writes a
// claim's spec alone, with its nominated pods and last nomination time.
// The API server reads such a claim as phase Nominating (the CRD's
// default), `kubectl get nodeclaims` shows its phase and pods, and the
// scheduler's account may not write a claim's status.
func TestAClaimTheSchedulerWroteReadsAsNominating(t *testing.T) {
	ctx := context.Background()
	sched := asScheduler(t)
	nc := launchingClaim("nominating-abcde", "nominating", []v1alpha1.InstanceType{instanceType("a2", 2)})
	nc.Finalizers = nil
	nc.Spec.NominatedPods = 3
	nc.Spec.LastNominationTime = &metav1.MicroTime{Time: time.Now().Truncate(time.Microsecond)}
	if err := sched.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), nc) })
	var got v1alpha1.NodeClaim
	if err := kube.Get(ctx, client.ObjectKeyFromObject(nc), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.NodeClaimNominating || got.Spec.NominatedPods != 3 ||
		got.Spec.LastNominationTime == nil || !got.Spec.LastNominationTime.Equal(nc.Spec.LastNominationTime) {
		t.Fatalf("read back: phase %q, %d pods, last nomination %v; want Nominating, 3, %v",
			got.Status.Phase, got.Spec.NominatedPods, got.Spec.LastNominationTime, nc.Spec.LastNominationTime)
	}

	// What kubectl get shows: the server's table of the claim.
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/apis", v1alpha1.Group, "v1alpha1", "nodeclaims", nc.Name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	columns := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		if len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			columns[col.Name] = table.Rows[0].Cells[i]
		}
	}
	if columns["Phase"] != "Nominating" || fmt.Sprint(columns["Pods"]) != "3" {
		t.Errorf("kubectl get nodeclaims shows Phase %v, Pods %v; want Nominating, 3 (columns %v)", columns["Phase"], columns["Pods"], columns)
	}

	got.Status.Phase = v1alpha1.NodeClaimLaunching
	if err := sched.Status().Update(ctx, &got); !apierrors.IsForbidden(err) {
		t.Errorf("the scheduler's account writing a claim's status: %v; want Forbidden", err)
	}
}
