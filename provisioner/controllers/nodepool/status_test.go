package nodepool

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/fake"
)

func poolWithClass(name string, ref v1alpha1.NodeClassReference) *v1alpha1.NodePool {
	np := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.NodeClassRef = ref
	return np
}

func simulatedClass(name string) v1alpha1.NodeClassReference {
	return v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: name}
}

// TestPoolIsReadyOnlyWithAServedReadyClass: the Ready condition follows
// what the cloud provider declares: the kind must be one it serves (the
// message names them), the class must exist, and the provider must read
// it as ready.
func TestPoolIsReadyOnlyWithAServedReadyClass(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		ref        v1alpha1.NodeClassReference
		notReady   string // the fake provider reads this class as not ready
		wantStatus metav1.ConditionStatus
		wantReason string
		wantInMsg  string
	}{
		{name: "a class of a served kind that exists and is ready", ref: simulatedClass("default"),
			wantStatus: metav1.ConditionTrue, wantReason: "NodeClassReady", wantInMsg: "SimulatedNodeClass default is ready"},
		{name: "a class the provider reads as not ready", ref: simulatedClass("default"), notReady: "subnets not resolved",
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotReady", wantInMsg: "SimulatedNodeClass default is not ready (FakeNotReady): subnets not resolved"},
		{name: "a class that does not exist", ref: simulatedClass("missing"),
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotFound", wantInMsg: "SimulatedNodeClass missing does not exist"},
		{name: "a kind the provider does not serve", ref: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "default"},
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotSupported", wantInMsg: "which launches from SimulatedNodeClass"},
		{name: "a served kind in another group", ref: v1alpha1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "SimulatedNodeClass", Name: "default"},
			wantStatus: metav1.ConditionFalse, wantReason: "NodeClassNotSupported", wantInMsg: "not served by this provisioner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
			np := poolWithClass("pool", tc.ref)
			kube := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(class, np).WithStatusSubresource(np).Build()
			cloud := fake.New()
			if tc.notReady != "" {
				cloud.SetNodeClassReady("default", false, tc.notReady)
			}
			c := NewStatusController(kube, cloud.NodeClasses())
			if _, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.NodePool
			if err := kube.Get(context.Background(), client.ObjectKey{Name: "pool"}, &got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, ConditionReady)
			if cond == nil {
				t.Fatal("no Ready condition")
			}
			if cond.Status != tc.wantStatus || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantInMsg) {
				t.Errorf("Ready = %s %s %q, want %s %s and a message containing %q", cond.Status, cond.Reason, cond.Message, tc.wantStatus, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

// TestClassChangeReconcilesThePoolsReferringToIt: a change to a node class
// enqueues the pools whose nodeClassRef names that kind and name, and no
// other pool.
func TestClassChangeReconcilesThePoolsReferringToIt(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kube := crfake.NewClientBuilder().WithScheme(scheme).WithObjects(
		poolWithClass("uses-it", simulatedClass("a")),
		poolWithClass("other-name", simulatedClass("b")),
		poolWithClass("other-kind", v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "EC2NodeClass", Name: "a"}),
	).Build()
	c := NewStatusController(kube, fake.New().NodeClasses())
	got := c.poolsOfClass("SimulatedNodeClass")(context.Background(), &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	if len(got) != 1 || got[0].Name != "uses-it" {
		t.Errorf("pools enqueued for SimulatedNodeClass a = %v, want only uses-it", got)
	}
}
