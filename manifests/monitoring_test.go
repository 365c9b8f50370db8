package manifests_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestChartMonitoringIsOffByDefault: no dashboard ConfigMap and no
// PrometheusRule unless asked for.
func TestChartMonitoringIsOffByDefault(t *testing.T) {
	for _, o := range render(t, required...) {
		if o.GetKind() == "PrometheusRule" || o.GetName() == "nodeforge-dashboard" {
			t.Errorf("%s %s rendered by default", o.GetKind(), o.GetName())
		}
	}
}

// TestChartMonitoring: asked for, the dashboard is a ConfigMap the
// Grafana sidecar selects (grafana_dashboard: "1", the given annotations
// beside commonAnnotations) holding monitoring/dashboard.json as it is,
// and the alerts a PrometheusRule whose spec is monitoring/alerts.yaml,
// with the given labels for the Prometheus's ruleSelector.
func TestChartMonitoring(t *testing.T) {
	objs := render(t, append([]string{
		"grafanaDashboard.enabled=true",
		"grafanaDashboard.annotations.grafana_folder=Platform",
		"commonAnnotations.example\\.com/owner=platform",
		"prometheusRule.enabled=true",
		"prometheusRule.labels.release=prometheus",
	}, required...)...)

	cm := find(t, objs, "ConfigMap", "nodeforge-dashboard")
	if cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetNamespace() != "nf-chart" {
		t.Errorf("dashboard ConfigMap labels %v in %q, want grafana_dashboard=1 in nf-chart", cm.GetLabels(), cm.GetNamespace())
	}
	if a := cm.GetAnnotations(); a["grafana_folder"] != "Platform" || a["example.com/owner"] != "platform" {
		t.Errorf("dashboard ConfigMap annotations %v, want grafana_folder and commonAnnotations", a)
	}
	var rendered, file map[string]any
	if err := json.Unmarshal([]byte(str(cm, "data", "nodeforge.json")), &rendered); err != nil {
		t.Fatalf("the ConfigMap's nodeforge.json is not JSON: %v", err)
	}
	raw, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(rendered, file) {
		t.Error("the ConfigMap's dashboard differs from monitoring/dashboard.json")
	}

	rule := find(t, objs, "PrometheusRule", "nodeforge")
	if rule.GetLabels()["release"] != "prometheus" || rule.GetNamespace() != "nf-chart" {
		t.Errorf("PrometheusRule labels %v in %q, want release=prometheus in nf-chart", rule.GetLabels(), rule.GetNamespace())
	}
	raw, err = os.ReadFile("monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts map[string]any
	if err := yaml.Unmarshal(raw, &alerts); err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	if !equality.Semantic.DeepEqual(spec, alerts) {
		t.Errorf("the PrometheusRule's spec differs from monitoring/alerts.yaml:\n%v", spec)
	}
	// The API server has no PrometheusRule kind without the operator's CRDs.
	dryRun(t, slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "PrometheusRule" }))
}
