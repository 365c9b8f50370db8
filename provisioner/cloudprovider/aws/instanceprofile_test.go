package aws

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/iamfake"
	"github.com/nodeforge/nodeforge/internal/sdkhttp"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// These tests run the node class controller against a fake API server
// (controller-runtime's fake client) and the real EC2 and IAM SDK clients
// against loopback fakes of both services; what IAM holds afterwards is read
// from the IAM fake.

const testCluster = "prod"

// iamEnv is one test's world: the fakes, the provider and its controller.
type iamEnv struct {
	iam      *iamfake.Server
	kube     client.Client
	provider *Provider
	ctrl     *NodeClassController
}

// newIAMEnv starts EC2 and IAM fakes and a provider for cluster "prod"
// using them; funcs intercept the API server's client when given.
func newIAMEnv(t *testing.T, funcs *interceptor.Funcs) *iamEnv {
	t.Helper()
	e := &iamEnv{iam: iamfake.New()}
	ec2s := ec2fake.New(ec2fake.DefaultWorld())
	ec2URL, stopEC2, err := ec2s.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopEC2)
	iamURL, stopIAM, err := e.iam.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopIAM)
	creds := credentials.NewStaticCredentialsProvider("AKIATEST", "secret", "")
	ec2c := ec2.New(ec2.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(ec2URL), Credentials: creds,
		HTTPClient: sdkhttp.GuardClosedBodyRace(nil), Retryer: testRetryer()})
	iamc := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: sdkaws.String(iamURL), Credentials: creds,
		HTTPClient: sdkhttp.GuardClosedBodyRace(nil), Retryer: testRetryer()})

	kube := testobj.Client()
	if funcs != nil {
		kube = interceptor.NewClient(kube, *funcs)
	}
	e.kube = kube
	prices, err := pricing.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	e.provider, err = New(ec2c, e.kube, prices, Options{Region: "us-west-2", ClusterName: testCluster, KubernetesVersion: "1.37", IAM: iamc})
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = NewNodeClassController(e.kube, e.provider)
	return e
}

// classSpec is a spec whose selectors resolve in DefaultWorld.
func classSpec(role, instanceProfile string) v1alpha1.EC2NodeClassSpec {
	return v1alpha1.EC2NodeClassSpec{
		Role:                       role,
		InstanceProfile:            instanceProfile,
		SubnetSelectorTerms:        []v1alpha1.SelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		SecurityGroupSelectorTerms: []v1alpha1.SecurityGroupSelectorTerm{{Tags: map[string]string{ec2fake.DiscoveryTag: "sandbox"}}},
		AMISelectorTerms:           []v1alpha1.AMISelectorTerm{{Alias: "al2023@latest"}},
	}
}

func (e *iamEnv) create(t *testing.T, name string, spec v1alpha1.EC2NodeClassSpec) {
	t.Helper()
	if err := e.kube.Create(context.Background(), &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}); err != nil {
		t.Fatal(err)
	}
}

