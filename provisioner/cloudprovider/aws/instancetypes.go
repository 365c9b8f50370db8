package aws

import (
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

// regionCatalog is what the region offers, as described by EC2.
type regionCatalog struct {
	types   map[string]ec2types.InstanceTypeInfo
	offered map[string][]string           // type -> zones
	spot    map[string]map[string]float64 // type -> zone -> $/h
	typesAt time.Time
	spotAt  time.Time
	// spotRetryAt is when spot prices are asked for again after a failed
	// DescribeSpotPriceHistory, so a throttled or denied call is not
	// repeated for every pool reconciled meanwhile.
	spotRetryAt time.Time
	typeNames   []string // sorted
}

// refresh describes the region again where the cache is older than its TTL.
// A failed refresh keeps the previous figures if there are any. Without
// instance types there is nothing to offer, so their first failure is
// returned; without spot prices there are still the on-demand offerings, so
// a failed spot refresh is logged, never returned, and asked again after
// spotRetryInterval.
func (p *Provider) refresh(ctx context.Context) (regionCatalog, error) {
	p.mu.Lock()
	cat := p.catalog
	p.mu.Unlock()
	now := p.now()
	logger := klog.FromContext(ctx)
	if cat.types == nil || now.Sub(cat.typesAt) > p.opts.InstanceTypesTTL {
		types, offered, err := p.describeTypes(ctx)
		switch {
		case err != nil && cat.types == nil:
			return cat, err
		case err != nil:
			logger.Error(err, "Refreshing instance types failed; keeping the previous ones", "age", now.Sub(cat.typesAt).Round(time.Second))
		default:
			cat.types, cat.offered, cat.typesAt = types, offered, now
			cat.typeNames = make([]string, 0, len(types))
			for n := range types {
				cat.typeNames = append(cat.typeNames, n)
			}
			slices.Sort(cat.typeNames)
			logger.Info("Described instance types", "region", p.opts.Region, "instanceTypes", len(types))
		}
	}
	if (cat.spot == nil || now.Sub(cat.spotAt) > p.opts.SpotPricesTTL) && !now.Before(cat.spotRetryAt) {
		spot, err := p.describeSpotPrices(ctx)
		retryAt := now.Add(p.spotRetryInterval())
		switch {
		case err != nil && cat.spot == nil:
			cat.spotRetryAt = retryAt
			logger.Error(err, "Describing spot prices failed; publishing on-demand offerings only until it succeeds",
				"call", "DescribeSpotPriceHistory", "region", p.opts.Region, "retryAt", retryAt.UTC().Format(time.RFC3339))
		case err != nil:
			cat.spotRetryAt = retryAt
			logger.Error(err, "Refreshing spot prices failed; keeping the previous ones",
				"call", "DescribeSpotPriceHistory", "region", p.opts.Region, "age", now.Sub(cat.spotAt).Round(time.Second), "retryAt", retryAt.UTC().Format(time.RFC3339))
		default:
			cat.spot, cat.spotAt, cat.spotRetryAt = spot, now, time.Time{}
			logger.V(2).Info("Described spot prices", "region", p.opts.Region, "instanceTypes", len(spot))
		}
	}
	p.mu.Lock()
	p.catalog = cat
	p.mu.Unlock()
	return cat, nil
}

// spotRetryInterval is how long a failed spot price refresh waits before
// the next: a minute, or the spot prices' TTL where that is shorter.
func (p *Provider) spotRetryInterval() time.Duration {
	return min(time.Minute, p.opts.SpotPricesTTL)
}

func (p *Provider) describeTypes(ctx context.Context) (map[string]ec2types.InstanceTypeInfo, map[string][]string, error) {
	types := map[string]ec2types.InstanceTypeInfo{}
	// Every type, filtered here: architectures and bare metal are checked
	// below, where the reason can be logged.
	pages := ec2.NewDescribeInstanceTypesPaginator(p.ec2, &ec2.DescribeInstanceTypesInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("DescribeInstanceTypes", err)
		}
		for _, it := range page.InstanceTypes {
			if it.BareMetal != nil && *it.BareMetal {
				continue
			}
			types[string(it.InstanceType)] = it
		}
	}
	offered := map[string][]string{}
	offers := ec2.NewDescribeInstanceTypeOfferingsPaginator(p.ec2, &ec2.DescribeInstanceTypeOfferingsInput{
		LocationType: ec2types.LocationTypeAvailabilityZone,
	})
	for offers.HasMorePages() {
		page, err := offers.NextPage(ctx)
		if err != nil {
			return nil, nil, classify("DescribeInstanceTypeOfferings", err)
		}
		for _, o := range page.InstanceTypeOfferings {
			offered[string(o.InstanceType)] = append(offered[string(o.InstanceType)], sdkaws.ToString(o.Location))
		}
	}
	return types, offered, nil
}

