package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The Karpenter API groups converted, and Nodeforge's.
//
// The Karpenter fields the converter knows are those of Karpenter v1's
// published CRDs: karpenter.sh_nodepools.yaml of kubernetes-sigs/karpenter
// v1.14.0 and karpenter.k8s.aws_ec2nodeclasses.yaml of
// aws/karpenter-provider-aws v1.14.1 (whose kubelet settings are the twelve
// fields listed in ec2nodeclass.go). Fields of earlier v1 releases are a
// subset of those; a field of a later one is reported as unknown.
const (
	karpenterGroup    = "karpenter.sh"
	karpenterAWSGroup = "karpenter.k8s.aws"
	nodeforgeGroup    = "nodeforge.dev"
	nodeforgeVersion  = "nodeforge.dev/v1alpha1"
	karpenterRelease  = "Karpenter v1.14"
)

// Dropped is a field of a Karpenter object that the converted object does
// not carry, and why. A Dropped with no Path is the whole object, which is
// not written at all.
type Dropped struct {
	Kind, Name string
	// Path of the field, e.g. spec.template.spec.requirements[2].minValues;
	// map keys in brackets, e.g. spec.tags[Name].
	Path string
	Why  string
}

func (d Dropped) String() string {
	if d.Path == "" {
		return fmt.Sprintf("%s %s not written: %s", d.Kind, d.Name, d.Why)
	}
	return fmt.Sprintf("%s %s: %s not carried over: %s", d.Kind, d.Name, d.Path, d.Why)
}

// Result is what Convert made of its input.
type Result struct {
	// Out holds the converted objects, as YAML documents.
	Out []byte
	// Dropped lists every field left behind, and why, in input order.
	Dropped []Dropped
	// Objects is how many objects Out holds, and Converted how many
	// fields of the input they carry (each string, number and boolean
	// counts once, as does each item of a list or map of them).
	Objects, Converted int
}

// Convert reads Karpenter v1 NodePools and EC2NodeClasses and v1alpha1
// NodeOverlays (YAML, several
// documents, or a List of them as kubectl get -o yaml writes) and returns
// Nodeforge's with every field left behind. Documents of other kinds are
// an error: a file of mixed objects should be split first.
func Convert(in io.Reader) (Result, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var res Result
	var out bytes.Buffer
	for i := 0; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Result{}, fmt.Errorf("document %d: %w", i+1, err)
		}
		if obj == nil {
			continue
		}
		objs := []map[string]any{obj}
		if obj["kind"] == "List" { // kubectl get -o yaml
			objs = nil
			items, _ := obj["items"].([]any)
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					objs = append(objs, m)
				}
			}
		}
		for _, obj := range objs {
			conv, c, err := convertOne(obj, i)
			if err != nil {
				return Result{}, err
			}
			res.Dropped = append(res.Dropped, c.dropped...)
			if conv == nil {
				continue
			}
			raw, err := yaml.Marshal(conv)
			if err != nil {
				return Result{}, err
			}
			if out.Len() > 0 {
				out.WriteString("---\n")
			}
			out.Write(raw)
			res.Objects++
			res.Converted += c.converted
		}
	}
	res.Out = out.Bytes()
	return res, nil
}

// convertOne converts the object of document i; nil when it is not
// written (the converter says why).
func convertOne(obj map[string]any, i int) (map[string]any, *converter, error) {
	c := &converter{}
	c.kind, _ = obj["kind"].(string)
	c.name, _ = get(obj, "metadata", "name").(string)
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, _ := strings.Cut(apiVersion, "/")
	src := fields{c: c, m: obj}
	var conv map[string]any
	switch {
	case group == karpenterGroup && c.kind == "NodePool":
		conv = c.nodePool(src)
	case group == karpenterAWSGroup && c.kind == "EC2NodeClass":
		conv = c.ec2NodeClass(src)
	case group == karpenterGroup && c.kind == "NodeOverlay":
		conv = c.nodeOverlay(src)
	default:
		return nil, nil, fmt.Errorf("document %d: %v %s is not a Karpenter NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1) or NodeOverlay (karpenter.sh/v1alpha1)", i+1, obj["apiVersion"], c.kind)
	}
	if c.kind == "NodeOverlay" {
		if version != overlayVersion {
			c.drop(field.NewPath("apiVersion"), fmt.Sprintf("converted as %s; this is %s/%s, whose fields may differ: check the result", overlayVersion, group, version))
		}
	} else if version != "v1" {
		c.drop(field.NewPath("apiVersion"), fmt.Sprintf("converted as v1; this is %s/%s, whose fields may differ (v1beta1 kept kubelet settings in the NodePool): check the result", group, version))
	}
	if c.notWritten != "" {
		c.dropped = append(c.dropped, Dropped{Kind: c.kind, Name: c.name, Why: c.notWritten})
		return nil, c, nil
	}
	return conv, c, nil
}

