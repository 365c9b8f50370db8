package main

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// classFieldsLeftBehind are EC2NodeClass fields Nodeforge has no
// counterpart for, and what to do instead.
var classFieldsLeftBehind = map[string]string{
	"associatePublicIPAddress": "Nodeforge's instances take their subnet's setting for public IPv4 addresses; select subnets that assign them (or not) as you need",
	"connectionTracking":       "Nodeforge does not set connection tracking timeouts on the instances' network interfaces",
	"context":                  "Nodeforge passes no EC2 Fleet context",
	"cpuOptions":               "Nodeforge does not set CPU options (nested virtualization)",
	"detailedMonitoring":       "Nodeforge launches instances with basic (5-minute) CloudWatch monitoring",
	"instanceStorePolicy":      "Nodeforge does not set up instance store volumes and plans ephemeral storage from the root volume; a NodeConfig in userData can still ask nodeadm for RAID0 (spec.instance.localStorage.strategy)",
	"ipPrefixCount":            "Nodeforge does not assign IPv4 prefixes to the instances' network interfaces",
	"networkInterfaces":        "Nodeforge launches instances with their primary network interface only (no EFA interfaces)",
	"placementGroupSelector":   "Nodeforge does not launch into placement groups",
}

// kubeletViaNodeConfig is why a kubelet setting Nodeforge lacks is left
// behind, and where it can go instead.
const kubeletViaNodeConfig = "Nodeforge sets the kubelet's maxPods, podsPerCore, kubeReserved, systemReserved and evictionHard only; put this setting in a NodeConfig in userData (spec.kubelet.config, which nodeadm merges into the kubelet's configuration)"

// kubeletLeftBehind are the settings of Karpenter's kubelet block
// (KubeletConfiguration of karpenter.k8s.aws/v1: clusterDNS, maxPods,
// podsPerCore, systemReserved, kubeReserved, evictionHard, evictionSoft,
// evictionSoftGracePeriod, evictionMaxPodGracePeriod,
// imageGCHighThresholdPercent, imageGCLowThresholdPercent, cpuCFSQuota)
// that Nodeforge does not have. Any other field (later Karpenter releases
// take any field of the kubelet's configuration) is left behind too.
var kubeletLeftBehind = map[string]string{
	"clusterDNS":                  kubeletViaNodeConfig,
	"cpuCFSQuota":                 kubeletViaNodeConfig,
	"evictionMaxPodGracePeriod":   kubeletViaNodeConfig,
	"evictionSoft":                kubeletViaNodeConfig,
	"evictionSoftGracePeriod":     kubeletViaNodeConfig,
	"imageGCHighThresholdPercent": kubeletViaNodeConfig,
	"imageGCLowThresholdPercent":  kubeletViaNodeConfig,
}

// The value rules of Nodeforge's EC2NodeClass (apis/v1alpha1).
var (
	subnetID      = regexp.MustCompile(`^subnet-[0-9a-z]+$`)
	securityGroup = regexp.MustCompile(`^sg-[0-9a-z]+$`)
	imageID       = regexp.MustCompile(`^ami-[0-9a-z]+$`)
	imageOwner    = regexp.MustCompile(`^([0-9]{12}|self|amazon)$`)
	imageAlias    = regexp.MustCompile(`^al2023@(latest|v[0-9]{8})$`)
	reservationID = regexp.MustCompile(`^cr-[0-9a-z]+$`)
	accountID     = regexp.MustCompile(`^[0-9]{12}$`)
	deviceName    = regexp.MustCompile(`^/dev/[a-z0-9]+$`)
	roleName      = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)
	roleARN       = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/([\w+=,.@-]+/)*[\w+=,.@-]{1,64}$`)
	percentage    = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?%$`)
)

// Image families: Karpenter's amiFamily values, and the family of an
// alias (al2023@latest is AL2023's). Nodeforge boots Amazon Linux 2023.
const (
	familyAL2023 = "AL2023"
	familyCustom = "Custom"
)

var aliasFamilies = map[string]string{
	"al2": "AL2", "al2023": familyAL2023, "bottlerocket": "Bottlerocket",
	"windows2019": "Windows2019", "windows2022": "Windows2022", "windows2025": "Windows2025",
}

