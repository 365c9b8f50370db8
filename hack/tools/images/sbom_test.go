package main

import (
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestSBOMListsTheModulesOfTheBinary builds the SBOM of this test's own
// binary, named twice as two architectures' would be: a valid SPDX 2.3
// document whose identifiers are unique and whose relationships name only
// packages it holds, describing the image by its digest, listing the
// standard library of the running Go and go-containerregistry at go.mod's
// version with their package URLs, each module once; the same input gives
// the same namespace, another digest another.
func TestSBOMListsTheModulesOfTheBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	raw, err := sbom("nodeforge-test", "v1.2.3", digest, []string{exe, exe})
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.Name != "nodeforge-test" {
		t.Errorf("document header %q %q %q %q", doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.Name)
	}
	if !regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(doc.DocumentNamespace) {
		t.Errorf("documentNamespace %q is not a version 8 UUID URN", doc.DocumentNamespace)
	}
	if len(doc.CreationInfo.Creators) == 0 || doc.CreationInfo.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("creationInfo %+v", doc.CreationInfo)
	}

	ids := map[string]spdxPackage{}
	byName := map[string][]spdxPackage{}
	idPattern := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	for _, p := range doc.Packages {
		if _, dup := ids[p.SPDXID]; dup || !idPattern.MatchString(p.SPDXID) {
			t.Errorf("package %s: SPDXID %q is repeated or not valid", p.Name, p.SPDXID)
		}
		if p.DownloadLocation == "" {
			t.Errorf("package %s has no downloadLocation", p.Name)
		}
		ids[p.SPDXID] = p
		byName[p.Name] = append(byName[p.Name], p)
	}
	for _, r := range doc.Relationships {
		_, left := ids[r.Element]
		_, right := ids[r.Related]
		if !(left || r.Element == doc.SPDXID) || !right {
			t.Errorf("relationship %+v names a package the document does not hold", r)
		}
	}

	image := byName["nodeforge-test"]
	if len(image) != 1 || image[0].VersionInfo != "v1.2.3" || len(image[0].Checksums) != 1 ||
		image[0].Checksums[0] != (spdxChecksum{Algorithm: "SHA256", ChecksumValue: strings.Repeat("ab", 32)}) {
		t.Errorf("image package %+v, want version v1.2.3 and the digest as its SHA256", image)
	}
	registry := "github.com/google/go-containerregistry"
	want := map[string]string{
		"stdlib": "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go"),
		registry: "pkg:golang/" + registry + "@" + requiredVersion(t, registry),
	}
	for name, locator := range want {
		got := byName[name]
		if len(got) != 1 {
			t.Errorf("%s is listed %d times, want once", name, len(got))
			continue
		}
		if len(got[0].ExternalRefs) != 1 || got[0].ExternalRefs[0].ReferenceLocator != locator {
			t.Errorf("%s: external refs %+v, want the package URL %s", name, got[0].ExternalRefs, locator)
		}
	}

	again, err := sbom("nodeforge-test", "v1.2.3", digest, []string{exe})
	if err != nil {
		t.Fatal(err)
	}
	other, err := sbom("nodeforge-test", "v1.2.3", "sha256:"+strings.Repeat("cd", 32), []string{exe})
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(raw) {
		t.Error("the same binary listed once and twice gives two documents")
	}
	var otherDoc spdxDocument
	if err := json.Unmarshal(other, &otherDoc); err != nil || otherDoc.DocumentNamespace == doc.DocumentNamespace {
		t.Errorf("another image digest kept the namespace %s (%v)", doc.DocumentNamespace, err)
	}
	if _, err := sbom("nodeforge-test", "v1", "sha512:00", []string{exe}); err == nil {
		t.Error("a digest that is not sha256 was accepted")
	}
}

// TestSBOMModuleIsWhatWasBuilt: a module go.mod replaces is listed at the
// version (and path) built, and package URLs encode what they must.
func TestSBOMModuleIsWhatWasBuilt(t *testing.T) {
	for _, tc := range []struct {
		name        string
		in          debug.Module
		wantName    string
		wantVersion string
		wantLocator string
		wantComment string
	}{
		{name: "a module as required", in: debug.Module{Path: "sigs.k8s.io/yaml", Version: "v1.6.0"},
			wantName: "sigs.k8s.io/yaml", wantVersion: "v1.6.0", wantLocator: "pkg:golang/sigs.k8s.io/yaml@v1.6.0"},
		{name: "replaced by a version of itself, as go.mod pins the staging libraries",
			in:       debug.Module{Path: "k8s.io/api", Version: "v0.0.0", Replace: &debug.Module{Path: "k8s.io/api", Version: "v0.37.2"}},
			wantName: "k8s.io/api", wantVersion: "v0.37.2", wantLocator: "pkg:golang/k8s.io/api@v0.37.2"},
		{name: "replaced by another module",
			in:       debug.Module{Path: "example.test/a", Version: "v1.0.0", Replace: &debug.Module{Path: "example.test/fork", Version: "v1.0.1"}},
			wantName: "example.test/fork", wantVersion: "v1.0.1", wantLocator: "pkg:golang/example.test/fork@v1.0.1", wantComment: "replaces example.test/a (go.mod)"},
		{name: "an incompatible major version, its plus sign encoded",
			in:       debug.Module{Path: "example.test/old", Version: "v2.0.0+incompatible"},
			wantName: "example.test/old", wantVersion: "v2.0.0+incompatible", wantLocator: "pkg:golang/example.test/old@v2.0.0%2Bincompatible"},
		{name: "the main module of a build without a version", in: debug.Module{Path: "example.test/main", Version: "(devel)"},
			wantName: "example.test/main", wantLocator: "pkg:golang/example.test/main"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := module(tc.in, "LIBRARY")
			if p.Name != tc.wantName || p.VersionInfo != tc.wantVersion || p.Comment != tc.wantComment ||
				len(p.ExternalRefs) != 1 || p.ExternalRefs[0].ReferenceLocator != tc.wantLocator {
				t.Errorf("module(%+v) = %+v; want %s %q, package URL %s, comment %q", tc.in, p, tc.wantName, tc.wantVersion, tc.wantLocator, tc.wantComment)
			}
		})
	}
}

// requiredVersion is the version of path that this module's go.mod
// requires.
func requiredVersion(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s+(\S+)`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatalf("go.mod requires no %s", path)
	}
	return m[1]
}
