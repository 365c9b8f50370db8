package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent runs controller-gen (the version pinned in
// hack/tools) and fails when the committed deepcopy code or CRDs differ from
// what it generates now: run `make generate`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gen := os.Getenv("CONTROLLER_GEN")
	if gen == "" {
		gen = filepath.Join(t.TempDir(), "controller-gen")
		build := exec.Command("go", "build", "-C", filepath.Join(root, "hack", "tools"), "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building controller-gen: %v\n%s", err, out)
		}
	}
	run := func(args ...string) []byte {
		cmd := exec.Command(gen, args...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}

	for pkg, file := range map[string]string{"./apis/v1alpha1/...": "apis/v1alpha1/zz_generated.deepcopy.go", "./apis/autoscaling/v1": "apis/autoscaling/v1/zz_generated.deepcopy.go", "./apis/autoscaling/v1beta1": "apis/autoscaling/v1beta1/zz_generated.deepcopy.go"} {
		deepcopy := run("object:headerFile=hack/boilerplate.go.txt", "paths="+pkg, "output:object:stdout")
		committed, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bytes.TrimSpace(deepcopy), bytes.TrimSpace(committed)) {
			t.Errorf("%s is stale: run make generate", file)
		}
	}
	// Nodeforge's CRDs, and those the chart installs only when asked.
	for pkg, dir := range map[string]string{"./apis/v1alpha1/...": "manifests/crd", "./apis/autoscaling/...": "manifests/crd-optional"} {
		crdDir := t.TempDir()
		run("crd", "paths="+pkg, "output:crd:dir="+crdDir)
		fresh, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		old, err := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(fresh) == 0 || len(fresh) != len(old) {
			t.Fatalf("controller-gen makes %d CRDs from %s, %s has %d: run make generate", len(fresh), pkg, dir, len(old))
		}
		for _, f := range fresh {
			want, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, dir, filepath.Base(f)))
			if err != nil || !bytes.Equal(want, got) {
				t.Errorf("%s/%s is stale or missing: run make generate", dir, filepath.Base(f))
			}
		}
	}
}
