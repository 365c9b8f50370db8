package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// karpenterBudgetReasons are the disruption methods Karpenter's budgets
// hold: a budget that names no reason holds these three, and not
// expiration or node repair, which Karpenter carries out whatever the
// budgets say. Nodeforge's budgets hold every method, Expired and
// Unhealthy too, so a converted budget names these reasons.
var karpenterBudgetReasons = []string{"Underutilized", "Empty", "Drifted"}

// limitedResources are the resources of an instance type Nodeforge
// counts against a pool's limits (the capacity it gives every EC2 type).
var limitedResources = []string{"cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"}

// nodePoolFieldsLeftBehind are NodePool fields Nodeforge has no
// counterpart for.
var nodePoolFieldsLeftBehind = map[string]string{}

func (c *converter) nodePool(src fields) map[string]any {
	out := map[string]any{"apiVersion": nodeforgeVersion, "kind": "NodePool", "metadata": c.metadata(src)}
	if len(c.name) > 57 {
		c.drop(field.NewPath("metadata", "name"), "Nodeforge's NodePool names are at most 57 characters, so that their NodeClaims' names fit in a label value")
		c.skip("its name is longer than Nodeforge allows; rename it and convert it again")
	}
	spec, _ := src.object("spec")
	outSpec := map[string]any{}
	tmpl, _ := spec.object("template")
	tmeta, _ := tmpl.object("metadata")
	labels, labelReqs := c.templateLabels(tmeta)
	annotations := c.templateAnnotations(tmeta)
	tmeta.rest()

	tspec, _ := tmpl.object("spec")
	outT := map[string]any{}
	if ref, ok := c.nodeClassRef(tspec); ok {
		outT["nodeClassRef"] = ref
	} else {
		c.skip("it has no nodeClassRef")
	}
	reqs := append(labelReqs, c.requirements(tspec, labels)...)
	if len(reqs) > 0 {
		outT["requirements"] = reqs
	}
	for _, name := range []string{"taints", "startupTaints"} {
		if taints := c.taints(tspec, name); len(taints) > 0 {
			outT[name] = taints
		}
	}
	if d, ok := c.duration(tspec, "expireAfter", true, v1alpha1.MinExpireAfter,
		"a node's life counts from when its NodeClaim is made, and launching, joining and draining it take minutes, so a shorter one replaces nodes about as fast as they become useful",
		"which replaces nodes less often: set Never or a longer one if you meant"); ok {
		outT["expireAfter"] = d
	}
	if d, ok := c.duration(tspec, "terminationGracePeriod", false, v1alpha1.MinTerminationGracePeriod,
		"pods are deleted regardless of PodDisruptionBudgets early enough that their own grace period (30s by default) ends by then, so a shorter one deletes them as soon as a drain starts",
		"which leaves PodDisruptionBudgets longer to hold"); ok {
		outT["terminationGracePeriod"] = d
	}
	tspec.rest()
	tmpl.rest()
	outMeta := map[string]any{}
	if len(labels) > 0 {
		outMeta["labels"] = labels
	}
	if len(annotations) > 0 {
		outMeta["annotations"] = annotations
	}
	outTmpl := map[string]any{"spec": outT}
	if len(outMeta) > 0 {
		outTmpl["metadata"] = outMeta
	}
	outSpec["template"] = outTmpl
	outSpec["disruption"] = c.disruption(spec)
	if limits := c.limits(spec); len(limits) > 0 {
		outSpec["limits"] = limits
	}
	c.replicas(spec, outSpec)
	if w, ok := spec.integer("weight"); ok {
		if _, fixed := outSpec["replicas"]; fixed {
			c.drop(spec.at("weight"), "a fixed-size pool (replicas) is never chosen for pending pods, so Nodeforge refuses a weight beside it")
		} else if w < 1 || w > 100 {
			c.drop(spec.at("weight"), fmt.Sprintf("weight %d: Nodeforge's weights are from 1 to 100", w))
		} else {
			outSpec["weight"] = c.carry(w)
		}
	}
	spec.leftBehind(nodePoolFieldsLeftBehind)
	spec.rest()
	src.rest()
	out["spec"] = outSpec
	return out
}

// templateLabels converts the labels of the pool's nodes. A label on a
// key that every node carries anyway (zone, instance type, capacity
// type, ...) is, in Karpenter, a requirement that the node has that
// value; it becomes that requirement.
func (c *converter) templateLabels(meta fields) (map[string]any, []any) {
	keys, in, _ := meta.stringMap("labels")
	labels := map[string]any{}
	var reqs []any
	for _, k := range keys {
		p := meta.at("labels").Key(k)
		if key := nodeforgeKey(k); onEveryNode(key) {
			r := requirement{Key: k, Operator: string(corev1.NodeSelectorOpIn), Values: []string{in[k]}}
			if conv := c.requirement(p, func(int) *field.Path { return p }, r, nil); conv != nil {
				reqs = append(reqs, c.carry(conv.out()))
			}
			continue
		}
		if why := templateLabelProblem(k, in[k]); why != "" {
			c.drop(p, why)
			continue
		}
		labels[k] = c.carry(in[k])
	}
	return labels, reqs
}

