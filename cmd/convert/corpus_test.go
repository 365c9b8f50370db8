package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden from what the converter makes now")

// TestCorpus converts every Karpenter manifest of testdata/karpenter and
// checks, per file: the paths reported (testdata/golden/NAME.reported),
// the objects written (testdata/golden/NAME.yaml), that the API server
// accepts every object written as it is (server-side dry run, strict field
// validation: an unknown field is a refusal), and that the command exits 3
// when something is reported and 0 when not. It logs the corpus totals.
func TestCorpus(t *testing.T) {
	inputs, err := filepath.Glob("testdata/karpenter/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	var total struct{ files, objects, converted, reported, sent, refused int }
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Convert(bytes.NewReader(src))
			if err != nil {
				t.Fatal(err)
			}
			var reported bytes.Buffer
			for _, d := range res.Dropped {
				fmt.Fprintln(&reported, reportedPath(d))
			}
			golden(t, filepath.Join("testdata", "golden", name+".reported"), reported.Bytes())
			golden(t, filepath.Join("testdata", "golden", name+".yaml"), res.Out)

			sent, refused := sendDryRun(t, res.Out)
			if sent != res.Objects {
				t.Errorf("sent %d objects, Convert says it wrote %d", sent, res.Objects)
			}

			var stdout, stderr bytes.Buffer
			want := 0
			if len(res.Dropped) > 0 {
				want = 3
			}
			if code := run([]string{in}, strings.NewReader(""), &stdout, &stderr); code != want {
				t.Errorf("nodeforge-convert %s exited %d, want %d; stderr:\n%s", in, code, want, stderr.String())
			}
			if !bytes.Equal(stdout.Bytes(), res.Out) {
				t.Errorf("nodeforge-convert %s wrote other objects than Convert:\n%s", in, cmp.Diff(string(res.Out), stdout.String()))
			}
			for _, d := range res.Dropped {
				if !strings.Contains(stderr.String(), d.String()) {
					t.Errorf("stderr lacks %q", d)
				}
			}

			total.files++
			total.objects += res.Objects
			total.converted += res.Converted
			total.reported += len(res.Dropped)
			total.sent += sent
			total.refused += refused
		})
	}
	t.Logf("Karpenter corpus: %d files, %d objects written", total.files, total.objects)
	t.Logf("  fields converted: %d", total.converted)
	t.Logf("  fields reported:  %d", total.reported)
	t.Logf("  objects sent to the API server (dry run, strict): %d", total.sent)
	t.Logf("  objects refused:  %d", total.refused)
	if total.refused > 0 {
		t.Errorf("the API server refused %d converted object(s)", total.refused)
	}
}

// reportedPath is how a golden file lists a reported field: kind/name
// and path, or "(not written)" for the whole object.
func reportedPath(d Dropped) string {
	if d.Path == "" {
		return fmt.Sprintf("%s/%s (not written)", d.Kind, d.Name)
	}
	return fmt.Sprintf("%s/%s %s", d.Kind, d.Name, d.Path)
}

// sendDryRun creates each object of out, as an unstructured object, with a
// server-side dry run and strict field validation, reporting each refusal.
func sendDryRun(t *testing.T, out []byte) (sent, refused int) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return sent, refused
		} else if err != nil {
			t.Fatalf("reading the converted objects: %v", err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		sent++
		if err := kube.Create(context.Background(), u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			refused++
			t.Errorf("the API server refused %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// golden compares got with the file at path, or writes it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestCorpus -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want,+got); go test -run TestCorpus -update rewrites it once the change is meant:\n%s", path, diff)
	}
}

// TestDryRunRefusesWhatNodeforgeRefuses: the check TestCorpus relies on
// does refuse: an unknown field (strict field validation), a value the
// schema refuses, and a rule of Nodeforge's CEL validation.
func TestDryRunRefusesWhatNodeforgeRefuses(t *testing.T) {
	const valid = "apiVersion: nodeforge.dev/v1alpha1\nkind: NodePool\nmetadata: {name: dry-run}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: nodeforge.dev, kind: EC2NodeClass, name: default}\n"
	for name, doc := range map[string]string{
		"an unknown field":     valid + "      volumeInitializationRate: 100\n",
		"an operator it lacks": valid + "      requirements: [{key: kubernetes.io/arch, operator: Gte, values: ['1']}]\n",
		"minValues on Exists":  valid + "      requirements: [{key: nodeforge.dev/instance-family, operator: Exists, minValues: 2}]\n",
	} {
		if sent, refused := sendDryRunQuietly(t, doc); sent != 1 || refused != 1 {
			t.Errorf("%s: sent %d, refused %d; want the one object refused", name, sent, refused)
		}
	}
	if sent, refused := sendDryRunQuietly(t, valid); sent != 1 || refused != 0 {
		t.Errorf("a valid pool: sent %d, refused %d; want it accepted", sent, refused)
	}
}

// sendDryRunQuietly sends one object as sendDryRun does, counting a
// refusal without failing t.
func sendDryRunQuietly(t *testing.T, doc string) (sent, refused int) {
	var obj map[string]any
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&obj); err != nil {
		t.Fatal(err)
	}
	err := kube.Create(context.Background(), &unstructured.Unstructured{Object: obj}, client.DryRunAll, client.FieldValidation("Strict"))
	if err != nil {
		t.Logf("refused: %v", err)
		return 1, 1
	}
	return 1, 0
}
