package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/smithy-go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// An EC2NodeClass with spec.role gets an instance profile that Nodeforge
// makes, keeps holding that role, and deletes with the class, as Karpenter
// does for its EC2NodeClass. A profile is Nodeforge's only when it carries
// both TagCluster and TagNodeClass with this cluster's and this class's
// names: one that merely has the name is someone else's, and is never
// changed or deleted.

// InstanceProfilePath is the IAM path of every instance profile Nodeforge
// makes, so that a policy can scope the provisioner's IAM permissions to
// instance-profile/nodeforge/*, and an operator can list them all
// (aws iam list-instance-profiles --path-prefix /nodeforge/).
const InstanceProfilePath = "/nodeforge/"

// FinalizerNodeClass keeps an EC2NodeClass until no NodeClaim refers to
// it any more (the instances of those claims run with its instance
// profile), and then until its launch templates and the instance profile
// made for it are deleted.
const FinalizerNodeClass = v1alpha1.FinalizerTermination

// Reasons of the InstanceProfileReady condition.
const (
	// ReasonInstanceProfileGiven: spec.instanceProfile names the profile.
	ReasonInstanceProfileGiven = "Given"
	// ReasonInstanceProfileCreated: the profile was created, or its role
	// added or replaced, by this resolution.
	ReasonInstanceProfileCreated = "Created"
	// ReasonInstanceProfileResolved: the profile was there with the role.
	ReasonInstanceProfileResolved = "Resolved"
	// ReasonAccessDenied: the provisioner lacks an IAM permission; the
	// message names it.
	ReasonAccessDenied = "AccessDenied"
	// ReasonRoleNotFound: spec.role names no role.
	ReasonRoleNotFound = "RoleNotFound"
	// ReasonNotOwned: a profile of that name exists that Nodeforge did
	// not make for this class; it is left alone.
	ReasonNotOwned = "NotOwned"
	// ReasonResolutionFailed: an IAM call failed otherwise.
	ReasonResolutionFailed = "ResolutionFailed"
	// ReasonNoIAM: the provisioner has no IAM client.
	ReasonNoIAM = "IAMUnavailable"
	// ReasonTerminating is the Ready reason of a class being deleted.
	ReasonTerminating = "Terminating"
	// ReasonFinalizerNotAdded is the Ready reason of a class with
	// spec.role that the finalizer could not be added to: nothing is made
	// in IAM until it is there.
	ReasonFinalizerNotAdded = "FinalizerNotAdded"
)

// maxInstanceProfileName is IAM's limit on an instance profile's name.
const maxInstanceProfileName = 128

// InstanceProfileName is the name of the instance profile Nodeforge keeps
// for the EC2NodeClass class of cluster: "nodeforge_<cluster>_<class>".
// Every character of an EKS cluster name and of a Kubernetes object name
// is one IAM allows in a name, and a class name has no "_", so distinct
// classes and clusters get distinct names. When that is longer than IAM's
// 128 characters, it is cut to 117 and "_" and the first 10 hex digits of
// the SHA-256 of the whole name are appended: still stable, still distinct
// in practice, and still starting with the cluster's name.
func InstanceProfileName(cluster, class string) string {
	name := "nodeforge_" + cluster + "_" + class
	if len(name) <= maxInstanceProfileName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "_" + hex.EncodeToString(sum[:])[:10]
	return name[:maxInstanceProfileName-len(suffix)] + suffix
}

// RoleName is the name of the role spec.role names: the role's name as
// given, or the last segment of its ARN
// (arn:aws:iam::123456789012:role/path/NodeRole is NodeRole). An instance
// profile takes a role by name.
func RoleName(role string) string {
	if strings.HasPrefix(role, "arn:") {
		return role[strings.LastIndex(role, "/")+1:]
	}
	return role
}

// kubernetesClusterTag is the tag that marks a resource as a cluster's,
// with the value "owned", as the Kubernetes AWS integrations read it.
func kubernetesClusterTag(cluster string) string { return "kubernetes.io/cluster/" + cluster }