// templateAnnotations converts the annotations of the pool's nodes.
func (c *converter) templateAnnotations(meta fields) map[string]any {
	keys, in, _ := meta.stringMap("annotations")
	out := map[string]any{}
	for _, k := range keys {
		p := meta.at("annotations").Key(k)
		switch {
		case v1alpha1.IsReservedKey(k):
			c.drop(p, "the nodeforge.dev domain is Nodeforge's")
		// Nodeforge honours Karpenter's do-not-disrupt annotation on a
		// node as its own (v1alpha1.DoNotDisruptAnnotations).
		case k == karpenterGroup+"/do-not-disrupt":
			out[k] = c.carry(in[k])
		case karpenterDomain.MatchString(k):
			c.drop(p, "Karpenter's annotation; Nodeforge does not read it")
		default:
			out[k] = c.carry(in[k])
		}
	}
	return out
}

// nodeClassRef points the pool at the Nodeforge EC2NodeClass of the same
// name, which converting the Karpenter one makes.
func (c *converter) nodeClassRef(tspec fields) (map[string]any, bool) {
	ref, ok := tspec.object("nodeClassRef")
	if !ok {
		return nil, false
	}
	group, _ := ref.str("group")
	kind, _ := ref.str("kind")
	name, _ := ref.str("name")
	ref.rest()
	if name == "" {
		c.drop(ref.path, "it names no node class")
		return nil, false
	}
	if group != karpenterAWSGroup || kind != "EC2NodeClass" {
		c.drop(ref.path, fmt.Sprintf("%s %s is not an EC2NodeClass of %s; the converted pool refers to Nodeforge's EC2NodeClass %s: set its node class by hand", group, kind, karpenterAWSGroup, name))
	} else {
		c.carry([]any{group, kind, name})
	}
	return map[string]any{"group": nodeforgeGroup, "kind": "EC2NodeClass", "name": name}, true
}

// taints converts the pool's taints or startup taints (field name).
func (c *converter) taints(tspec fields, name string) []any {
	list, _ := tspec.list(name)
	var out []any
	for i, v := range list {
		t, ok := tspec.item(tspec.at(name).Index(i), v)
		if !ok {
			continue
		}
		key, _ := t.str("key")
		value, _ := t.str("value")
		effect, _ := t.str("effect")
		if _, ok := t.take("timeAdded"); ok {
			c.drop(t.at("timeAdded"), "the time a taint was added is the node's, not the pool's")
		}
		t.rest()
		var why string
		switch {
		case strings.HasPrefix(key, nodeforgeGroup+"/"):
			why = "the nodeforge.dev domain is Nodeforge's"
		case len(validation.IsQualifiedName(key)) > 0:
			why = fmt.Sprintf("key %q is not a qualified name", key)
		case len(validation.IsValidLabelValue(value)) > 0:
			why = fmt.Sprintf("value %q: Nodeforge's taint values are like label values (letters, digits, '-', '_' and '.', at most 63)", value)
		case !slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, effect):
			why = fmt.Sprintf("effect %q is not NoSchedule, PreferNoSchedule or NoExecute", effect)
		}
		if why != "" {
			c.drop(t.path, why+"; the taint is dropped")
			continue
		}
		taint := map[string]any{"key": key, "effect": effect}
		if value != "" {
			taint["value"] = value
		}
		out = append(out, c.carry(taint))
	}
	return out
}

// nodeforgeDuration is what Nodeforge's durations match (and at most 12
// characters): whole hours, minutes and seconds of at most 6 digits each.
var nodeforgeDuration = regexp.MustCompile(`^([0-9]{1,6}(s|m|h))+$`)

// duration takes the duration field name, "Never" too if nillable, as
// Nodeforge writes it: Karpenter's own when Nodeforge accepts it as it
// is, else the same length of time in hours, minutes and seconds. One
// shorter than floor, which Nodeforge refuses (why), is written as the
// floor and reported (raised says what that does).
func (c *converter) duration(f fields, name string, nillable bool, floor time.Duration, why, raised string) (string, bool) {
	s, ok := f.str(name)
	if !ok {
		return "", false
	}
	d, err := nodeforgeDurationOf(s, nillable)
	if err != nil {
		c.drop(f.at(name), err.Error())
		return "", false
	}
	if v, err := time.ParseDuration(d); err == nil && v < floor { // not Never
		least := formatDuration(floor)
		c.drop(f.at(name), fmt.Sprintf("%s is shorter than Nodeforge's least %s, %s: %s; the converted pool has %s %s, %s", s, name, least, why, name, least, raised))
		return least, true
	}
	c.carry(d)
	return d, true
}

