package manifests_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// releaseNamespace is how docs/security.md names the namespace the chart
// is installed in; render installs it in nf-chart.
const releaseNamespace = "the release's namespace"

// documentedRole is a role of docs/security.md's "What each role may do":
// its rules, each with a reason.
type documentedRole struct {
	kind, name, namespace string
	simulatedOnly         bool
	builtIn               bool
	rules                 []documentedRule
}

type documentedRule struct {
	rbacv1.PolicyRule
	why string
}

func (r documentedRole) key() string {
	return roleKey(r.kind, r.name, r.namespace)
}

func roleKey(kind, name, namespace string) string {
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + name + ", in " + namespace
}

var (
	roleHeading = regexp.MustCompile(`^### (ClusterRole|Role) ([a-z0-9:-]+)(?:, in ([a-z0-9-]+|the release's namespace))?(?: \((simulated cloud only|built in)\))?$`)
	tableRow    = regexp.MustCompile(`^\|(.*)\|$`)
)

// documentedRoles parses the section "What each role may do" of
// docs/security.md: a heading per role, then a table of its rules.
func documentedRoles(t *testing.T) []documentedRole {
	t.Helper()
	f, err := os.Open("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var roles []documentedRole
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## What each role may do"
		case !in:
		case strings.HasPrefix(line, "### "):
			m := roleHeading.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("docs/security.md: heading %q names no role as `### ClusterRole NAME` or `### Role NAME, in NAMESPACE`, with (simulated cloud only) or (built in)", line)
			}
			roles = append(roles, documentedRole{kind: m[1], name: m[2], namespace: m[3], simulatedOnly: m[4] == "simulated cloud only", builtIn: m[4] == "built in"})
		case tableRow.MatchString(line):
			cells := strings.Split(tableRow.FindStringSubmatch(line)[1], "|")
			if len(cells) != 5 {
				t.Fatalf("docs/security.md: row %q has %d cells, want API groups, resources, names, verbs, why", line, len(cells))
			}
			if strings.TrimSpace(cells[0]) == "API groups" || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
				continue
			}
			if len(roles) == 0 {
				t.Fatalf("docs/security.md: row %q comes before any role's heading", line)
			}
			r := documentedRule{PolicyRule: rbacv1.PolicyRule{
				APIGroups:     list(cells[0]),
				Resources:     list(cells[1]),
				ResourceNames: list(cells[2]),
				Verbs:         list(cells[3]),
			}, why: strings.TrimSpace(cells[4])}
			if r.why == "" {
				t.Errorf("docs/security.md: %s: rule %s gives no reason", roles[len(roles)-1].key(), ruleString(r.PolicyRule))
			}
			roles[len(roles)-1].rules = append(roles[len(roles)-1].rules, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(roles) == 0 {
		t.Fatal(`docs/security.md has no role under "## What each role may do"`)
	}
	return roles
}

