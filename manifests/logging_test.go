package manifests_test

import (
	"strings"
	"testing"
)

// TestChartLoggingFormat: logging.format is both programs'
// --logging-format, text unless set; another format is refused.
func TestChartLoggingFormat(t *testing.T) {
	for format, set := range map[string][]string{
		"text": required,
		"json": append([]string{"logging.format=json"}, required...),
	} {
		objs := render(t, set...)
		for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
			args := str(find(t, objs, "Deployment", name), "spec", "template", "spec", "containers")
			if !strings.Contains(args, "--logging-format="+format) {
				t.Errorf("%s with %v: args %s lack --logging-format=%s", name, set, args, format)
			}
		}
	}
	_, err := runHelm(t, "template", "nodeforge", ".", "--set", "provisioner.clusterName=demo", "--set", "image.repository="+repository, "--set", "logging.format=xml")
	if want := `logging.format "xml": choose text or json`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("logging.format=xml: %v, want an error saying %q", err, want)
	}
}
