package aws

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

func defaultSpec() v1alpha1.EC2NodeClassSpec {
	return v1alpha1.EC2NodeClassSpec{
		InstanceProfile:            "NodeforgeNodeInstanceProfile",
		SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
	}
}

// TestDeniedLaunchMakesTheClassNotReady: a policy that refuses what a
// launch sends makes the class not Ready at resolution, through EC2's
// DryRun, with a message naming the IAM action, before any claim; nothing
// is launched, and a second resolution is answered from the cache.
func TestDeniedLaunchMakesTheClassNotReady(t *testing.T) {
	for _, tc := range []struct {
		name, deny, op, action string
	}{
		{"no ec2:CreateFleet", "CreateFleet", "CreateFleet", "ec2:CreateFleet"},
		{"no ec2:CreateTags to tag on create", "CreateTags", "CreateLaunchTemplate", "ec2:CreateTags"},
		{"no iam:PassRole for the instance profile", "iam:PassRole", "RunInstances", "iam:PassRole"},
		{"no ec2:CreateLaunchTemplate", "CreateLaunchTemplate", "CreateLaunchTemplate", "ec2:CreateLaunchTemplate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegion(t, nil, nil)
			r.ec2.Deny(tc.deny, true)
			class := r.resolve(t, className(t)+"-d", defaultSpec())
			c := ready(class)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "LaunchDenied" || !strings.Contains(c.Message, tc.action) {
				t.Fatalf("Ready = %+v, want False LaunchDenied naming %s", c, tc.action)
			}
			la := meta.FindStatusCondition(class.Status.Conditions, aws.ConditionLaunchAllowed)
			if la == nil || la.Status != metav1.ConditionFalse || la.Reason != tc.op+"Denied" || !strings.Contains(la.Message, tc.action) {
				t.Errorf("LaunchAllowed = %+v, want False %sDenied naming %s", la, tc.op, tc.action)
			}
			for _, req := range r.ec2.Requests() {
				if req.Action == "CreateFleet" && req.Form.Get("DryRun") != "true" {
					t.Errorf("a CreateFleet without DryRun was sent: %v", req.Form)
				}
			}
			if len(r.ec2.Instances()) != 0 {
				t.Errorf("instances launched: %d", len(r.ec2.Instances()))
			}
			pool := r.pool()
			pool.Spec.Template.Spec.NodeClassRef.Name = class.Name
			var notReady *cloudprovider.NodeClassNotReadyError
			if _, err := r.provider.InstanceTypes(context.Background(), pool); !errors.As(err, &notReady) {
				t.Errorf("InstanceTypes of the class = %v, want NodeClassNotReadyError", err)
			}
			before := r.ec2.Calls("CreateLaunchTemplate") + r.ec2.Calls("RunInstances") + r.ec2.Calls("CreateFleet")
			if _, err := aws.NewNodeClassController(kube, r.provider).Reconcile(context.Background(), reconcileRequest(class.Name)); err != nil {
				t.Fatal(err)
			}
			if after := r.ec2.Calls("CreateLaunchTemplate") + r.ec2.Calls("RunInstances") + r.ec2.Calls("CreateFleet"); after != before {
				t.Errorf("a second resolution made %d dry runs, want 0 (cached)", after-before)
			}
		})
	}
	t.Run("allowed: Ready, LaunchAllowed and SpotLaunchAllowed True, the dry runs sent with DryRun", func(t *testing.T) {
		r := newRegion(t, nil, nil)
		if c := ready(r.class); c == nil || c.Status != metav1.ConditionTrue {
			t.Fatalf("Ready = %+v, want True", c)
		}
		for _, typ := range []string{aws.ConditionLaunchAllowed, aws.ConditionSpotLaunchAllowed} {
			if c := meta.FindStatusCondition(r.class.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("%s = %+v, want True", typ, c)
			}
		}
		req := r.lastRequest(t, "CreateFleet")
		if req.Form.Get("DryRun") != "true" || req.Form.Get("TagSpecification.3.ResourceType") != "fleet" {
			t.Errorf("the fleet dry run was sent as %v", req.Form)
		}
	})
}

// TestMissingSpotRoleWithholdsSpotOnly: without the spot service-linked
// role the class stays Ready, says how to make the role, and offers
// on-demand but no spot; a spot launch of a class checked before the role
// went missing withholds its spot at once.
func TestMissingSpotRoleWithholdsSpotOnly(t *testing.T) {
	ctx := context.Background()
	r := newRegion(t, nil, nil)
	r.ec2.MissingSpotRole(true)
	class := r.resolve(t, className(t)+"-nospot", defaultSpec())
	if c := ready(class); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v, want True: on-demand launches", c)
	}
	c := meta.FindStatusCondition(class.Status.Conditions, aws.ConditionSpotLaunchAllowed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ServiceLinkedRoleMissing" || !strings.Contains(c.Message, aws.SpotRoleFix) || !strings.Contains(c.Message, ec2fake.SpotRoleCode) {
		t.Fatalf("SpotLaunchAllowed = %+v, want False naming %q", c, aws.SpotRoleFix)
	}
	offered := func(name string) (onDemand, spot int) {
		pool := r.pool()
		pool.Spec.Template.Spec.NodeClassRef.Name = name
		types, err := r.provider.InstanceTypes(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range types {
			for _, o := range it.Offerings {
				if o.CapacityType == v1alpha1.CapacityTypeSpot {
					spot++
				} else {
					onDemand++
				}
			}
		}
		return onDemand, spot
	}
	if od, sp := offered(class.Name); od == 0 || sp != 0 {
		t.Errorf("offerings of the class without the spot role: %d on-demand, %d spot; want some on-demand and no spot", od, sp)
	}

	// r.class was checked while the role existed: its first spot launch
	// finds it missing.
	if od, sp := offered(r.class.Name); od == 0 || sp == 0 {
		t.Fatalf("offerings of the class checked with the role: %d on-demand, %d spot; want both", od, sp)
	}
	spotOffers := r.offers(t, v1alpha1.CapacityTypeSpot, "m5.large")
	_, err := r.provider.Create(ctx, r.launch(spotOffers))
	var insufficient *cloudprovider.InsufficientCapacityError
	if !errors.As(err, &insufficient) {
		t.Fatalf("spot launch without the role = %v, want InsufficientCapacityError", err)
	}
	if od, sp := offered(r.class.Name); od == 0 || sp != 0 {
		t.Errorf("after the refused spot launch: %d on-demand, %d spot offerings; want no spot", od, sp)
	}
	if in, err := r.provider.Create(ctx, r.launch(r.offers(t, v1alpha1.CapacityTypeOnDemand, "m5.large"))); err != nil || in == nil {
		t.Errorf("on-demand launch without the spot role = %v, %v; want an instance", in, err)
	}
}
