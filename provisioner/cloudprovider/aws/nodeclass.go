package aws

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Condition types of an EC2NodeClass.
const (
	ConditionReady                = "Ready"
	ConditionSubnetsReady         = "SubnetsReady"
	ConditionSecurityGroupsReady  = "SecurityGroupsReady"
	ConditionAMIsReady            = "AMIsReady"
	ConditionInstanceProfileReady = "InstanceProfileReady"
	// ConditionRefreshed is False, while the class stays Ready, when a
	// refresh failed and the class keeps what it resolved to before.
	ConditionRefreshed = "Refreshed"
)

// notReady says why a class cannot be launched from yet, or "".
func notReady(class *v1alpha1.EC2NodeClass) string {
	if ready, reason, message := readiness(class); !ready {
		return cmp.Or(message, reason)
	}
	return ""
}

// readiness reads the class's Ready condition, which NodeClassController
// sets once it has resolved the selector terms; when it is not True, a
// reason and a message say why.
func readiness(class *v1alpha1.EC2NodeClass) (ready bool, reason, message string) {
	cond := meta.FindStatusCondition(class.Status.Conditions, ConditionReady)
	switch {
	case cond == nil:
		return false, "NotResolvedYet", "its subnets, security groups and images have not been resolved yet"
	case cond.Status != metav1.ConditionTrue:
		return false, cond.Reason, cond.Message
	}
	return true, cond.Reason, cond.Message
}

// NodeClasses declares EC2NodeClass: ready once its selector terms have
// resolved (its Ready condition), drifted when its spec changes (but for
// its capacity reservation terms). What the selectors resolve to (subnets,
// security groups, images, reservations) is status, not spec, and not in
// the hash.
func (p *Provider) NodeClasses() []cloudprovider.NodeClass {
	return []cloudprovider.NodeClass{{
		Kind: "EC2NodeClass",
		New:  func() client.Object { return &v1alpha1.EC2NodeClass{} },
		Ready: func(o client.Object) (bool, string, string) {
			return readiness(o.(*v1alpha1.EC2NodeClass))
		},
		Hash: func(o client.Object) (string, error) {
			// Which reservations the class launches into says nothing
			// about the nodes it launched: a node outside a newly
			// selected reservation, or in one no longer selected, is
			// the node the class would launch otherwise.
			spec := o.(*v1alpha1.EC2NodeClass).Spec
			spec.CapacityReservationSelectorTerms = nil
			return cloudprovider.SpecHash(spec)
		},
		Drifted: func(o client.Object, nc *v1alpha1.NodeClaim) string {
			return p.imageDrifted(o.(*v1alpha1.EC2NodeClass), nc)
		},
		DriftInputs: func(o client.Object) (string, error) {
			return nodeshape.Hash(o.(*v1alpha1.EC2NodeClass).Status.AMIs)
		},
	}}
}

// NodeClassController resolves each EC2NodeClass's selector terms into its
// status, again every RefreshInterval, and says in its conditions what
// matched nothing.
type NodeClassController struct {
	kube     client.Client
	provider *Provider
	// RefreshInterval: images and subnets change under a class.
	RefreshInterval time.Duration
	// Timeout bounds one resolution (the provisioner's
	// --cloud-call-timeout); 0: none.
	Timeout time.Duration
	// Live, if set, reads the claims that hold a class being deleted
	// from the API server rather than the cache.
	Live client.Reader
}

// NewNodeClassController returns a controller resolving through provider.
func NewNodeClassController(kube client.Client, provider *Provider) *NodeClassController {
	return &NodeClassController{kube: kube, provider: provider, RefreshInterval: 5 * time.Minute}
}