func (c *converter) ec2NodeClass(src fields) map[string]any {
	out := map[string]any{"apiVersion": nodeforgeVersion, "kind": "EC2NodeClass", "metadata": c.metadata(src)}
	spec, _ := src.object("spec")
	outSpec := map[string]any{}

	family, hasFamily := spec.str("amiFamily")
	terms, aliasFamily := c.amiSelectorTerms(spec)
	if !hasFamily {
		family = aliasFamily
	}
	switch {
	case family == familyAL2023:
		if hasFamily {
			c.carry(family) // what Nodeforge boots
		}
	case family == familyCustom:
		c.drop(spec.at("amiFamily"), "Karpenter writes no user data of its own for Custom images; Nodeforge adds the NodeConfig that joins the node after the class's userData, so the images must run nodeadm (Amazon Linux 2023): check them and the userData")
	default:
		if hasFamily {
			c.drop(spec.at("amiFamily"), fmt.Sprintf("amiFamily %s: Nodeforge boots Amazon Linux 2023 only, with nodeadm's NodeConfig user data", family))
		}
		images := fmt.Sprintf("its images are %s's", family)
		if family == "" {
			images = "it names no image family (amiFamily, or an alias)"
		}
		c.skip(images + ", and Nodeforge boots Amazon Linux 2023 only: write an AL2023 class by hand (the fields reported above tell what else differs); NodePools that refer to this class launch nothing until it exists")
	}
	if len(terms) > 0 {
		outSpec["amiSelectorTerms"] = terms
	} else {
		c.skip("no amiSelectorTerms term could be carried over, and Nodeforge needs one")
	}

	if terms := c.capacityReservationTerms(spec); len(terms) > 0 {
		outSpec["capacityReservationSelectorTerms"] = terms
	}
	for _, sel := range []struct {
		name string
		term func(fields) map[string]any
	}{
		{"subnetSelectorTerms", c.subnetTerm},
		{"securityGroupSelectorTerms", c.securityGroupTerm},
	} {
		list, _ := spec.list(sel.name)
		var kept []any
		for i, v := range list {
			if t, ok := spec.item(spec.at(sel.name).Index(i), v); ok {
				if conv := sel.term(t); conv != nil {
					kept = append(kept, c.carry(conv))
				}
			}
		}
		if len(kept) == 0 {
			c.skip(fmt.Sprintf("no %s term could be carried over, and Nodeforge needs one", sel.name))
			continue
		}
		outSpec[sel.name] = kept
	}

	role, hasRole := spec.str("role")
	profile, hasProfile := spec.str("instanceProfile")
	switch {
	case hasRole && hasProfile, !hasRole && !hasProfile:
		c.skip("it needs exactly one of role and instanceProfile")
	case hasRole && !roleName.MatchString(role) && !roleARN.MatchString(role):
		c.drop(spec.at("role"), fmt.Sprintf("%q is neither an IAM role name nor a role ARN", role))
		c.skip("its role cannot be carried over")
	case hasRole:
		outSpec["role"] = c.carry(role)
	case len(profile) < 1 || len(profile) > 128:
		c.drop(spec.at("instanceProfile"), "an instance profile name is 1 to 128 characters")
		c.skip("its instance profile cannot be carried over")
	default:
		outSpec["instanceProfile"] = c.carry(profile)
	}

	if ud, ok := spec.str("userData"); ok {
		if conv, ok := c.userData(spec.at("userData"), ud, family); ok {
			outSpec["userData"] = conv
		}
	}
	if tags := c.tags(spec); len(tags) > 0 {
		outSpec["tags"] = tags
	}
	if mo := c.metadataOptions(spec); len(mo) > 0 {
		outSpec["metadataOptions"] = mo
	}
	if bdms := c.blockDeviceMappings(spec, family); len(bdms) > 0 {
		outSpec["blockDeviceMappings"] = bdms
	}
	if kubelet := c.kubelet(spec); len(kubelet) > 0 {
		outSpec["kubelet"] = kubelet
	}
	spec.leftBehind(classFieldsLeftBehind)
	spec.rest()
	src.rest()
	out["spec"] = outSpec
	return out
}

