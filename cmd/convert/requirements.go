package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// requirement is a NodeSelectorRequirementWithMinValues as read.
type requirement struct {
	Key, Operator string
	Values        []string
	MinValues     *int64
}

func (r requirement) out() map[string]any {
	m := map[string]any{"key": r.Key, "operator": r.Operator}
	if len(r.Values) > 0 {
		m["values"] = anyList(r.Values)
	}
	if r.MinValues != nil {
		m["minValues"] = *r.MinValues
	}
	return m
}

// renamedKeys are keys with a Nodeforge counterpart of the same meaning
// and values: the deprecated keys Karpenter itself reads as the stable
// ones (its NormalizedLabels), and its capacity type. Karpenter's
// karpenter.k8s.aws/instance-* keys that Nodeforge publishes too are
// renamed by nodeforgeKey.
var renamedKeys = map[string]string{
	corev1.LabelFailureDomainBetaZone:   corev1.LabelTopologyZone,
	corev1.LabelFailureDomainBetaRegion: corev1.LabelTopologyRegion,
	"beta.kubernetes.io/arch":           corev1.LabelArchStable,
	"beta.kubernetes.io/os":             corev1.LabelOSStable,
	corev1.LabelInstanceType:            corev1.LabelInstanceTypeStable,
	karpenterGroup + "/capacity-type":   v1alpha1.LabelCapacityType,
}

// nodeforgeKey is the key a requirement on key has in Nodeforge.
func nodeforgeKey(key string) string {
	if to, ok := renamedKeys[key]; ok {
		return to
	}
	if name, ok := strings.CutPrefix(key, karpenterAWSGroup+"/"); ok && v1alpha1.IsInstanceLabel(nodeforgeGroup+"/"+name) {
		return nodeforgeGroup + "/" + name
	}
	return key
}

// onEveryNode says whether every node Nodeforge launches on EC2 carries
// key (or carries it when its instance type has the attribute), so that
// a requirement on it chooses instance types and offerings, as the same
// requirement does in Karpenter.
func onEveryNode(key string) bool {
	switch key {
	case corev1.LabelTopologyZone, corev1.LabelTopologyRegion, corev1.LabelInstanceTypeStable,
		corev1.LabelArchStable, corev1.LabelOSStable, v1alpha1.LabelCapacityType:
		return true
	}
	return v1alpha1.IsInstanceLabel(key)
}

// unsupportedKey says why a requirement on key (after nodeforgeKey)
// cannot be carried over, or "".
func unsupportedKey(key string) string {
	switch {
	case key == karpenterGroup+"/nodepool":
		return "Nodeforge labels each node with its pool itself (nodeforge.dev/nodepool)"
	case key == corev1.LabelHostname:
		return "a requirement on the hostname chooses nothing that can be launched"
	case key == "topology.k8s.aws/zone-id":
		return "Nodeforge publishes no zone id label; require topology.kubernetes.io/zone with the names of those zones instead"
	case key == corev1.LabelWindowsBuild:
		return "Nodeforge launches Linux nodes only"
	case key == karpenterAWSGroup+"/capacity-reservation-id":
		return "Nodeforge chooses capacity reservations per EC2NodeClass, not per pool: give the pool a class whose capacityReservationSelectorTerms select these reservations by id (nodes launched into one carry nodeforge.dev/capacity-reservation-id)"
	case key == karpenterAWSGroup+"/capacity-reservation-type", key == karpenterAWSGroup+"/capacity-reservation-interruptible":
		return "Nodeforge launches into on-demand capacity reservations that are neither Capacity Blocks for ML nor interruptible, and publishes no label for either"
	case strings.HasPrefix(key, karpenterAWSGroup+"/"):
		return fmt.Sprintf("Nodeforge publishes no such label (its instance labels are %s); name the instance types (node.kubernetes.io/instance-type) instead", instanceLabelNames())
	case karpenterDomain.MatchString(key):
		return "Karpenter's own label; Nodeforge publishes no such label"
	case v1alpha1.IsReservedKey(key) && !onEveryNode(key):
		return "the nodeforge.dev domain is Nodeforge's; only nodeforge.dev/capacity-type and the instance labels may be required"
	}
	return ""
}

