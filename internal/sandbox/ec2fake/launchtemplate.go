package ec2fake

import (
	"encoding/base64"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LaunchTemplate is a launch template as the fake keeps it: the fields a
// launch reads, decoded, and every LaunchTemplateData parameter as it was
// sent, so a test can check any of them. Only version 1 exists: the fake has
// no CreateLaunchTemplateVersion.
type LaunchTemplate struct {
	ID         string
	Name       string
	CreateTime time.Time
	Tags       map[string]string // tags of the template itself

	ImageID                string
	InstanceType           string
	UserData               string // decoded from base64
	SecurityGroupIDs       []string
	IAMInstanceProfileName string
	IAMInstanceProfileARN  string
	BlockDeviceMappings    []BlockDeviceMapping
	MetadataOptions        *MetadataOptions
	// TagSpecifications is resource type ("instance", "volume", …) -> tags
	// to put on the resources launched from the template.
	TagSpecifications map[string]map[string]string
	// Data is every LaunchTemplateData.* parameter with that prefix removed,
	// e.g. "ImageId", "BlockDeviceMapping.1.Ebs.VolumeSize".
	Data url.Values
}

// BlockDeviceMapping is an EBS block device of a launch template.
type BlockDeviceMapping struct {
	DeviceName          string
	VolumeSizeGiB       int32
	VolumeType          string
	IOPS                int32
	Throughput          int32
	Encrypted           *bool
	DeleteOnTermination *bool
	KMSKeyID            string
	SnapshotID          string
}

// MetadataOptions are a launch template's instance metadata service options.
type MetadataOptions struct {
	HTTPTokens              string // "optional" or "required"
	HTTPPutResponseHopLimit int32
	HTTPEndpoint            string // "enabled" or "disabled"
	HTTPProtocolIPv6        string
	InstanceMetadataTags    string
}

// EFAInterfaces counts the template's network interfaces of type efa.
func (lt *LaunchTemplate) EFAInterfaces() int {
	n := 0
	for key, values := range lt.Data {
		if strings.HasPrefix(key, "NetworkInterface.") && strings.HasSuffix(key, ".InterfaceType") && slices.Contains(values, "efa") {
			n++
		}
	}
	return n
}

func (lt *LaunchTemplate) clone() LaunchTemplate {
	c := *lt
	c.Tags = maps.Clone(lt.Tags)
	c.SecurityGroupIDs = slices.Clone(lt.SecurityGroupIDs)
	c.BlockDeviceMappings = slices.Clone(lt.BlockDeviceMappings)
	if lt.MetadataOptions != nil {
		md := *lt.MetadataOptions
		c.MetadataOptions = &md
	}
	c.TagSpecifications = map[string]map[string]string{}
	for k, v := range lt.TagSpecifications {
		c.TagSpecifications[k] = maps.Clone(v)
	}
	c.Data = url.Values{}
	for k, v := range lt.Data {
		c.Data[k] = slices.Clone(v)
	}
	return c
}

// --- XML shapes shared by the launch template actions ---

type launchTemplateXML struct {
	LaunchTemplateID     string   `xml:"launchTemplateId"`
	LaunchTemplateName   string   `xml:"launchTemplateName"`
	CreateTime           ec2Time  `xml:"createTime"`
	CreatedBy            string   `xml:"createdBy"`
	DefaultVersionNumber int64    `xml:"defaultVersionNumber"`
	LatestVersionNumber  int64    `xml:"latestVersionNumber"`
	Tags                 []xmlTag `xml:"tagSet>item"`
}

func (s *Server) templateXML(lt *LaunchTemplate) launchTemplateXML {
	return launchTemplateXML{
		LaunchTemplateID: lt.ID, LaunchTemplateName: lt.Name, CreateTime: ec2Time(lt.CreateTime),
		CreatedBy:            s.callerARN(),
		DefaultVersionNumber: 1, LatestVersionNumber: 1, Tags: tagSet(lt.Tags),
	}
}

// callerARN is who the fake says made a call; there is only one caller.
func (s *Server) callerARN() string { return "arn:aws:iam::" + s.world.AccountID + ":user/ec2fake" }

type launchTemplateVersionXML struct {
	LaunchTemplateID   string                `xml:"launchTemplateId"`
	LaunchTemplateName string                `xml:"launchTemplateName"`
	VersionNumber      int64                 `xml:"versionNumber"`
	CreateTime         ec2Time               `xml:"createTime"`
	CreatedBy          string                `xml:"createdBy"`
	DefaultVersion     bool                  `xml:"defaultVersion"`
	Data               launchTemplateDataXML `xml:"launchTemplateData"`
}

type launchTemplateDataXML struct {
	ImageID             string           `xml:"imageId,omitempty"`
	InstanceType        string           `xml:"instanceType,omitempty"`
	UserData            string           `xml:"userData,omitempty"`
	SecurityGroupIDs    []string         `xml:"securityGroupIdSet>item"`
	IAMInstanceProfile  *iamProfileXML   `xml:"iamInstanceProfile,omitempty"`
	BlockDeviceMappings []blockDeviceXML `xml:"blockDeviceMappingSet>item"`
	MetadataOptions     *metadataXML     `xml:"metadataOptions,omitempty"`
	TagSpecifications   []ltTagSpecXML   `xml:"tagSpecificationSet>item"`
}

type iamProfileXML struct {
	Arn  string `xml:"arn,omitempty"`
	Name string `xml:"name,omitempty"`
}

type blockDeviceXML struct {
	DeviceName string `xml:"deviceName"`
	EBS        struct {
		VolumeSize          int32  `xml:"volumeSize,omitempty"`
		VolumeType          string `xml:"volumeType,omitempty"`
		IOPS                int32  `xml:"iops,omitempty"`
		Throughput          int32  `xml:"throughput,omitempty"`
		Encrypted           *bool  `xml:"encrypted,omitempty"`
		DeleteOnTermination *bool  `xml:"deleteOnTermination,omitempty"`
		KMSKeyID            string `xml:"kmsKeyId,omitempty"`
		SnapshotID          string `xml:"snapshotId,omitempty"`
	} `xml:"ebs"`
}

type metadataXML struct {
	State                   string `xml:"state,omitempty"`
	HTTPTokens              string `xml:"httpTokens,omitempty"`
	HTTPPutResponseHopLimit int32  `xml:"httpPutResponseHopLimit,omitempty"`
	HTTPEndpoint            string `xml:"httpEndpoint,omitempty"`
	HTTPProtocolIPv6        string `xml:"httpProtocolIpv6,omitempty"`
	InstanceMetadataTags    string `xml:"instanceMetadataTags,omitempty"`
}

type ltTagSpecXML struct {
	ResourceType string   `xml:"resourceType"`
	Tags         []xmlTag `xml:"tagSet>item"`
}

func (s *Server) versionXML(lt *LaunchTemplate) launchTemplateVersionXML {
	d := launchTemplateDataXML{
		ImageID:          lt.ImageID,
		InstanceType:     lt.InstanceType,
		UserData:         lt.Data.Get("UserData"), // echoed as sent, base64
		SecurityGroupIDs: lt.SecurityGroupIDs,
	}
	if lt.IAMInstanceProfileARN != "" || lt.IAMInstanceProfileName != "" {
		d.IAMInstanceProfile = &iamProfileXML{Arn: lt.IAMInstanceProfileARN, Name: lt.IAMInstanceProfileName}
	}
	for _, b := range lt.BlockDeviceMappings {
		x := blockDeviceXML{DeviceName: b.DeviceName}
		x.EBS.VolumeSize, x.EBS.VolumeType, x.EBS.IOPS, x.EBS.Throughput = b.VolumeSizeGiB, b.VolumeType, b.IOPS, b.Throughput
		x.EBS.Encrypted, x.EBS.DeleteOnTermination, x.EBS.KMSKeyID, x.EBS.SnapshotID = b.Encrypted, b.DeleteOnTermination, b.KMSKeyID, b.SnapshotID
		d.BlockDeviceMappings = append(d.BlockDeviceMappings, x)
	}
	if md := lt.MetadataOptions; md != nil {
		d.MetadataOptions = &metadataXML{
			State: "applied", HTTPTokens: md.HTTPTokens, HTTPPutResponseHopLimit: md.HTTPPutResponseHopLimit,
			HTTPEndpoint: md.HTTPEndpoint, HTTPProtocolIPv6: md.HTTPProtocolIPv6, InstanceMetadataTags: md.InstanceMetadataTags,
		}
	}
	for _, rt := range sortedKeys(lt.TagSpecifications) {
		d.TagSpecifications = append(d.TagSpecifications, ltTagSpecXML{ResourceType: rt, Tags: tagSet(lt.TagSpecifications[rt])})
	}
	return launchTemplateVersionXML{
		LaunchTemplateID: lt.ID, LaunchTemplateName: lt.Name, VersionNumber: 1,
		CreateTime: ec2Time(lt.CreateTime), CreatedBy: s.callerARN(), DefaultVersion: true, Data: d,
	}
}

// --- CreateLaunchTemplate ---

type createLaunchTemplateResponse struct {
	meta
	LaunchTemplate launchTemplateXML `xml:"launchTemplate"`
}

// templateName is EC2's rule for launch template names.
var templateName = regexp.MustCompile(`^[a-zA-Z0-9().\-/_]{3,128}$`)

// maxUserData is EC2's limit on user data before base64 encoding.
const maxUserData = 16 * 1024

func (s *Server) createLaunchTemplate(q query) (response, error) {
	lt, err := s.parseLaunchTemplate(q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The SDK fills in ClientToken when the caller does not, so a retried
	// create (say after a timeout) finds the template it already made
	// instead of failing with AlreadyExists.
	token := q.get("ClientToken")
	if rec, ok := s.templateTokens[token]; ok && token != "" {
		if rec.fingerprint != fingerprint(q) {
			return nil, badRequest("IdempotentParameterMismatch", "The client token %s has already been used with different parameters.", token)
		}
		if existing := s.templateByID(rec.id); existing != nil {
			return &createLaunchTemplateResponse{LaunchTemplate: s.templateXML(existing)}, nil
		}
	}
	if s.templateByName(lt.Name) != nil {
		return nil, badRequest("InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
	}
	lt.ID = newID("lt")
	lt.CreateTime = s.now()
	s.templates = append(s.templates, lt)
	if token != "" {
		s.templateTokens[token] = tokenRecord{id: lt.ID, fingerprint: fingerprint(q)}
	}
	return &createLaunchTemplateResponse{LaunchTemplate: s.templateXML(lt)}, nil
}

func (s *Server) parseLaunchTemplate(q query) (*LaunchTemplate, error) {
	name := q.get("LaunchTemplateName")
	if name == "" {
		return nil, badRequest("MissingParameter", "The request must contain the parameter LaunchTemplateName")
	}
	if !templateName.MatchString(name) {
		return nil, badRequest("InvalidLaunchTemplateName.MalformedException",
			"A launch template name must be between 3 and 128 characters, and may contain letters, numbers, and the following characters: - ( ) . / _.")
	}
	const prefix = "LaunchTemplateData."
	data := url.Values{}
	for k, v := range q {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			data[rest] = slices.Clone(v)
		}
	}
	if len(data) == 0 {
		return nil, badRequest("MissingParameter", "No launch template data was provided. Launch template data is required to create a launch template.")
	}
	d := query(data)
	lt := &LaunchTemplate{
		Name:                   name,
		ImageID:                d.get("ImageId"),
		InstanceType:           d.get("InstanceType"),
		SecurityGroupIDs:       d.list("SecurityGroupId"),
		IAMInstanceProfileName: d.get("IamInstanceProfile.Name"),
		IAMInstanceProfileARN:  d.get("IamInstanceProfile.Arn"),
		Data:                   data,
	}
	if lt.ImageID != "" && !validID("ami", lt.ImageID) {
		return nil, badRequest("InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", lt.ImageID)
	}
	for _, id := range lt.SecurityGroupIDs {
		if !validID("sg", id) {
			return nil, badRequest("InvalidGroupId.Malformed", "Invalid id: \"%s\" (expecting \"sg-...\")", id)
		}
	}
	if ud := d.get("UserData"); ud != "" {
		raw, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, badRequest("InvalidUserData.Malformed", "Invalid BASE64 encoding of user data.")
		}
		if len(raw) > maxUserData {
			return nil, invalidParameter("User data is limited to %d bytes", maxUserData)
		}
		lt.UserData = string(raw)
	}
	for _, m := range d.members("BlockDeviceMapping") {
		b, err := parseBlockDevice(d, m)
		if err != nil {
			return nil, err
		}
		lt.BlockDeviceMappings = append(lt.BlockDeviceMappings, b)
	}
	switch pref := d.get("CapacityReservationSpecification.CapacityReservationPreference"); pref {
	case "", "capacity-reservations-only", "open", "none":
	default:
		return nil, invalidParameter("Value (%s) for parameter CapacityReservationPreference is invalid. Valid values are capacity-reservations-only, open, none.", pref)
	}
	if id := d.get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"); id != "" && !validID("cr", id) {
		return nil, badRequest("InvalidCapacityReservationId.Malformed", "Invalid id: \"%s\" (expecting \"cr-...\")", id)
	}
	md, err := parseMetadataOptions(d)
	if err != nil {
		return nil, err
	}
	lt.MetadataOptions = md
	if lt.TagSpecifications, err = d.tagSpecifications("TagSpecification", "instance", "volume", "network-interface", "spot-instances-request"); err != nil {
		return nil, err
	}
	own, err := q.tagSpecifications("TagSpecification", "launch-template")
	if err != nil {
		return nil, err
	}
	lt.Tags = own["launch-template"]
	if lt.Tags == nil {
		lt.Tags = map[string]string{}
	}
	return lt, nil
}

