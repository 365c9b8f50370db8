// Command images builds Nodeforge's container images without a container
// daemon: for each program, one image per architecture from the static
// binaries make images cross-compiled, and an index of them, written as an
// OCI image layout (a directory crane and skopeo read as oci:DIR) and the
// same layout as a tar (which docker load and podman load accept).
//
// Beside each layout it writes the index's digest (<program>.digest), an
// SPDX SBOM of the Go modules in the binary (<program>.spdx.json, read from
// the binaries' build info: sbom.go), and digests.yaml, the chart values
// that pin the images by those digests.
//
// Each image is two layers on nothing (no base image to pull): the
// system's CA bundle with an /etc/passwd naming user nonroot (65532), then
// the binary at /<program>, its entrypoint. The config runs as 65532:65532
// and carries the OCI annotations of the version, revision and source.
//
// go-containerregistry, not ko: ko builds Go programs itself and would
// need its own copy of the build flags (the version stamps, the Kubernetes
// version of the scheduler); here make builds them once, for tests and
// images alike, and this only packs them.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	bins := flag.String("bins", "bin", "directory holding linux_<arch>/<program> binaries")
	out := flag.String("out", "bin/images", "where to write <program>/ (an OCI layout) and <program>.tar")
	version := flag.String("version", "dev", "version stamped into the images' annotations")
	revision := flag.String("revision", "", "VCS revision")
	cacerts := flag.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to put at /etc/ssl/certs/ca-certificates.crt")
	archs := flag.String("archs", "amd64,arm64", "architectures")
	flag.Parse()
	if err := run(*bins, *out, *version, *revision, *cacerts, strings.Split(*archs, ","), flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// epoch is the time in every layer and config, so that the same binaries
// make the same image digests.
var epoch = time.Unix(0, 0).UTC()

func run(bins, out, version, revision, cacerts string, archs, programs []string) error {
	if len(programs) == 0 {
		return fmt.Errorf("name the programs to pack, e.g. nodeforge-scheduler nodeforge-provisioner")
	}
	ca, err := os.ReadFile(cacerts)
	if err != nil {
		return fmt.Errorf("reading the CA bundle: %w", err)
	}
	base, err := tarLayer(map[string]file{
		"etc/ssl/certs/ca-certificates.crt": {data: ca, mode: 0o644},
		"etc/passwd":                        {data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), mode: 0o644},
		"etc/group":                         {data: []byte("root:x:0:\nnonroot:x:65532:\n"), mode: 0o644},
		"tmp/":                              {mode: 0o1777},
		"home/nonroot/":                     {mode: 0o755, uid: 65532},
	})
	if err != nil {
		return err
	}
	digests := map[string]string{}
	for _, program := range programs {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var binaries []string
		for _, arch := range archs {
			path := filepath.Join(bins, "linux_"+arch, program)
			binaries = append(binaries, path)
			img, labels, err := programImage(base, path, program, arch, version, revision)
			if err != nil {
				return err
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: arch}, Annotations: labels}})
		}
		dir := filepath.Join(out, program)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": version,
		})); err != nil {
			return err
		}
		if err := tarDir(dir, dir+".tar"); err != nil {
			return err
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		if err := os.WriteFile(dir+".digest", []byte(d.String()+"\n"), 0o644); err != nil {
			return err
		}
		doc, err := sbom(program, version, d.String(), binaries)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dir+".spdx.json", doc, 0o644); err != nil {
			return err
		}
		digests[strings.TrimPrefix(program, "nodeforge-")] = d.String()
		fmt.Printf("%s: %s (%s) in %s and %s.tar; SBOM %s.spdx.json\n", program, d, strings.Join(archs, ", "), dir, dir, dir)
	}
	values := filepath.Join(out, "digests.yaml")
	if err := os.WriteFile(values, digestValues(digests), 0o644); err != nil {
		return err
	}
	fmt.Printf("chart values pinning these digests: %s (helm install -f %s)\n", values, values)
	return nil
}

// programImage is the linux/arch image of program: the base layer, the
// binary at path as its entrypoint, run as nonroot, with the OCI labels
// (returned too, for the index's annotations).
func programImage(base v1.Layer, path, program, arch, version, revision string) (v1.Image, map[string]string, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	app, err := tarLayer(map[string]file{program: {data: bin, mode: 0o755}})
	if err != nil {
		return nil, nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return nil, nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	labels := map[string]string{
		"org.opencontainers.image.title":    program,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/nodeforge/nodeforge",
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/" + program}
	cf.Config.User = "65532:65532"
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Labels = labels
	cf.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, nil, err
	}
	img = mutate.Annotations(img, labels).(v1.Image)
	return img, labels, nil
}

// digestValues is a values file of the chart setting image.digests to
// the digests of the images just built, by program (nodeforge-scheduler
// is scheduler).
func digestValues(digests map[string]string) []byte {
	var b strings.Builder
	b.WriteString("# Written by make images: the digests of the images it built, as the\n")
	b.WriteString("# chart's values (helm install ... -f digests.yaml). They hold once the\n")
	b.WriteString("# images are pushed with their digests kept (docs/install.md, Images).\n")
	b.WriteString("image:\n  digests:\n")
	for _, program := range slices.Sorted(maps.Keys(digests)) {
		fmt.Fprintf(&b, "    %s: %q\n", program, digests[program])
	}
	return []byte(b.String())
}

type file struct {
	data []byte
	mode int64
	uid  int
}

// tarLayer is a layer of the files given (a name ending in / is a
// directory), with their parent directories, in a stable order.
func tarLayer(files map[string]file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	written := map[string]bool{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		f := files[name]
		parts := strings.Split(strings.TrimSuffix(name, "/"), "/")
		for i := 1; i < len(parts); i++ {
			dir := strings.Join(parts[:i], "/") + "/"
			if written[dir] {
				continue
			}
			written[dir] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: name, Mode: f.mode, ModTime: epoch, Uid: f.uid, Gid: f.uid}
		if strings.HasSuffix(name, "/") {
			h.Typeflag = tar.TypeDir
			written[name] = true
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// tarDir writes the directory as a tar, its contents at the top.
func tarDir(dir, to string) error {
	f, err := os.Create(to)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime = filepath.ToSlash(rel), epoch
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