// SetupWithManager registers the controller. A deleted NodeClaim wakes
// the class it refers to when that class is being deleted and waits for
// its claims to go.
func (c *NodeClassController) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("ec2nodeclass").For(&v1alpha1.EC2NodeClass{}).
		Watches(&v1alpha1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(c.deletingClassOf),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(ctrlevent.CreateEvent) bool { return false },
				UpdateFunc:  func(ctrlevent.UpdateEvent) bool { return false },
				GenericFunc: func(ctrlevent.GenericEvent) bool { return false },
			})).
		Complete(c)
}

// deletingClassOf maps a deleted NodeClaim to its EC2NodeClass if that
// class is being deleted, and to nothing otherwise: a class that is not
// being deleted has no use for the news.
func (c *NodeClassController) deletingClassOf(ctx context.Context, o client.Object) []reconcile.Request {
	nc, ok := o.(*v1alpha1.NodeClaim)
	if !ok || nc.Spec.NodeClassRef.Kind != "EC2NodeClass" {
		return nil
	}
	var class v1alpha1.EC2NodeClass
	if err := c.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodeClassRef.Name}, &class); err != nil || class.DeletionTimestamp.IsZero() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(&class)}}
}

// Reconcile resolves one class.
func (c *NodeClassController) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var class v1alpha1.EC2NodeClass
	if err := c.kube.Get(ctx, req.NamespacedName, &class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !class.DeletionTimestamp.IsZero() {
		return c.finalize(ctx, &class)
	}
	if err := c.addFinalizer(ctx, &class); err != nil {
		if class.Spec.Role != "" {
			return reconcile.Result{}, err // no profile without the finalizer that deletes it
		}
		// Its launch templates are collected once it is gone all the same.
		klog.FromContext(ctx).Error(err, "Resolving ec2nodeclass without its finalizer", "ec2NodeClass", klog.KObj(&class))
	}
	var status v1alpha1.EC2NodeClassStatus
	err := cloudprovider.Within(ctx, c.Timeout, "EC2NodeClass resolution", func(ctx context.Context) (err error) {
		status, err = c.provider.Resolve(ctx, &class)
		return err
	})
	switch {
	case err != nil && readyForSpec(&class):
		// A failed refresh of a class that resolved for this spec: what
		// it resolved to still launches. Keep it, say so, and try again
		// soon, rather than take its pools offline for one throttled call.
		klog.FromContext(ctx).Error(err, "Refreshing ec2nodeclass failed; keeping what it resolved to", "ec2NodeClass", klog.KObj(&class))
		status = *class.Status.DeepCopy()
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: ConditionRefreshed, Status: metav1.ConditionFalse, Reason: "ResolutionFailed", Message: err.Error(), ObservedGeneration: class.Generation})
	case err != nil:
		// A failed call, not an empty answer: say so and try again soon.
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: "ResolutionFailed", Message: err.Error(), ObservedGeneration: class.Generation})
	default:
		meta.RemoveStatusCondition(&status.Conditions, ConditionRefreshed)
	}
	if !equality.Semantic.DeepEqual(status, class.Status) {
		class.Status = status
		if uerr := c.kube.Status().Update(ctx, &class); uerr != nil {
			return reconcile.Result{}, uerr
		}
		ready := meta.FindStatusCondition(status.Conditions, ConditionReady)
		klog.FromContext(ctx).Info("Resolved ec2nodeclass", "ec2NodeClass", klog.KObj(&class), "ready", ready.Status, "reason", ready.Reason,
			"subnets", len(status.Subnets), "securityGroups", len(status.SecurityGroups), "amis", amiIDs(status.AMIs),
			"capacityReservations", len(status.CapacityReservations), "message", ready.Message)
	}
	if err != nil {
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return reconcile.Result{RequeueAfter: c.RefreshInterval}, nil
}

// readyForSpec: the class's Ready condition is True for its current spec.
func readyForSpec(class *v1alpha1.EC2NodeClass) bool {
	cond := meta.FindStatusCondition(class.Status.Conditions, ConditionReady)
	return cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == class.Generation
}

