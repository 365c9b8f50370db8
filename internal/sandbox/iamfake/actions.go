package iamfake

import (
	"encoding/base64"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// query is a parsed AWS Query request. Lists are flattened as
// Name.member.1, Name.member.2 and structures as Name.member.1.Field, so
// every value is just a key.
type query struct{ url.Values }

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
	v := q.Get(key)
	switch {
	case !q.Has(key):
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
	if !q.Has("Path") {
		return "/", nil
	}
	v := q.Get("Path")
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
	for _, t := range awsfake.Tags(q.Values, "Tags.member") {
		k, v := t.Key, t.Value
		switch {
		case !t.HasKey:
			return nil, validation("Value null at 'tags.%s.member.key' failed to satisfy constraint: Member must not be null", strings.TrimPrefix(t.Member, "Tags.member."))
		case len(k) > 128 || !tagKeyPattern.MatchString(k):
			return nil, validation("Value '%s' at 'tags.member.key' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+ and have length less than or equal to 128", k)
		case len(v) > 256 || !tagValuePattern.MatchString(v):
			return nil, validation("Value '%s' at 'tags.member.value' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]* and have length less than or equal to 256", v)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, awsfake.BadRequest("InvalidInput", "User-defined tag keys can't start with 'aws:'.")
		case seen[strings.ToLower(k)]:
			return nil, awsfake.BadRequest("InvalidInput", "Duplicate tag keys found. Please note that Tag keys are case insensitive.")
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
	if q.Has("MaxItems") {
		n, err := strconv.Atoi(q.Get("MaxItems"))
		if err != nil || n < 1 || n > 1000 {
			return nil, "", validation("Value '%s' at 'maxItems' failed to satisfy constraint: Member must have value between 1 and 1000", q.Get("MaxItems"))
		}
		size = n
	}
	start := 0
	if m := q.Get("Marker"); m != "" {
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

// profileResult is the result of the actions that answer with one
// instance profile.
type profileResult struct {
	InstanceProfile xmlInstanceProfile `xml:"InstanceProfile"`
}

// roleResult is the result of the actions that answer with one role.
type roleResult struct {
	Role xmlRole `xml:"Role"`
}

func (s *Server) role(name string) (*Role, error) {
	if r := s.roles[strings.ToLower(name)]; r != nil {
		return r, nil
	}
	return nil, noSuchEntity("The role with name %s cannot be found.", name)
}

// onProfile makes the handler of an action on the instance profile
// InstanceProfileName names. IAM checks every parameter before it looks
// anything up, so the handler reads the name, then the action's other
// parameters with read, and only then, under the lock, finds the profile
// (NoSuchEntity if there is none) and calls act with it and what read
// returned.
func onProfile[A any](read func(query) (A, error), act func(s *Server, q query, p *InstanceProfile, a A) (any, error)) handler {
	return func(s *Server, q query) (any, error) {
		name, err := q.name("InstanceProfileName", "instanceProfileName", 128)
		if err != nil {
			return nil, err
		}
		a, err := read(q)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		p := s.profiles[strings.ToLower(name)]
		if p == nil {
			return nil, noSuchEntity("Instance Profile %s cannot be found.", name)
		}
		return act(s, q, p, a)
	}
}

// nothing reads no parameters, for the actions given only a profile.
func nothing(query) (struct{}, error) { return struct{}{}, nil }

// roleName reads the RoleName of an action on a profile's role.
func roleName(q query) (string, error) { return q.name("RoleName", "roleName", 64) }

// tagsToAdd reads the tags TagInstanceProfile adds: at least one.
func tagsToAdd(q query) (map[string]string, error) {
	tags, err := q.tags()
	if err == nil && len(tags) == 0 {
		err = validation("Value null at 'tags' failed to satisfy constraint: Member must not be null")
	}
	return tags, err
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
	return profileResult{s.profileXML(s.addProfileLocked(InstanceProfile{Name: name, Path: path, Tags: tags}), true)}, nil
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

func (s *Server) getInstanceProfile(_ query, p *InstanceProfile, _ struct{}) (any, error) {
	return profileResult{s.profileXML(p, true)}, nil
}

func (s *Server) listInstanceProfiles(q query) (any, error) {
	prefix := "/"
	if q.Has("PathPrefix") {
		prefix = q.Get("PathPrefix")
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

func (s *Server) deleteInstanceProfile(_ query, p *InstanceProfile, _ struct{}) (any, error) {
	if len(p.Roles) > 0 {
		return nil, conflict("DeleteConflict", "Cannot delete entity, must remove roles from instance profile first.")
	}
	delete(s.profiles, strings.ToLower(p.Name))
	return nil, nil
}

func (s *Server) addRoleToInstanceProfile(_ query, p *InstanceProfile, roleName string) (any, error) {
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

func (s *Server) removeRoleFromInstanceProfile(_ query, p *InstanceProfile, roleName string) (any, error) {
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

func (s *Server) tagInstanceProfile(_ query, p *InstanceProfile, tags map[string]string) (any, error) {
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

func (s *Server) listInstanceProfileTags(q query, p *InstanceProfile, _ struct{}) (any, error) {
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
	name, err := roleName(q)
	if err != nil {
		return nil, err
	}
	path, err := q.path()
	if err != nil {
		return nil, err
	}
	if q.Get("AssumeRolePolicyDocument") == "" {
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
	return roleResult{roleXML(s.addRoleLocked(name, path, q.Get("AssumeRolePolicyDocument")))}, nil
}

func (s *Server) addRoleLocked(name, path, trust string) *Role {
	r := &Role{Name: name, Path: path, ID: newID("AROA"), ARN: "arn:aws:iam::" + Account + ":role" + path + name,
		Created: s.now(), AssumeRolePolicyDocument: trust}
	s.roles[strings.ToLower(name)] = r
	return r
}

func (s *Server) getRole(q query) (any, error) {
	name, err := roleName(q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.role(name)
	if err != nil {
		return nil, err
	}
	return roleResult{roleXML(r)}, nil
}

// escapePolicy URL-encodes a policy document as IAM returns it.
func escapePolicy(doc string) string {
	return strings.ReplaceAll(url.QueryEscape(doc), "+", "%20")
}