// amiSelectorTerms converts the image selector terms, and says the
// family of an alias among them.
func (c *converter) amiSelectorTerms(spec fields) ([]any, string) {
	list, _ := spec.list("amiSelectorTerms")
	var kept []any
	aliasFamily := ""
	for i, v := range list {
		t, ok := spec.item(spec.at("amiSelectorTerms").Index(i), v)
		if !ok {
			continue
		}
		alias, hasAlias := t.str("alias")
		id, hasID := t.str("id")
		name, hasName := t.str("name")
		owner, hasOwner := t.str("owner")
		_, tags, hasTags := t.stringMap("tags")
		param, hasParam := t.str("ssmParameter")
		t.rest()
		if hasAlias {
			aliasFamily = aliasFamilies[strings.ToLower(strings.SplitN(alias, "@", 2)[0])]
		}
		var why string
		at := t.path
		switch {
		case hasParam:
			at = t.at("ssmParameter")
			why = fmt.Sprintf("Nodeforge reads SSM parameters for its al2023 aliases only: select the image the parameter names by id (aws ssm get-parameter --name %s), or use alias al2023@latest for the EKS-optimised Amazon Linux 2023 images; the term is dropped", param)
		case hasAlias && aliasFamily != familyAL2023:
			at = t.at("alias")
			why = fmt.Sprintf("alias %s: Nodeforge boots Amazon Linux 2023 only (al2023@latest, al2023@vYYYYMMDD)", alias)
		case hasAlias && !imageAlias.MatchString(alias):
			at = t.at("alias")
			why = fmt.Sprintf("alias %s: Nodeforge's aliases are al2023@latest and al2023@vYYYYMMDD", alias)
		case hasAlias && (hasID || hasName || hasOwner || hasTags):
			why = "an alias cannot be combined with id, name, owner or tags"
		case hasID && !imageID.MatchString(id):
			at = t.at("id")
			why = fmt.Sprintf("%q is not an image id", id)
		case hasID && (hasName || hasOwner || hasTags):
			why = "an id cannot be combined with name, owner or tags"
		case hasOwner && !imageOwner.MatchString(owner):
			at = t.at("owner")
			why = fmt.Sprintf("owner %q: Nodeforge's owners are an account id, self or amazon; select the images by id instead", owner)
		case hasName && len(name) > 128:
			at = t.at("name")
			why = "an image name pattern is at most 128 characters"
		case hasTags && (len(tags) == 0 || len(tags) > 20 || emptyKeyOrValue(tags)):
			at = t.at("tags")
			why = "tags are 1 to 20, with keys and values not empty"
		case !hasAlias && !hasID && !hasName && !hasTags:
			why = "it selects nothing (no alias, id, name or tags)"
		}
		if why != "" {
			if !strings.Contains(why, "the term is dropped") {
				why += "; the term is dropped"
			}
			c.drop(at, why)
			continue
		}
		term := map[string]any{}
		for k, v := range map[string]string{"alias": alias, "id": id, "name": name, "owner": owner} {
			if v != "" {
				term[k] = v
			}
		}
		if hasTags {
			term["tags"] = anyMap(tags)
		}
		kept = append(kept, c.carry(term))
	}
	if len(kept) > 1 && slices.ContainsFunc(kept, func(t any) bool { _, ok := t.(map[string]any)["alias"]; return ok }) {
		c.drop(spec.at("amiSelectorTerms"), "an alias must be the only term")
		return nil, aliasFamily
	}
	return kept, aliasFamily
}

func emptyKeyOrValue(tags map[string]string) bool {
	for k, v := range tags {
		if k == "" || v == "" {
			return true
		}
	}
	return false
}

// subnetTerm converts a subnet selector term (tags or id), or reports why
// not.
func (c *converter) subnetTerm(t fields) map[string]any {
	id, hasID := t.str("id")
	_, tags, hasTags := t.stringMap("tags")
	t.rest()
	switch {
	case hasID == hasTags:
		c.drop(t.path, "a subnet term sets exactly one of tags and id; the term is dropped")
	case hasID && !subnetID.MatchString(id):
		c.drop(t.at("id"), fmt.Sprintf("%q is not a subnet id; the term is dropped", id))
	case hasTags && (len(tags) == 0 || len(tags) > 20 || emptyKeyOrValue(tags)):
		c.drop(t.at("tags"), "tags are 1 to 20, with keys and values not empty; the term is dropped")
	case hasID:
		return map[string]any{"id": id}
	default:
		return map[string]any{"tags": anyMap(tags)}
	}
	return nil
}