// instanceProfileTags are the tags of the class's profile.
func (p *Provider) instanceProfileTags(class string) map[string]string {
	return map[string]string{
		TagCluster:                               p.opts.ClusterName,
		TagNodeClass:                             class,
		kubernetesClusterTag(p.opts.ClusterName): "owned",
	}
}

// owns reports whether a profile's tags say Nodeforge made it for class.
func (p *Provider) owns(class string, tags []iamtypes.Tag) bool {
	var cluster, nodeClass bool
	for _, t := range tags {
		switch sdkaws.ToString(t.Key) {
		case TagCluster:
			cluster = sdkaws.ToString(t.Value) == p.opts.ClusterName
		case TagNodeClass:
			nodeClass = sdkaws.ToString(t.Value) == class
		}
	}
	return cluster && nodeClass
}

// profileState is what ensureInstanceProfile found and did: the profile to
// launch with when ready, and the InstanceProfileReady condition.
type profileState struct {
	name           string
	ready          bool
	reason, detail string
}

// ensureInstanceProfile makes sure the class's instance profile exists,
// is Nodeforge's for this class, and holds spec.role and no other role.
// It costs one GetInstanceProfile when nothing has to change; a create,
// a tag, a role removal or addition only when one is missing or wrong. It
// returns an error, besides the state saying what happened, when an IAM
// call failed: the caller retries soon. A missing role or a profile that
// is not ours is a state, not an error: the user has to act.
func (p *Provider) ensureInstanceProfile(ctx context.Context, class *v1alpha1.EC2NodeClass) (profileState, error) {
	name := InstanceProfileName(p.opts.ClusterName, class.Name)
	role := RoleName(class.Spec.Role)
	log := klog.FromContext(ctx).WithValues("ec2NodeClass", klog.KObj(class), "instanceProfile", name, "role", role)
	if p.opts.IAM == nil {
		return profileState{name: name, reason: ReasonNoIAM,
			detail: "spec.role needs an instance profile, and the provisioner was started without IAM access: set spec.instanceProfile instead"}, nil
	}
	api := p.opts.IAM
	profile, err := p.getInstanceProfile(ctx, name)
	created := false
	if errors.Is(err, cloudprovider.ErrNotFound) {
		var out *iam.CreateInstanceProfileOutput
		out, err = api.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{
			InstanceProfileName: sdkaws.String(name), Path: sdkaws.String(InstanceProfilePath), Tags: iamTags(p.instanceProfileTags(class.Name)),
		})
		err = classify("CreateInstanceProfile", err)
		switch {
		case err == nil:
			profile, created = out.InstanceProfile, true
			log.Info("Created instance profile", "path", InstanceProfilePath)
		case errors.Is(err, errAlreadyExists):
			// Another writer (an earlier leader) got there first:
			// what it made is judged like any other profile.
			profile, err = p.getInstanceProfile(ctx, name)
		}
	}
	if err != nil {
		return iamFailure(name, err)
	}
	if !p.owns(class.Name, profile.Tags) {
		log.Info("Instance profile exists and is not ours; leaving it alone", "path", sdkaws.ToString(profile.Path))
		return profileState{name: name, reason: ReasonNotOwned, detail: fmt.Sprintf(
			"instance profile %s exists without the tags %s=%s and %s=%s, so it is not the one Nodeforge keeps for this class; Nodeforge will not change or delete it: delete or rename it, or set spec.instanceProfile to use it as it is",
			name, TagCluster, p.opts.ClusterName, TagNodeClass, class.Name)}, nil
	}
	changed := created
	if !created && !hasTag(profile.Tags, kubernetesClusterTag(p.opts.ClusterName), "owned") {
		if _, err := api.TagInstanceProfile(ctx, &iam.TagInstanceProfileInput{InstanceProfileName: sdkaws.String(name),
			Tags: iamTags(p.instanceProfileTags(class.Name))}); err != nil {
			return iamFailure(name, classify("TagInstanceProfile", err))
		}
		log.Info("Tagged instance profile", "tag", kubernetesClusterTag(p.opts.ClusterName))
	}
	holds := false
	for _, r := range profile.Roles {
		// IAM's names are unique regardless of case, and it answers with
		// the role's own spelling.
		if strings.EqualFold(sdkaws.ToString(r.RoleName), role) {
			holds = true
			continue
		}
		// spec.role changed: the profile holds at most one role.
		old := sdkaws.ToString(r.RoleName)
		_, err := api.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: sdkaws.String(name), RoleName: sdkaws.String(old)})
		if err = classify("RemoveRoleFromInstanceProfile", err); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			return iamFailure(name, err)
		}
		log.Info("Removed role from instance profile", "previousRole", old)
		changed = true
	}
	if !holds {
		_, err := api.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: sdkaws.String(name), RoleName: sdkaws.String(role)})
		if err = classify("AddRoleToInstanceProfile", err); err != nil {
			if errors.Is(err, cloudprovider.ErrNotFound) {
				// The profile was just read, so what is missing is
				// the role.
				return profileState{name: name, reason: ReasonRoleNotFound, detail: fmt.Sprintf(
					"role %s does not exist (IAM: %s); create it, or fix spec.role", role, apiMessage(err))}, nil
			}
			return iamFailure(name, err)
		}
		log.Info("Added role to instance profile")
		changed = true
	}
	reason := ReasonInstanceProfileResolved
	if changed {
		reason = ReasonInstanceProfileCreated
	}
	return profileState{name: name, ready: true, reason: reason, detail: name}, nil
}

