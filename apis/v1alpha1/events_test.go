package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// eventConstants are the constants of events.go whose names start with
// prefix, by value. Read from the source, so a constant added there is
// counted without a list to keep beside it.
func eventConstants(t *testing.T, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, prefix) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal: a reason or action is written out, as users see it", name.Name)
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if name.Name != prefix+v {
					t.Errorf("constant %s is %q; name it %s%s", name.Name, v, prefix, v)
				}
				consts[v] = name.Name
			}
		}
	}
	if len(consts) == 0 {
		t.Fatalf("no %s constants in events.go", prefix)
	}
	return consts
}

// documentedEvents are the rows of the Events table of docs/api.md: each
// reason with the backquoted actions of its row.
func documentedEvents(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## Events\n")
	if !ok {
		t.Fatal("docs/api.md has no section ## Events")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\|[^|]*\\|[^|]*\\|([^|]*)\\|")
	quoted := regexp.MustCompile("`([A-Za-z]+)`")
	rows := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/api.md lists Event reason %s twice", m[1])
		}
		rows[m[1]] = []string{}
		for _, a := range quoted.FindAllStringSubmatch(m[2], -1) {
			rows[m[1]] = append(rows[m[1]], a[1])
		}
	}
	if len(rows) == 0 {
		t.Fatal("no rows in docs/api.md's Events table")
	}
	return rows
}

// TestEventReasonsAreDocumented: the Events table of docs/api.md lists
// every reason constant, and only those, and every action constant is in
// it: users match on what the table says.
func TestEventReasonsAreDocumented(t *testing.T) {
	reasons, actions := eventConstants(t, "Reason"), eventConstants(t, "Action")
	rows := documentedEvents(t)
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		if _, ok := rows[r]; !ok {
			t.Errorf("%s (%q) is missing from docs/api.md's Events table", reasons[r], r)
		}
	}
	used := map[string]bool{}
	for _, r := range slices.Sorted(maps.Keys(rows)) {
		if _, ok := reasons[r]; !ok {
			t.Errorf("docs/api.md's Events table lists %q, which no Reason constant in events.go has", r)
		}
		for _, a := range rows[r] {
			used[a] = true
			if _, ok := actions[a]; !ok {
				t.Errorf("docs/api.md gives Event %s the action %q, which no Action constant in events.go has", r, a)
			}
		}
	}
	for _, a := range slices.Sorted(maps.Keys(actions)) {
		if !used[a] {
			t.Errorf("%s (%q) is the action of no Event in docs/api.md's Events table", actions[a], a)
		}
	}
	if ReasonInterrupted != string(DisruptionReasonInterrupted) {
		t.Errorf("ReasonInterrupted is %q and DisruptionReasonInterrupted %q; an interruption's Event reason is its disruption reason", ReasonInterrupted, DisruptionReasonInterrupted)
	}
}

// kubeReasons are Event reasons the docs name that kube-scheduler
// records, not Nodeforge.
var kubeReasons = []string{"FailedScheduling", "Scheduled"}

// TestDocsNameOnlyEventReasonsThatExist: wherever the README and docs/
// call a word an Event (`X` Event, Event `X`), it is a reason Nodeforge
// records or kube-scheduler's; and every word the README's "What a pod
// shows" quotes is one too, or a pod condition.
func TestDocsNameOnlyEventReasonsThatExist(t *testing.T) {
	reasons := eventConstants(t, "Reason")
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"), filepath.Join("..", "..", "plugin", "virtualnodes", "README.md"))
	named := regexp.MustCompile("`([A-Z][A-Za-z]+)`\\s+(?:\\(?Warning\\)?\\s+)?Events?\\b|Events?\\s+\\(?`([A-Z][A-Za-z]+)`")
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
			r := m[1] + m[2]
			if _, ok := reasons[r]; !ok && !slices.Contains(kubeReasons, r) {
				t.Errorf("%s names Event %q, which no Reason constant in events.go has", f, r)
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n## What a pod shows\n")
	if !ok {
		t.Fatal("README.md has no section ## What a pod shows")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, m := range regexp.MustCompile("`([A-Z][A-Za-z]+)`").FindAllStringSubmatch(section, -1) {
		if _, ok := reasons[m[1]]; !ok && !slices.Contains(kubeReasons, m[1]) && m[1] != "PodScheduled" {
			t.Errorf("README.md's What a pod shows names %q, which is no Event reason of Nodeforge's", m[1])
		}
	}
}