// instanceLabelNames lists the instance attribute labels Nodeforge
// publishes, for a message.
func instanceLabelNames() string {
	names := make([]string, len(v1alpha1.InstanceLabels))
	for i, k := range v1alpha1.InstanceLabels {
		names[i] = strings.TrimPrefix(k, v1alpha1.Group+"/instance-")
	}
	return "nodeforge.dev/instance-{" + strings.Join(names, ",") + "}"
}

// neverLaunched are values of an In requirement that no node Nodeforge
// launches has: Nodeforge boots Amazon Linux 2023.
var neverLaunched = map[string]map[string]string{
	corev1.LabelOSStable: {"windows": "operating system windows: Nodeforge launches Linux nodes (Amazon Linux 2023) only"},
}

// wholeNumberValue is what Gt and Lt take in Nodeforge (and what a node
// label is compared as): a whole number of at most 18 digits.
var wholeNumberValue = regexp.MustCompile(`^[0-9]{1,18}$`)

// readRequirement reads one requirement of a NodePool.
func readRequirement(f fields) requirement {
	var r requirement
	r.Key, _ = f.str("key")
	r.Operator, _ = f.str("operator")
	r.Values, _ = f.strings("values")
	if n, ok := f.integer("minValues"); ok {
		r.MinValues = &n
	}
	f.rest()
	return r
}

// requirements converts the pool's requirements. labels are its template
// labels (converted): a requirement on one of them applies to it, and a
// requirement that in Karpenter gives every node a label of its own adds
// that label.
func (c *converter) requirements(tspec fields, labels map[string]any) []any {
	list, _ := tspec.list("requirements")
	path := tspec.at("requirements")
	reqs := make([]requirement, len(list))
	read := make([]bool, len(list))
	for i, v := range list {
		if f, ok := tspec.item(path.Index(i), v); ok {
			reqs[i], read[i] = readRequirement(f), true
		}
	}
	// Karpenter labels each node with a value of every requirement on a
	// key of the user's own; with In and one value, that value. Nodeforge
	// derives no labels from requirements, so the label is added to the
	// template, where both agree on its meaning.
	for _, r := range reqs {
		key := nodeforgeKey(r.Key)
		if r.Operator == string(corev1.NodeSelectorOpIn) && len(r.Values) == 1 && !onEveryNode(key) && unsupportedKey(key) == "" {
			if _, ok := labels[key]; !ok && templateLabelProblem(key, r.Values[0]) == "" {
				labels[key] = r.Values[0]
			}
		}
	}
	var out []any
	for i, r := range reqs {
		if !read[i] {
			continue
		}
		p := path.Index(i)
		valuePath := func(j int) *field.Path { return p.Child("values").Index(j) }
		if conv := c.requirement(p, valuePath, r, labels); conv != nil {
			out = append(out, c.carry(conv.out()))
		}
	}
	return out
}

// requirement converts r, read at path (its values at valuePath), or
// reports why not and returns nil.
func (c *converter) requirement(path *field.Path, valuePath func(int) *field.Path, r requirement, labels map[string]any) *requirement {
	if r.Key == "" || r.Operator == "" {
		c.drop(path, "a requirement needs a key and an operator")
		return nil
	}
	read := r
	r.Key = nodeforgeKey(r.Key)
	if why := unsupportedKey(r.Key); why != "" {
		c.drop(path, fmt.Sprintf("requirement on %s: %s", r.Key, why))
		return nil
	}
	for _, msg := range validation.IsQualifiedName(r.Key) {
		c.drop(path.Child("key"), fmt.Sprintf("%s is not a label key: %s", r.Key, msg))
		return nil
	}
	if !c.strictBound(path, &r) || !c.operatorValues(path, valuePath, &r) {
		return nil
	}
	if r.Operator == string(corev1.NodeSelectorOpIn) {
		c.dropNeverLaunched(path, valuePath, &r)
	}
	if !onEveryNode(r.Key) {
		if why := c.userKeyProblem(read, labels); why != "" {
			c.drop(path, why)
			return nil
		}
	}
	if r.MinValues != nil {
		c.checkMinValues(path.Child("minValues"), &r)
	}
	return &r
}

