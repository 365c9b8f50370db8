package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestImages inspects the images make images wrote ($NODEFORGE_IMAGES):
// each program's OCI layout holds a valid index (every digest and size
// checked) of an image for each architecture built
// ($NODEFORGE_IMAGE_ARCHS, comma-separated; both shipped ones when unset),
// each with the
// program as its entrypoint, run as a user that is not root, with the OCI
// labels of its title and version, and the binary at the entrypoint's
// path; beside it, the index's digest (in <program>.digest and in the
// chart values digests.yaml) and an SBOM of that digest listing the
// binary's modules. make test builds them first; outside it, the test has nothing to
// inspect and says so.
func TestImages(t *testing.T) {
	dir := os.Getenv("NODEFORGE_IMAGES")
	if dir == "" {
		t.Skip("NODEFORGE_IMAGES is not set: run make test (or make images, then set it to bin/images)")
	}
	// The architectures make built (IMAGE_ARCHS): amd64 in make test,
	// every shipped one in make release-images.
	want := strings.Split(os.Getenv("NODEFORGE_IMAGE_ARCHS"), ",")
	if want[0] == "" {
		want = []string{"amd64", "arm64"}
	}
	slices.Sort(want)
	for _, program := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		t.Run(program, func(t *testing.T) {
			p, err := layout.FromPath(filepath.Join(dir, program))
			if err != nil {
				t.Fatal(err)
			}
			outer, err := p.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			om, err := outer.IndexManifest()
			if err != nil || len(om.Manifests) != 1 {
				t.Fatalf("layout index: %v, %+v; want one index", err, om)
			}
			idx, err := outer.ImageIndex(om.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate.Index(idx); err != nil {
				t.Fatalf("the index does not validate: %v", err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var archs []string
			for _, d := range im.Manifests {
				if d.Platform == nil || d.Platform.OS != "linux" {
					t.Fatalf("manifest %s has platform %+v", d.Digest, d.Platform)
				}
				archs = append(archs, d.Platform.Architecture)
				img, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
					t.Errorf("%s: config says %s/%s", d.Platform.Architecture, cf.OS, cf.Architecture)
				}
				if !slices.Equal(cf.Config.Entrypoint, []string{"/" + program}) {
					t.Errorf("%s: entrypoint %v", d.Platform.Architecture, cf.Config.Entrypoint)
				}
				if u := cf.Config.User; u == "" || u == "0" || u == "root" || u[:2] == "0:" {
					t.Errorf("%s: runs as %q, want a user that is not root", d.Platform.Architecture, u)
				}
				if cf.Config.Labels["org.opencontainers.image.title"] != program || cf.Config.Labels["org.opencontainers.image.version"] == "" {
					t.Errorf("%s: labels %v", d.Platform.Architecture, cf.Config.Labels)
				}
				layers, err := img.Layers()
				if err != nil || len(layers) != 2 {
					t.Fatalf("%s: %d layers (%v), want the CA bundle and the binary", d.Platform.Architecture, len(layers), err)
				}
				if size, _ := layers[1].Size(); size < 1<<20 {
					t.Errorf("%s: the binary's layer is %d bytes", d.Platform.Architecture, size)
				}
			}
			slices.Sort(archs)
			if !slices.Equal(archs, want) {
				t.Errorf("architectures %v, want %v", archs, want)
			}
			if st, err := os.Stat(filepath.Join(dir, program+".tar")); err != nil || st.Size() < 1<<20 {
				t.Errorf("the layout's tar: %v", err)
			}
			digest := om.Manifests[0].Digest.String()
			if raw, err := os.ReadFile(filepath.Join(dir, program+".digest")); err != nil || string(raw) != digest+"\n" {
				t.Errorf("%s.digest holds %q (%v), want the index's digest %s", program, raw, err, digest)
			}
			values, err := os.ReadFile(filepath.Join(dir, "digests.yaml"))
			if want := fmt.Sprintf("%s: %q\n", strings.TrimPrefix(program, "nodeforge-"), digest); err != nil || !strings.Contains(string(values), want) {
				t.Errorf("digests.yaml (%v) lacks %q:\n%s", err, want, values)
			}
			raw, err := os.ReadFile(filepath.Join(dir, program+".spdx.json"))
			if err != nil {
				t.Fatal(err)
			}
			var doc spdxDocument
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatalf("%s.spdx.json: %v", program, err)
			}
			names := map[string]bool{}
			for _, p := range doc.Packages {
				names[p.Name] = true
			}
			if doc.Packages[0].Checksums[0].ChecksumValue != strings.TrimPrefix(digest, "sha256:") || !names["k8s.io/client-go"] || !names["stdlib"] {
				t.Errorf("%s.spdx.json describes %+v and lists %d packages; want the index's digest, client-go and the standard library", program, doc.Packages[0], len(doc.Packages))
			}
		})
	}
}