func (p *Provider) describeSpotPrices(ctx context.Context) (map[string]map[string]float64, error) {
	prices := map[string]map[string]float64{}
	stamps := map[[2]string]time.Time{}
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(p.ec2, &ec2.DescribeSpotPriceHistoryInput{
		ProductDescriptions: []string{"Linux/UNIX"},
		// A start time of now returns the price in effect now for each
		// type and zone (EC2 API reference, DescribeSpotPriceHistory).
		StartTime: sdkaws.Time(p.now()),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeSpotPriceHistory", err)
		}
		for _, sp := range page.SpotPriceHistory {
			price, err := strconv.ParseFloat(sdkaws.ToString(sp.SpotPrice), 64)
			if err != nil {
				continue
			}
			t, z := string(sp.InstanceType), sdkaws.ToString(sp.AvailabilityZone)
			if at := sdkaws.ToTime(sp.Timestamp); !at.Before(stamps[[2]string{t, z}]) {
				stamps[[2]string{t, z}] = at
				if prices[t] == nil {
					prices[t] = map[string]float64{}
				}
				prices[t][z] = price
			}
		}
	}
	return prices, nil
}

// InstanceTypes lists what the pool's EC2NodeClass can launch: the
// region's types of an architecture the class has an image for, offered in
// the zones of its subnets, spot where EC2 quotes a spot price, on-demand
// always, and reserved where the class has capacity reservations of the
// type and zone (reservations.go), with allocatable resources under the
// class's kubelet settings. An on-demand price the table does not have for
// the region is the closest region's (a stand-in that keeps the order) or,
// failing that, pricing.UnknownPrice (chosen last); either way the types
// are named in a Warning event on the pool and in the log
// (reportPriceGaps).
func (p *Provider) InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	cat, err := p.refresh(ctx)
	if err != nil {
		return nil, err
	}
	var class *v1alpha1.EC2NodeClass
	if pool != nil {
		if class, err = p.nodeClass(ctx, pool.Spec.Template.Spec.NodeClassRef); err != nil {
			return nil, err
		}
	}
	zones := map[string]bool{}
	// No spot service-linked role, or spot denied (dryrun.go): the
	// class's spot offerings are not offered until a check passes.
	noSpot := class != nil && p.spotWithheld(class)
	if class != nil {
		for _, s := range class.Status.Subnets {
			zones[s.Zone] = true
		}
		p.refreshReservations(ctx, class)
	}
	reserved := p.reservedOfferings(class)
	var out []v1alpha1.InstanceType
	unpriced := 0 // spot offerings EC2 quotes no price for
	gaps := p.newPriceGaps()
	for _, name := range cat.typeNames {
		info := cat.types[name]
		arch := architecture(info)
		if arch == "" {
			continue
		}
		// A type the class has no image for (its architecture, or the
		// variant it needs: NVIDIA, Neuron) is not offered.
		if _, ok := imageFor(classAMIs(class), arch, variantOf(info)); class != nil && !ok {
			continue
		}
		it := p.instanceType(ctx, info, class)
		for _, zone := range cat.offered[name] {
			if class != nil && !zones[zone] {
				continue
			}
			for _, uc := range info.SupportedUsageClasses {
				var price float64
				var ok bool
				switch uc {
				case ec2types.UsageClassTypeSpot:
					if noSpot {
						continue
					}
					price, ok = cat.spot[name][zone]
				case ec2types.UsageClassTypeOnDemand:
					var source priceSource
					price, source = p.onDemand(name, gaps.standInRegion)
					gaps.add(name, source)
					ok = true
				default:
					continue
				}
				if !ok {
					unpriced++
					continue
				}
				it.Offerings = append(it.Offerings, v1alpha1.Offering{
					Zone: zone, CapacityType: v1alpha1.CapacityType(uc), Available: true,
					Price: strconv.FormatFloat(price, 'f', -1, 64),
				})
			}
			if r := reserved[name][zone]; r != nil && slices.Contains(info.SupportedUsageClasses, ec2types.UsageClassTypeOnDemand) {
				// The reservations' room, at a price below every other
				// offering's (reservedPriceFactor).
				price, _ := p.onDemand(name, gaps.standInRegion)
				count := int32(r.count)
				it.Offerings = append(it.Offerings, v1alpha1.Offering{
					Zone: zone, CapacityType: v1alpha1.CapacityTypeReserved, Available: count > 0, ReservationCapacity: &count,
					Price: strconv.FormatFloat(price*reservedPriceFactor, 'f', -1, 64),
				})
			}
		}
		if len(it.Offerings) == 0 {
			continue
		}
		slices.SortFunc(it.Offerings, func(a, b v1alpha1.Offering) int {
			if a.Zone != b.Zone {
				return compareStrings(a.Zone, b.Zone)
			}
			return compareStrings(string(a.CapacityType), string(b.CapacityType))
		})
		out = append(out, it)
	}
	if unpriced > 0 {
		klog.FromContext(ctx).V(2).Info("Skipped spot offerings without a spot price", "offerings", unpriced, "region", p.opts.Region)
	}
	p.reportPriceGaps(ctx, pool, class, gaps)
	return out, nil
}