func (e *iamEnv) reconcile(t *testing.T, name string) reconcile.Result {
	t.Helper()
	res, err := e.ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (e *iamEnv) get(t *testing.T, name string) *v1alpha1.EC2NodeClass {
	t.Helper()
	var class v1alpha1.EC2NodeClass
	if err := e.kube.Get(context.Background(), client.ObjectKey{Name: name}, &class); err != nil {
		t.Fatal(err)
	}
	return &class
}

// condition returns status, reason and message of a condition, or
// "missing".
func condition(class *v1alpha1.EC2NodeClass, typ string) (metav1.ConditionStatus, string, string) {
	c := meta.FindStatusCondition(class.Status.Conditions, typ)
	if c == nil {
		return "missing", "", ""
	}
	return c.Status, c.Reason, c.Message
}

// callsSince returns the actions the IAM fake received after the first n
// requests.
func (e *iamEnv) callsSince(n int) []string {
	var out []string
	for _, r := range e.iam.Requests()[n:] {
		out = append(out, r.Action+" "+r.Params.Get("RoleName"))
	}
	return out
}

func ourTags(class string) map[string]string {
	return map[string]string{TagCluster: testCluster, TagNodeClass: class, "kubernetes.io/cluster/" + testCluster: "owned"}
}

// TestRoleCreatesInstanceProfile: a class with spec.role (here an ARN)
// gets the finalizer before anything is made in IAM, then an instance
// profile named by the rule, under /nodeforge/, tagged as ours and
// holding the role; the class is Ready with it. Resolving again costs one
// GetInstanceProfile and changes nothing.
func TestRoleCreatesInstanceProfile(t *testing.T) {
	failPatch := true
	e := newIAMEnv(t, &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
		if failPatch {
			return errors.New("injected: the API server refuses the patch")
		}
		return c.Patch(ctx, o, p, opts...)
	}})
	e.iam.AddRole("NodeRole")
	e.create(t, "default", classSpec("arn:aws:iam::123456789012:role/teams/NodeRole", ""))

	// The finalizer comes first: when it cannot be added, nothing is made.
	if _, err := e.ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "default"}}); err == nil {
		t.Fatal("reconcile succeeded though the finalizer could not be added")
	}
	if n := e.iam.Calls(""); n != 0 {
		t.Fatalf("%d IAM calls before the finalizer was on the class: %v", n, e.callsSince(0))
	}
	if s, r, m := condition(e.get(t, "default"), ConditionReady); s != metav1.ConditionFalse || r != ReasonFinalizerNotAdded || !strings.Contains(m, "refuses the patch") {
		t.Errorf("Ready without the finalizer = %s %s %q, want False %s with the error", s, r, m, ReasonFinalizerNotAdded)
	}
	failPatch = false

	e.reconcile(t, "default")
	class := e.get(t, "default")
	if !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerTermination) {
		t.Errorf("finalizers %v lack %s", class.Finalizers, v1alpha1.FinalizerTermination)
	}
	const name = "nodeforge_prod_default"
	if class.Status.InstanceProfile != name {
		t.Errorf("status.instanceProfile = %q, want %s", class.Status.InstanceProfile, name)
	}
	if s, r, m := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionTrue || r != ReasonInstanceProfileCreated || m != name {
		t.Errorf("InstanceProfileReady = %s %s %q, want True Created %q", s, r, m, name)
	}
	if s, _, m := condition(class, ConditionReady); s != metav1.ConditionTrue {
		t.Errorf("Ready = %s %q, want True", s, m)
	}
	profiles := e.iam.InstanceProfiles()
	if len(profiles) != 1 {
		t.Fatalf("IAM holds %+v, want one profile", profiles)
	}
	got := profiles[0]
	if got.Name != name || got.Path != "/nodeforge/" || !cmp.Equal(got.Roles, []string{"NodeRole"}) {
		t.Errorf("profile %s at %s with roles %v, want %s at /nodeforge/ with [NodeRole]", got.Name, got.Path, got.Roles, name)
	}
	if diff := cmp.Diff(ourTags("default"), got.Tags); diff != "" {
		t.Errorf("profile tags (-want,+got):\n%s", diff)
	}

	before := len(e.iam.Requests())
	e.reconcile(t, "default")
	e.reconcile(t, "default")
	if diff := cmp.Diff([]string{"GetInstanceProfile ", "GetInstanceProfile "}, e.callsSince(before)); diff != "" {
		t.Errorf("IAM calls of two more resolutions (-want,+got):\n%s", diff)
	}
	if _, r, _ := condition(e.get(t, "default"), ConditionInstanceProfileReady); r != ReasonInstanceProfileResolved {
		t.Errorf("InstanceProfileReady reason after a resolution that changed nothing = %s, want Resolved", r)
	}
}

// TestRoleChangeSwapsTheRole: changing spec.role takes the old role out of
// the profile and puts the new one in, in that order (a profile holds one).
func TestRoleChangeSwapsTheRole(t *testing.T) {
	e := newIAMEnv(t, nil)
	e.iam.AddRole("OldRole")
	e.iam.AddRole("NewRole")
	e.create(t, "default", classSpec("OldRole", ""))
	e.reconcile(t, "default")

	class := e.get(t, "default")
	class.Spec.Role = "NewRole"
	if err := e.kube.Update(context.Background(), class); err != nil {
		t.Fatal(err)
	}
	before := len(e.iam.Requests())
	e.reconcile(t, "default")
	if diff := cmp.Diff([]string{"GetInstanceProfile ", "RemoveRoleFromInstanceProfile OldRole", "AddRoleToInstanceProfile NewRole"}, e.callsSince(before)); diff != "" {
		t.Errorf("IAM calls (-want,+got):\n%s", diff)
	}
	if ps := e.iam.InstanceProfiles(); len(ps) != 1 || !cmp.Equal(ps[0].Roles, []string{"NewRole"}) {
		t.Errorf("profiles after the change: %+v, want one holding NewRole", ps)
	}
	class = e.get(t, "default")
	if s, r, _ := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionTrue || r != ReasonInstanceProfileCreated {
		t.Errorf("InstanceProfileReady = %s %s, want True Created", s, r)
	}
}

