package aws

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// TestEC2NodeClassDeclaration: the provider serves EC2NodeClass, reads its
// readiness from the Ready condition the node class controller sets, and
// hashes its spec for drift, not what the selectors resolved to.
func TestEC2NodeClassDeclaration(t *testing.T) {
	classes := (&Provider{}).NodeClasses()
	if len(classes) != 1 || classes[0].Kind != "EC2NodeClass" {
		t.Fatalf("NodeClasses = %+v, want EC2NodeClass alone", classes)
	}
	decl := classes[0]
	if _, ok := decl.New().(*v1alpha1.EC2NodeClass); !ok {
		t.Errorf("New() = %T, want *EC2NodeClass", decl.New())
	}
	withReady := func(conds ...metav1.Condition) *v1alpha1.EC2NodeClass {
		class := &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		class.Status.Conditions = conds
		return class
	}
	for _, tc := range []struct {
		name                    string
		class                   *v1alpha1.EC2NodeClass
		ready                   bool
		wantReason, wantMessage string
	}{
		{"not resolved yet", withReady(), false, "NotResolvedYet", "its subnets, security groups and images have not been resolved yet"},
		{"resolved to nothing", withReady(metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "NotResolved", Message: "no subnet matched"}),
			false, "NotResolved", "no subnet matched"},
		{"not ready without a message", withReady(metav1.Condition{Type: ConditionReady, Status: metav1.ConditionUnknown, Reason: "ResolutionFailed"}),
			false, "ResolutionFailed", ""},
		{"resolved", withReady(metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"}), true, "Ready", ""},
	} {
		ready, reason, message := decl.Ready(tc.class)
		if ready != tc.ready || reason != tc.wantReason || message != tc.wantMessage {
			t.Errorf("%s: Ready = %v %q %q, want %v %q %q", tc.name, ready, reason, message, tc.ready, tc.wantReason, tc.wantMessage)
		}
		if launchable := notReady(tc.class) == ""; launchable != tc.ready {
			t.Errorf("%s: launches refused = %v, but the class is read as ready = %v", tc.name, !launchable, tc.ready)
		}
	}

	class := withReady()
	class.Spec.Role = "NodeRole"
	before, err := decl.Hash(class)
	if err != nil {
		t.Fatal(err)
	}
	class.Status.Subnets = []v1alpha1.ResolvedSubnet{{ID: "subnet-1", Zone: "zone-a"}}
	if after, _ := decl.Hash(class); after != before {
		t.Errorf("resolving a subnet (status) changed the hash from %s to %s", before, after)
	}
	class.Spec.Role = "OtherRole"
	if after, _ := decl.Hash(class); after == before {
		t.Errorf("changing spec.role left the hash at %s", before)
	}
}