func parseBlockDevice(d query, m string) (BlockDeviceMapping, error) {
	b := BlockDeviceMapping{
		DeviceName: d.get(m + ".DeviceName"),
		VolumeType: d.get(m + ".Ebs.VolumeType"),
		KMSKeyID:   d.get(m + ".Ebs.KmsKeyId"),
		SnapshotID: d.get(m + ".Ebs.SnapshotId"),
	}
	if b.DeviceName == "" {
		return b, badRequest("MissingParameter", "The request must contain the parameter %s.DeviceName", m)
	}
	if b.VolumeType != "" && !slices.Contains([]string{"standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"}, b.VolumeType) {
		return b, invalidParameter("Value (%s) for parameter volumeType is invalid.", b.VolumeType)
	}
	for key, dst := range map[string]*int32{"VolumeSize": &b.VolumeSizeGiB, "Iops": &b.IOPS, "Throughput": &b.Throughput} {
		n, _, err := d.int(m + ".Ebs." + key)
		if err != nil {
			return b, err
		}
		*dst = int32(n)
	}
	for key, dst := range map[string]**bool{"Encrypted": &b.Encrypted, "DeleteOnTermination": &b.DeleteOnTermination} {
		if v := d.get(m + ".Ebs." + key); v != "" {
			bv, err := strconv.ParseBool(v)
			if err != nil {
				return b, invalidParameter("Value (%s) for parameter %s is invalid. Expected a boolean.", v, key)
			}
			*dst = &bv
		}
	}
	return b, nil
}