// getInstanceProfile reads a profile; ErrNotFound when there is none.
func (p *Provider) getInstanceProfile(ctx context.Context, name string) (*iamtypes.InstanceProfile, error) {
	out, err := p.opts.IAM.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: sdkaws.String(name)})
	if err != nil {
		return nil, classify("GetInstanceProfile", err)
	}
	return out.InstanceProfile, nil
}

// deniedPermission reads what IAM says it refused: "... is not authorized
// to perform: iam:CreateInstanceProfile on resource: arn:... because ...".
// A GetInstanceProfile of a profile that does not exist yet names the
// resource without an ARN ("on resource: instance profile NAME"): only an
// ARN is taken for the resource.
var deniedPermission = regexp.MustCompile(`not authorized to perform: (\S+)(?: on resource: (arn:\S+))?`)

// iamFailure is the state and the error of a failed IAM call; its detail
// names the missing permission when IAM refused one.
func iamFailure(name string, err error) (profileState, error) {
	var denied *cloudprovider.AccessDeniedError
	if errors.As(err, &denied) {
		permission, resource := "iam:"+denied.Op, "arn:aws:iam::<account>:instance-profile"+InstanceProfilePath+name
		if m := deniedPermission.FindStringSubmatch(apiMessage(err)); m != nil {
			permission = m[1]
			if m[2] != "" {
				resource = m[2]
			}
		}
		detail := fmt.Sprintf("the provisioner is not allowed %s on %s: add it to the provisioner's IAM policy (docs/aws.md)", permission, resource)
		return profileState{name: name, reason: ReasonAccessDenied, detail: detail}, fmt.Errorf("instance profile %s: %s: %w", name, detail, err)
	}
	return profileState{name: name, reason: ReasonResolutionFailed, detail: fmt.Sprintf("instance profile %s: %v", name, err)},
		fmt.Errorf("instance profile %s: %w", name, err)
}

// apiMessage is the message of the API error in err, or err's text.
func apiMessage(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorMessage()
	}
	return err.Error()
}

func hasTag(tags []iamtypes.Tag, key, value string) bool {
	for _, t := range tags {
		if sdkaws.ToString(t.Key) == key && sdkaws.ToString(t.Value) == value {
			return true
		}
	}
	return false
}