// TestForeignProfileIsLeftAlone: a profile with our name but without our
// cluster's and class's tags is someone else's: it is neither changed nor
// deleted, the class is not Ready and says NotOwned, and deleting the class
// leaves the profile there.
func TestForeignProfileIsLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		tags map[string]string
	}{
		{"no tags at all", nil},
		{"another cluster's", map[string]string{TagCluster: "staging", TagNodeClass: "default"}},
		{"another class's", map[string]string{TagCluster: testCluster, TagNodeClass: "gpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newIAMEnv(t, nil)
			e.iam.AddRole("NodeRole")
			e.iam.AddRole("TheirRole")
			foreign, err := e.iam.AddInstanceProfile(iamfake.InstanceProfile{Name: "nodeforge_prod_default", Path: "/theirs/", Roles: []string{"TheirRole"}, Tags: tc.tags})
			if err != nil {
				t.Fatal(err)
			}
			e.create(t, "default", classSpec("NodeRole", ""))
			e.reconcile(t, "default")

			class := e.get(t, "default")
			if s, r, m := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionFalse || r != ReasonNotOwned || !strings.Contains(m, "not the one Nodeforge keeps") {
				t.Errorf("InstanceProfileReady = %s %s %q, want False NotOwned saying it is not ours", s, r, m)
			}
			if s, _, m := condition(class, ConditionReady); s != metav1.ConditionFalse || !strings.Contains(m, "nodeforge_prod_default exists without the tags") {
				t.Errorf("Ready = %s %q, want False naming the profile", s, m)
			}
			if class.Status.InstanceProfile != "" {
				t.Errorf("status.instanceProfile = %q, want none", class.Status.InstanceProfile)
			}
			if diff := cmp.Diff([]string{"GetInstanceProfile "}, e.callsSince(0)); diff != "" {
				t.Errorf("IAM calls (-want,+got):\n%s", diff)
			}

			if err := e.kube.Delete(context.Background(), class); err != nil {
				t.Fatal(err)
			}
			e.reconcile(t, "default")
			if err := e.kube.Get(context.Background(), client.ObjectKey{Name: "default"}, class); !apierrors.IsNotFound(err) {
				t.Errorf("class after deletion: %v, want it gone", err)
			}
			if diff := cmp.Diff([]iamfake.InstanceProfile{foreign}, e.iam.InstanceProfiles()); diff != "" {
				t.Errorf("the foreign profile changed (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestMissingRole: a role that does not exist leaves the class not Ready
// with RoleNotFound naming it; once the role exists, the next resolution
// puts it in the profile.
func TestMissingRole(t *testing.T) {
	e := newIAMEnv(t, nil)
	e.create(t, "default", classSpec("NoSuchRole", ""))
	e.reconcile(t, "default")
	class := e.get(t, "default")
	if s, r, m := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionFalse || r != ReasonRoleNotFound || !strings.Contains(m, "role NoSuchRole does not exist") {
		t.Errorf("InstanceProfileReady = %s %s %q, want False RoleNotFound naming NoSuchRole", s, r, m)
	}
	if s, _, m := condition(class, ConditionReady); s != metav1.ConditionFalse || !strings.Contains(m, "NoSuchRole") {
		t.Errorf("Ready = %s %q, want False naming the role", s, m)
	}
	if class.Status.InstanceProfile != "" {
		t.Errorf("status.instanceProfile = %q with no role in it", class.Status.InstanceProfile)
	}

	e.iam.AddRole("NoSuchRole")
	e.reconcile(t, "default")
	class = e.get(t, "default")
	if s, _, m := condition(class, ConditionReady); s != metav1.ConditionTrue {
		t.Errorf("Ready once the role exists = %s %q, want True", s, m)
	}
	if ps := e.iam.InstanceProfiles(); len(ps) != 1 || !cmp.Equal(ps[0].Roles, []string{"NoSuchRole"}) {
		t.Errorf("profiles: %+v", ps)
	}
	if n := e.iam.Calls("CreateInstanceProfile"); n != 1 {
		t.Errorf("%d CreateInstanceProfile calls, want 1: the first resolution's profile is reused", n)
	}
}

// TestAccessDenied: IAM refusing a call gives AccessDenied naming the
// permission and the resource, Ready False with the problem, and a retry
// soon rather than at the next refresh.
func TestAccessDenied(t *testing.T) {
	e := newIAMEnv(t, nil)
	e.iam.AddRole("NodeRole")
	e.iam.FailNext("CreateInstanceProfile", 1, iamfake.Status("AccessDenied"), "AccessDenied")
	e.create(t, "default", classSpec("NodeRole", ""))
	res := e.reconcile(t, "default")
	if res.RequeueAfter != 30*time.Second {
		t.Errorf("requeue after %s, want 30s", res.RequeueAfter)
	}
	class := e.get(t, "default")
	const want = "not allowed iam:CreateInstanceProfile on arn:aws:iam::000000000000:instance-profile/nodeforge/nodeforge_prod_default"
	if s, r, m := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionFalse || r != ReasonAccessDenied || !strings.Contains(m, want) {
		t.Errorf("InstanceProfileReady = %s %s %q, want False AccessDenied containing %q", s, r, m, want)
	}
	if s, _, m := condition(class, ConditionReady); s != metav1.ConditionFalse || !strings.Contains(m, want) {
		t.Errorf("Ready = %s %q, want False containing %q", s, m, want)
	}
	if len(e.iam.InstanceProfiles()) != 0 {
		t.Error("a denied create left a profile")
	}
	e.reconcile(t, "default")
	if s, _, m := condition(e.get(t, "default"), ConditionReady); s != metav1.ConditionTrue {
		t.Errorf("Ready once allowed = %s %q, want True", s, m)
	}
}

// TestCreateThatRacedCountsAsSuccess: a create that finds the profile
// already made (EntityAlreadyExists: another leader got there between our
// Get and Create) reads it again and uses it when it is ours.
func TestCreateThatRacedCountsAsSuccess(t *testing.T) {
	e := newIAMEnv(t, nil)
	e.iam.AddRole("NodeRole")
	if _, err := e.iam.AddInstanceProfile(iamfake.InstanceProfile{Name: "nodeforge_prod_default", Path: "/nodeforge/", Roles: []string{"NodeRole"}, Tags: ourTags("default")}); err != nil {
		t.Fatal(err)
	}
	// The first Get does not see it yet, as if the other writer's create
	// landed just after.
	e.iam.FailNext("GetInstanceProfile", 1, iamfake.Status("NoSuchEntity"), "NoSuchEntity")
	e.create(t, "default", classSpec("NodeRole", ""))
	e.reconcile(t, "default")
	class := e.get(t, "default")
	if s, _, m := condition(class, ConditionReady); s != metav1.ConditionTrue || class.Status.InstanceProfile != "nodeforge_prod_default" {
		t.Errorf("Ready = %s %q with profile %q, want True with nodeforge_prod_default", s, m, class.Status.InstanceProfile)
	}
	if diff := cmp.Diff([]string{"GetInstanceProfile ", "CreateInstanceProfile ", "GetInstanceProfile "}, e.callsSince(0)); diff != "" {
		t.Errorf("IAM calls (-want,+got):\n%s", diff)
	}
}

// TestOwnedProfileIsRetagged: a profile of ours that lost the
// kubernetes.io/cluster tag gets it back; one that has it is not tagged
// again.
func TestOwnedProfileIsRetagged(t *testing.T) {
	e := newIAMEnv(t, nil)
	e.iam.AddRole("NodeRole")
	if _, err := e.iam.AddInstanceProfile(iamfake.InstanceProfile{Name: "nodeforge_prod_default", Path: "/nodeforge/", Roles: []string{"NodeRole"},
		Tags: map[string]string{TagCluster: testCluster, TagNodeClass: "default"}}); err != nil {
		t.Fatal(err)
	}
	e.create(t, "default", classSpec("NodeRole", ""))
	e.reconcile(t, "default")
	e.reconcile(t, "default")
	if diff := cmp.Diff(ourTags("default"), e.iam.InstanceProfiles()[0].Tags); diff != "" {
		t.Errorf("tags (-want,+got):\n%s", diff)
	}
	if n := e.iam.Calls("TagInstanceProfile"); n != 1 {
		t.Errorf("%d TagInstanceProfile calls, want 1", n)
	}
	if s, _, m := condition(e.get(t, "default"), ConditionReady); s != metav1.ConditionTrue {
		t.Errorf("Ready = %s %q, want True", s, m)
	}
}

// TestDeletionWaitsForClaims: a class being deleted keeps its profile and
// its finalizer while NodeClaims refer to it, and says how many; once they
// are gone, the profile's role is taken out, the profile deleted and the
// finalizer removed.
func TestDeletionWaitsForClaims(t *testing.T) {
	ctx := context.Background()
	e := newIAMEnv(t, nil)
	e.iam.AddRole("NodeRole")
	e.create(t, "default", classSpec("NodeRole", ""))
	e.reconcile(t, "default")
	claim := func(name, class string) *v1alpha1.NodeClaim {
		return testobj.Claim(name).Class("EC2NodeClass", class).Obj()
	}
	claims := []*v1alpha1.NodeClaim{claim("default-a", "default"), claim("default-b", "default"), claim("gpu-a", "gpu")}
	for _, nc := range claims {
		if err := e.kube.Create(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.kube.Delete(ctx, e.get(t, "default")); err != nil {
		t.Fatal(err)
	}

	before := len(e.iam.Requests())
	res := e.reconcile(t, "default")
	if res.RequeueAfter <= 0 {
		t.Errorf("waiting for claims without a requeue: %+v", res)
	}
	class := e.get(t, "default")
	if class.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(class, v1alpha1.FinalizerTermination) {
		t.Fatalf("class deleting=%v finalizers=%v, want deleting and held", !class.DeletionTimestamp.IsZero(), class.Finalizers)
	}
	if s, r, m := condition(class, ConditionReady); s != metav1.ConditionFalse || r != ReasonTerminating || !strings.Contains(m, "waiting for 2 NodeClaims") || !strings.Contains(m, "default-a, default-b") {
		t.Errorf("Ready while waiting = %s %s %q, want False Terminating naming the 2 claims", s, r, m)
	}
	if calls := e.callsSince(before); len(calls) != 0 {
		t.Errorf("IAM calls while claims remain: %v", calls)
	}
	if len(e.iam.InstanceProfiles()) != 1 {
		t.Error("the profile went while claims still use it")
	}

	for _, nc := range claims[:2] {
		if err := e.kube.Delete(ctx, nc); err != nil {
			t.Fatal(err)
		}
	}
	e.reconcile(t, "default")
	if err := e.kube.Get(ctx, client.ObjectKey{Name: "default"}, class); !apierrors.IsNotFound(err) {
		t.Errorf("class after its claims went: %v (finalizers %v), want it gone", err, class.Finalizers)
	}
	if ps := e.iam.InstanceProfiles(); len(ps) != 0 {
		t.Errorf("profiles left: %+v", ps)
	}
	if diff := cmp.Diff([]string{"GetInstanceProfile ", "RemoveRoleFromInstanceProfile NodeRole", "DeleteInstanceProfile "}, e.callsSince(before)); diff != "" {
		t.Errorf("IAM calls of the cleanup (-want,+got):\n%s", diff)
	}
}

// TestDeletionOfAProfileAlreadyGone: a profile deleted by someone else
// counts as deleted; the class goes without a delete call.
func TestDeletionOfAProfileAlreadyGone(t *testing.T) {
	ctx := context.Background()
	e := newIAMEnv(t, nil)
	e.iam.AddRole("NodeRole")
	e.create(t, "default", classSpec("NodeRole", ""))
	e.reconcile(t, "default")
	iamc := e.provider.opts.IAM
	if _, err := iamc.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default"), RoleName: sdkaws.String("NodeRole")}); err != nil {
		t.Fatal(err)
	}
	if _, err := iamc.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String("nodeforge_prod_default")}); err != nil {
		t.Fatal(err)
	}
	if err := e.kube.Delete(ctx, e.get(t, "default")); err != nil {
		t.Fatal(err)
	}
	before := len(e.iam.Requests())
	e.reconcile(t, "default")
	if err := e.kube.Get(ctx, client.ObjectKey{Name: "default"}, &v1alpha1.EC2NodeClass{}); !apierrors.IsNotFound(err) {
		t.Errorf("class: %v, want it gone", err)
	}
	if diff := cmp.Diff([]string{"GetInstanceProfile "}, e.callsSince(before)); diff != "" {
		t.Errorf("IAM calls (-want,+got):\n%s", diff)
	}
}

// TestGivenInstanceProfileMakesNoIAMCalls: spec.instanceProfile is used as
// it is, with no IAM call while the class is in use. The class keeps the
// finalizer that deletes its launch templates; on deletion one
// GetInstanceProfile looks for a profile of ours (the class may have had a
// role), and a provisioner not allowed to look (IAM refuses) still lets
// the class go.
func TestGivenInstanceProfileMakesNoIAMCalls(t *testing.T) {
	ctx := context.Background()
	e := newIAMEnv(t, nil)
	e.create(t, "default", classSpec("", "MyProfile"))
	e.reconcile(t, "default")
	e.reconcile(t, "default")
	class := e.get(t, "default")
	if s, r, m := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionTrue || r != ReasonInstanceProfileGiven || m != "MyProfile" || class.Status.InstanceProfile != "MyProfile" {
		t.Errorf("InstanceProfileReady = %s %s %q, profile %q; want True Given MyProfile", s, r, m, class.Status.InstanceProfile)
	}
	if n := e.iam.Calls(""); n != 0 {
		t.Errorf("%d IAM calls while resolving: %v, want none", n, e.callsSince(0))
	}
	if !slices.Equal(class.Finalizers, []string{FinalizerNodeClass}) {
		t.Errorf("finalizers %v, want %s (launch templates)", class.Finalizers, FinalizerNodeClass)
	}
	e.iam.FailNext("GetInstanceProfile", 1, http.StatusForbidden, "AccessDenied")
	if err := e.kube.Delete(ctx, class); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "default")
	if err := e.kube.Get(ctx, client.ObjectKey{Name: "default"}, class); !apierrors.IsNotFound(err) {
		t.Errorf("class after deletion: %v, want it gone", err)
	}
	if diff := cmp.Diff([]string{"GetInstanceProfile "}, e.callsSince(0)); diff != "" {
		t.Errorf("IAM calls (-want,+got):\n%s", diff)
	}
}

// TestRoleWithoutIAM: a provider without an IAM client says a class with
// spec.role cannot be served; the class still goes when deleted.
func TestRoleWithoutIAM(t *testing.T) {
	ctx := context.Background()
	e := newIAMEnv(t, nil)
	e.provider.opts.IAM = nil
	e.create(t, "default", classSpec("NodeRole", ""))
	e.reconcile(t, "default")
	class := e.get(t, "default")
	if s, r, _ := condition(class, ConditionInstanceProfileReady); s != metav1.ConditionFalse || r != ReasonNoIAM {
		t.Errorf("InstanceProfileReady = %s %s, want False %s", s, r, ReasonNoIAM)
	}
	if err := e.kube.Delete(ctx, class); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t, "default")
	if err := e.kube.Get(ctx, client.ObjectKey{Name: "default"}, class); !apierrors.IsNotFound(err) {
		t.Errorf("class after deletion: %v, want it gone", err)
	}
}

// TestInstanceProfileName pins the naming rule and the reading of roles.
func TestInstanceProfileName(t *testing.T) {
	if got := InstanceProfileName("prod", "default"); got != "nodeforge_prod_default" {
		t.Errorf("short name = %s", got)
	}
	long := strings.Repeat("c", 100)
	a, b := InstanceProfileName(long, strings.Repeat("x", 60)), InstanceProfileName(long, strings.Repeat("x", 59)+"y")
	if len(a) != 128 || len(b) != 128 || a == b || !strings.HasPrefix(a, "nodeforge_"+long+"_xxx") {
		t.Errorf("long names %s (%d) and %s (%d): want 128 characters each, distinct, starting with the cluster", a, len(a), b, len(b))
	}
	if again := InstanceProfileName(long, strings.Repeat("x", 60)); again != a {
		t.Errorf("the name is not stable: %s then %s", a, again)
	}
	if exact := InstanceProfileName("c", strings.Repeat("x", 128-len("nodeforge_c_"))); len(exact) != 128 || strings.Contains(exact[len(exact)-11:], "_") {
		t.Errorf("a name of exactly 128 characters was changed: %s", exact)
	}
	for role, want := range map[string]string{
		"NodeRole": "NodeRole",
		"arn:aws:iam::123456789012:role/NodeRole":                "NodeRole",
		"arn:aws:iam::123456789012:role/teams/platform/NodeRole": "NodeRole",
		"arn:aws-cn:iam::123456789012:role/NodeRole":             "NodeRole",
	} {
		if got := RoleName(role); got != want {
			t.Errorf("RoleName(%s) = %s, want %s", role, got, want)
		}
	}
}