func nodeforgeDurationOf(s string, nillable bool) (string, error) {
	if nillable && s == string(v1alpha1.Never) {
		return s, nil
	}
	if nodeforgeDuration.MatchString(s) && len(s) <= 12 {
		return s, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d%time.Second != 0 {
		return "", fmt.Errorf("%q is not a duration in whole seconds", s)
	}
	out := formatDuration(d)
	if !nodeforgeDuration.MatchString(out) || len(out) > 12 {
		return "", fmt.Errorf("%s is longer than Nodeforge's durations (at most 999999h and 12 characters)", s)
	}
	return out, nil
}

// formatDuration writes d, whole seconds, in hours, minutes and seconds,
// leaving out the parts that are 0: 1h, 1h30m, 90s is 1m30s.
func formatDuration(d time.Duration) string {
	h, m, sec := d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second
	out := ""
	if h > 0 {
		out += fmt.Sprintf("%dh", h)
	}
	if m > 0 {
		out += fmt.Sprintf("%dm", m)
	}
	if sec > 0 || out == "" {
		out += fmt.Sprintf("%ds", sec)
	}
	return out
}

// disruption converts the pool's disruption settings, writing Karpenter's
// defaults where Nodeforge's differ or it has none.
func (c *converter) disruption(spec fields) map[string]any {
	d, _ := spec.object("disruption")
	out := map[string]any{}
	if policy, ok := d.str("consolidationPolicy"); ok {
		switch policy {
		case "WhenEmpty", "WhenEmptyOrUnderutilized":
			out["consolidationPolicy"] = c.carry(policy)
		case "Balanced":
			// The policy that disrupts less stands in for it.
			out["consolidationPolicy"] = "WhenEmpty"
			c.drop(d.at("consolidationPolicy"), "Nodeforge has no Balanced consolidation (replacing a node only when the saving is worth the disruption); the converted pool consolidates WhenEmpty, which disrupts less: set WhenEmptyOrUnderutilized to consolidate underused nodes too")
		default:
			out["consolidationPolicy"] = "WhenEmpty"
			c.drop(d.at("consolidationPolicy"), fmt.Sprintf("%q: Nodeforge's policies are WhenEmpty and WhenEmptyOrUnderutilized; the converted pool consolidates WhenEmpty, which disrupts less", policy))
		}
	}
	_, given := d.m["consolidateAfter"]
	if after, ok := d.str("consolidateAfter"); ok {
		if v, err := nodeforgeDurationOf(after, true); err == nil {
			out["consolidateAfter"] = c.carry(v)
		} else {
			// The stand-in disrupts less.
			out["consolidateAfter"] = string(v1alpha1.Never)
			c.drop(d.at("consolidateAfter"), err.Error()+"; the converted pool has consolidateAfter Never (no consolidation) in its place: set the wait you meant")
		}
	} else if given {
		out["consolidateAfter"] = string(v1alpha1.Never) // str reported it
	} else {
		out["consolidateAfter"] = "0s" // Karpenter's default; Nodeforge's field is required
	}
	if list, ok := d.list("budgets"); ok {
		budgets := []any{}
		for i, v := range list {
			if b, ok := d.item(d.at("budgets").Index(i), v); ok {
				if conv := c.budget(b); conv != nil {
					budgets = append(budgets, conv)
				}
			}
		}
		out["budgets"] = budgets
	} else {
		out["budgets"] = []any{map[string]any{"nodes": "10%", "reasons": anyList(karpenterBudgetReasons)}} // Karpenter's default
	}
	d.rest()
	return out
}

var budgetNodes = regexp.MustCompile(`^((100|[0-9]{1,2})%|[0-9]+)$`)

// budget converts one disruption budget, or reports why not. A budget
// that cannot be carried over exactly is written so that it disrupts less,
// never more, and the report says what was written: without its schedule
// (it then holds at all times), with nodes 0, or with every reason.
func (c *converter) budget(b fields) map[string]any {
	out := map[string]any{}
	nodes, ok := b.str("nodes")
	if !ok {
		nodes = "10%" // Karpenter's default
	}
	if !budgetNodes.MatchString(nodes) || len(nodes) > 8 {
		c.drop(b.at("nodes"), fmt.Sprintf("%q is not a whole number of at most 8 digits or a percentage; the budget is written with nodes 0 (no disruption while it holds): set the number you meant", nodes))
		nodes = "0"
	} else {
		c.carry(nodes)
	}
	out["nodes"] = nodes
	schedule, hasSchedule := b.str("schedule")
	duration, hasDuration := b.str("duration")
	reasons, hasReasons := b.strings("reasons")
	b.rest()
	const unscheduled = "; the budget is written without its schedule, so it holds at all times"
	switch {
	case hasSchedule != hasDuration:
		c.drop(b.path, "a budget with a schedule needs a duration, and a duration needs a schedule"+unscheduled)
	case !hasSchedule:
	default:
		// The parser Nodeforge's disruption controller reads schedules
		// with, which the API server's rules match.
		if _, err := v1alpha1.ParseSchedule(schedule); err != nil {
			c.drop(b.at("schedule"), fmt.Sprintf("%q is not a schedule Nodeforge reads (%v)%s", schedule, err, unscheduled))
			break
		}
		d, err := nodeforgeDurationOf(duration, false)
		if err != nil {
			c.drop(b.at("duration"), err.Error()+unscheduled)
			break
		}
		if !strings.ContainsAny(d, "123456789") {
			// Exact: a window of no time never holds, in Karpenter too.
			c.drop(b.at("duration"), "a window of no time never applies; the budget is dropped")
			return nil
		}
		out["schedule"] = c.carry(schedule)
		out["duration"] = c.carry(d)
	}
	if !hasReasons || len(reasons) == 0 {
		out["reasons"] = anyList(karpenterBudgetReasons)
		return out
	}
	for i, r := range reasons {
		if !slices.Contains(karpenterBudgetReasons, r) {
			c.drop(b.at("reasons").Index(i), fmt.Sprintf("%q is not a reason Karpenter's budgets take (%s); the budget is written for all three", r, strings.Join(karpenterBudgetReasons, ", ")))
			out["reasons"] = anyList(karpenterBudgetReasons)
			return out
		}
	}
	out["reasons"] = c.carry(anyList(reasons))
	return out
}

// limits converts the pool's limits: those on resources Nodeforge counts.
func (c *converter) limits(spec fields) map[string]any {
	l, ok := spec.object("limits")
	if !ok {
		return nil
	}
	out := map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(l.m)) {
		v, _ := l.take(name)
		p := l.at(name)
		s, isStr := v.(string)
		if n, isNum := v.(float64); isNum {
			s, isStr = fmt.Sprint(n), true
		}
		q, err := resource.ParseQuantity(s)
		switch {
		case name == "nodes":
			c.drop(p, "Nodeforge limits a pool's capacity, not its number of nodes; limit cpu or memory instead")
		case !slices.Contains(limitedResources, name):
			c.drop(p, fmt.Sprintf("Nodeforge counts %s of the instance types it launches; a limit on %s would not hold", strings.Join(limitedResources, ", "), name))
		case !isStr || err != nil:
			c.drop(p, fmt.Sprintf("%s is not a quantity", describe(v)))
		case q.Sign() < 0:
			c.drop(p, "a limit must not be negative")
		default:
			if str, ok := v.(string); ok {
				out[name] = c.carry(str)
			} else {
				out[name] = c.carry(q.String())
			}
		}
	}
	return out
}