// securityGroupTerm converts a security group selector term (tags, id or
// name), or reports why not.
func (c *converter) securityGroupTerm(t fields) map[string]any {
	id, hasID := t.str("id")
	name, hasName := t.str("name")
	_, tags, hasTags := t.stringMap("tags")
	t.rest()
	n := 0
	for _, has := range []bool{hasID, hasName, hasTags} {
		if has {
			n++
		}
	}
	switch {
	case n != 1:
		c.drop(t.path, "a security group term sets exactly one of tags, id and name; the term is dropped")
	case hasID && !securityGroup.MatchString(id):
		c.drop(t.at("id"), fmt.Sprintf("%q is not a security group id; the term is dropped", id))
	case hasName && (len(name) < 1 || len(name) > 255):
		c.drop(t.at("name"), "a security group name is 1 to 255 characters; the term is dropped")
	case hasTags && (len(tags) == 0 || len(tags) > 20 || emptyKeyOrValue(tags)):
		c.drop(t.at("tags"), "tags are 1 to 20, with keys and values not empty; the term is dropped")
	case hasID:
		return map[string]any{"id": id}
	case hasName:
		return map[string]any{"name": name}
	default:
		return map[string]any{"tags": anyMap(tags)}
	}
	return nil
}

// capacityReservationTerms converts the capacity reservation selector
// terms: an id alone, or tags and/or instanceMatchCriteria with an
// optional ownerID, as both APIs take them. A term that cannot be carried
// over is dropped and reported; the class then launches into fewer
// reservations than Karpenter's did, never more.
func (c *converter) capacityReservationTerms(spec fields) []any {
	list, ok := spec.list("capacityReservationSelectorTerms")
	if !ok {
		return nil
	}
	var kept []any
	for i, v := range list {
		t, ok := spec.item(spec.at("capacityReservationSelectorTerms").Index(i), v)
		if !ok {
			continue
		}
		id, hasID := t.str("id")
		owner, hasOwner := t.str("ownerID")
		criteria, hasCriteria := t.str("instanceMatchCriteria")
		_, tags, hasTags := t.stringMap("tags")
		t.rest()
		at, why := t.path, ""
		switch {
		case hasID && (hasTags || hasOwner || hasCriteria):
			why = "an id cannot be combined with tags, ownerID or instanceMatchCriteria"
		case !hasID && !hasTags && !hasCriteria:
			why = "it selects nothing (no id, tags or instanceMatchCriteria)"
		case hasID && !reservationID.MatchString(id):
			at, why = t.at("id"), fmt.Sprintf("%q is not a capacity reservation id", id)
		case hasOwner && !accountID.MatchString(owner):
			at, why = t.at("ownerID"), fmt.Sprintf("%q is not an account id (12 digits)", owner)
		case hasCriteria && criteria != "open" && criteria != "targeted":
			at, why = t.at("instanceMatchCriteria"), fmt.Sprintf("%q is neither open nor targeted", criteria)
		case hasTags && (len(tags) == 0 || len(tags) > 20 || emptyKeyOrValue(tags)):
			at, why = t.at("tags"), "tags are 1 to 20, with keys and values not empty"
		case len(kept) == 30:
			why = "Nodeforge takes at most 30 terms"
		}
		if why != "" {
			c.drop(at, why+"; the term is dropped")
			continue
		}
		term := map[string]any{}
		for k, v := range map[string]string{"id": id, "ownerID": owner, "instanceMatchCriteria": criteria} {
			if v != "" {
				term[k] = v
			}
		}
		if hasTags {
			term["tags"] = anyMap(tags)
		}
		kept = append(kept, c.carry(term))
	}
	return kept
}

// tags converts the tags of the instances, volumes and launch templates.
func (c *converter) tags(spec fields) map[string]any {
	keys, tags, _ := spec.stringMap("tags")
	out := map[string]any{}
	for _, k := range keys {
		p := spec.at("tags").Key(k)
		v := tags[k]
		switch {
		case k == "Name":
			c.drop(p, "Nodeforge names each instance after its NodeClaim (the Name tag), over the class's tag")
		case v1alpha1.IsReservedKey(k), strings.HasPrefix(k, "kubernetes.io/cluster/"), strings.HasPrefix(k, "aws:"), k == "eks:eks-cluster-name":
			c.drop(p, "Nodeforge and AWS set tags with this key themselves")
		case len(k) < 1 || len(k) > 128 || len(v) > 256:
			c.drop(p, "tag keys are 1 to 128 characters and values at most 256")
		case len(out) == 40:
			c.drop(p, "Nodeforge takes at most 40 tags")
		default:
			out[k] = c.carry(v)
		}
	}
	return out
}

