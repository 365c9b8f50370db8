package aws

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// Launch templates are made per class, image and user data
// (ensureLaunchTemplate), so every change of a pool's labels or taints, a
// class's settings or its image makes new ones. An instance does not need
// its template once it is launched, so a template no launch of this
// provisioner has used for LaunchTemplateGrace, and older than that, is
// deleted, and so is every template of a class that is gone; a launch that
// needs a deleted template again makes it again. A template is
// Nodeforge's, and this cluster's, by its TagCluster tag.

// DefaultLaunchTemplateGrace is how long an unused launch template is kept.
const DefaultLaunchTemplateGrace = 30 * time.Minute

// templateNotFound reports whether err is EC2 saying a launch template
// does not exist.
func templateNotFound(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "InvalidLaunchTemplateName.NotFoundException" || api.ErrorCode() == "InvalidLaunchTemplateId.NotFound")
}

// forgetTemplate drops a template from what the provider knows to exist,
// so that the next launch needing it describes or makes it again.
func (p *Provider) forgetTemplate(name string) {
	p.mu.Lock()
	delete(p.templates, name)
	delete(p.templateUsed, name)
	p.mu.Unlock()
}

// clusterTemplates lists this cluster's launch templates.
func (p *Provider) clusterTemplates(ctx context.Context) ([]ec2types.LaunchTemplate, error) {
	var out []ec2types.LaunchTemplate
	pages := ec2.NewDescribeLaunchTemplatesPaginator(p.ec2, &ec2.DescribeLaunchTemplatesInput{
		Filters: []ec2types.Filter{{Name: sdkaws.String("tag:" + TagCluster), Values: []string{p.opts.ClusterName}}},
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeLaunchTemplates", err)
		}
		out = append(out, page.LaunchTemplates...)
	}
	return out, nil
}

func templateTag(lt ec2types.LaunchTemplate, key string) string {
	for _, t := range lt.Tags {
		if sdkaws.ToString(t.Key) == key {
			return sdkaws.ToString(t.Value)
		}
	}
	return ""
}

// deleteTemplate deletes one template; one already gone counts as deleted.
func (p *Provider) deleteTemplate(ctx context.Context, lt ec2types.LaunchTemplate, why string) error {
	name := sdkaws.ToString(lt.LaunchTemplateName)
	p.forgetTemplate(name)
	_, err := p.ec2.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: lt.LaunchTemplateId})
	if err != nil && !templateNotFound(err) {
		return classify("DeleteLaunchTemplate "+name, err)
	}
	klog.FromContext(ctx).Info("Deleted launch template", "launchTemplate", name, "ec2NodeClass", templateTag(lt, TagNodeClass), "reason", why)
	return nil
}

// DeleteLaunchTemplates deletes every launch template of the class, for a
// class being deleted once no claim uses it.
func (p *Provider) DeleteLaunchTemplates(ctx context.Context, class string) (int, error) {
	all, err := p.clusterTemplates(ctx)
	if err != nil {
		return 0, err
	}
	deleted := 0
	var errs []error
	for _, lt := range all {
		if templateTag(lt, TagNodeClass) != class {
			continue
		}
		if err := p.deleteTemplate(ctx, lt, "its EC2NodeClass is deleted"); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}

// CollectLaunchTemplates deletes this cluster's launch templates that are
// of no class in classes (the EC2NodeClasses that exist), and those no
// launch of this process has used for grace and made more than grace
// ago. It returns how many it deleted.
func (p *Provider) CollectLaunchTemplates(ctx context.Context, classes map[string]bool, grace time.Duration) (int, error) {
	all, err := p.clusterTemplates(ctx)
	if err != nil {
		return 0, err
	}
	now := p.now()
	deleted := 0
	var errs []error
	for _, lt := range all {
		name := sdkaws.ToString(lt.LaunchTemplateName)
		why := ""
		p.mu.Lock()
		used := p.templateUsed[name]
		p.mu.Unlock()
		switch {
		case !classes[templateTag(lt, TagNodeClass)]:
			why = "its EC2NodeClass is gone"
		case now.Sub(sdkaws.ToTime(lt.CreateTime)) > grace && now.Sub(used) > grace:
			why = fmt.Sprintf("no launch used it for %s", grace)
		default:
			continue
		}
		if err := p.deleteTemplate(ctx, lt, why); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}

// LaunchTemplateCollector runs CollectLaunchTemplates every Interval in the
// leader.
type LaunchTemplateCollector struct {
	kube     client.Reader
	provider *Provider
	// Interval between collections (default 5m); Grace how long an unused
	// template is kept (DefaultLaunchTemplateGrace).
	Interval, Grace time.Duration
	// Timeout bounds one collection (the provisioner's
	// --cloud-call-timeout); 0: none.
	Timeout time.Duration
}

// NewLaunchTemplateCollector collects provider's templates, reading the
// classes through kube.
func NewLaunchTemplateCollector(kube client.Reader, provider *Provider) *LaunchTemplateCollector {
	return &LaunchTemplateCollector{kube: kube, provider: provider, Interval: 5 * time.Minute, Grace: DefaultLaunchTemplateGrace}
}

// NeedLeaderElection: only the leader deletes.
func (c *LaunchTemplateCollector) NeedLeaderElection() bool { return true }

// Start collects until ctx ends.
func (c *LaunchTemplateCollector) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("collector", "launchtemplates")
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.Collect(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Collecting launch templates; will try again", "interval", c.Interval)
			}
		}
	}
}

// Collect runs one collection.
func (c *LaunchTemplateCollector) Collect(ctx context.Context) error {
	var list v1alpha1.EC2NodeClassList
	if err := c.kube.List(ctx, &list); err != nil {
		return fmt.Errorf("listing ec2nodeclasses: %w", err)
	}
	classes := map[string]bool{}
	for _, class := range list.Items {
		classes[class.Name] = true
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	n, err := c.provider.CollectLaunchTemplates(ctx, classes, c.Grace)
	if n > 0 {
		klog.FromContext(ctx).Info("Collected launch templates", "deleted", n, "grace", c.Grace)
	}
	return err
}