// strictBound turns r's operator Gte or Lte into Gt or Lt, or reports
// why not and returns false.
//
// Gte and Lte are Gt and Lt by one less and one more: the values are
// whole numbers.
func (c *converter) strictBound(path *field.Path, r *requirement) bool {
	if r.Operator != "Gte" && r.Operator != "Lte" {
		return true
	}
	if len(r.Values) != 1 {
		c.drop(path, fmt.Sprintf("operator %s takes one value", r.Operator))
		return false
	}
	strict := map[string]string{"Gte": "Gt", "Lte": "Lt"}[r.Operator]
	n, err := strconv.ParseInt(r.Values[0], 10, 64)
	if err != nil {
		c.drop(path, fmt.Sprintf("%s %s %q: the value is not a whole number", r.Key, r.Operator, r.Values[0]))
		return false
	}
	if r.Operator == "Gte" {
		n--
	} else {
		n++
	}
	v := strconv.FormatInt(n, 10)
	if !wholeNumberValue.MatchString(v) {
		c.drop(path, fmt.Sprintf("%s %s %s would be %s %s, and Nodeforge's Gt and Lt take a whole number of at most 18 digits (Exists means the same if every value is one)", r.Key, r.Operator, r.Values[0], strict, v))
		return false
	}
	r.Operator = strict
	r.Values = []string{v}
	return true
}

