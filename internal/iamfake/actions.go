package iamfake

import (
	"encoding/base64"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// query is a parsed AWS Query request. Lists are flattened as
// Name.member.1, Name.member.2 and structures as Name.member.1.Field, so
// every value is just a key.
type query map[string][]string

func (q query) get(key string) string {
	if v := q[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (q query) has(key string) bool { _, ok := q[key]; return ok }

// members returns the prefixes of the members of the list at prefix, in
// index order: "Tags.member.1", "Tags.member.2" for Tags.member.1.Key and
// so on. Indexes need not be contiguous.
func (q query) members(prefix string) []string {
	seen := map[int]bool{}
	for k := range q {
		rest, ok := strings.CutPrefix(k, prefix+".member.")
		if !ok {
			continue
		}
		idx, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(idx); err == nil && n > 0 {
			seen[n] = true
		}
	}
	var out []string
	for _, n := range slices.Sorted(maps.Keys(seen)) {
		out = append(out, prefix+".member."+strconv.Itoa(n))
	}
	return out
}

// Constraints of IAM's shapes (the patterns and lengths of
// instanceProfileNameType, roleNameType, pathType, pathPrefixType,
// tagKeyType and tagValueType in IAM's API reference).
var (
	namePattern       = regexp.MustCompile(`^[\w+=,.@-]+$`)
	pathPattern       = regexp.MustCompile(`^(/|/[\x21-\x7E]+/)$`)
	pathPrefixPattern = regexp.MustCompile(`^/[\x21-\x7F]*$`)
	tagKeyPattern     = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]+$`)
	tagValuePattern   = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)
)

// maxTags is how many tags an IAM resource may carry.
const maxTags = 50

// name reads a required name parameter: member is its name in IAM's
// messages (instanceProfileName), max its longest length.
func (q query) name(key, member string, max int) (string, error) {
	v := q.get(key)
	switch {
	case !q.has(key):
		return "", validation("Value null at '%s' failed to satisfy constraint: Member must not be null", member)
	case len(v) < 1 || len(v) > max:
		return "", validation("Value '%s' at '%s' failed to satisfy constraint: Member must have length less than or equal to %d", v, member, max)
	case !namePattern.MatchString(v):
		return "", validation("Value '%s' at '%s' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]+", v, member)
	}
	return v, nil
}

// path reads an optional Path, "/" when absent.
func (q query) path() (string, error) {
	if !q.has("Path") {
		return "/", nil
	}
	v := q.get("Path")
	if len(v) > 512 || !pathPattern.MatchString(v) {
		return "", validation("Value '%s' at 'path' failed to satisfy constraint: Member must satisfy regular expression pattern: (\\u002F)|(\\u002F[\\u0021-\\u007E]+\\u002F)", v)
	}
	return v, nil
}

// tags reads Tags.member.N.{Key,Value}. Keys are compared regardless of
// case, as IAM does for the tags of roles and instance profiles.
func (q query) tags() (map[string]string, error) {
	out := map[string]string{}
	seen := map[string]bool{}
	for _, m := range q.members("Tags") {
		k, v := q.get(m+".Key"), q.get(m+".Value")
		switch {
		case !q.has(m + ".Key"):
			return nil, validation("Value null at 'tags.%s.member.key' failed to satisfy constraint: Member must not be null", strings.TrimPrefix(m, "Tags.member."))
		case len(k) > 128 || !tagKeyPattern.MatchString(k):
			return nil, validation("Value '%s' at 'tags.member.key' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+ and have length less than or equal to 128", k)
		case len(v) > 256 || !tagValuePattern.MatchString(v):
			return nil, validation("Value '%s' at 'tags.member.value' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]* and have length less than or equal to 256", v)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, badRequest("InvalidInput", "User-defined tag keys can't start with 'aws:'.")
		case seen[strings.ToLower(k)]:
			return nil, badRequest("InvalidInput", "Duplicate tag keys found. Please note that Tag keys are case insensitive.")
		}
		seen[strings.ToLower(k)] = true
		out[k] = v
	}
	if len(out) > maxTags {
		return nil, conflict("LimitExceeded", "The number of tags has reached the maximum limit.")
	}
	return out, nil
}

// page returns the part of items that Marker and MaxItems ask for, and the
// marker of the next part ("" when this is the last). Markers are opaque
// offsets into the list, which is stable because lists are sorted by name.
func page[T any](q query, items []T) ([]T, string, error) {
	size := 100
	if q.has("MaxItems") {
		n, err := strconv.Atoi(q.get("MaxItems"))
		if err != nil || n < 1 || n > 1000 {
			return nil, "", validation("Value '%s' at 'maxItems' failed to satisfy constraint: Member must have value between 1 and 1000", q.get("MaxItems"))
		}
		size = n
	}
	start := 0
	if m := q.get("Marker"); m != "" {
		b, err := base64.RawURLEncoding.DecodeString(m)
		rest, ok := strings.CutPrefix(string(b), "iamfake-offset:")
		n, nerr := strconv.Atoi(rest)
		if err != nil || !ok || nerr != nil || n < 0 || n > len(items) {
			return nil, "", validation("Value '%s' at 'marker' is not a marker this endpoint gave", m)
		}
		start = n
	}
	if start+size >= len(items) {
		return items[start:], "", nil
	}
	return items[start : start+size], base64.RawURLEncoding.EncodeToString([]byte("iamfake-offset:" + strconv.Itoa(start+size))), nil
}

// XML shapes of the results, member names as in the SDK's schemas.

type xmlTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type xmlRole struct {
	Path                     string `xml:"Path"`
	RoleName                 string `xml:"RoleName"`
	RoleID                   string `xml:"RoleId"`
	Arn                      string `xml:"Arn"`
	CreateDate               string `xml:"CreateDate"`
	AssumeRolePolicyDocument string `xml:"AssumeRolePolicyDocument,omitempty"`
}

type xmlInstanceProfile struct {
	Path                string    `xml:"Path"`
	InstanceProfileName string    `xml:"InstanceProfileName"`
	InstanceProfileID   string    `xml:"InstanceProfileId"`
	Arn                 string    `xml:"Arn"`
	CreateDate          string    `xml:"CreateDate"`
	Roles               []xmlRole `xml:"Roles>member"`
	Tags                []xmlTag  `xml:"Tags>member,omitempty"`
}

func tagList(tags map[string]string) []xmlTag {
	out := []xmlTag{}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

func roleXML(r *Role) xmlRole {
	// IAM returns the trust policy URL-encoded.
	return xmlRole{Path: r.Path, RoleName: r.Name, RoleID: r.ID, Arn: r.ARN, CreateDate: iamTime(r.Created),
		AssumeRolePolicyDocument: escapePolicy(r.AssumeRolePolicyDocument)}
}

// profileXML is a profile as IAM describes it; withTags is false for
// ListInstanceProfiles, which (unlike GetInstanceProfile) leaves tags out.
func (s *Server) profileXML(p *InstanceProfile, withTags bool) xmlInstanceProfile {
	out := xmlInstanceProfile{Path: p.Path, InstanceProfileName: p.Name, InstanceProfileID: p.ID, Arn: p.ARN, CreateDate: iamTime(p.Created)}
	for _, name := range p.Roles {
		if r := s.roles[strings.ToLower(name)]; r != nil {
			out.Roles = append(out.Roles, roleXML(r))
		}
	}
	if withTags && len(p.Tags) > 0 {
		out.Tags = tagList(p.Tags)
	}
	return out
}

func (s *Server) profile(name string) (*InstanceProfile, error) {
	if p := s.profiles[strings.ToLower(name)]; p != nil {
		return p, nil
	}
	return nil, noSuchEntity("Instance Profile %s cannot be found.", name)
}

func (s *Server) role(name string) (*Role, error) {
	if r := s.roles[strings.ToLower(name)]; r != nil {
		return r, nil
	}
	return nil, noSuchEntity("The role with name %s cannot be found.", name)
}

func (s *Server) createInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	path, err := q.path()
	if err != nil {
		return nil, err
	}
	tags, err := q.tags()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.profiles[strings.ToLower(name)] != nil {
		return nil, conflict("EntityAlreadyExists", "Instance Profile %s already exists.", name)
	}
	p := s.addProfileLocked(InstanceProfile{Name: name, Path: path, Tags: tags})
	return struct {
		InstanceProfile xmlInstanceProfile `xml:"InstanceProfile"`
	}{s.profileXML(p, true)}, nil
}

// addProfileLocked stores p, filling in what IAM makes: ID, ARN, creation
// time, and the path "/" when it has none.
func (s *Server) addProfileLocked(p InstanceProfile) *InstanceProfile {
	c := p.clone()
	if c.Path == "" {
		c.Path = "/"
	}
	if c.ID == "" {
		c.ID = newID("AIPA")
	}
	if c.ARN == "" {
		c.ARN = "arn:aws:iam::" + Account + ":instance-profile" + c.Path + c.Name
	}
	if c.Created.IsZero() {
		c.Created = s.now()
	}
	s.profiles[strings.ToLower(c.Name)] = &c
	return &c
}

func (s *Server) getInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	return struct {
		InstanceProfile xmlInstanceProfile `xml:"InstanceProfile"`
	}{s.profileXML(p, true)}, nil
}

func (s *Server) listInstanceProfiles(q query) (any, error) {
	prefix := "/"
	if q.has("PathPrefix") {
		prefix = q.get("PathPrefix")
		if len(prefix) > 512 || !pathPrefixPattern.MatchString(prefix) {
			return nil, validation("Value '%s' at 'pathPrefix' failed to satisfy constraint: Member must satisfy regular expression pattern: \\u002F[\\u0021-\\u007F]*", prefix)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []xmlInstanceProfile
	for _, key := range slices.Sorted(maps.Keys(s.profiles)) {
		if p := s.profiles[key]; strings.HasPrefix(p.Path, prefix) {
			all = append(all, s.profileXML(p, false))
		}
	}
	items, marker, err := page(q, all)
	if err != nil {
		return nil, err
	}
	return struct {
		InstanceProfiles []xmlInstanceProfile `xml:"InstanceProfiles>member"`
		IsTruncated      bool                 `xml:"IsTruncated"`
		Marker           string               `xml:"Marker,omitempty"`
	}{items, marker != "", marker}, nil
}

func (s *Server) deleteInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	if len(p.Roles) > 0 {
		return nil, conflict("DeleteConflict", "Cannot delete entity, must remove roles from instance profile first.")
	}
	delete(s.profiles, strings.ToLower(name))
	return nil, nil
}

func (s *Server) addRoleToInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	roleName, err := q.name("RoleName", "roleName", 64)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	r, err := s.role(roleName)
	if err != nil {
		return nil, err
	}
	// One role per profile is a hard quota; adding the role it already
	// holds breaks it too.
	if len(p.Roles) > 0 {
		return nil, conflict("LimitExceeded", "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1")
	}
	p.Roles = append(p.Roles, r.Name)
	return nil, nil
}

func (s *Server) removeRoleFromInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	roleName, err := q.name("RoleName", "roleName", 64)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	if _, err := s.role(roleName); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(p.Roles, func(r string) bool { return strings.EqualFold(r, roleName) })
	if i < 0 {
		return nil, noSuchEntity("The role with name %s is not in instance profile %s.", roleName, p.Name)
	}
	p.Roles = slices.Delete(p.Roles, i, i+1)
	return nil, nil
}

func (s *Server) tagInstanceProfile(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	tags, err := q.tags()
	if err != nil {
		return nil, err
	}
	if len(tags) == 0 {
		return nil, validation("Value null at 'tags' failed to satisfy constraint: Member must not be null")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	merged := maps.Clone(p.Tags)
	for k, v := range tags {
		for old := range merged {
			if strings.EqualFold(old, k) {
				delete(merged, old)
			}
		}
		merged[k] = v
	}
	if len(merged) > maxTags {
		return nil, conflict("LimitExceeded", "The number of tags has reached the maximum limit.")
	}
	p.Tags = merged
	return nil, nil
}

func (s *Server) listInstanceProfileTags(q query) (any, error) {
	name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.profile(name)
	if err != nil {
		return nil, err
	}
	items, marker, err := page(q, tagList(p.Tags))
	if err != nil {
		return nil, err
	}
	return struct {
		Tags        []xmlTag `xml:"Tags>member"`
		IsTruncated bool     `xml:"IsTruncated"`
		Marker      string   `xml:"Marker,omitempty"`
	}{items, marker != "", marker}, nil
}

func (s *Server) createRole(q query) (any, error) {
	name, err := q.name("RoleName", "roleName", 64)
	if err != nil {
		return nil, err
	}
	path, err := q.path()
	if err != nil {
		return nil, err
	}
	if q.get("AssumeRolePolicyDocument") == "" {
		return nil, validation("Value null at 'assumeRolePolicyDocument' failed to satisfy constraint: Member must not be null")
	}
	if _, err := q.tags(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.roles[strings.ToLower(name)] != nil {
		return nil, conflict("EntityAlreadyExists", "Role with name %s already exists.", name)
	}
	r := s.addRoleLocked(name, path, q.get("AssumeRolePolicyDocument"))
	return struct {
		Role xmlRole `xml:"Role"`
	}{roleXML(r)}, nil
}

func (s *Server) addRoleLocked(name, path, trust string) *Role {
	r := &Role{Name: name, Path: path, ID: newID("AROA"), ARN: "arn:aws:iam::" + Account + ":role" + path + name,
		Created: s.now(), AssumeRolePolicyDocument: trust}
	s.roles[strings.ToLower(name)] = r
	return r
}

func (s *Server) getRole(q query) (any, error) {
	name, err := q.name("RoleName", "roleName", 64)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.role(name)
	if err != nil {
		return nil, err
	}
	return struct {
		Role xmlRole `xml:"Role"`
	}{roleXML(r)}, nil
}

// escapePolicy URL-encodes a policy document as IAM returns it.
func escapePolicy(doc string) string {
	return strings.ReplaceAll(url.QueryEscape(doc), "+", "%20")
}
