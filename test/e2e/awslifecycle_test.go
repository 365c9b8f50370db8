package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
)

// TestAWSLifecycleLeavesNothing walks a class's whole life on the AWS
// provider, against fakes that speak EC2's, IAM's, SSM's, EKS's and SQS's
// wire protocols (the provisioner found the cluster through EKS): a class with a role gets its instance profile and launches
// with it; AWS publishes a newer recommended image and the node drifts to
// it; then the uninstall steps of docs/install.md, run with kubectl as a
// user would, leave no instance, launch template, instance profile or
// queue behind. It logs the requests each fake received.
func TestAWSLifecycleLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "aws", AWSRegistrationDelay: time.Second})
	const name = "life"
	var def v1alpha1.EC2NodeClass
	poll(t, "the sandbox's default EC2NodeClass", func() (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Name: "default"}, &def) == nil, nil
	})
	class := &v1alpha1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *def.Spec.DeepCopy()}
	class.Spec.InstanceProfile, class.Spec.Role = "", sandbox.NodeRole
	if err := kube.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	profile := aws.InstanceProfileName("sandbox", name)
	poll(t, "EC2NodeClass life Ready with its instance profile", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(class), class); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(class.Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue && class.Status.InstanceProfile == profile, nil
	})
	if got := sb.IAM.InstanceProfiles(); len(got) != 1 || got[0].Name != profile || got[0].Path != aws.InstanceProfilePath || !slices.Equal(got[0].Roles, []string{sandbox.NodeRole}) {
		t.Fatalf("instance profiles %+v, want %s under %s holding %s", got, profile, aws.InstanceProfilePath, sandbox.NodeRole)
	}

	pool := poolFromDefault(t, kube, name, func(np *v1alpha1.NodePool) {
		np.Spec.Template.Spec.NodeClassRef.Name = name
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{v1alpha1.CapacityTypeOnDemand}},
		}
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1", Reasons: []v1alpha1.DisruptionReason{"Drifted"}}}
	})
	driftWorkload(t, cs, pool.Name, 1)
	var old v1alpha1.NodeClaim
	poll(t, "the pod Running and its claim Initialized", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+name)
		if err != nil || n != 1 {
			return false, err
		}
		claims, err := poolClaims(ctx, kube, name)
		if err != nil || len(claims) != 1 || claims[0].Status.Phase != v1alpha1.NodeClaimInitialized {
			return false, err
		}
		old = claims[0]
		return true, nil
	})
	standard := imageOf(class, "amd64", "standard")
	if old.Status.ImageID == "" || old.Status.ImageID != standard {
		t.Fatalf("claim %s launched from image %q, want the class's standard amd64 image %q", old.Name, old.Status.ImageID, standard)
	}
	for _, lt := range sb.EC2.LaunchTemplates() {
		if lt.Tags[aws.TagNodeClass] == name && lt.IAMInstanceProfileName != profile {
			t.Errorf("launch template %s launches with instance profile %q, want %s", lt.Name, lt.IAMInstanceProfileName, profile)
		}
	}

	// AWS publishes a newer standard image; the class resolves to it at
	// its next refresh, which an edit of the class brings forward.
	const newer = "ami-0e7a1d2c3b4f50099"
	sb.EC2.AddImage(ec2fake.Image{ID: newer, Name: "amazon-eks-node-al2023-x86_64-standard-1.37-v20261201",
		OwnerID: ec2fake.EKSAccountID, OwnerAlias: "amazon", Architecture: "x86_64", State: "available", Public: true})
	sb.SSM.Put(ssmfake.RecommendedImageIDParameter("1.37", "x86_64", "standard"), newer)
	update(t, kube, class, func() {
		class.Annotations = map[string]string{"example.com/touched": "new image"}
	})
	poll(t, "the old claim replaced by one of the new image, the pod Running on it", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, name)
		if err != nil || len(claims) != 1 || claims[0].Name == old.Name || claims[0].Status.ImageID != newer {
			return false, err
		}
		n, err := runningPods(ctx, cs, "app="+name)
		return n == 1, err
	})
	if note := disruptionEvent(t, cs, old.Name, "Drifted"); !strings.Contains(note, "image "+standard+" is not the one EC2NodeClass life now launches m5.large from ("+newer) {
		t.Errorf("Disrupting Event for Drifted on %s: %q, want it to name the old image", old.Name, note)
	}

	// Uninstall, as docs/install.md says (the chart is the sandbox's own).
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", sb.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	kubectl("delete", "deployment", name)
	kubectl("delete", "nodepools.nodeforge.dev", "--all")
	kubectl("wait", "--for=delete", "nodeclaims.nodeforge.dev", "--all", "--timeout=5m")
	kubectl("delete", "ec2nodeclasses.nodeforge.dev", "--all")
	kubectl("wait", "--for=delete", "ec2nodeclasses.nodeforge.dev", "--all", "--timeout=5m")
	q := sqs.New(sqs.Options{Region: "us-west-2", BaseEndpoint: sdkaws.String(sb.SQSURL()),
		Credentials: credentials.NewStaticCredentialsProvider("AKIASANDBOX", "sandbox", "")})
	url, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String(sandbox.InterruptionQueue)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}

	live := 0
	for _, in := range sb.EC2.Instances() {
		if in.State != "terminated" && in.State != "shutting-down" {
			live++
			t.Errorf("instance %s (%s) left %s", in.ID, in.Tags[aws.TagNodeClaim], in.State)
		}
	}
	if lts := sb.EC2.LaunchTemplates(); len(lts) != 0 {
		t.Errorf("%d launch templates left: %v", len(lts), lts)
	}
	if ps := sb.IAM.InstanceProfiles(); len(ps) != 0 {
		t.Errorf("%d instance profiles left: %+v", len(ps), ps)
	}
	_, err = q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: sdkaws.String(sandbox.InterruptionQueue)})
	if !errors.As(err, new(*sqstypes.QueueDoesNotExist)) {
		t.Errorf("the interruption queue after its deletion: %v, want QueueDoesNotExist", err)
	}
	var eks, sqsActions []string
	for _, r := range sb.EKS.Requests() {
		eks = append(eks, r.Action)
	}
	for _, r := range sb.SQS.Requests() {
		sqsActions = append(sqsActions, r.Action)
	}
	t.Logf("left: %d instances, %d launch templates, %d instance profiles, no queue; requests: EC2 %s; IAM %s; SSM %s; EKS %s; SQS %s",
		live, len(sb.EC2.LaunchTemplates()), len(sb.IAM.InstanceProfiles()),
		countActions(ec2Actions(sb.EC2.Requests())), countActions(iamActions(sb)), countActions(ssmActions(sb)), countActions(eks), countActions(sqsActions))
}

// imageOf is the class's image for an architecture and variant.
func imageOf(class *v1alpha1.EC2NodeClass, arch, variant string) string {
	for _, a := range class.Status.AMIs {
		if a.Architecture == arch && a.Variant == variant {
			return a.ID
		}
	}
	return ""
}

func ec2Actions(reqs []ec2fake.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Action
	}
	return out
}

func iamActions(sb *sandbox.Sandbox) []string {
	var out []string
	for _, r := range sb.IAM.Requests() {
		out = append(out, r.Action)
	}
	return out
}

func ssmActions(sb *sandbox.Sandbox) []string {
	var out []string
	for _, r := range sb.SSM.Requests() {
		out = append(out, r.Action)
	}
	return out
}

// countActions is "Action×n, …", sorted.
func countActions(actions []string) string {
	n := map[string]int{}
	for _, a := range actions {
		n[a]++
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s×%d", a, n[a]))
	}
	return strings.Join(parts, ", ")
}