// converter converts one object. Fields are taken out of the source as
// they are read (fields.take), so that what is left is reported; every
// field carried over is counted (carry).
type converter struct {
	kind, name string
	dropped    []Dropped
	converted  int
	// notWritten, when set, is why the object is not written at all.
	notWritten string
}

// drop reports the field at path as not carried over.
func (c *converter) drop(path *field.Path, why string) {
	c.dropped = append(c.dropped, Dropped{Kind: c.kind, Name: c.name, Path: path.String(), Why: why})
}

// skip leaves the whole object out of the output, for why; the first
// reason stands.
func (c *converter) skip(why string) {
	if c.notWritten == "" {
		c.notWritten = why
	}
}

// carry counts the fields of v, which the output carries.
func (c *converter) carry(v any) any {
	c.converted += leaves(v)
	return v
}

func leaves(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := 0
		for _, x := range t {
			n += leaves(x)
		}
		return n
	case []any:
		n := 0
		for _, x := range t {
			n += leaves(x)
		}
		return n
	case []string:
		return len(t)
	case map[string]string:
		return len(t)
	case nil:
		return 0
	}
	return 1
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// fields is one JSON object of a Karpenter object, at path. Each field is
// taken out as it is read, so that rest can report the fields nothing
// read: the unknown ones, at any depth.
type fields struct {
	c    *converter
	path *field.Path
	m    map[string]any
}

func (f fields) at(name string) *field.Path {
	if f.path == nil {
		return field.NewPath(name)
	}
	return f.path.Child(name)
}

// take removes the field and returns it; a null field is absent.
func (f fields) take(name string) (any, bool) {
	v, ok := f.m[name]
	delete(f.m, name)
	return v, ok && v != nil
}

// object takes a field that is an object. An absent field, or one of
// another type (reported), reads as an empty object.
func (f fields) object(name string) (fields, bool) {
	sub := fields{c: f.c, path: f.at(name), m: map[string]any{}}
	v, ok := f.take(name)
	if !ok {
		return sub, false
	}
	m, isObj := v.(map[string]any)
	if !isObj {
		f.c.drop(sub.path, fmt.Sprintf("is %s, not an object", describe(v)))
		return sub, false
	}
	sub.m = m
	return sub, true
}

// item is the i-th item of list v (taken from field path) as an object;
// another type is reported.
func (f fields) item(path *field.Path, v any) (fields, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		f.c.drop(path, fmt.Sprintf("is %s, not an object", describe(v)))
		return fields{}, false
	}
	return fields{c: f.c, path: path, m: m}, true
}

// list takes a field that is a list.
func (f fields) list(name string) ([]any, bool) {
	v, ok := f.take(name)
	if !ok {
		return nil, false
	}
	l, isList := v.([]any)
	if !isList {
		f.c.drop(f.at(name), fmt.Sprintf("is %s, not a list", describe(v)))
	}
	return l, isList
}

// str takes a field that is a string.
func (f fields) str(name string) (string, bool) {
	v, ok := f.take(name)
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		f.c.drop(f.at(name), fmt.Sprintf("is %s, not a string", describe(v)))
	}
	return s, isStr
}

// boolean takes a field that is true or false.
func (f fields) boolean(name string) (bool, bool) {
	v, ok := f.take(name)
	if !ok {
		return false, false
	}
	b, isBool := v.(bool)
	if !isBool {
		f.c.drop(f.at(name), fmt.Sprintf("is %s, not true or false", describe(v)))
	}
	return b, isBool
}

// integer takes a field that is a whole number.
func (f fields) integer(name string) (int64, bool) {
	v, ok := f.take(name)
	if !ok {
		return 0, false
	}
	n, isInt := wholeNumber(v)
	if !isInt {
		f.c.drop(f.at(name), fmt.Sprintf("is %s, not a whole number", describe(v)))
	}
	return n, isInt
}