func classAMIs(class *v1alpha1.EC2NodeClass) []v1alpha1.ResolvedAMI {
	if class == nil {
		return nil
	}
	return class.Status.AMIs
}

// priceSource says where an on-demand price came from.
type priceSource int

const (
	// priceOwn: the table's price for the provider's region, shipped or
	// refreshed from the Pricing API.
	priceOwn priceSource = iota
	// priceStandIn: the table has no prices for the region at all, and the
	// closest region's (pricing.Table.StandIn) stand in: prices differ
	// between regions by a similar factor for most types, so the
	// cheapest-first order is kept, but the figure is not the cost.
	priceStandIn
	// priceUnknown: neither has the type; pricing.UnknownPrice.
	priceUnknown
)

// onDemand is the type's on-demand price in the provider's region, and
// where it came from; standIn is pricing.Table.StandIn's answer for the
// region, "" for none. A type is never left without a price: one the table
// does not know is priced pricing.UnknownPrice, after every known price.
func (p *Provider) onDemand(instanceType, standIn string) (float64, priceSource) {
	if price, ok := p.prices.OnDemand(p.opts.Region, instanceType); ok {
		return price, priceOwn
	}
	if standIn != "" {
		if price, ok := p.prices.OnDemand(standIn, instanceType); ok {
			return price, priceStandIn
		}
	}
	return pricing.UnknownPrice, priceUnknown
}