func parseMetadataOptions(d query) (*MetadataOptions, error) {
	present := false
	for k := range d {
		present = present || strings.HasPrefix(k, "MetadataOptions.")
	}
	if !present {
		return nil, nil
	}
	md := &MetadataOptions{
		HTTPTokens:           d.get("MetadataOptions.HttpTokens"),
		HTTPEndpoint:         d.get("MetadataOptions.HttpEndpoint"),
		HTTPProtocolIPv6:     d.get("MetadataOptions.HttpProtocolIpv6"),
		InstanceMetadataTags: d.get("MetadataOptions.InstanceMetadataTags"),
	}
	if md.HTTPTokens != "" && md.HTTPTokens != "optional" && md.HTTPTokens != "required" {
		return nil, invalidParameter("Value (%s) for parameter HttpTokens is invalid. Valid values are optional, required.", md.HTTPTokens)
	}
	for _, v := range []string{md.HTTPEndpoint, md.HTTPProtocolIPv6, md.InstanceMetadataTags} {
		if v != "" && v != "enabled" && v != "disabled" {
			return nil, invalidParameter("Value (%s) for a metadata option is invalid. Valid values are enabled, disabled.", v)
		}
	}
	hops, ok, err := d.int("MetadataOptions.HttpPutResponseHopLimit")
	if err != nil {
		return nil, err
	}
	if ok && (hops < 1 || hops > 64) {
		return nil, invalidParameter("Value (%d) for parameter HttpPutResponseHopLimit is invalid. Expecting a value between 1 and 64.", hops)
	}
	md.HTTPPutResponseHopLimit = int32(hops)
	return md, nil
}

