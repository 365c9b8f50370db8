package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// The Karpenter API groups and kinds converted, with the field names of
// Karpenter's v1 API (its NodePool and EC2NodeClass reference).
const (
	karpenterGroup    = "karpenter.sh"
	karpenterAWSGroup = "karpenter.k8s.aws"
	nodeforgeVersion  = "nodeforge.dev/v1alpha1"
)

// Dropped is a field of a Karpenter object that the converted object does
// not carry, and why.
type Dropped struct {
	Kind, Name string
	// Path of the field, e.g. spec.template.spec.requirements[2].
	Path string
	Why  string
}

func (d Dropped) String() string {
	return fmt.Sprintf("%s %s: %s not carried over: %s", d.Kind, d.Name, d.Path, d.Why)
}

// Convert reads Karpenter v1 NodePools and EC2NodeClasses (YAML, several
// documents, or a List of them as kubectl get -o yaml writes) and returns Nodeforge's, as YAML documents, with every field
// left behind. Documents of other kinds are an error: a file of mixed
// objects should be split first.
func Convert(in io.Reader) ([]byte, []Dropped, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var out bytes.Buffer
	var dropped []Dropped
	for i := 0; ; i++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
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
			raw, d, err := convertOne(obj, i)
			if err != nil {
				return nil, nil, err
			}
			if out.Len() > 0 {
				out.WriteString("---\n")
			}
			out.Write(raw)
			dropped = append(dropped, d...)
		}
	}
	return out.Bytes(), dropped, nil
}

// convertOne converts the object of document i.
func convertOne(obj map[string]any, i int) ([]byte, []Dropped, error) {
	c := &converter{src: obj}
	c.kind, _ = obj["kind"].(string)
	c.name, _ = get(obj, "metadata", "name").(string)
	group, version, _ := strings.Cut(fmt.Sprint(obj["apiVersion"]), "/")
	var conv map[string]any
	switch {
	case group == karpenterGroup && c.kind == "NodePool":
		conv = c.nodePool()
	case group == karpenterAWSGroup && c.kind == "EC2NodeClass":
		conv = c.ec2NodeClass()
	default:
		return nil, nil, fmt.Errorf("document %d: %s %s is not a Karpenter NodePool (karpenter.sh/v1) or EC2NodeClass (karpenter.k8s.aws/v1)", i+1, obj["apiVersion"], c.kind)
	}
	if version != "v1" {
		c.drop("apiVersion", fmt.Sprintf("converted as v1; this is %s/%s, whose fields may differ (v1beta1 kept kubelet settings in the NodePool): check the result", group, version))
	}
	c.leftovers("", c.src)
	raw, err := yaml.Marshal(conv)
	if err != nil {
		return nil, nil, err
	}
	return raw, c.dropped, nil
}

// converter converts one object: each field read is taken out of src, so
// that what is left at the end is what was not carried over.
type converter struct {
	src        map[string]any
	kind, name string
	dropped    []Dropped
}

func (c *converter) drop(path, why string) {
	c.dropped = append(c.dropped, Dropped{Kind: c.kind, Name: c.name, Path: path, Why: why})
}

// take removes and returns the field at path of src.
func (c *converter) take(path ...string) any {
	m := c.src
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return nil
		}
		m = next
	}
	v, ok := m[path[len(path)-1]]
	if !ok {
		return nil
	}
	delete(m, path[len(path)-1])
	return v
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

// leftovers reports every field still in v, under prefix, as not known
// to the converter; empty maps (whose fields were all taken) are not.
func (c *converter) leftovers(prefix string, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(t))
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			switch sub := t[k].(type) {
			case map[string]any:
				if len(sub) > 0 {
					c.leftovers(p, sub)
				}
			default:
				c.drop(p, "Nodeforge has no such field")
			}
		}
	}
}

// metadata keeps the name, labels and annotations; kubectl's and the
// server's bookkeeping (uid, resourceVersion, ...) is not copied and not
// reported.
func (c *converter) metadata() map[string]any {
	md := map[string]any{"name": c.name}
	c.take("metadata", "name")
	if l, ok := c.take("metadata", "labels").(map[string]any); ok && len(l) > 0 {
		md["labels"] = l
	}
	if a, ok := c.take("metadata", "annotations").(map[string]any); ok {
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		for k := range a {
			if strings.HasPrefix(k, "karpenter.") {
				delete(a, k)
			}
		}
		if len(a) > 0 {
			md["annotations"] = a
		}
	}
	for _, k := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "namespace", "finalizers"} {
		c.take("metadata", k)
	}
	c.take("status")
	c.take("apiVersion")
	c.take("kind")
	return md
}