func iamTags(tags map[string]string) []iamtypes.Tag {
	out := make([]iamtypes.Tag, 0, len(tags))
	for _, k := range []string{TagCluster, TagNodeClass} {
		out = append(out, iamtypes.Tag{Key: sdkaws.String(k), Value: sdkaws.String(tags[k])})
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if k != TagCluster && k != TagNodeClass {
			out = append(out, iamtypes.Tag{Key: sdkaws.String(k), Value: sdkaws.String(tags[k])})
		}
	}
	return out
}

// deleteInstanceProfile deletes the class's instance profile if it is
// Nodeforge's for this class, first taking its role out, as IAM requires.
// A profile already gone counts as deleted; one that is not ours is left
// as it is.
func (p *Provider) deleteInstanceProfile(ctx context.Context, class *v1alpha1.EC2NodeClass) error {
	name := InstanceProfileName(p.opts.ClusterName, class.Name)
	log := klog.FromContext(ctx).WithValues("ec2NodeClass", klog.KObj(class), "instanceProfile", name)
	if p.opts.IAM == nil {
		return fmt.Errorf("instance profile %s cannot be deleted: the provisioner was started without IAM access", name)
	}
	profile, err := p.getInstanceProfile(ctx, name)
	switch {
	case errors.Is(err, cloudprovider.ErrNotFound):
		log.Info("Instance profile already gone")
		return nil
	case err != nil:
		return fmt.Errorf("instance profile %s: %w", name, err)
	case !p.owns(class.Name, profile.Tags):
		log.Info("Instance profile is not ours; leaving it")
		return nil
	}
	for _, r := range profile.Roles {
		_, err := p.opts.IAM.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: sdkaws.String(name), RoleName: r.RoleName})
		if err = classify("RemoveRoleFromInstanceProfile", err); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
			return fmt.Errorf("instance profile %s: %w", name, err)
		}
		log.Info("Removed role from instance profile", "role", sdkaws.ToString(r.RoleName))
	}
	_, err = p.opts.IAM.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: sdkaws.String(name)})
	if err = classify("DeleteInstanceProfile", err); err != nil && !errors.Is(err, cloudprovider.ErrNotFound) {
		return fmt.Errorf("instance profile %s: %w", name, err)
	}
	log.Info("Deleted instance profile")
	return nil
}

// addFinalizer puts FinalizerNodeClass on a class before anything is made
// for it (launch templates; an instance profile for spec.role), so that
// its deletion waits for the cleanup.
func (c *NodeClassController) addFinalizer(ctx context.Context, class *v1alpha1.EC2NodeClass) error {
	if controllerutil.ContainsFinalizer(class, FinalizerNodeClass) {
		return nil
	}
	orig := class.DeepCopy()
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(class, FinalizerNodeClass)
	if err := c.kube.Patch(ctx, class, patch); err != nil {
		err = fmt.Errorf("adding finalizer %s to ec2nodeclass %s: %w", FinalizerNodeClass, class.Name, err)
		controllerutil.RemoveFinalizer(class, FinalizerNodeClass)
		if class.Spec.Role == "" {
			return err // the caller resolves it all the same
		}
		// Say so on the class too, which would otherwise wait without a
		// word (the provisioner may lack update on ec2nodeclasses).
		meta.SetStatusCondition(&orig.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse,
			Reason: ReasonFinalizerNotAdded, Message: err.Error(), ObservedGeneration: orig.Generation})
		if uerr := c.kube.Status().Update(ctx, orig); uerr != nil {
			klog.FromContext(ctx).Error(uerr, "Could not report the missing finalizer", "ec2NodeClass", klog.KObj(orig))
		}
		return err
	}
	klog.FromContext(ctx).Info("Added finalizer", "ec2NodeClass", klog.KObj(class), "finalizer", FinalizerNodeClass)
	return nil
}