// --- lookups ---

func (s *Server) templateByID(id string) *LaunchTemplate {
	for _, lt := range s.templates {
		if lt.ID == id {
			return lt
		}
	}
	return nil
}

func (s *Server) templateByName(name string) *LaunchTemplate {
	for _, lt := range s.templates {
		if lt.Name == name {
			return lt
		}
	}
	return nil
}

// findTemplate resolves a template given by ID or by name (exactly one),
// with EC2's error for each way of naming a template that does not exist.
func (s *Server) findTemplate(id, name string) (*LaunchTemplate, error) {
	switch {
	case id != "" && name != "":
		return nil, badRequest("InvalidParameterCombination", "The launch template ID and name cannot both be specified.")
	case id != "":
		if !validID("lt", id) {
			return nil, badRequest("InvalidLaunchTemplateId.Malformed", "The specified ID for the launch template (%s) is not valid.", id)
		}
		if lt := s.templateByID(id); lt != nil {
			return lt, nil
		}
		return nil, badRequest("InvalidLaunchTemplateId.NotFound", "The specified launch template, with template ID %s, does not exist.", id)
	case name != "":
		if lt := s.templateByName(name); lt != nil {
			return lt, nil
		}
		return nil, badRequest("InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", name)
	default:
		return nil, badRequest("MissingParameter", "The request must contain the parameter LaunchTemplateName or LaunchTemplateId")
	}
}

