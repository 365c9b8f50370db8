package auditlog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// TestTheSimulatedCloudIsNamedAsItNamesItself: the user agent the reader
// counts as the simulated cloud is the one its clients send.
func TestTheSimulatedCloudIsNamedAsItNamesItself(t *testing.T) {
	if simulatedCloudAgent != simulated.UserAgent {
		t.Errorf("the audit log reader counts user agent %q as the simulated cloud, which sends %q", simulatedCloudAgent, simulated.UserAgent)
	}
}

// line is one audit event as the API server writes it at the Metadata
// level, answered at second s past 10:00.
func line(s int, verb, username, userAgent, resource string) string {
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"%d","stage":"ResponseComplete",`+
		`"requestURI":"/api/v1/%s","verb":%q,"user":{"username":%q,"groups":["system:serviceaccounts","system:serviceaccounts:nodeforge","system:authenticated"]},`+
		`"sourceIPs":["127.0.0.1"],"userAgent":%q,"objectRef":{"resource":%q,"namespace":"nodeforge","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},`+
		`"requestReceivedTimestamp":"2026-11-30T10:00:%02d.000000Z","stageTimestamp":"2026-11-30T10:00:%02d.001000Z"}`,
		s, resource, verb, username, userAgent, resource, s, s)
}

// TestReadCountsTheSimulatedCloudApart reads an audit log and the file
// it was rotated to: the requests the provisioner's service account made
// with the simulated cloud's user agent count as SimulatedCloud, with or
// without a version, and only those; requests answered outside the
// window are not counted.
func TestReadCountsTheSimulatedCloudApart(t *testing.T) {
	const (
		scheduler   = "system:serviceaccount:nodeforge:nodeforge-scheduler"
		provisioner = "system:serviceaccount:nodeforge:nodeforge-provisioner"
	)
	dir := t.TempDir()
	rotated := []string{
		line(1, "create", scheduler, "nodeforge-scheduler/v0.37.2", "pods"),
		line(2, "list", provisioner, "nodeforge-provisioner", "nodeclaims"),
	}
	current := []string{
		line(3, "list", provisioner, "nodeforge-simulated-cloud", "configmaps"),
		line(4, "create", provisioner, "nodeforge-simulated-cloud/dev", "nodes"),
		line(5, "patch", provisioner, "nodeforge-provisioner", "nodes"),
		line(9, "list", provisioner, "nodeforge-simulated-cloud", "configmaps"), // after the window
	}
	for name, lines := range map[string][]string{"audit-2026-11-30T10-00-02.500.log": rotated, "audit.log": current} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	at := func(s int) time.Time { return time.Date(2026, 11, 30, 10, 0, s, 0, time.UTC) }

	got, err := Read(filepath.Join(dir, "audit.log"), at(0), at(8))
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{
		Total:  map[string]int{"nodeforge-scheduler": 1, "nodeforge-provisioner": 2, SimulatedCloud: 2},
		Writes: map[string]int{"nodeforge-scheduler": 1, "nodeforge-provisioner": 1, SimulatedCloud: 1},
		By: map[string]int{
			"nodeforge-scheduler create pods":       1,
			"nodeforge-provisioner list nodeclaims": 1,
			"nodeforge-provisioner patch nodes":     1,
			"simulated-cloud list configmaps":       1,
			"simulated-cloud create nodes":          1,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want,+got):\n%s", diff)
	}
}