func amiIDs(amis []v1alpha1.ResolvedAMI) []string {
	out := make([]string, 0, len(amis))
	for _, a := range amis {
		if a.Variant != "" {
			out = append(out, a.Architecture+"/"+a.Variant+"="+a.ID)
		} else {
			out = append(out, a.Architecture+"="+a.ID)
		}
	}
	return out
}

// Resolve finds the class's subnets, security groups, images and capacity
// reservations (reservations.go), and its instance profile (making it for
// spec.role: instanceprofile.go), checks
// with EC2's DryRun that a launch of what resolved is allowed (dryrun.go),
// and returns the status that says so. It returns an error only when a call
// failed; selectors that match nothing, a missing role or a profile that
// is not Nodeforge's give a status that is not Ready and says which.
func (p *Provider) Resolve(ctx context.Context, class *v1alpha1.EC2NodeClass) (v1alpha1.EC2NodeClassStatus, error) {
	status := v1alpha1.EC2NodeClassStatus{Conditions: slices.Clone(class.Status.Conditions)}
	set := func(typ string, ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: class.Generation})
	}
	problems, err := p.resolveSelected(ctx, class, &status, set)
	if err != nil {
		return status, err
	}
	if err := p.resolveReservations(ctx, class, &status, set); err != nil {
		return status, err
	}
	problem, err := p.resolveInstanceProfile(ctx, class, &status, set)
	if err != nil {
		return status, err
	}
	if problem != "" {
		problems = append(problems, problem)
	}
	// What resolved is checked with EC2's DryRun (dryrun.go): a policy
	// that refuses the launch makes the class not Ready now, rather than
	// its first claim wait out its registration TTL.
	reason := "NotResolved"
	if len(problems) == 0 {
		denied, err := p.checkLaunchAllowed(ctx, class, &status, set)
		if err != nil {
			return status, err
		}
		if denied != "" {
			problems, reason = append(problems, denied), "LaunchDenied"
		}
	} else {
		// Nothing to check until the class resolves.
		meta.RemoveStatusCondition(&status.Conditions, ConditionLaunchAllowed)
		meta.RemoveStatusCondition(&status.Conditions, ConditionSpotLaunchAllowed)
	}
	if ok, why, msg, known := p.maxPodsAddressable(ctx, class); known {
		set(ConditionMaxPodsAddressable, ok, why, msg)
	}
	if ok, why, msg, known := p.pricesKnown(ctx); known {
		set(ConditionOnDemandPricesKnown, ok, why, msg)
	}
	if len(problems) > 0 {
		set(ConditionReady, false, reason, strings.Join(problems, "; "))
	} else {
		set(ConditionReady, true, "Ready", "")
	}
	return status, nil
}

// resolveSelected finds what the class's selector terms select (subnets,
// security groups and images) into status, sets the condition of each,
// and returns what matched nothing.
func (p *Provider) resolveSelected(ctx context.Context, class *v1alpha1.EC2NodeClass, status *v1alpha1.EC2NodeClassStatus, set func(typ string, ok bool, reason, msg string)) ([]string, error) {
	var problems []string
	subnets, err := p.subnets(ctx, class.Spec.SubnetSelectorTerms)
	if err != nil {
		return nil, err
	}
	status.Subnets, status.SubnetCount = subnets, int32(len(subnets))
	if len(subnets) == 0 {
		problems = append(problems, "no subnet matches subnetSelectorTerms")
		set(ConditionSubnetsReady, false, "NoneMatched", problems[len(problems)-1])
	} else {
		set(ConditionSubnetsReady, true, "Resolved", fmt.Sprintf("%d subnets", len(subnets)))
	}
	groups, err := p.securityGroups(ctx, class.Spec.SecurityGroupSelectorTerms)
	if err != nil {
		return nil, err
	}
	status.SecurityGroups = groups
	if len(groups) == 0 {
		problems = append(problems, "no security group matches securityGroupSelectorTerms")
		set(ConditionSecurityGroupsReady, false, "NoneMatched", problems[len(problems)-1])
	} else {
		set(ConditionSecurityGroupsReady, true, "Resolved", fmt.Sprintf("%d security groups", len(groups)))
	}
	amis, note, err := p.images(ctx, class.Spec.AMISelectorTerms)
	if err != nil {
		return nil, err
	}
	status.AMIs = amis
	if len(amis) == 0 {
		problems = append(problems, "no image matches amiSelectorTerms"+p.aliasHint(class.Spec.AMISelectorTerms))
		set(ConditionAMIsReady, false, "NoneMatched", problems[len(problems)-1])
	} else {
		set(ConditionAMIsReady, true, "Resolved", strings.Join(amiIDs(amis), ", ")+note)
	}
	return problems, nil
}