// checkVersion accepts the versions that resolve to version 1, the only one
// the fake keeps.
func checkVersion(lt *LaunchTemplate, v string) error {
	switch v {
	case "", "$Latest", "$Default", "1":
		return nil
	}
	if _, err := strconv.Atoi(v); err != nil {
		return invalidParameter("The launch template version %s is not valid.", v)
	}
	return badRequest("InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for launch template with ID %s.", v, lt.ID)
}

// --- DescribeLaunchTemplates ---

type describeLaunchTemplatesResponse struct {
	meta
	LaunchTemplates []launchTemplateXML `xml:"launchTemplates>item"`
	NextToken       string              `xml:"nextToken,omitempty"`
}

func (s *Server) describeLaunchTemplates(q query) (response, error) {
	filters, err := q.filters(append([]string{"launch-template-name"}, tagFilters...)...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, names := q.list("LaunchTemplateId"), q.list("LaunchTemplateName")
	for _, id := range ids {
		if _, err := s.findTemplate(id, ""); err != nil {
			return nil, err
		}
	}
	for _, name := range names {
		if s.templateByName(name) == nil {
			return nil, badRequest("InvalidLaunchTemplateName.NotFoundException", "At least one of the launch templates specified in the request does not exist.")
		}
	}
	var matched []*LaunchTemplate
	for _, lt := range s.templates {
		if (len(ids) > 0 || len(names) > 0) && !slices.Contains(ids, lt.ID) && !slices.Contains(names, lt.Name) {
			continue
		}
		if (attrs{"launch-template-name": {lt.Name}}).withTags(lt.Tags).matches(filters) {
			matched = append(matched, lt)
		}
	}
	page, next, err := paginate(q, matched, pageLimits{min: 1, max: 200})
	if err != nil {
		return nil, err
	}
	out := &describeLaunchTemplatesResponse{NextToken: next}
	for _, lt := range page {
		out.LaunchTemplates = append(out.LaunchTemplates, s.templateXML(lt))
	}
	return out, nil
}

// --- DescribeLaunchTemplateVersions ---

type describeLaunchTemplateVersionsResponse struct {
	meta
	Versions  []launchTemplateVersionXML `xml:"launchTemplateVersionSet>item"`
	NextToken string                     `xml:"nextToken,omitempty"`
}

func (s *Server) describeLaunchTemplateVersions(q query) (response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, name := q.get("LaunchTemplateId"), q.get("LaunchTemplateName")
	versions := q.list("LaunchTemplateVersion")
	var templates []*LaunchTemplate
	if id == "" && name == "" {
		// Without a template, EC2 describes the $Latest or $Default version
		// of every template; all of them are version 1 here.
		templates = s.templates
	} else {
		lt, err := s.findTemplate(id, name)
		if err != nil {
			return nil, err
		}
		for _, v := range versions {
			if err := checkVersion(lt, v); err != nil {
				return nil, err
			}
		}
		templates = []*LaunchTemplate{lt}
	}
	page, next, err := paginate(q, templates, pageLimits{min: 1, max: 200})
	if err != nil {
		return nil, err
	}
	out := &describeLaunchTemplateVersionsResponse{NextToken: next}
	for _, lt := range page {
		out.Versions = append(out.Versions, s.versionXML(lt))
	}
	return out, nil
}

// --- DeleteLaunchTemplate ---

type deleteLaunchTemplateResponse struct {
	meta
	LaunchTemplate launchTemplateXML `xml:"launchTemplate"`
}

func (s *Server) deleteLaunchTemplate(q query) (response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lt, err := s.findTemplate(q.get("LaunchTemplateId"), q.get("LaunchTemplateName"))
	if err != nil {
		return nil, err
	}
	s.templates = slices.DeleteFunc(s.templates, func(t *LaunchTemplate) bool { return t == lt })
	x := s.templateXML(lt)
	x.Tags = nil // EC2 does not echo the tags of a deleted template
	return &deleteLaunchTemplateResponse{LaunchTemplate: x}, nil
}