// replicas carries a static pool's replicas over, and leaves out of its
// disruption what Karpenter ignores on a static pool and Nodeforge
// refuses there: a consolidation policy other than the default and a
// consolidateAfter other than 0s or Never (a fixed-size pool is never
// consolidated, so it becomes Never).
func (c *converter) replicas(spec fields, outSpec map[string]any) {
	n, ok := spec.integer("replicas")
	if !ok {
		return
	}
	if n < 0 || n > 1000 {
		c.drop(spec.at("replicas"), fmt.Sprintf("replicas %d: Nodeforge's fixed-size pools have from 0 to 1000 nodes", n))
		return
	}
	outSpec["replicas"] = c.carry(n)
	d, _ := outSpec["disruption"].(map[string]any)
	if d == nil {
		return
	}
	path := field.NewPath("spec", "disruption")
	if p, ok := d["consolidationPolicy"]; ok && p != "WhenEmptyOrUnderutilized" {
		c.drop(path.Child("consolidationPolicy"), "a fixed-size pool is never consolidated; Nodeforge refuses a consolidation policy beside replicas")
		delete(d, "consolidationPolicy")
	}
	if a, ok := d["consolidateAfter"]; ok && a != "0s" && a != "Never" {
		c.drop(path.Child("consolidateAfter"), "a fixed-size pool is never consolidated; written as Never")
		d["consolidateAfter"] = "Never"
	}
}
