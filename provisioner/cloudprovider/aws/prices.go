package aws

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// maxNamedTypes bounds the instance types an event or log line names; an
// event's note must stay under 1 KB.
const maxNamedTypes = 12

// priceGaps are the instance types one InstanceTypes call offered on
// demand without their region's own price.
type priceGaps struct {
	region        string
	standInRegion string
	// tableHasRegion: the table has figures of the region's own.
	tableHasRegion bool
	standIn        map[string]bool // priced with standInRegion's figure
	unknown        map[string]bool // priced pricing.UnknownPrice
}

// newPriceGaps starts the gaps of one InstanceTypes call.
func (p *Provider) newPriceGaps() priceGaps {
	g := priceGaps{region: p.opts.Region}
	g.standInRegion, _ = p.prices.StandIn(p.opts.Region)
	g.tableHasRegion = g.standInRegion == "" && slices.Contains(p.prices.Regions(), p.opts.Region)
	return g
}

func (g *priceGaps) add(instanceType string, source priceSource) {
	switch source {
	case priceStandIn:
		if g.standIn == nil {
			g.standIn = map[string]bool{}
		}
		g.standIn[instanceType] = true
	case priceUnknown:
		if g.unknown == nil {
			g.unknown = map[string]bool{}
		}
		g.unknown[instanceType] = true
	}
}

// message says which types are priced how, and why, for people.
func (g *priceGaps) message() string {
	var parts []string
	if len(g.standIn) > 0 {
		parts = append(parts, fmt.Sprintf("%d instance types are offered on demand at %s's prices, standing in to keep their cheapest-first order "+
			"(the price table has no %s prices; it gets them from the AWS Pricing API, or from a newer build): %s",
			len(g.standIn), g.standInRegion, g.region, names(g.standIn)))
	}
	if len(g.unknown) > 0 {
		var why string
		switch {
		case g.standInRegion != "":
			why = fmt.Sprintf("in the price table neither for %s nor for %s, standing in", g.region, g.standInRegion)
		case g.tableHasRegion:
			why = fmt.Sprintf("not in the price table for %s, shipped or refreshed from the AWS Pricing API", g.region)
		default:
			why = fmt.Sprintf("the price table has no prices for %s or any region of partition %s", g.region, pricing.Partition(g.region))
		}
		parts = append(parts, fmt.Sprintf("%d instance types have no known on-demand price (%s) and are offered at %s per hour, after every priced offering: %s",
			len(g.unknown), why, strconv.Itoa(pricing.UnknownPrice), names(g.unknown)))
	}
	return strings.Join(parts, "; ")
}

// names lists up to maxNamedTypes of the types, sorted, and how many more.
func names(set map[string]bool) string {
	list := make([]string, 0, len(set))
	for n := range set {
		list = append(list, n)
	}
	slices.Sort(list)
	if len(list) <= maxNamedTypes {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:maxNamedTypes], ", "), len(list)-maxNamedTypes)
}

// priceGapReporter remembers what was last logged, so that the log line is
// written when the gaps change, not on every catalog reconcile.
type priceGapReporter struct {
	mu     sync.Mutex
	logged string
}

// reportPriceGaps makes the gaps visible: a Warning event on the pool
// (the recorder folds repeats into one series, refreshed while they last)
// and, when they change, one log line for the region.
func (p *Provider) reportPriceGaps(ctx context.Context, pool *v1alpha1.NodePool, class *v1alpha1.EC2NodeClass, gaps priceGaps) {
	msg := ""
	if len(gaps.standIn) > 0 || len(gaps.unknown) > 0 {
		msg = gaps.message()
	}
	p.gaps.mu.Lock()
	changed := msg != p.gaps.logged
	p.gaps.logged = msg
	p.gaps.mu.Unlock()
	logger := klog.FromContext(ctx)
	if changed && msg == "" {
		logger.Info("Every instance type offered on demand has its region's price", "region", p.opts.Region, "prices", p.prices.Source())
	}
	if msg == "" {
		return
	}
	if changed {
		logger.Info("Offering instance types on demand without their region's price", "region", p.opts.Region, "standInRegion", gaps.standInRegion,
			"standIn", len(gaps.standIn), "unknown", len(gaps.unknown), "prices", p.prices.Source(), "reason", msg)
	}
	if p.opts.Recorder == nil || pool == nil {
		return
	}
	var related runtime.Object // the class, if any; never a typed nil
	if class != nil {
		related = class
	}
	p.opts.Recorder.Eventf(pool, related, corev1.EventTypeWarning, v1alpha1.ReasonOnDemandPricesUnknown, v1alpha1.ActionPriceInstanceTypes, "%s", msg)
}

// ConditionOnDemandPricesKnown is False, while the class stays Ready, when
// some of the region's instance types are offered on demand without the
// region's own price: at a stand-in region's, or last of all at
// pricing.UnknownPrice. The message names them and why.
const ConditionOnDemandPricesKnown = "OnDemandPricesKnown"

// pricesKnown judges the region's on-demand prices for the class's
// condition; known is false when the region could not be described (the
// condition is then left as it was).
func (p *Provider) pricesKnown(ctx context.Context) (ok bool, reason, message string, known bool) {
	cat, err := p.refresh(ctx)
	if err != nil {
		return false, "", "", false
	}
	gaps := p.newPriceGaps()
	for _, name := range cat.typeNames {
		info := cat.types[name]
		if architecture(info) == "" || !slices.Contains(info.SupportedUsageClasses, ec2types.UsageClassTypeOnDemand) {
			continue
		}
		_, source := p.onDemand(name, gaps.standInRegion)
		gaps.add(name, source)
	}
	switch {
	case len(gaps.unknown) > 0:
		return false, "PricesUnknown", gaps.message(), true
	case len(gaps.standIn) > 0:
		return false, "StandInPrices", gaps.message(), true
	}
	return true, "RegionPriced", fmt.Sprintf("every instance type of %s has its on-demand price (%s)", p.opts.Region, p.prices.Source()), true
}