// labelKeys maps Karpenter's well-known label keys to Nodeforge's; a key
// mapped to "" has no Nodeforge counterpart.
var labelKeys = map[string]string{
	"karpenter.sh/capacity-type": "nodeforge.dev/capacity-type",
	"karpenter.sh/nodepool":      "",
}

// instanceLabelNames lists the instance attribute labels Nodeforge
// publishes, for a message.
func instanceLabelNames() string {
	names := make([]string, len(v1alpha1.InstanceLabels))
	for i, k := range v1alpha1.InstanceLabels {
		names[i] = strings.TrimPrefix(k, v1alpha1.Group+"/")
	}
	return "nodeforge.dev/{" + strings.Join(names, ",") + "}"
}

// requirement converts one NodeSelectorRequirementWithMinValues.
func (c *converter) requirement(path string, r map[string]any) (map[string]any, bool) {
	key, _ := r["key"].(string)
	out := map[string]any{}
	for k, v := range r {
		out[k] = v
	}
	if to, ok := labelKeys[key]; ok {
		if to == "" {
			c.drop(path, fmt.Sprintf("requirement on %s: Nodeforge sets %s itself", key, "nodeforge.dev/nodepool"))
			return nil, false
		}
		out["key"] = to
	}
	// The instance attribute labels have Karpenter's names and value
	// formats under Nodeforge's domain.
	if name, ok := strings.CutPrefix(key, karpenterAWSGroup+"/"); ok && v1alpha1.IsInstanceLabel(v1alpha1.Group+"/"+name) {
		out["key"] = v1alpha1.Group + "/" + name
		return out, true
	}
	if strings.HasPrefix(key, karpenterAWSGroup+"/") || (strings.HasPrefix(key, karpenterGroup+"/") && labelKeys[key] == "") {
		c.drop(path, fmt.Sprintf("requirement on %s: Nodeforge publishes no such label (its instance labels are %s); name the instance types (node.kubernetes.io/instance-type) instead", key, instanceLabelNames()))
		return nil, false
	}
	if key == "karpenter.sh/capacity-type" {
		if vals, ok := r["values"].([]any); ok {
			var kept []any
			for _, v := range vals {
				if v == "reserved" {
					c.drop(path+".values", "capacity type reserved: Nodeforge launches spot and on-demand only")
					continue
				}
				kept = append(kept, v)
			}
			out["values"] = kept
		}
	}
	return out, true
}

func (c *converter) nodePool() map[string]any {
	out := map[string]any{"apiVersion": nodeforgeVersion, "kind": "NodePool", "metadata": c.metadata()}
	spec := map[string]any{}
	tmplMeta := map[string]any{}
	for _, f := range []string{"labels", "annotations"} {
		if v := c.take("spec", "template", "metadata", f); v != nil {
			tmplMeta[f] = v
		}
	}
	tmplSpec := map[string]any{}
	if ref, ok := c.take("spec", "template", "spec", "nodeClassRef").(map[string]any); ok {
		if ref["group"] != karpenterAWSGroup || ref["kind"] != "EC2NodeClass" {
			c.drop("spec.template.spec.nodeClassRef", fmt.Sprintf("%v %v is not an EC2NodeClass of %s; set Nodeforge's node class by hand", ref["group"], ref["kind"], karpenterAWSGroup))
		}
		tmplSpec["nodeClassRef"] = map[string]any{"group": "nodeforge.dev", "kind": "EC2NodeClass", "name": ref["name"]}
	}
	if reqs, ok := c.take("spec", "template", "spec", "requirements").([]any); ok {
		var kept []any
		for i, r := range reqs {
			rm, ok := r.(map[string]any)
			if !ok {
				continue
			}
			if conv, ok := c.requirement(fmt.Sprintf("spec.template.spec.requirements[%d]", i), rm); ok {
				kept = append(kept, conv)
			}
		}
		if len(kept) > 0 {
			tmplSpec["requirements"] = kept
		}
	}
	for _, f := range []string{"taints", "startupTaints", "expireAfter", "terminationGracePeriod"} {
		if v := c.take("spec", "template", "spec", f); v != nil {
			tmplSpec[f] = v
		}
	}
	if len(tmplMeta) > 0 {
		spec["template"] = map[string]any{"metadata": tmplMeta, "spec": tmplSpec}
	} else {
		spec["template"] = map[string]any{"spec": tmplSpec}
	}
	disruption := map[string]any{}
	for _, f := range []string{"consolidationPolicy", "consolidateAfter", "budgets"} {
		if v := c.take("spec", "disruption", f); v != nil {
			disruption[f] = v
		}
	}
	if len(disruption) > 0 {
		if _, ok := disruption["consolidateAfter"]; !ok {
			disruption["consolidateAfter"] = "0s" // Karpenter's default
		}
		spec["disruption"] = disruption
	}
	for _, f := range []string{"limits", "weight"} {
		if v := c.take("spec", f); v != nil {
			spec[f] = v
		}
	}
	out["spec"] = spec
	return out
}