// terminatingRecheck is how often a class being deleted looks again for
// the claims that hold it, besides being woken when one is deleted.
const terminatingRecheck = 30 * time.Second

// finalize runs for a class being deleted: while NodeClaims still refer to
// it, it says so (Ready False, Terminating) and waits; then it deletes the
// instance profile made for it and lets the class go.
func (c *NodeClassController) finalize(ctx context.Context, class *v1alpha1.EC2NodeClass) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(class, FinalizerNodeClass) {
		return reconcile.Result{}, nil
	}
	log := klog.FromContext(ctx).WithValues("ec2NodeClass", klog.KObj(class))
	claims, err := c.claimsOf(ctx, class.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(claims) > 0 {
		msg := fmt.Sprintf("being deleted: waiting for %d NodeClaims that use this class to go (%s)", len(claims), strings.Join(firstN(claims, 5), ", "))
		log.Info("Waiting for nodeclaims before deleting ec2nodeclass", "nodeClaims", len(claims))
		cond := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonTerminating, Message: msg, ObservedGeneration: class.Generation}
		if old := meta.FindStatusCondition(class.Status.Conditions, ConditionReady); old == nil || old.Reason != cond.Reason || old.Message != cond.Message || old.Status != cond.Status {
			meta.SetStatusCondition(&class.Status.Conditions, cond)
			if err := c.kube.Status().Update(ctx, class); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{RequeueAfter: terminatingRecheck}, nil
	}
	n, err := c.provider.DeleteLaunchTemplates(ctx, class.Name)
	switch {
	case err != nil && cloudprovider.IsAccessDenied(err):
		// A policy without ec2:DeleteLaunchTemplate: the templates
		// cannot be deleted by anyone here, and holding the class would
		// not change that.
		log.Error(err, "Not allowed to delete the launch templates of ec2nodeclass; leaving them (add ec2:DeleteLaunchTemplate, docs/aws.md)", "deleted", n)
	case err != nil:
		log.Error(err, "Deleting the launch templates of ec2nodeclass failed; retrying", "deleted", n)
		return reconcile.Result{}, err
	}
	if c.provider.opts.IAM != nil {
		// A class without role may have had one: its profile goes too.
		// Without the IAM permissions for it (a user of instanceProfile
		// need not grant them) there is nothing of ours to delete.
		err := c.provider.deleteInstanceProfile(ctx, class)
		switch {
		case err != nil && class.Spec.Role == "" && cloudprovider.IsAccessDenied(err):
			log.Info("Not allowed to look for an instance profile of ours; the class has none", "reason", err.Error())
		case err != nil:
			log.Error(err, "Deleting the instance profile of ec2nodeclass failed; retrying")
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFromWithOptions(class.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(class, FinalizerNodeClass)
	if err := c.kube.Patch(ctx, class, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log.Info("Removed finalizer; ec2nodeclass can go", "finalizer", FinalizerNodeClass)
	return reconcile.Result{}, nil
}

// claimsOf returns the names of the NodeClaims whose nodeClassRef is the
// EC2NodeClass name, sorted.
func (c *NodeClassController) claimsOf(ctx context.Context, name string) ([]string, error) {
	// From the API server when the controller has a live reader: a claim
	// created a moment ago, not in the cache yet, holds the class too.
	var reader client.Reader = c.kube
	if c.Live != nil {
		reader = c.Live
	}
	var list v1alpha1.NodeClaimList
	if err := reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing nodeclaims of ec2nodeclass %s: %w", name, err)
	}
	var out []string
	for _, nc := range list.Items {
		if refersTo(nc.Spec.NodeClassRef, name) {
			out = append(out, nc.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func refersTo(ref v1alpha1.NodeClassReference, class string) bool {
	return ref.Kind == "EC2NodeClass" && ref.Name == class && (ref.Group == "" || ref.Group == v1alpha1.Group)
}

func firstN(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(names[:n:n], fmt.Sprintf("and %d more", len(names)-n))
}