// metadataOptions converts the instance metadata service's options.
func (c *converter) metadataOptions(spec fields) map[string]any {
	mo, ok := spec.object("metadataOptions")
	if !ok {
		return nil
	}
	out := map[string]any{}
	for name, allowed := range map[string][]string{
		"httpEndpoint":     {"enabled", "disabled"},
		"httpProtocolIPv6": {"enabled", "disabled"},
		"httpTokens":       {"required", "optional"},
	} {
		if v, ok := mo.str(name); ok {
			if slices.Contains(allowed, v) {
				out[name] = c.carry(v)
			} else {
				c.drop(mo.at(name), fmt.Sprintf("%q is not one of %s", v, strings.Join(allowed, ", ")))
			}
		}
	}
	if n, ok := mo.integer("httpPutResponseHopLimit"); ok {
		if n >= 1 && n <= 64 {
			out["httpPutResponseHopLimit"] = c.carry(n)
		} else {
			c.drop(mo.at("httpPutResponseHopLimit"), "the hop limit is from 1 to 64")
		}
	}
	mo.rest()
	return out
}

// ebsFieldsLeftBehind are fields of Karpenter's EBS volumes that
// Nodeforge's lack.
var ebsFieldsLeftBehind = map[string]string{
	"snapshotID":               "Nodeforge does not create volumes from snapshots: the volume is created empty",
	"volumeInitializationRate": "Nodeforge creates volumes empty, with nothing to initialize from a snapshot",
}

// blockDeviceMappings converts the instances' volumes. With no root
// volume marked, Karpenter counts the ephemeral storage of an AL2023
// node on /dev/xvda, the image's root device; Nodeforge on the root
// volume, so that mapping is marked the root volume.
func (c *converter) blockDeviceMappings(spec fields, family string) []any {
	list, ok := spec.list("blockDeviceMappings")
	if !ok {
		return nil
	}
	var kept []any
	for i, v := range list {
		m, ok := spec.item(spec.at("blockDeviceMappings").Index(i), v)
		if !ok {
			continue
		}
		if conv := c.blockDeviceMapping(m); conv != nil {
			if len(kept) == 10 {
				c.drop(m.path, "Nodeforge takes at most 10 block device mappings")
				continue
			}
			kept = append(kept, conv)
		}
	}
	hasRoot := slices.ContainsFunc(kept, func(m any) bool { return m.(map[string]any)["rootVolume"] == true })
	if !hasRoot && family == familyAL2023 {
		for _, m := range kept {
			if mm := m.(map[string]any); mm["deviceName"] == "/dev/xvda" {
				mm["rootVolume"] = true
				break
			}
		}
	}
	return kept
}

func (c *converter) blockDeviceMapping(m fields) map[string]any {
	name, hasName := m.str("deviceName")
	root, hasRoot := m.boolean("rootVolume")
	ebs, hasEBS := m.object("ebs")
	m.rest()
	out := map[string]any{}
	outEBS := map[string]any{}
	if v, ok := ebs.take("volumeSize"); ok {
		if gib, err := toGiB(v); err != nil {
			c.drop(ebs.at("volumeSize"), err.Error())
		} else {
			outEBS["volumeSize"] = gib
		}
	}
	_, typed := ebs.m["volumeType"]
	if t, ok := ebs.str("volumeType"); ok {
		if slices.Contains([]string{"gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"}, t) {
			outEBS["volumeType"] = t
		} else {
			c.drop(ebs.at("volumeType"), fmt.Sprintf("%q is not an EBS volume type", t))
		}
	}
	volumeType, _ := outEBS["volumeType"].(string)
	if n, ok := ebs.integer("iops"); ok {
		switch {
		case n < 100 || n > 256000:
			c.drop(ebs.at("iops"), "Nodeforge's iops are from 100 to 256000")
		case !slices.Contains([]string{"", "gp3", "io1", "io2"}, volumeType):
			c.drop(ebs.at("iops"), "iops are set on gp3, io1 and io2 volumes only")
		default:
			outEBS["iops"] = n
		}
	}
	if n, ok := ebs.integer("throughput"); ok {
		switch {
		case n < 125 || n > 2000:
			c.drop(ebs.at("throughput"), "Nodeforge's throughput is from 125 to 2000 MiB/s")
		case volumeType != "" && volumeType != "gp3":
			c.drop(ebs.at("throughput"), "throughput is set on gp3 volumes only")
		default:
			outEBS["throughput"] = n
		}
	}
	_, encryption := ebs.m["encrypted"]
	for _, f := range []string{"encrypted", "deleteOnTermination"} {
		if b, ok := ebs.boolean(f); ok {
			outEBS[f] = b
		}
	}
	if k, ok := ebs.str("kmsKeyID"); ok {
		outEBS["kmsKeyID"] = k
	}
	ebs.leftBehind(ebsFieldsLeftBehind)
	ebs.rest()
	var why string
	switch {
	case !hasName:
		why = "it has no deviceName"
	case !deviceName.MatchString(name):
		why = fmt.Sprintf("device name %q is not /dev/ and letters and digits", name)
	case !hasEBS:
		why = "it has no ebs volume"
	case outEBS["volumeSize"] == nil:
		why = "its ebs volume has no volumeSize (Karpenter took the snapshot's size), and Nodeforge needs one: give it the size"
	}
	if why != "" {
		c.drop(m.path, why+"; the mapping is dropped")
		return nil
	}
	// Absent differs: Karpenter sends none, and EC2's defaults apply;
	// Nodeforge's API defaults them.
	if !typed {
		c.drop(ebs.at("volumeType"), "not set: Karpenter leaves the volume type to EC2's default, Nodeforge's default is gp3; set volumeType to choose")
	}
	if !encryption {
		c.drop(ebs.at("encrypted"), "not set: Karpenter leaves encryption to the account's EBS default, Nodeforge encrypts unless encrypted is false; set encrypted to choose")
	}
	out["deviceName"] = name
	if hasRoot && root {
		out["rootVolume"] = true
	}
	out["ebs"] = outEBS
	c.carry(outEBS)
	c.carry(name)
	if hasRoot {
		c.carry(root)
	}
	return out
}