// resolveInstanceProfile puts the class's instance profile in status, the
// one spec.instanceProfile names or the one made for spec.role, sets its
// condition, and returns why it is not ready, or "".
func (p *Provider) resolveInstanceProfile(ctx context.Context, class *v1alpha1.EC2NodeClass, status *v1alpha1.EC2NodeClassStatus, set func(typ string, ok bool, reason, msg string)) (string, error) {
	if class.Spec.InstanceProfile != "" {
		status.InstanceProfile = class.Spec.InstanceProfile
		set(ConditionInstanceProfileReady, true, ReasonInstanceProfileGiven, class.Spec.InstanceProfile)
		return "", nil
	}
	ip, err := p.ensureInstanceProfile(ctx, class)
	set(ConditionInstanceProfileReady, ip.ready, ip.reason, ip.detail)
	if err != nil {
		return "", err
	}
	if !ip.ready {
		return ip.detail, nil
	}
	status.InstanceProfile = ip.name
	return "", nil
}

// checkLaunchAllowed dry-runs a launch of what resolved into status, sets
// the conditions that say whether EC2 allows it, on demand and on spot,
// and returns why a launch is denied, or "".
func (p *Provider) checkLaunchAllowed(ctx context.Context, class *v1alpha1.EC2NodeClass, status *v1alpha1.EC2NodeClassStatus, set func(typ string, ok bool, reason, msg string)) (string, error) {
	check, err := p.checkLaunch(ctx, class, *status)
	if err != nil {
		return "", err
	}
	if check.denied != "" {
		set(ConditionLaunchAllowed, false, check.deniedReason, check.denied)
		meta.RemoveStatusCondition(&status.Conditions, ConditionSpotLaunchAllowed)
		return check.denied, nil
	}
	set(ConditionLaunchAllowed, true, "DryRunSucceeded", "EC2 allows dry runs of CreateLaunchTemplate, RunInstances and CreateFleet with the class's settings")
	if check.spot != "" {
		set(ConditionSpotLaunchAllowed, false, check.spotReason, check.spot)
	} else {
		set(ConditionSpotLaunchAllowed, true, "DryRunSucceeded", "")
	}
	return "", nil
}

func (p *Provider) aliasHint(terms []v1alpha1.AMISelectorTerm) string {
	for _, t := range terms {
		if t.Alias != "" && p.opts.SSM != nil {
			return fmt.Sprintf(" (alias %s reads the SSM parameter %s and its siblings in %s)", t.Alias, aliasImages(t.Alias, p.opts.KubernetesVersion)[0].param, p.opts.Region)
		}
		if t.Alias != "" {
			return fmt.Sprintf(" (alias %s looks for %s in %s)", t.Alias, aliasNamePattern(t.Alias, p.opts.KubernetesVersion, "x86_64"), p.opts.Region)
		}
	}
	return ""
}

