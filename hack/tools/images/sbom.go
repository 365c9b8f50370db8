package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
)

// The SBOM of an image is an SPDX 2.3 JSON document listing what its
// binary was built from, as `go version -m` reads it from the binary: the
// main module, the Go standard library of the toolchain, and every module
// compiled in, at the version the build used (a replacement's, where go.mod
// replaces one). Nothing is fetched: the build info is in the binary. It
// lists modules, not the packages used of each, nor the files of the
// image's first layer (the CA bundle and /etc/passwd, which come from no
// package).

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// sbom is the SPDX document of the image of program whose index has
// digest (sha256:...), built from the binaries at paths (one per
// architecture; the modules of all are listed once). Its time is the
// epoch, as the images' is, so the same binaries make the same document.
func sbom(program, version, digest string, paths []string) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("image digest %q is not sha256", digest)
	}
	image := spdxPackage{
		SPDXID: "SPDXRef-Image", Name: program, VersionInfo: version, DownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose: "CONTAINER",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hexDigest}},
		ExternalRefs:          []spdxExternalRef{purl("pkg:oci/" + program + "@" + escape(digest))},
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: program,
		DocumentNamespace: "urn:uuid:" + nameUUID(program+"@"+digest),
		CreationInfo:      spdxCreationInfo{Created: epoch.Format("2006-01-02T15:04:05Z"), Creators: []string{"Tool: nodeforge-images"}},
		Packages:          []spdxPackage{image},
		Relationships:     []spdxRelationship{{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID}},
	}
	// The modules of every architecture's binary, each once; keyed by
	// name and version, then numbered in that order (a name made
	// identifier-safe could collide).
	mains, deps := map[string]spdxPackage{}, map[string]spdxPackage{}
	for _, path := range paths {
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the build info of %s: %w", path, err)
		}
		m := module(info.Main, "APPLICATION")
		mains[m.Name+"@"+m.VersionInfo] = m
		goVersion := strings.TrimPrefix(info.GoVersion, "go")
		deps["stdlib@"+info.GoVersion] = spdxPackage{
			Name: "stdlib", VersionInfo: info.GoVersion, DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "LIBRARY",
			ExternalRefs: []spdxExternalRef{purl("pkg:golang/stdlib@" + escape(goVersion))},
			Comment:      "the Go standard library of the toolchain that built the binary",
		}
		for _, d := range info.Deps {
			p := module(*d, "LIBRARY")
			deps[p.Name+"@"+p.VersionInfo] = p
		}
	}
	n := 0
	numbered := func(set map[string]spdxPackage) []spdxPackage {
		var out []spdxPackage
		for _, key := range slices.Sorted(maps.Keys(set)) {
			n++
			p := set[key]
			p.SPDXID = fmt.Sprintf("SPDXRef-Package-%d", n)
			out = append(out, p)
		}
		return out
	}
	mainModules, libraries := numbered(mains), numbered(deps)
	for _, m := range mainModules {
		doc.Packages = append(doc.Packages, m)
		doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", m.SPDXID})
		for _, d := range libraries {
			doc.Relationships = append(doc.Relationships, spdxRelationship{m.SPDXID, "DEPENDS_ON", d.SPDXID})
		}
	}
	doc.Packages = append(doc.Packages, libraries...)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// module is the SPDX package (without its identifier) of a Go module as
// the build used it: the replacement's version where go.mod replaces it.
func module(m debug.Module, purpose string) spdxPackage {
	path, version, comment := m.Path, m.Version, ""
	if r := m.Replace; r != nil {
		version = r.Version
		if r.Path != m.Path {
			path, comment = r.Path, "replaces "+m.Path+" (go.mod)"
		}
	}
	if version == "(devel)" {
		version = ""
	}
	p := spdxPackage{
		Name: path, VersionInfo: version, DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: purpose, Comment: comment,
	}
	locator := "pkg:golang/" + escapePath(path)
	if version != "" {
		locator += "@" + escape(version)
	}
	p.ExternalRefs = []spdxExternalRef{purl(locator)}
	return p
}

func purl(locator string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// escape percent-encodes what a package URL component may not hold
// unencoded (":" of a digest, "+" of "+incompatible").
func escape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func escapePath(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		parts[i] = escape(p)
	}
	return strings.Join(parts, "/")
}

// nameUUID is a UUID (version 8, RFC 9562) made from the SHA-256 of name:
// the same image gets the same document namespace.
func nameUUID(name string) string {
	sum := sha256.Sum256([]byte(name))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
