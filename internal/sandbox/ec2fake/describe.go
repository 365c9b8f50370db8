package ec2fake

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// This file holds the read-only catalogue actions: zones, instance types and
// their offerings, Spot prices, subnets, security groups and images.

// --- DescribeAvailabilityZones ---

type describeAvailabilityZonesResponse struct {
	meta
	Zones []zoneXML `xml:"availabilityZoneInfo>item"`
}

type zoneXML struct {
	ZoneName           string `xml:"zoneName"`
	ZoneID             string `xml:"zoneId"`
	ZoneState          string `xml:"zoneState"`
	OptInStatus        string `xml:"optInStatus"`
	RegionName         string `xml:"regionName"`
	GroupName          string `xml:"groupName"`
	NetworkBorderGroup string `xml:"networkBorderGroup"`
	ZoneType           string `xml:"zoneType"`
}

func (s *Server) describeAvailabilityZones(q query) (response, error) {
	filters, err := q.filters("zone-name", "zone-id", "region-name", "state", "zone-type", "group-name", "opt-in-status")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names, ids := q.list("ZoneName"), q.list("ZoneId")
	for _, z := range append(slices.Clone(names), ids...) {
		if _, ok := s.zones[z]; !ok {
			return nil, invalidParameter("Invalid availability zone: [%s]", z)
		}
	}
	out := &describeAvailabilityZonesResponse{}
	for _, z := range s.world.Zones {
		if (len(names) > 0 || len(ids) > 0) && !slices.Contains(names, z.Name) && !slices.Contains(ids, z.ID) {
			continue
		}
		a := attrs{
			"zone-name": {z.Name}, "zone-id": {z.ID}, "region-name": {s.world.Region},
			"state": {"available"}, "zone-type": {"availability-zone"}, "group-name": {s.world.Region},
			"opt-in-status": {"opt-in-not-required"},
		}
		if !a.matches(filters) {
			continue
		}
		out.Zones = append(out.Zones, zoneXML{
			ZoneName: z.Name, ZoneID: z.ID, ZoneState: "available", OptInStatus: "opt-in-not-required",
			RegionName: s.world.Region, GroupName: s.world.Region, NetworkBorderGroup: s.world.Region,
			ZoneType: "availability-zone",
		})
	}
	return out, nil
}

// --- DescribeInstanceTypes ---

type describeInstanceTypesResponse struct {
	meta
	InstanceTypes []instanceTypeXML `xml:"instanceTypeSet>item"`
	NextToken     string            `xml:"nextToken,omitempty"`
}