// strings takes a field that is a list of strings; items of other types
// are reported and left out.
func (f fields) strings(name string) ([]string, bool) {
	l, ok := f.list(name)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for i, v := range l {
		s, isStr := v.(string)
		if !isStr {
			f.c.drop(f.at(name).Index(i), fmt.Sprintf("is %s, not a string", describe(v)))
			continue
		}
		out = append(out, s)
	}
	return out, true
}

// stringMap takes a field that is a map of strings, keys sorted; entries
// of other types are reported and left out.
func (f fields) stringMap(name string) ([]string, map[string]string, bool) {
	sub, ok := f.object(name)
	if !ok {
		return nil, nil, false
	}
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(sub.m)) {
		s, isStr := sub.m[k].(string)
		if !isStr {
			f.c.drop(sub.path.Key(k), fmt.Sprintf("is %s, not a string", describe(sub.m[k])))
			continue
		}
		out[k] = s
	}
	return slices.Sorted(maps.Keys(out)), out, true
}

// rest reports every field no one took: not a field of Karpenter v1's
// object there, and none of Nodeforge's.
func (f fields) rest() {
	for _, k := range slices.Sorted(maps.Keys(f.m)) {
		f.c.drop(f.at(k), fmt.Sprintf("unknown field: not in %s's %s, and Nodeforge has no such field", karpenterRelease, f.c.kind))
	}
}

// leftBehind takes the fields Karpenter has and Nodeforge does not, and
// reports each with its reason.
func (f fields) leftBehind(why map[string]string) {
	for _, name := range slices.Sorted(maps.Keys(why)) {
		if _, ok := f.take(name); ok {
			f.c.drop(f.at(name), why[name])
		}
	}
}

// wholeNumber reads a JSON or YAML number that has no fraction.
func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	}
	return 0, false
}

// describe names the type of a decoded value for a message.
func describe(v any) string {
	switch t := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", t)
	case bool:
		return fmt.Sprintf("%t", t)
	case float64, int64, int:
		return fmt.Sprintf("the number %v", t)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// metadata keeps the name, labels and annotations. kubectl's and the
// server's bookkeeping (uid, resourceVersion, the last applied
// configuration, Karpenter's hash annotations, ...) is neither copied nor
// reported, and neither is the status.
func (c *converter) metadata(src fields) map[string]any {
	src.take("apiVersion")
	src.take("kind")
	src.take("status")
	meta, _ := src.object("metadata")
	md := map[string]any{}
	if name, ok := meta.str("name"); ok {
		md["name"] = c.carry(name)
	}
	if _, labels, ok := meta.stringMap("labels"); ok && len(labels) > 0 {
		md["labels"] = c.carry(anyMap(labels))
	}
	if _, a, ok := meta.stringMap("annotations"); ok {
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		for _, k := range slices.Sorted(maps.Keys(a)) {
			switch {
			case karpenterBookkeeping.MatchString(k):
				delete(a, k) // Karpenter's hashes of the object, its own bookkeeping
			case strings.HasPrefix(k, karpenterGroup+"/") || strings.HasPrefix(k, karpenterAWSGroup+"/"):
				delete(a, k)
				c.drop(meta.at("annotations").Key(k), "an annotation of Karpenter's on the object itself, which Nodeforge does not read")
			}
		}
		if len(a) > 0 {
			md["annotations"] = c.carry(anyMap(a))
		}
	}
	for _, k := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink", "namespace", "finalizers"} {
		meta.take(k)
	}
	if _, ok := meta.take("ownerReferences"); ok {
		c.drop(meta.at("ownerReferences"), "they name their owners by uid, which a new object's owners do not share; set them again once the owners exist")
	}
	meta.rest()
	return md
}

// karpenterBookkeeping are the annotations Karpenter writes on its pools
// and classes to detect drift (nodepool-hash, ec2nodeclass-hash and their
// -version): dropped without a report, like the server's bookkeeping.
var karpenterBookkeeping = regexp.MustCompile(`^karpenter\.(sh/nodepool|k8s\.aws/ec2nodeclass)-hash(-version)?$`)

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func anyList(l []string) []any {
	out := make([]any, len(l))
	for i, v := range l {
		out[i] = v
	}
	return out
}