// toGiB is a Karpenter volume size (a quantity, "20Gi") in whole GiB,
// rounded up as Karpenter rounds it.
func toGiB(v any) (int64, error) {
	q, err := resource.ParseQuantity(fmt.Sprint(v))
	if err != nil {
		return 0, fmt.Errorf("volume size %v is not a quantity: %w", v, err)
	}
	gib := int64(math.Ceil(q.AsApproximateFloat64() / (1 << 30)))
	if gib < 1 || gib > 65536 {
		return 0, fmt.Errorf("volume size %v: Nodeforge's volumes are 1 to 65536 GiB", v)
	}
	return gib, nil
}

// kubelet converts the kubelet settings Nodeforge has.
func (c *converter) kubelet(spec fields) map[string]any {
	k, ok := spec.object("kubelet")
	if !ok {
		return nil
	}
	out := map[string]any{}
	if n, ok := k.integer("maxPods"); ok {
		if n >= 1 && n <= 737 {
			out["maxPods"] = c.carry(n)
		} else {
			c.drop(k.at("maxPods"), fmt.Sprintf("maxPods %d: Nodeforge's is from 1 to 737", n))
		}
	}
	if n, ok := k.integer("podsPerCore"); ok {
		if n >= 1 && n <= 1000 {
			out["podsPerCore"] = c.carry(n)
		} else {
			c.drop(k.at("podsPerCore"), fmt.Sprintf("podsPerCore %d: Nodeforge's is from 1 to 1000", n))
		}
	}
	reservable := []string{"cpu", "memory", "ephemeral-storage", "pid"}
	for _, name := range []string{"kubeReserved", "systemReserved"} {
		if m := c.kubeletValues(k, name, reservable, false); len(m) > 0 {
			out[name] = m
		}
	}
	signals := []string{"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree", "pid.available"}
	if m := c.kubeletValues(k, "evictionHard", signals, true); len(m) > 0 {
		out["evictionHard"] = m
	}
	k.leftBehind(kubeletLeftBehind)
	for _, name := range slices.Sorted(maps.Keys(k.m)) {
		k.take(name)
		c.drop(k.at(name), kubeletViaNodeConfig)
	}
	return out
}

// kubeletValues converts a map of quantities (or, with percent, of
// percentages too) whose keys must be among keys.
func (c *converter) kubeletValues(k fields, name string, keys []string, percent bool) map[string]any {
	names, m, ok := k.stringMap(name)
	if !ok {
		return nil
	}
	out := map[string]any{}
	for _, key := range names {
		v := m[key]
		p := k.at(name).Key(key)
		q, err := resource.ParseQuantity(v)
		switch {
		case !slices.Contains(keys, key):
			c.drop(p, fmt.Sprintf("Nodeforge's %s keys are %s", name, strings.Join(keys, ", ")))
		case len(v) > 32:
			c.drop(p, "at most 32 characters")
		case percent && percentage.MatchString(v):
			out[key] = c.carry(v)
		case err != nil || q.Sign() < 0:
			c.drop(p, fmt.Sprintf("%q is not a quantity of 0 or more", v))
		default:
			out[key] = c.carry(v)
		}
	}
	return out
}