// onDemandPrice is the type's on-demand price, its own region's or a
// stand-in's, and whether there is one.
func (p *Provider) onDemandPrice(instanceType string) (float64, bool) {
	standIn, _ := p.prices.StandIn(p.opts.Region)
	price, source := p.onDemand(instanceType, standIn)
	return price, source != priceUnknown
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// architecture is the Kubernetes name of the type's first supported
// architecture, or "" for one Nodeforge does not launch.
func architecture(info ec2types.InstanceTypeInfo) string {
	if info.ProcessorInfo == nil {
		return ""
	}
	for _, a := range info.ProcessorInfo.SupportedArchitectures {
		switch a {
		case ec2types.ArchitectureTypeX8664:
			return "amd64"
		case ec2types.ArchitectureTypeArm64:
			return "arm64"
		}
	}
	return ""
}

// instanceType describes one type as nodes of the class will have it,
// under the class's kubelet settings and DRA drivers (dra.go).
func (p *Provider) instanceType(ctx context.Context, info ec2types.InstanceTypeInfo, class *v1alpha1.EC2NodeClass) v1alpha1.InstanceType {
	var kubelet *v1alpha1.KubeletConfiguration
	var bdm []v1alpha1.BlockDeviceMapping
	if class != nil {
		kubelet, bdm = class.Spec.Kubelet, class.Spec.BlockDeviceMappings
	}
	capacity := Capacity(info, kubelet, rootVolumeGiB(bdm), *p.opts.VMMemoryOverheadPercent)
	if measured, ok := p.measured.memory(string(info.InstanceType), classAMIs(class)); ok {
		capacity[corev1.ResourceMemory] = measured
	}
	reservedPods, _ := Pods(info, kubelet)
	labels := p.labels(info)
	maps.Copy(labels, draLabels(class))
	it := v1alpha1.InstanceType{
		Name: string(info.InstanceType),
		// What the kubelet and the cloud's node controller label every
		// node of the type with, beside its name and zone: a pod that
		// selects on them must be judged on the node that will register.
		Labels:      labels,
		Capacity:    capacity,
		Allocatable: Allocatable(capacity, reservedPods, kubelet),
	}
	p.withDRADrivers(ctx, info, class, &it)
	return it
}

// labels are what a node of the type is labelled with beside its name and
// zone: what the kubelet and the cloud's node controller set
// (architecture, operating system, region), and the instance attribute
// labels (v1alpha1.InstanceLabels), read from DescribeInstanceTypes with
// the value formats of Karpenter's karpenter.k8s.aws/instance-* labels.
// The provisioner sets the attribute labels on the node when it adopts
// it; a pod that selects on any of them is judged on the node that will
// register.
func (p *Provider) labels(info ec2types.InstanceTypeInfo) map[string]string {
	labels := v1alpha1.InstanceNameLabels(string(info.InstanceType))
	labels[corev1.LabelArchStable] = architecture(info)
	labels[corev1.LabelOSStable] = "linux"
	labels[corev1.LabelTopologyRegion] = p.opts.Region
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	if info.VCpuInfo != nil && info.VCpuInfo.DefaultVCpus != nil {
		labels[v1alpha1.LabelInstanceCPU] = itoa(int64(*info.VCpuInfo.DefaultVCpus))
	}
	if info.ProcessorInfo != nil && info.ProcessorInfo.Manufacturer != nil {
		labels[v1alpha1.LabelInstanceCPUManufacturer] = strings.ToLower(*info.ProcessorInfo.Manufacturer)
	}
	if info.MemoryInfo != nil && info.MemoryInfo.SizeInMiB != nil {
		labels[v1alpha1.LabelInstanceMemory] = itoa(*info.MemoryInfo.SizeInMiB)
	}
	if info.Hypervisor != "" {
		labels[v1alpha1.LabelInstanceHypervisor] = string(info.Hypervisor)
	}
	// Karpenter labels GPUs only for a type with one kind of GPU; so do we.
	if info.GpuInfo != nil && len(info.GpuInfo.Gpus) == 1 {
		g := info.GpuInfo.Gpus[0]
		labels[v1alpha1.LabelInstanceGPUName] = strings.ToLower(sdkaws.ToString(g.Name))
		labels[v1alpha1.LabelInstanceGPUManufacturer] = strings.ToLower(sdkaws.ToString(g.Manufacturer))
		labels[v1alpha1.LabelInstanceGPUCount] = itoa(int64(sdkaws.ToInt32(g.Count)))
		if g.MemoryInfo != nil && g.MemoryInfo.SizeInMiB != nil {
			labels[v1alpha1.LabelInstanceGPUMemory] = itoa(int64(*g.MemoryInfo.SizeInMiB))
		}
	}
	if s := info.InstanceStorageInfo; s != nil && s.NvmeSupport != ec2types.EphemeralNvmeSupportUnsupported && sdkaws.ToInt64(s.TotalSizeInGB) > 0 {
		labels[v1alpha1.LabelInstanceLocalNVMe] = itoa(sdkaws.ToInt64(s.TotalSizeInGB))
	}
	if n := info.NetworkInfo; n != nil {
		// The baseline bandwidth of the default network card, in Mbit/s.
		for _, card := range n.NetworkCards {
			if sdkaws.ToInt32(card.NetworkCardIndex) == sdkaws.ToInt32(n.DefaultNetworkCardIndex) && card.BaselineBandwidthInGbps != nil {
				labels[v1alpha1.LabelInstanceNetworkBandwidth] = itoa(int64(math.Round(*card.BaselineBandwidthInGbps * 1000)))
			}
		}
		if n.EncryptionInTransitSupported != nil {
			labels[v1alpha1.LabelInstanceEncryptionInTransitSupported] = strconv.FormatBool(*n.EncryptionInTransitSupported)
		}
	}
	return labels
}