// list reads a cell of comma-separated names; `""` is the core group.
func list(cell string) []string {
	var out []string
	for _, s := range strings.Split(cell, ",") {
		s = strings.Trim(strings.TrimSpace(s), "`")
		switch s {
		case "":
		case `""`:
			out = append(out, "")
		default:
			out = append(out, s)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func sameRule(a, b rbacv1.PolicyRule) bool {
	return sameSet(a.APIGroups, b.APIGroups) && sameSet(a.Resources, b.Resources) &&
		sameSet(a.ResourceNames, b.ResourceNames) && sameSet(a.Verbs, b.Verbs) && len(a.NonResourceURLs)+len(b.NonResourceURLs) == 0
}

func ruleString(r rbacv1.PolicyRule) string {
	groups := slices.Clone(r.APIGroups)
	for i, g := range groups {
		if g == "" {
			groups[i] = `""`
		}
	}
	s := fmt.Sprintf("%s %s: %s", strings.Join(groups, ","), strings.Join(r.Resources, ","), strings.Join(r.Verbs, ","))
	if len(r.ResourceNames) > 0 {
		s += " (names " + strings.Join(r.ResourceNames, ",") + ")"
	}
	if len(r.NonResourceURLs) > 0 {
		s += " (URLs " + strings.Join(r.NonResourceURLs, ",") + ")"
	}
	return s
}

// renderedRoles are the ClusterRoles and Roles of a render, by the key
// docs/security.md names them with, and the keys of the roles its
// bindings refer to.
func renderedRoles(t *testing.T, objs []*unstructured.Unstructured) (roles map[string][]rbacv1.PolicyRule, bound map[string]string) {
	t.Helper()
	roles, bound = map[string][]rbacv1.PolicyRule{}, map[string]string{}
	ns := func(o *unstructured.Unstructured) string {
		if o.GetNamespace() == "nf-chart" {
			return releaseNamespace
		}
		return o.GetNamespace()
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			roles[roleKey(o.GetKind(), o.GetName(), ns(o))] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			refNS := ""
			if b.RoleRef.Kind == "Role" {
				refNS = ns(o)
			}
			bound[roleKey(b.RoleRef.Kind, b.RoleRef.Name, refNS)] = o.GetKind() + " " + o.GetName()
		}
	}
	return roles, bound
}

// TestEveryRoleRuleHasAReason renders the chart with each cloud provider
// and compares every rule of every ClusterRole and Role with the rows of
// docs/security.md: a rule with no row (a right added without a reason),
// a row with no rule, a role the page does not name, a binding to a role
// it does not name (system:kube-scheduler, say), and simulated-cloud
// rights rendered with aws all fail. The built-in roles a binding refers
// to are read from the API server and compared the same way.
func TestEveryRoleRuleHasAReason(t *testing.T) {
	docs := documentedRoles(t)
	byKey := map[string]documentedRole{}
	for _, d := range docs {
		if _, ok := byKey[d.key()]; ok {
			t.Errorf("docs/security.md lists %s twice", d.key())
		}
		byKey[d.key()] = d
	}
	for _, provider := range []string{"aws", "simulated"} {
		t.Run(provider, func(t *testing.T) {
			objs := render(t, "provisioner.cloudProvider="+provider, "provisioner.clusterName=demo", "image.repository="+repository)
			roles, bound := renderedRoles(t, objs)
			for key, rules := range roles {
				d, ok := byKey[key]
				if !ok {
					t.Errorf("the chart renders %s, which docs/security.md does not list", key)
					continue
				}
				if d.simulatedOnly && provider != "simulated" {
					t.Errorf("%s is rendered with cloudProvider %s; docs/security.md says simulated cloud only", key, provider)
				}
				compareRules(t, key, rules, d.rules)
			}
			for _, d := range docs {
				_, rendered := roles[d.key()]
				if !rendered && !d.builtIn && (provider == "simulated" || !d.simulatedOnly) {
					t.Errorf("docs/security.md lists %s, which the chart does not render with cloudProvider %s", d.key(), provider)
				}
			}
			for key, binding := range bound {
				d, ok := byKey[key]
				if !ok {
					t.Errorf("%s binds %s, which docs/security.md does not list", binding, key)
					continue
				}
				if d.builtIn {
					compareRules(t, key, liveRules(t, d), d.rules)
				}
			}
		})
	}
}

// compareRules pairs rendered rules with documented ones, each once.
func compareRules(t *testing.T, role string, rendered []rbacv1.PolicyRule, documented []documentedRule) {
	t.Helper()
	used := make([]bool, len(documented))
	for _, r := range rendered {
		i := slices.IndexFunc(documented, func(d documentedRule) bool { return sameRule(d.PolicyRule, r) })
		for i >= 0 && used[i] {
			next := slices.IndexFunc(documented[i+1:], func(d documentedRule) bool { return sameRule(d.PolicyRule, r) })
			if next < 0 {
				i = -1
				break
			}
			i += 1 + next
		}
		if i < 0 {
			t.Errorf("%s grants %s, which docs/security.md does not list with a reason", role, ruleString(r))
			continue
		}
		used[i] = true
	}
	for i, d := range documented {
		if !used[i] {
			t.Errorf("docs/security.md lists %s for %s, which it does not grant", ruleString(d.PolicyRule), role)
		}
	}
}

// liveRules reads a built-in role from the API server.
func liveRules(t *testing.T, d documentedRole) []rbacv1.PolicyRule {
	t.Helper()
	ctx := context.Background()
	if d.kind == "ClusterRole" {
		var r rbacv1.ClusterRole
		if err := kube.Get(ctx, client.ObjectKey{Name: d.name}, &r); err != nil {
			t.Fatalf("the built-in %s: %v", d.key(), err)
		}
		return r.Rules
	}
	var r rbacv1.Role
	if err := kube.Get(ctx, client.ObjectKey{Namespace: d.namespace, Name: d.name}, &r); err != nil {
		t.Fatalf("the built-in %s: %v", d.key(), err)
	}
	return r.Rules
}

// grants reports whether rules allow verb on group/resource (named name,
// if not empty).
func grants(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || name != "" && slices.Contains(r.ResourceNames, name))
	})
}

// TestSchedulerRoleCoversKubeScheduler: everything the API server's own
// system:kube-scheduler and system:volume-scheduler grant, nodeforge-
// scheduler's ClusterRole grants too, but for what it leaves out on
// purpose (the reasons are below and in docs/security.md). A Kubernetes
// release whose scheduler needs a new right fails this test, rather than
// nodeforge-scheduler at run time.
func TestSchedulerRoleCoversKubeScheduler(t *testing.T) {
	roles, _ := renderedRoles(t, render(t, required...))
	ours := roles["ClusterRole nodeforge-scheduler"]
	if ours == nil {
		t.Fatal("the chart renders no ClusterRole nodeforge-scheduler")
	}
	leftOut := map[string]string{
		"coordination.k8s.io/leases":          "leader election is on a lease of its own, in the release's namespace (Role nodeforge-scheduler)",
		"coordination.k8s.io/leasecandidates": "coordinated leader election, which nodeforge-scheduler does not take part in",
		"extensions/replicasets":              "a group no supported Kubernetes serves",
	}
	checked := 0
	for _, name := range []string{"system:kube-scheduler", "system:volume-scheduler"} {
		for _, r := range liveRules(t, documentedRole{kind: "ClusterRole", name: name}) {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if _, ok := leftOut[g+"/"+res]; ok {
						continue
					}
					for _, v := range r.Verbs {
						checked++
						names := r.ResourceNames
						if len(names) == 0 {
							names = []string{""}
						}
						for _, n := range names {
							if !grants(ours, g, res, v, n) {
								t.Errorf("%s grants %s on %s/%s, nodeforge-scheduler's ClusterRole does not", name, v, g, res)
							}
						}
					}
				}
			}
		}
	}
	if checked < 40 {
		t.Fatalf("checked %d rights of kube-scheduler's roles; they hold more than that", checked)
	}
}