// tagFilters turns selector tags into EC2 filters: "tag:KEY" for a value,
// "tag-key" for the wildcard "*".
func tagFilters(tags map[string]string) []ec2types.Filter {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []ec2types.Filter
	for _, k := range keys {
		if tags[k] == "*" {
			out = append(out, ec2types.Filter{Name: sdkaws.String("tag-key"), Values: []string{k}})
		} else {
			out = append(out, ec2types.Filter{Name: sdkaws.String("tag:" + k), Values: []string{tags[k]}})
		}
	}
	return out
}

func (p *Provider) subnets(ctx context.Context, terms []v1alpha1.SelectorTerm) ([]v1alpha1.ResolvedSubnet, error) {
	found := map[string]v1alpha1.ResolvedSubnet{}
	for _, t := range terms {
		in := &ec2.DescribeSubnetsInput{Filters: tagFilters(t.Tags)}
		if t.ID != "" {
			in.Filters = []ec2types.Filter{{Name: sdkaws.String("subnet-id"), Values: []string{t.ID}}}
		}
		pages := ec2.NewDescribeSubnetsPaginator(p.ec2, in)
		for pages.HasMorePages() {
			seq := p.subnetRooms.begin()
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, classify("DescribeSubnets", err)
			}
			// Launches choose subnets by these free addresses too
			// (subnets.go), without a call of their own for a while.
			p.subnetRooms.observe(p.now(), seq, nil, page.Subnets)
			for _, s := range page.Subnets {
				found[sdkaws.ToString(s.SubnetId)] = v1alpha1.ResolvedSubnet{ID: sdkaws.ToString(s.SubnetId), Zone: sdkaws.ToString(s.AvailabilityZone), ZoneID: sdkaws.ToString(s.AvailabilityZoneId)}
			}
		}
	}
	out := make([]v1alpha1.ResolvedSubnet, 0, len(found))
	for _, s := range found {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b v1alpha1.ResolvedSubnet) int {
		return cmp.Or(cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

func (p *Provider) securityGroups(ctx context.Context, terms []v1alpha1.SecurityGroupSelectorTerm) ([]v1alpha1.ResolvedSecurityGroup, error) {
	found := map[string]v1alpha1.ResolvedSecurityGroup{}
	for _, t := range terms {
		in := &ec2.DescribeSecurityGroupsInput{Filters: tagFilters(t.Tags)}
		switch {
		case t.ID != "":
			in.Filters = []ec2types.Filter{{Name: sdkaws.String("group-id"), Values: []string{t.ID}}}
		case t.Name != "":
			in.Filters = []ec2types.Filter{{Name: sdkaws.String("group-name"), Values: []string{t.Name}}}
		}
		pages := ec2.NewDescribeSecurityGroupsPaginator(p.ec2, in)
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, classify("DescribeSecurityGroups", err)
			}
			for _, g := range page.SecurityGroups {
				found[sdkaws.ToString(g.GroupId)] = v1alpha1.ResolvedSecurityGroup{ID: sdkaws.ToString(g.GroupId), Name: sdkaws.ToString(g.GroupName)}
			}
		}
	}
	out := make([]v1alpha1.ResolvedSecurityGroup, 0, len(found))
	for _, g := range found {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b v1alpha1.ResolvedSecurityGroup) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// aliasNamePattern is the name of the EKS-optimised AL2023 image for a
// Kubernetes version and architecture, as Amazon publishes them
// ("amazon-eks-node-al2023-x86_64-standard-1.37-v20261101"); "latest" takes
// the newest release.
func aliasNamePattern(alias, kubernetesVersion, ec2Arch string) string {
	_, version, _ := strings.Cut(alias, "@")
	if version == "latest" {
		version = "v*"
	}
	return fmt.Sprintf("amazon-eks-node-al2023-%s-standard-%s-%s", ec2Arch, kubernetesVersion, version)
}

// images resolves the AMI terms to the newest available image of each
// architecture among all that match.
//
// An alias resolves through SSM (images.go); where the provisioner may not
// read the parameters (a policy without ssm:GetParameters), it finds the
// standard image by name instead, and note says so for the class's
// AMIsReady condition.
func (p *Provider) images(ctx context.Context, terms []v1alpha1.AMISelectorTerm) (amis []v1alpha1.ResolvedAMI, note string, err error) {
	// An alias is the only term of its class (the API server says so).
	if len(terms) == 1 && terms[0].Alias != "" && p.opts.SSM != nil {
		amis, err := p.aliasImagesFromSSM(ctx, terms[0].Alias)
		if !cloudprovider.IsAccessDenied(err) {
			return amis, "", err
		}
		klog.FromContext(ctx).Error(err, "Not allowed to read the EKS-optimised images' SSM parameters; finding the standard image by name", "alias", terms[0].Alias)
		note = "; standard images only, found by name: the provisioner may not read the SSM parameters (ssm:GetParameters on arn:aws:ssm:" + p.opts.Region + "::parameter/aws/service/eks/optimized-ami/*), so GPU and Neuron types are not offered"
	}
	amis, err = p.imagesByTerms(ctx, terms)
	return amis, note, err
}

// imagesByTerms resolves the terms with DescribeImages.
func (p *Provider) imagesByTerms(ctx context.Context, terms []v1alpha1.AMISelectorTerm) ([]v1alpha1.ResolvedAMI, error) {
	var inputs []*ec2.DescribeImagesInput
	for _, t := range terms {
		switch {
		case t.Alias != "":
			for _, arch := range []string{"x86_64", "arm64"} {
				inputs = append(inputs, &ec2.DescribeImagesInput{Owners: []string{"amazon"}, Filters: []ec2types.Filter{
					{Name: sdkaws.String("name"), Values: []string{aliasNamePattern(t.Alias, p.opts.KubernetesVersion, arch)}},
					{Name: sdkaws.String("architecture"), Values: []string{arch}},
				}})
			}
		case t.ID != "":
			inputs = append(inputs, &ec2.DescribeImagesInput{Filters: []ec2types.Filter{{Name: sdkaws.String("image-id"), Values: []string{t.ID}}}})
		default:
			in := &ec2.DescribeImagesInput{Filters: tagFilters(t.Tags), Owners: []string{"self", "amazon"}}
			if t.Owner != "" {
				in.Owners = []string{t.Owner}
			}
			if t.Name != "" {
				in.Filters = append(in.Filters, ec2types.Filter{Name: sdkaws.String("name"), Values: []string{t.Name}})
			}
			inputs = append(inputs, in)
		}
	}
	newest := map[string]ec2types.Image{}
	for _, in := range inputs {
		in.Filters = append(in.Filters, ec2types.Filter{Name: sdkaws.String("state"), Values: []string{"available"}})
		pages := ec2.NewDescribeImagesPaginator(p.ec2, in)
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, classify("DescribeImages", err)
			}
			for _, img := range page.Images {
				arch := map[ec2types.ArchitectureValues]string{ec2types.ArchitectureValuesX8664: "amd64", ec2types.ArchitectureValuesArm64: "arm64"}[img.Architecture]
				if arch == "" {
					continue
				}
				if cur, ok := newest[arch]; !ok || sdkaws.ToString(img.CreationDate) > sdkaws.ToString(cur.CreationDate) {
					newest[arch] = img
				}
			}
		}
	}
	var out []v1alpha1.ResolvedAMI
	for _, arch := range []string{"amd64", "arm64"} {
		if img, ok := newest[arch]; ok {
			ami := v1alpha1.ResolvedAMI{ID: sdkaws.ToString(img.ImageId), Name: sdkaws.ToString(img.Name), Architecture: arch}
			if len(terms) == 1 && terms[0].Alias != "" {
				// Found by name without SSM: the standard image only.
				ami.Variant = VariantStandard
			}
			out = append(out, ami)
		}
	}
	return out, nil
}