type instanceTypeXML struct {
	InstanceType                 string   `xml:"instanceType"`
	CurrentGeneration            bool     `xml:"currentGeneration"`
	SupportedUsageClasses        []string `xml:"supportedUsageClasses>item"`
	SupportedRootDeviceTypes     []string `xml:"supportedRootDeviceTypes>item"`
	SupportedVirtualizationTypes []string `xml:"supportedVirtualizationTypes>item"`
	BareMetal                    bool     `xml:"bareMetal"`
	Hypervisor                   string   `xml:"hypervisor,omitempty"`
	ProcessorInfo                struct {
		SupportedArchitectures []string `xml:"supportedArchitectures>item"`
		Manufacturer           string   `xml:"manufacturer,omitempty"`
	} `xml:"processorInfo"`
	VCPUInfo struct {
		DefaultVCPUs          int32 `xml:"defaultVCpus"`
		DefaultCores          int32 `xml:"defaultCores"`
		DefaultThreadsPerCore int32 `xml:"defaultThreadsPerCore"`
	} `xml:"vCpuInfo"`
	MemoryInfo struct {
		SizeInMiB int64 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
	InstanceStorageSupported bool `xml:"instanceStorageSupported"`
	InstanceStorageInfo      *struct {
		TotalSizeInGB int64  `xml:"totalSizeInGB"`
		NvmeSupport   string `xml:"nvmeSupport"`
	} `xml:"instanceStorageInfo,omitempty"`
	EBSInfo struct {
		EBSOptimizedSupport string `xml:"ebsOptimizedSupport"`
		EncryptionSupport   string `xml:"encryptionSupport"`
		NvmeSupport         string `xml:"nvmeSupport"`
	} `xml:"ebsInfo"`
	NetworkInfo struct {
		NetworkPerformance        string           `xml:"networkPerformance,omitempty"`
		MaximumNetworkInterfaces  int32            `xml:"maximumNetworkInterfaces"`
		MaximumNetworkCards       int32            `xml:"maximumNetworkCards"`
		DefaultNetworkCardIndex   int32            `xml:"defaultNetworkCardIndex"`
		NetworkCards              []networkCardXML `xml:"networkCards>item"`
		IPv4AddressesPerInterface int32            `xml:"ipv4AddressesPerInterface"`
		IPv6AddressesPerInterface int32            `xml:"ipv6AddressesPerInterface"`
		IPv6Supported             bool             `xml:"ipv6Supported"`
		EnaSupport                string           `xml:"enaSupport"`
		EncryptionInTransit       bool             `xml:"encryptionInTransitSupported"`
		EFASupported              bool             `xml:"efaSupported"`
		EFAInfo                   *struct {
			MaximumEFAInterfaces int32 `xml:"maximumEfaInterfaces"`
		} `xml:"efaInfo,omitempty"`
	} `xml:"networkInfo"`
	NeuronInfo *struct {
		Devices []neuronDeviceXML `xml:"neuronDevices>item"`
		Total   int32             `xml:"totalNeuronDeviceMemoryInMiB"`
	} `xml:"neuronInfo,omitempty"`
	GPUInfo *struct {
		GPUs                []gpuXML `xml:"gpus>item"`
		TotalGPUMemoryInMiB int32    `xml:"totalGpuMemoryInMiB"`
	} `xml:"gpuInfo,omitempty"`
	BurstablePerformanceSupported bool `xml:"burstablePerformanceSupported"`
}

type networkCardXML struct {
	NetworkCardIndex         int32   `xml:"networkCardIndex"`
	NetworkPerformance       string  `xml:"networkPerformance,omitempty"`
	MaximumNetworkInterfaces int32   `xml:"maximumNetworkInterfaces"`
	BaselineBandwidthInGbps  float64 `xml:"baselineBandwidthInGbps,omitempty"`
	PeakBandwidthInGbps      float64 `xml:"peakBandwidthInGbps,omitempty"`
}

type neuronDeviceXML struct {
	Count    int32  `xml:"count"`
	Name     string `xml:"name"`
	CoreInfo struct {
		Count   int32 `xml:"count"`
		Version int32 `xml:"version"`
	} `xml:"coreInfo"`
	MemoryInfo struct {
		SizeInMiB int32 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
}

type gpuXML struct {
	Name         string `xml:"name"`
	Manufacturer string `xml:"manufacturer"`
	Count        int32  `xml:"count"`
	MemoryInfo   struct {
		SizeInMiB int32 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
}

func (it *InstanceType) architectures() []string {
	if len(it.Architectures) == 0 {
		return []string{"x86_64"}
	}
	return it.Architectures
}

func (it *InstanceType) usageClasses() []string {
	if len(it.SupportedUsageClasses) == 0 {
		return []string{"on-demand", "spot"}
	}
	return it.SupportedUsageClasses
}

func (it *InstanceType) xml() instanceTypeXML {
	tpc := max(it.ThreadsPerCore, 1)
	x := instanceTypeXML{
		InstanceType:                  it.Name,
		CurrentGeneration:             it.CurrentGeneration,
		SupportedUsageClasses:         it.usageClasses(),
		SupportedRootDeviceTypes:      []string{"ebs"},
		SupportedVirtualizationTypes:  []string{"hvm"},
		BareMetal:                     it.BareMetal,
		Hypervisor:                    it.Hypervisor,
		InstanceStorageSupported:      it.InstanceStorageGB > 0,
		BurstablePerformanceSupported: it.Burstable,
	}
	x.ProcessorInfo.SupportedArchitectures = it.architectures()
	x.ProcessorInfo.Manufacturer = it.ProcessorManufacturer
	x.VCPUInfo.DefaultVCPUs = it.VCPUs
	x.VCPUInfo.DefaultThreadsPerCore = tpc
	x.VCPUInfo.DefaultCores = it.VCPUs / tpc
	x.MemoryInfo.SizeInMiB = it.MemoryMiB
	if it.InstanceStorageGB > 0 {
		x.InstanceStorageInfo = &struct {
			TotalSizeInGB int64  `xml:"totalSizeInGB"`
			NvmeSupport   string `xml:"nvmeSupport"`
		}{TotalSizeInGB: it.InstanceStorageGB, NvmeSupport: "required"}
	}
	x.EBSInfo.EBSOptimizedSupport = "default"
	x.EBSInfo.EncryptionSupport = "supported"
	x.EBSInfo.NvmeSupport = "required"
	n := &x.NetworkInfo
	n.NetworkPerformance = it.NetworkPerformance
	n.MaximumNetworkInterfaces = it.MaxENIs
	for i, enis := range it.cards() {
		n.NetworkCards = append(n.NetworkCards, networkCardXML{NetworkCardIndex: int32(i), NetworkPerformance: it.NetworkPerformance, MaximumNetworkInterfaces: enis,
			BaselineBandwidthInGbps: it.BaselineBandwidthGbps, PeakBandwidthInGbps: max(it.BaselineBandwidthGbps, it.PeakBandwidthGbps)})
	}
	n.MaximumNetworkCards = int32(len(n.NetworkCards))
	if it.EFAs > 0 {
		n.EFASupported = true
		n.EFAInfo = &struct {
			MaximumEFAInterfaces int32 `xml:"maximumEfaInterfaces"`
		}{it.EFAs}
	}
	if len(it.NeuronDevices) > 0 {
		x.NeuronInfo = &struct {
			Devices []neuronDeviceXML `xml:"neuronDevices>item"`
			Total   int32             `xml:"totalNeuronDeviceMemoryInMiB"`
		}{}
		for _, d := range it.NeuronDevices {
			dx := neuronDeviceXML{Count: d.Count, Name: d.Name}
			dx.CoreInfo.Count, dx.CoreInfo.Version = d.Cores, d.Version
			dx.MemoryInfo.SizeInMiB = d.MemoryMiB
			x.NeuronInfo.Devices = append(x.NeuronInfo.Devices, dx)
			x.NeuronInfo.Total += d.Count * d.MemoryMiB
		}
	}
	n.EncryptionInTransit = it.EncryptionInTransit
	n.IPv4AddressesPerInterface = it.IPv4PerENI
	n.IPv6AddressesPerInterface = it.IPv4PerENI
	n.IPv6Supported = true
	n.EnaSupport = "required"
	if len(it.GPUs) > 0 {
		x.GPUInfo = &struct {
			GPUs                []gpuXML `xml:"gpus>item"`
			TotalGPUMemoryInMiB int32    `xml:"totalGpuMemoryInMiB"`
		}{}
		for _, g := range it.GPUs {
			gx := gpuXML{Name: g.Name, Manufacturer: g.Manufacturer, Count: g.Count}
			gx.MemoryInfo.SizeInMiB = g.MemoryMiB
			x.GPUInfo.GPUs = append(x.GPUInfo.GPUs, gx)
			x.GPUInfo.TotalGPUMemoryInMiB += g.Count * g.MemoryMiB
		}
	}
	return x
}

func (it *InstanceType) attrs() attrs {
	b := strconv.FormatBool
	return attrs{
		"instance-type":                             {it.Name},
		"current-generation":                        {b(it.CurrentGeneration)},
		"bare-metal":                                {b(it.BareMetal)},
		"burstable-performance-supported":           {b(it.Burstable)},
		"hypervisor":                                {it.Hypervisor},
		"processor-info.supported-architecture":     it.architectures(),
		"supported-usage-class":                     it.usageClasses(),
		"vcpu-info.default-vcpus":                   {strconv.Itoa(int(it.VCPUs))},
		"memory-info.size-in-mib":                   {strconv.FormatInt(it.MemoryMiB, 10)},
		"network-info.maximum-network-interfaces":   {strconv.Itoa(int(it.MaxENIs))},
		"network-info.ipv4-addresses-per-interface": {strconv.Itoa(int(it.IPv4PerENI))},
		"instance-storage-supported":                {b(it.InstanceStorageGB > 0)},
	}
}

func (s *Server) describeInstanceTypes(q query) (response, error) {
	filters, err := q.filters("instance-type", "current-generation", "bare-metal", "burstable-performance-supported",
		"hypervisor", "processor-info.supported-architecture", "supported-usage-class", "vcpu-info.default-vcpus",
		"memory-info.size-in-mib", "network-info.maximum-network-interfaces",
		"network-info.ipv4-addresses-per-interface", "instance-storage-supported")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	wanted := q.list("InstanceType")
	var unknown []string
	for _, name := range wanted {
		if s.types[name] == nil {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return nil, badRequest("InvalidInstanceType", "The following supplied instance types do not exist: [%s]", strings.Join(unknown, ", "))
	}
	var matched []*InstanceType
	for i := range s.world.InstanceTypes {
		it := &s.world.InstanceTypes[i]
		if len(wanted) > 0 && !slices.Contains(wanted, it.Name) {
			continue
		}
		if it.attrs().matches(filters) {
			matched = append(matched, it)
		}
	}
	// EC2 pages instance types even when MaxResults is absent.
	page, next, err := paginate(q, matched, pageLimits{min: 5, max: 100, def: 100})
	if err != nil {
		return nil, err
	}
	out := &describeInstanceTypesResponse{NextToken: next}
	for _, it := range page {
		out.InstanceTypes = append(out.InstanceTypes, it.xml())
	}
	return out, nil
}

// --- DescribeInstanceTypeOfferings ---

type describeInstanceTypeOfferingsResponse struct {
	meta
	Offerings []offeringXML `xml:"instanceTypeOfferingSet>item"`
	NextToken string        `xml:"nextToken,omitempty"`
}

type offeringXML struct {
	InstanceType string `xml:"instanceType"`
	LocationType string `xml:"locationType"`
	Location     string `xml:"location"`
}

// offeredIn reports whether the instance type is offered in the zone.
func (s *Server) offeredIn(instanceType, zone string) bool {
	zones, ok := s.world.Offerings[instanceType]
	return !ok || zones == nil || slices.Contains(zones, zone)
}

func (s *Server) describeInstanceTypeOfferings(q query) (response, error) {
	filters, err := q.filters("location", "instance-type")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	locType := q.get("LocationType")
	if locType == "" {
		locType = "region"
	}
	var all []offeringXML
	for _, it := range s.world.InstanceTypes {
		switch locType {
		case "region":
			all = append(all, offeringXML{it.Name, locType, s.world.Region})
		case "availability-zone", "availability-zone-id":
			for _, z := range s.world.Zones {
				if !s.offeredIn(it.Name, z.Name) {
					continue
				}
				loc := z.Name
				if locType == "availability-zone-id" {
					loc = z.ID
				}
				all = append(all, offeringXML{it.Name, locType, loc})
			}
		default:
			return nil, invalidParameter("Value (%s) for parameter locationType is invalid. Valid values are region, availability-zone, availability-zone-id, outpost.", locType)
		}
	}
	var matched []offeringXML
	for _, o := range all {
		if (attrs{"location": {o.Location}, "instance-type": {o.InstanceType}}).matches(filters) {
			matched = append(matched, o)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 5, max: 1000, def: 1000})
	if err != nil {
		return nil, err
	}
	return &describeInstanceTypeOfferingsResponse{Offerings: page, NextToken: next}, nil
}

// --- DescribeSpotPriceHistory ---

type describeSpotPriceHistoryResponse struct {
	meta
	Prices    []spotPriceXML `xml:"spotPriceHistorySet>item"`
	NextToken string         `xml:"nextToken,omitempty"`
}

type spotPriceXML struct {
	InstanceType       string  `xml:"instanceType"`
	ProductDescription string  `xml:"productDescription"`
	SpotPrice          string  `xml:"spotPrice"`
	Timestamp          ec2Time `xml:"timestamp"`
	AvailabilityZone   string  `xml:"availabilityZone"`
	AvailabilityZoneID string  `xml:"availabilityZoneId"`
}

// linuxProduct is the only product description the fake prices; EC2 also
// accepts the older VPC-qualified spelling as a synonym.
const linuxProduct = "Linux/UNIX"

func (s *Server) spotPrice(instanceType, zone string) (float64, bool) {
	p, ok := s.world.SpotPrices[instanceType][zone]
	return p, ok
}

func (s *Server) describeSpotPriceHistory(q query) (response, error) {
	filters, err := q.filters("availability-zone", "instance-type", "product-description")
	if err != nil {
		return nil, err
	}
	if _, _, err := q.time("StartTime"); err != nil {
		return nil, err
	}
	end, hasEnd, err := q.time("EndTime")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	types := q.list("InstanceType")
	products := q.list("ProductDescription")
	if len(products) > 0 && !slices.Contains(products, linuxProduct) && !slices.Contains(products, linuxProduct+" (Amazon VPC)") {
		return &describeSpotPriceHistoryResponse{}, nil
	}
	zoneParam, zoneIDParam := q.get("AvailabilityZone"), q.get("AvailabilityZoneId")
	var matched []spotPriceXML
	for _, it := range s.world.InstanceTypes {
		if len(types) > 0 && !slices.Contains(types, it.Name) {
			continue
		}
		for _, z := range s.world.Zones {
			price, ok := s.spotPrice(it.Name, z.Name)
			if !ok || !s.offeredIn(it.Name, z.Name) {
				continue
			}
			if zoneParam != "" && zoneParam != z.Name || zoneIDParam != "" && zoneIDParam != z.ID {
				continue
			}
			// A price is reported from the time it was set; a window that
			// ends before that has no price to show.
			if hasEnd && end.Before(s.priceTime) {
				continue
			}
			a := attrs{"availability-zone": {z.Name}, "instance-type": {it.Name}, "product-description": {linuxProduct}}
			if !a.matches(filters) {
				continue
			}
			matched = append(matched, spotPriceXML{
				InstanceType: it.Name, ProductDescription: linuxProduct,
				SpotPrice: strconv.FormatFloat(price, 'f', 6, 64), Timestamp: ec2Time(s.priceTime),
				AvailabilityZone: z.Name, AvailabilityZoneID: z.ID,
			})
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 1, max: 1000, def: 1000})
	if err != nil {
		return nil, err
	}
	return &describeSpotPriceHistoryResponse{Prices: page, NextToken: next}, nil
}

// --- DescribeSubnets ---

type describeSubnetsResponse struct {
	meta
	Subnets   []subnetXML `xml:"subnetSet>item"`
	NextToken string      `xml:"nextToken,omitempty"`
}

type subnetXML struct {
	SubnetID                string   `xml:"subnetId"`
	SubnetArn               string   `xml:"subnetArn"`
	State                   string   `xml:"state"`
	VpcID                   string   `xml:"vpcId"`
	OwnerID                 string   `xml:"ownerId"`
	CidrBlock               string   `xml:"cidrBlock"`
	AvailableIPAddressCount int32    `xml:"availableIpAddressCount"`
	AvailabilityZone        string   `xml:"availabilityZone"`
	AvailabilityZoneID      string   `xml:"availabilityZoneId"`
	DefaultForAz            bool     `xml:"defaultForAz"`
	MapPublicIPOnLaunch     bool     `xml:"mapPublicIpOnLaunch"`
	Tags                    []xmlTag `xml:"tagSet>item"`
}

var idPattern = regexp.MustCompile(`^[a-z]+-([0-9a-f]{8}|[0-9a-f]{17})$`)

// validID reports whether id is prefix-<8 or 17 hex digits>, the two forms
// EC2 has used; anything else is "malformed" rather than "not found".
func validID(prefix, id string) bool {
	return strings.HasPrefix(id, prefix+"-") && idPattern.MatchString(id)
}

// notFoundList formats a list of missing IDs the way EC2's messages do.
func notFoundList(ids []string) string { return strings.Join(ids, ", ") }

func (s *Server) subnetByID(id string) *subnetState {
	for _, sn := range s.subnets {
		if sn.ID == id {
			return sn
		}
	}
	return nil
}

func (s *Server) describeSubnets(q query) (response, error) {
	filters, err := q.filters(append([]string{"subnet-id", "availability-zone", "availability-zone-id", "vpc-id",
		"cidr-block", "cidr-block-association.cidr-block", "state", "owner-id", "default-for-az"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(s.now())
	ids := q.list("SubnetId")
	for _, id := range ids {
		if !validID("subnet", id) {
			return nil, badRequest("InvalidSubnetID.Malformed", "The subnet ID '%s' is malformed", id)
		}
		if s.subnetByID(id) == nil {
			return nil, badRequest("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
	}
	var matched []*subnetState
	for _, sn := range s.subnets {
		if len(ids) > 0 && !slices.Contains(ids, sn.ID) {
			continue
		}
		a := attrs{
			"subnet-id": {sn.ID}, "availability-zone": {sn.Zone}, "availability-zone-id": {sn.ZoneID},
			"vpc-id": {sn.VpcID}, "cidr-block": {sn.CIDR}, "cidr-block-association.cidr-block": {sn.CIDR},
			"state": {"available"}, "owner-id": {s.world.AccountID}, "default-for-az": {"false"},
		}
		if a.withTags(sn.Tags).matches(filters) {
			matched = append(matched, sn)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 5, max: 1000})
	if err != nil {
		return nil, err
	}
	out := &describeSubnetsResponse{NextToken: next}
	for _, sn := range page {
		out.Subnets = append(out.Subnets, subnetXML{
			SubnetID:                sn.ID,
			SubnetArn:               fmt.Sprintf("arn:aws:ec2:%s:%s:subnet/%s", s.world.Region, s.world.AccountID, sn.ID),
			State:                   "available",
			VpcID:                   sn.VpcID,
			OwnerID:                 s.world.AccountID,
			CidrBlock:               sn.CIDR,
			AvailableIPAddressCount: int32(sn.free()),
			AvailabilityZone:        sn.Zone,
			AvailabilityZoneID:      sn.ZoneID,
			Tags:                    tagSet(sn.Tags),
		})
	}
	return out, nil
}

// --- DescribeSecurityGroups ---

type describeSecurityGroupsResponse struct {
	meta
	Groups    []securityGroupXML `xml:"securityGroupInfo>item"`
	NextToken string             `xml:"nextToken,omitempty"`
}

type securityGroupXML struct {
	OwnerID          string   `xml:"ownerId"`
	GroupID          string   `xml:"groupId"`
	GroupName        string   `xml:"groupName"`
	GroupDescription string   `xml:"groupDescription"`
	VpcID            string   `xml:"vpcId"`
	SecurityGroupArn string   `xml:"securityGroupArn"`
	Tags             []xmlTag `xml:"tagSet>item"`
}

func (s *Server) groupByID(id string) *SecurityGroup {
	for _, g := range s.groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

func (s *Server) describeSecurityGroups(q query) (response, error) {
	filters, err := q.filters(append([]string{"group-id", "group-name", "vpc-id", "owner-id", "description"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, names := q.list("GroupId"), q.list("GroupName")
	for _, id := range ids {
		if !validID("sg", id) {
			return nil, badRequest("InvalidGroupId.Malformed", "Invalid id: \"%s\" (expecting \"sg-...\")", id)
		}
		if s.groupByID(id) == nil {
			return nil, badRequest("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
		}
	}
	for _, name := range names {
		if !slices.ContainsFunc(s.groups, func(g *SecurityGroup) bool { return g.Name == name }) {
			return nil, badRequest("InvalidGroup.NotFound", "The security group '%s' does not exist in default VPC", name)
		}
	}
	var matched []*SecurityGroup
	for _, g := range s.groups {
		if (len(ids) > 0 || len(names) > 0) && !slices.Contains(ids, g.ID) && !slices.Contains(names, g.Name) {
			continue
		}
		a := attrs{"group-id": {g.ID}, "group-name": {g.Name}, "vpc-id": {g.VpcID}, "owner-id": {s.world.AccountID}, "description": {g.Description}}
		if a.withTags(g.Tags).matches(filters) {
			matched = append(matched, g)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 5, max: 1000})
	if err != nil {
		return nil, err
	}
	out := &describeSecurityGroupsResponse{NextToken: next}
	for _, g := range page {
		out.Groups = append(out.Groups, securityGroupXML{
			OwnerID: s.world.AccountID, GroupID: g.ID, GroupName: g.Name, GroupDescription: g.Description, VpcID: g.VpcID,
			SecurityGroupArn: fmt.Sprintf("arn:aws:ec2:%s:%s:security-group/%s", s.world.Region, s.world.AccountID, g.ID),
			Tags:             tagSet(g.Tags),
		})
	}
	return out, nil
}

// --- DescribeImages ---

type describeImagesResponse struct {
	meta
	Images    []imageXML `xml:"imagesSet>item"`
	NextToken string     `xml:"nextToken,omitempty"`
}

type imageXML struct {
	ImageID            string   `xml:"imageId"`
	ImageLocation      string   `xml:"imageLocation"`
	ImageState         string   `xml:"imageState"`
	ImageOwnerID       string   `xml:"imageOwnerId"`
	CreationDate       string   `xml:"creationDate"`
	IsPublic           bool     `xml:"isPublic"`
	Architecture       string   `xml:"architecture"`
	ImageType          string   `xml:"imageType"`
	ImageOwnerAlias    string   `xml:"imageOwnerAlias,omitempty"`
	Name               string   `xml:"name"`
	Description        string   `xml:"description,omitempty"`
	RootDeviceType     string   `xml:"rootDeviceType"`
	RootDeviceName     string   `xml:"rootDeviceName"`
	VirtualizationType string   `xml:"virtualizationType"`
	Hypervisor         string   `xml:"hypervisor"`
	PlatformDetails    string   `xml:"platformDetails"`
	UsageOperation     string   `xml:"usageOperation"`
	EnaSupport         bool     `xml:"enaSupport"`
	Tags               []xmlTag `xml:"tagSet>item"`
}

func (im *Image) state() string {
	if im.State == "" {
		return "available"
	}
	return im.State
}

func (s *Server) imageByID(id string) *Image {
	for _, im := range s.images {
		if im.ID == id {
			return im
		}
	}
	return nil
}

// ownedBy reports whether the image matches one Owners value: an account ID,
// "self", or an owner alias such as "amazon".
func (s *Server) ownedBy(im *Image, owner string) bool {
	switch owner {
	case "self":
		return im.OwnerID == s.world.AccountID
	case "amazon", "aws-marketplace":
		return im.OwnerAlias == owner
	default:
		return im.OwnerID == owner
	}
}

func (s *Server) describeImages(q query) (response, error) {
	filters, err := q.filters(append([]string{"name", "image-id", "architecture", "state", "owner-id", "owner-alias",
		"is-public", "image-type", "description", "root-device-type", "virtualization-type"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, owners := q.list("ImageId"), q.list("Owner")
	var missing []string
	for _, id := range ids {
		if !validID("ami", id) {
			return nil, badRequest("InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", id)
		}
		if s.imageByID(id) == nil {
			missing = append(missing, id)
		}
	}
	switch {
	case len(missing) == 1:
		return nil, badRequest("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", missing[0])
	case len(missing) > 1:
		return nil, badRequest("InvalidAMIID.NotFound", "The image ids '[%s]' do not exist", notFoundList(missing))
	}
	var matched []*Image
	for _, im := range s.images {
		if len(ids) > 0 && !slices.Contains(ids, im.ID) {
			continue
		}
		if len(owners) > 0 && !slices.ContainsFunc(owners, func(o string) bool { return s.ownedBy(im, o) }) {
			continue
		}
		a := attrs{
			"name": {im.Name}, "image-id": {im.ID}, "architecture": {im.Architecture}, "state": {im.state()},
			"owner-id": {im.OwnerID}, "owner-alias": {im.OwnerAlias}, "is-public": {strconv.FormatBool(im.Public)},
			"image-type": {"machine"}, "description": {im.Description}, "root-device-type": {"ebs"},
			"virtualization-type": {"hvm"},
		}
		if a.withTags(im.Tags).matches(filters) {
			matched = append(matched, im)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 1, max: 1000})
	if err != nil {
		return nil, err
	}
	out := &describeImagesResponse{NextToken: next}
	for _, im := range page {
		owner := im.OwnerAlias
		if owner == "" {
			owner = im.OwnerID
		}
		out.Images = append(out.Images, imageXML{
			ImageID: im.ID, ImageLocation: owner + "/" + im.Name, ImageState: im.state(), ImageOwnerID: im.OwnerID,
			CreationDate: formatTime(im.CreationDate), IsPublic: im.Public,
			Architecture: im.Architecture, ImageType: "machine", ImageOwnerAlias: im.OwnerAlias, Name: im.Name,
			Description: im.Description, RootDeviceType: "ebs", RootDeviceName: "/dev/xvda",
			VirtualizationType: "hvm", Hypervisor: "xen", PlatformDetails: "Linux/UNIX", UsageOperation: "RunInstances",
			EnaSupport: true, Tags: tagSet(im.Tags),
		})
	}
	return out, nil
}