func (c *converter) ec2NodeClass() map[string]any {
	out := map[string]any{"apiVersion": nodeforgeVersion, "kind": "EC2NodeClass", "metadata": c.metadata()}
	spec := map[string]any{}
	for _, f := range []string{"subnetSelectorTerms", "securityGroupSelectorTerms", "role", "instanceProfile", "userData", "tags", "metadataOptions"} {
		if v := c.take("spec", f); v != nil {
			spec[f] = v
		}
	}
	family, _ := c.take("spec", "amiFamily").(string)
	if terms, ok := c.take("spec", "amiSelectorTerms").([]any); ok {
		var kept []any
		for i, t := range terms {
			tm, ok := t.(map[string]any)
			if !ok {
				continue
			}
			path := fmt.Sprintf("spec.amiSelectorTerms[%d]", i)
			if alias, ok := tm["alias"].(string); ok && !strings.HasPrefix(alias, "al2023@") {
				c.drop(path, fmt.Sprintf("alias %s: Nodeforge's aliases are of Amazon Linux 2023 (al2023@latest, al2023@vYYYYMMDD); select that family's images by id, name or tags", alias))
				continue
			}
			if _, ok := tm["ssmParameter"]; ok {
				c.drop(path+".ssmParameter", "Nodeforge does not resolve images from SSM parameters")
				delete(tm, "ssmParameter")
				if len(tm) == 0 {
					continue
				}
			}
			kept = append(kept, tm)
		}
		if len(kept) > 0 {
			spec["amiSelectorTerms"] = kept
		}
	}
	if family != "" && !strings.EqualFold(family, "AL2023") {
		c.drop("spec.amiFamily", fmt.Sprintf("amiFamily %s: Nodeforge writes Amazon Linux 2023's NodeConfig user data only", family))
	}
	if bdms, ok := c.take("spec", "blockDeviceMappings").([]any); ok {
		var kept []any
		for i, b := range bdms {
			bm, ok := b.(map[string]any)
			if !ok {
				continue
			}
			path := fmt.Sprintf("spec.blockDeviceMappings[%d].ebs", i)
			if ebs, ok := bm["ebs"].(map[string]any); ok {
				if size, ok := ebs["volumeSize"]; ok {
					gib, err := toGiB(size)
					if err != nil {
						c.drop(path+".volumeSize", err.Error())
						delete(ebs, "volumeSize")
					} else {
						ebs["volumeSize"] = gib
					}
				}
				if _, ok := ebs["snapshotID"]; ok {
					c.drop(path+".snapshotID", "Nodeforge does not create volumes from snapshots")
					delete(ebs, "snapshotID")
				}
			}
			kept = append(kept, bm)
		}
		spec["blockDeviceMappings"] = kept
	}
	if kubelet, ok := c.take("spec", "kubelet").(map[string]any); ok {
		kept := map[string]any{}
		for _, f := range []string{"maxPods", "kubeReserved", "systemReserved", "evictionHard"} {
			if v, ok := kubelet[f]; ok {
				kept[f] = v
				delete(kubelet, f)
			}
		}
		for _, f := range sortedKeys(kubelet) {
			c.drop("spec.kubelet."+f, "Nodeforge sets maxPods, kubeReserved, systemReserved and evictionHard only")
		}
		if len(kept) > 0 {
			spec["kubelet"] = kept
		}
	}
	out["spec"] = spec
	return out
}

// toGiB is a Karpenter volume size (a quantity, "20Gi") in whole GiB,
// rounded up.
func toGiB(v any) (int64, error) {
	q, err := resource.ParseQuantity(fmt.Sprint(v))
	if err != nil {
		return 0, fmt.Errorf("volume size %v is not a quantity: %w", v, err)
	}
	return int64(math.Ceil(float64(q.Value()) / (1 << 30))), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
