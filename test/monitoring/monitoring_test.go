// Package monitoring checks the chart's Grafana dashboard and Prometheus
// alerts against the metrics both programs register, in process, and
// docs/metrics.md against Nodeforge's own metrics.
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics/legacyregistry"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	// nodeforge-scheduler's registrations at load: nodeforge_build_info,
	// and component-base's client-go metrics (leader election among them).
	_ "github.com/nodeforge/nodeforge/cmd/scheduler/app"
	"github.com/nodeforge/nodeforge/manifests"
	"github.com/nodeforge/nodeforge/plugin/gatedpreemption"
	"github.com/nodeforge/nodeforge/plugin/virtualnodes"
	// The provisioner's metrics, on controller-runtime's registry with
	// controller-runtime's own (workqueue, client, leader election).
	_ "github.com/nodeforge/nodeforge/provisioner/metrics"
)

// exported returns the names of the metric families each program serves
// on /metrics: their registries' descriptors, so a vector with no series
// yet counts too. The scheduler's registry gets what kube-scheduler and
// VirtualNodes register when they start.
func exported(t *testing.T) (scheduler, provisioner map[string]bool) {
	t.Helper()
	schedmetrics.Register()
	virtualnodes.RegisterMetrics()
	gatedpreemption.RegisterMetrics()
	return names(t, legacyregistry.Registerer()), names(t, crmetrics.Registry)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func names(t *testing.T, r prometheus.Registerer) map[string]bool {
	t.Helper()
	c, ok := r.(prometheus.Collector)
	if !ok {
		t.Fatalf("registry %T cannot describe its metrics", r)
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	out := map[string]bool{}
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("a registry described no metric")
	}
	return out
}

var (
	// quoted strings, taken out first: they may hold anything.
	promqlStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	// label matchers, ranges and subqueries, and the label lists of by,
	// without, on, ignoring, group_left and group_right.
	promqlNoise = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// a number or duration (1e3, 0.9, 5m), or an identifier and whether a
	// parenthesis follows.
	token    = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|\$?[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "Inf", "NaN",
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, matchers, ranges and label lists are
// taken out, less functions (followed by a parenthesis), keywords,
// aggregations and Grafana's variables.
func metricNames(expr string) []string {
	var out []string
	for _, m := range token.FindAllStringSubmatch(promqlNoise.ReplaceAllString(promqlStrings.ReplaceAllString(expr, `""`), " "), -1) {
		tok := m[0]
		if m[1] != "" || tok[0] >= '0' && tok[0] <= '9' || tok[0] == '$' || slices.Contains(keywords, tok) {
			continue
		}
		out = append(out, tok)
	}
	return out
}

// TestMetricNamesOfPromQL: the extraction the tests below rely on finds
// the metrics and nothing else.
func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (nodepool) (rate(a_total{nodepool=~"$nodepool", x="by (y)"}[$__rate_interval]))`:              {"a_total"},
		`histogram_quantile(0.99, sum by (le, result) (rate(b_seconds_bucket[5m])))`:                          {"b_seconds_bucket"},
		`(sum(c{name="kube-scheduler"} and on (job, instance) d) or vector(0)) < 1`:                           {"c", "d"},
		"max by (nodepool, resource) (e)\n/ on (nodepool, resource)\nmax by (nodepool, resource) (f)\n>= 0.9": {"e", "f"},
		`sum(increase(g_count[15m])) < 1 unless on () h offset 5m`:                                            {"g_count", "h"},
		`count by (version) (i) * on (job) group_left (kubernetesVersion) j`:                                  {"i", "j"},
		`min_over_time(sum(k)[15m:1m]) > bool 0 and l`:                                                        {"k", "l"},
		`topk(3, sum(m) by (a)) / ignoring (result) group_right sum without (pod) (n)`:                        {"m", "n"},
		`o{a="}"} + p{b='x"y'} + q{c="x\"y"}`:                                                                 {"o", "p", "q"},
		`s:recorded:rate5m > 1e3`:                                                                             {"s:recorded:rate5m"},
		`vector(0) + time()`:                                                                                  nil,
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardQueries returns each query of the dashboard, by where it is:
// every panel target's expression, and each variable's metric.
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := manifests.FS.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("monitoring/dashboard.json: %v", err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	// label_values(metric, label): the metric only.
	labelValues := regexp.MustCompile(`^label_values\(([^,]+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		m := labelValues.FindStringSubmatch(strings.TrimSpace(fmt.Sprint(q["query"])))
		if m == nil {
			t.Fatalf("variable %s: query %v is not label_values(metric, label)", v.Name, v.Query)
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

// alertRule is one rule of monitoring/alerts.yaml.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw, err := manifests.FS.ReadFile("monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("monitoring/alerts.yaml: %v", err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// servedBy says which programs serve the metric family a selected name
// belongs to: a histogram's _bucket, _sum and _count series are its
// family's.
func servedBy(name string, scheduler, provisioner map[string]bool) []string {
	var out []string
	for program, names := range map[string]map[string]bool{"nodeforge-scheduler": scheduler, "nodeforge-provisioner": provisioner} {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
				family = base
			}
		}
		if names[family] {
			out = append(out, program)
		}
	}
	return out
}

// TestDashboardAndAlertsReadExportedMetrics: every metric the dashboard's
// panels and variables and the alerts' expressions select is one that
// nodeforge-scheduler or nodeforge-provisioner serves, and every one of
// them selects at least one.
func TestDashboardAndAlertsReadExportedMetrics(t *testing.T) {
	scheduler, provisioner := exported(t)
	queries := dashboardQueries(t)
	rules := alertRules(t)
	if len(queries) < 20 || len(rules) < 5 {
		t.Fatalf("%d dashboard queries and %d alerts read: the files were not parsed as meant", len(queries), len(rules))
	}
	for _, r := range rules {
		queries["alert "+r.Alert] = r.Expr
	}
	for where, expr := range queries {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric found in %q", where, expr)
		}
		for _, name := range names {
			if len(servedBy(name, scheduler, provisioner)) == 0 {
				t.Errorf("%s reads %s, which neither program exports", where, name)
			}
		}
	}
}

// TestAlertsSayWhatAndHowBad: each alert waits before it fires, has a
// severity an Alertmanager can route on, and a summary and description.
func TestAlertsSayWhatAndHowBad(t *testing.T) {
	for _, r := range alertRules(t) {
		if !strings.HasPrefix(r.Alert, "Nodeforge") {
			t.Errorf("alert %s: want its name to start Nodeforge", r.Alert)
		}
		if r.For == "" {
			t.Errorf("alert %s fires on one evaluation: want a for:", r.Alert)
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: want a summary and a description", r.Alert)
		}
	}
}

// TestMetricsDocListsNodeforgesMetrics: docs/metrics.md names every
// metric family of Nodeforge's own (nodeforge_*) that either program
// serves, and no nodeforge_ metric neither serves.
func TestMetricsDocListsNodeforgesMetrics(t *testing.T) {
	scheduler, provisioner := exported(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(nodeforge_[a-z_]+)`").FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]] = true
	}
	for _, served := range []map[string]bool{scheduler, provisioner} {
		for name := range served {
			if strings.HasPrefix(name, "nodeforge_") && !documented[name] {
				t.Errorf("docs/metrics.md does not document %s", name)
			}
		}
	}
	for name := range documented {
		if len(servedBy(name, scheduler, provisioner)) == 0 {
			t.Errorf("docs/metrics.md documents %s, which neither program exports", name)
		}
	}
}