// operatorValues checks r's operator and that its values suit it, or
// reports why not and returns false. Values given to Exists or
// DoesNotExist are dropped, as Karpenter ignored them.
func (c *converter) operatorValues(path *field.Path, valuePath func(int) *field.Path, r *requirement) bool {
	switch corev1.NodeSelectorOperator(r.Operator) {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(r.Values) == 0 {
			c.drop(path, fmt.Sprintf("operator %s needs at least one value", r.Operator))
			return false
		}
		for j, v := range r.Values {
			for _, msg := range validation.IsValidLabelValue(v) {
				c.drop(valuePath(j), fmt.Sprintf("%q is not a label value: %s; the requirement is dropped", v, msg))
				return false
			}
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(r.Values) > 0 {
			c.drop(path.Child("values"), fmt.Sprintf("operator %s takes no values; Karpenter ignored them", r.Operator))
			r.Values = nil
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(r.Values) != 1 || !wholeNumberValue.MatchString(r.Values[0]) {
			c.drop(path, fmt.Sprintf("operator %s takes one whole number of at most 18 digits", r.Operator))
			return false
		}
	default:
		c.drop(path.Child("operator"), fmt.Sprintf("operator %q: Nodeforge's are In, NotIn, Exists, DoesNotExist, Gt and Lt; the requirement is dropped", r.Operator))
		return false
	}
	return true
}

// dropNeverLaunched drops from r, an In requirement, the values Karpenter
// never launched, reporting each; if none is left, it keeps them all and
// reports that instead.
func (c *converter) dropNeverLaunched(path *field.Path, valuePath func(int) *field.Path, r *requirement) {
	never := neverLaunched[r.Key]
	if never == nil {
		return
	}
	var kept []string
	var dropped []int
	for j, v := range r.Values {
		if _, ok := never[v]; ok {
			dropped = append(dropped, j)
			continue
		}
		kept = append(kept, v)
	}
	if len(kept) == 0 {
		// Dropping the requirement would let the pool launch
		// what Karpenter never did; kept, it launches nothing.
		c.drop(path, fmt.Sprintf("%s; the requirement is kept as it is, so the converted pool launches nothing", never[r.Values[0]]))
		return
	}
	for _, j := range dropped {
		c.drop(valuePath(j), never[r.Values[j]])
	}
	r.Values = kept
}

// checkMinValues drops r's minValues, read at mp, and reports why, when
// Nodeforge would not take it.
func (c *converter) checkMinValues(mp *field.Path, r *requirement) {
	switch {
	case r.Operator != string(corev1.NodeSelectorOpIn):
		c.drop(mp, fmt.Sprintf("Nodeforge takes minValues only with operator In (this is %s); list the values with In to keep it", r.Operator))
		r.MinValues = nil
	case *r.MinValues > int64(len(r.Values)):
		c.drop(mp, fmt.Sprintf("minValues %d is more than the %d value(s) Nodeforge can launch", *r.MinValues, len(r.Values)))
		r.MinValues = nil
	case *r.MinValues > 1 && slices.Contains([]string{corev1.LabelTopologyZone, v1alpha1.LabelCapacityType, corev1.LabelArchStable}, r.Key):
		c.drop(mp, fmt.Sprintf("minValues above 1 on %s: each NodeClaim launches in one zone, with one capacity type and one architecture", r.Key))
		r.MinValues = nil
	case *r.MinValues < 1 || *r.MinValues > 50:
		c.drop(mp, "minValues is from 1 to 50")
		r.MinValues = nil
	}
}

// userKeyProblem says why a requirement on a key of the user's own (one
// no node carries of itself) would not mean in Nodeforge what it meant in
// Karpenter, or "". Karpenter gives every node a label for such a
// requirement, with a value it allows (for NotIn, Exists, Gt and Lt, a
// made-up one); Nodeforge labels nodes with the template's labels only,
// and applies a requirement on a key none of them has to nothing.
func (c *converter) userKeyProblem(r requirement, labels map[string]any) string {
	if _, ok := labels[r.Key]; ok {
		return "" // applied to the template's label, as in Karpenter
	}
	what := r.Key + " " + r.Operator
	if len(r.Values) > 0 {
		what += " [" + strings.Join(r.Values, " ") + "]"
	}
	switch {
	case r.Operator == string(corev1.NodeSelectorOpDoesNotExist):
		return "" // neither labels the node
	case r.Operator == string(corev1.NodeSelectorOpIn) && len(r.Values) == 1:
		return fmt.Sprintf("requirement %s: Karpenter labels each node %s=%s, and Nodeforge may not: %s", what, r.Key, r.Values[0], templateLabelProblem(r.Key, r.Values[0]))
	}
	return fmt.Sprintf("requirement %s: Karpenter labels each node with a value of %s that it allows, for pods to choose; Nodeforge derives no labels from requirements, and would apply this one to nothing: set the label in spec.template.metadata.labels (a pool per value)", what, r.Key)
}

// templateLabelProblem says why Nodeforge refuses key=value as a label of
// a pool's nodes, or "": the rules of NodeClaimTemplateObjectMeta.Labels.
func templateLabelProblem(key, value string) string {
	switch {
	case v1alpha1.IsReservedKey(key) && !onEveryNode(key):
		return "the nodeforge.dev domain is Nodeforge's"
	case karpenterDomain.MatchString(key):
		return "the karpenter.sh and karpenter.k8s.aws domains are Karpenter's (a node with such labels could be taken for one of Karpenter's)"
	case kubernetesDomain.MatchString(key) && !((strings.HasPrefix(key, "node.kubernetes.io/") || strings.HasPrefix(key, "kubelet.kubernetes.io/")) && key != corev1.LabelInstanceTypeStable):
		return "keys in the kubernetes.io and k8s.io domains are set by Kubernetes and Nodeforge; only node.kubernetes.io/ and kubelet.kubernetes.io/ keys may be set"
	}
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return "not a label key: " + msgs[0]
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		return fmt.Sprintf("%q is not a label value: %s", value, msgs[0])
	}
	return ""
}

var (
	karpenterDomain  = regexp.MustCompile(`^([^/]*\.)?karpenter\.(sh|k8s\.aws)/`)
	kubernetesDomain = regexp.MustCompile(`^([^/]*\.)?(kubernetes\.io|k8s\.io)/`)
)
