package ec2fake

import (
	"encoding/base64"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeforge/nodeforge/internal/sandbox/awsfake"
)

// query is a parsed EC2 Query request. EC2 flattens lists as Name.1, Name.2
// and structures as Name.Field, so a nested value such as
// LaunchTemplateConfigs.1.Overrides.2.InstanceType is just a key.
type query map[string][]string

func (q query) get(key string) string {
	if v := q[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (q query) has(key string) bool { _, ok := q[key]; return ok }

// members returns the prefixes of the members of the list at prefix, in index
// order: "Filter.1", "Filter.2" for Filter.1.Name, Filter.2.Value.1 and so on.
func (q query) members(prefix string) []string { return awsfake.Members(q, prefix) }

// list returns the values of a flattened list of strings, such as
// InstanceId.1, InstanceId.2.
func (q query) list(prefix string) []string {
	var out []string
	for _, m := range q.members(prefix) {
		if v := q.get(m); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// int returns an integer parameter; ok is false when it is absent.
func (q query) int(key string) (n int, ok bool, err error) {
	v := q.get(key)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil {
		return 0, false, invalidParameter("Value (%s) for parameter %s is invalid. Expected an integer.", v, key)
	}
	return n, true, nil
}

// float returns a floating-point parameter; ok is false when it is absent.
func (q query) float(key string) (f float64, ok bool, err error) {
	v := q.get(key)
	if v == "" {
		return 0, false, nil
	}
	f, err = strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false, invalidParameter("Value (%s) for parameter %s is invalid. Expected a number.", v, key)
	}
	return f, true, nil
}

// time returns a timestamp parameter in the ISO 8601 form the SDK sends.
func (q query) time(key string) (t time.Time, ok bool, err error) {
	v := q.get(key)
	if v == "" {
		return time.Time{}, false, nil
	}
	t, err = time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false, invalidParameter("Value (%s) for parameter %s is invalid. Expected an ISO 8601 timestamp.", v, key)
	}
	return t, true, nil
}

// tags reads a flattened list of Key/Value pairs (Tag.N.Key, Tag.N.Value).
// Keys beginning with "aws:" are refused, as EC2 reserves them for itself.
func (q query) tags(prefix string) (map[string]string, error) {
	tags := map[string]string{}
	for _, t := range awsfake.Tags(q, prefix) {
		if t.Key == "" {
			return nil, badRequest("InvalidParameterValue", "Tag key must not be empty (%s.Key).", t.Member)
		}
		if strings.HasPrefix(strings.ToLower(t.Key), "aws:") {
			return nil, invalidParameter("Tag keys starting with 'aws:' are reserved for internal use")
		}
		tags[t.Key] = t.Value
	}
	if len(tags) > 50 {
		return nil, badRequest("TagLimitExceeded", "The maximum number of tags per resource is 50.")
	}
	return tags, nil
}

// tagSpecifications reads TagSpecification.N.{ResourceType, Tag.M.*} into
// resource type -> tags, accepting only the resource types allowed.
func (q query) tagSpecifications(prefix string, allowed ...string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, m := range q.members(prefix) {
		rt := q.get(m + ".ResourceType")
		if !slices.Contains(allowed, rt) {
			return nil, invalidParameter("'%s' is not a valid taggable resource type for this operation.", rt)
		}
		tags, err := q.tags(m + ".Tag")
		if err != nil {
			return nil, err
		}
		if out[rt] == nil {
			out[rt] = map[string]string{}
		}
		maps.Copy(out[rt], tags)
	}
	return out, nil
}

// filter is one Filter.N of a Describe call. Values are ORed, filters ANDed.
type filter struct {
	Name   string
	Values []string
}

// filters reads Filter.N.Name / Filter.N.Value.M and rejects names the action
// does not support, as EC2 does, so a typo in a client's filter fails loudly
// instead of silently matching everything. A supported name ending in ":"
// (only "tag:") allows any name with that prefix.
func (q query) filters(supported ...string) ([]filter, error) {
	var out []filter
	for _, m := range q.members("Filter") {
		f := filter{Name: q.get(m + ".Name"), Values: q.list(m + ".Value")}
		known := false
		for _, name := range supported {
			if f.Name == name || strings.HasSuffix(name, ":") && strings.HasPrefix(f.Name, name) && len(f.Name) > len(name) {
				known = true
				break
			}
		}
		if !known {
			return nil, invalidParameter("The filter '%s' is invalid", f.Name)
		}
		out = append(out, f)
	}
	return out, nil
}

// tagFilters are the tag filter names every taggable resource supports.
var tagFilters = []string{"tag:", "tag-key", "tag-value"}

// attrs holds the filterable attributes of one resource, by filter name.
type attrs map[string][]string

// withTags adds the tag filters' attributes.
func (a attrs) withTags(tags map[string]string) attrs {
	for k, v := range tags {
		a["tag:"+k] = append(a["tag:"+k], v)
		a["tag-key"] = append(a["tag-key"], k)
		a["tag-value"] = append(a["tag-value"], v)
	}
	return a
}

// matches reports whether the resource passes every filter: for each one,
// some attribute value matches some filter value.
func (a attrs) matches(filters []filter) bool {
	for _, f := range filters {
		if !anyMatch(f.Values, a[f.Name]) {
			return false
		}
	}
	return true
}

func anyMatch(patterns, values []string) bool {
	for _, p := range patterns {
		for _, v := range values {
			if globMatch(p, v) {
				return true
			}
		}
	}
	return false
}

// globMatch matches s against an EC2 filter pattern: "*" is any run of
// characters, "?" any one, and a backslash makes the next character literal.
// Unlike path.Match, "/" is an ordinary character (instance types, AMI names
// and tag values contain it) and "[" is literal.
func globMatch(pattern, s string) bool {
	p := []rune(pattern)
	r := []rune(s)
	var pi, si int
	starP, starS := -1, 0
	for si < len(r) {
		switch {
		case pi < len(p) && p[pi] == '*':
			starP, starS = pi, si
			pi++
		case pi < len(p) && p[pi] == '\\' && pi+1 < len(p) && p[pi+1] == r[si]:
			pi += 2
			si++
		case pi < len(p) && p[pi] != '\\' && (p[pi] == '?' || p[pi] == r[si]):
			pi++
			si++
		case starP >= 0:
			pi = starP + 1
			starS++
			si = starS
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// pageLimits is the MaxResults range an action accepts, and the page size
// when MaxResults is absent (0: everything in one page).
type pageLimits struct{ min, max, def int }

// paginate returns the page of items that MaxResults and NextToken ask for,
// and the token for the next page. Tokens are opaque offsets into the
// filtered list, which is stable because every list is kept in creation or
// catalogue order.
func paginate[T any](q query, items []T, lim pageLimits) ([]T, string, error) {
	size, ok, err := q.int("MaxResults")
	if err != nil {
		return nil, "", err
	}
	if ok && (size < lim.min || size > lim.max) {
		return nil, "", invalidParameter("Value ( %d ) for parameter maxResults is invalid. Expecting a value between %d and %d.", size, lim.min, lim.max)
	}
	if !ok {
		size = lim.def
	}
	start := 0
	if tok := q.get("NextToken"); tok != "" {
		start, err = decodeToken(tok)
		if err != nil || start > len(items) {
			return nil, "", badRequest("InvalidPaginationToken", "The pagination token '%s' is not valid or is expired.", tok)
		}
	}
	if size == 0 || start+size >= len(items) {
		return items[start:], "", nil
	}
	return items[start : start+size], encodeToken(start + size), nil
}

func encodeToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("ec2fake-offset:" + strconv.Itoa(offset)))
}

func decodeToken(tok string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, err
	}
	rest, ok := strings.CutPrefix(string(b), "ec2fake-offset:")
	if !ok {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(rest)
}

// fingerprint is a canonical form of a whole request, to tell whether a
// reused ClientToken comes with the same parameters.
func fingerprint(q query) string { return url.Values(q).Encode() }

// tokenRecord remembers what an idempotent create did with a ClientToken.
type tokenRecord struct {
	id          string
	fingerprint string
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
