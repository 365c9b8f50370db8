package ssmfake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
)

// This file publishes the public parameters of the EKS-optimised Amazon
// Linux 2023 AMIs. The paths are the public parameter layout AWS documents
// for them ("Retrieve recommended Amazon Linux AMI IDs" in the Amazon EKS
// User Guide):
//
//	/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/recommended/image_id
//	/aws/service/eks/optimized-ami/<k8s>/amazon-linux-2023/<arch>/<variant>/amazon-eks-node-al2023-<arch>-<variant>-<k8s>-v<YYYYMMDD>/image_id
//
// the first naming the newest release, the second pinning one. Variants are
// standard and nvidia for x86_64 and arm64, and neuron for x86_64 only.
// The siblings AWS also publishes beside image_id (image_name,
// release_version, and the JSON document at .../recommended) are not.

// AL2023Image names one release of an EKS-optimised AL2023 AMI.
type AL2023Image struct {
	KubernetesVersion string // e.g. "1.37"
	Arch              string // "x86_64" or "arm64"
	Variant           string // "standard", "nvidia" or "neuron"
	Release           string // "v" and the build date, e.g. "v20261101"
	// ImageID is the AMI ID published for it. It is set in what
	// SeedEKSOptimizedAL2023 returns, and empty in what it passes to the
	// function that chooses IDs.
	ImageID string
}

// Name is the AMI's name, e.g. amazon-eks-node-al2023-x86_64-standard-1.37-v20261101,
// the name ec2fake.DefaultWorld gives its EKS images.
func (i AL2023Image) Name() string {
	return "amazon-eks-node-al2023-" + i.Arch + "-" + i.Variant + "-" + i.KubernetesVersion + "-" + i.Release
}

// ImageIDParameter is the name of the parameter pinning this release.
func (i AL2023Image) ImageIDParameter() string {
	return al2023Prefix(i.KubernetesVersion, i.Arch, i.Variant) + i.Name() + "/image_id"
}

// RecommendedImageIDParameter is the name of the parameter holding the ID
// of the newest AMI for a Kubernetes version, architecture and variant.
func RecommendedImageIDParameter(kubernetesVersion, arch, variant string) string {
	return al2023Prefix(kubernetesVersion, arch, variant) + "recommended/image_id"
}

func al2023Prefix(kubernetesVersion, arch, variant string) string {
	return "/aws/service/eks/optimized-ami/" + kubernetesVersion + "/amazon-linux-2023/" + arch + "/" + variant + "/"
}

// al2023Variants are the architecture and variant pairs AWS publishes.
var al2023Variants = []struct{ arch, variant string }{
	{"x86_64", "standard"},
	{"x86_64", "nvidia"},
	{"x86_64", "neuron"},
	{"arm64", "standard"},
	{"arm64", "nvidia"},
}

// DefaultImageID is a made-up AMI ID for an image, the same on every run:
// "ami-" and 17 hex digits of a hash of its name.
func DefaultImageID(i AL2023Image) string {
	sum := sha256.Sum256([]byte(i.Name()))
	return "ami-" + hex.EncodeToString(sum[:])[:17]
}

// ImageIDsByName chooses IDs from a map of AMI name to ID, such as one
// built from the images of an ec2fake.World; an image missing from the map
// gets "", so it is not published.
func ImageIDsByName(ids map[string]string) func(AL2023Image) string {
	return func(i AL2023Image) string { return ids[i.Name()] }
}

var (
	releasePattern = regexp.MustCompile(`^v[0-9]{8}$`)
	versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
)

// SeedEKSOptimizedAL2023 publishes, for a Kubernetes version and each
// release given (e.g. "v20261001", "v20261101"), the pinned image_id
// parameter of every published architecture and variant, and points each
// recommended image_id at the newest of those releases. imageID chooses
// each AMI ID: DefaultImageID if nil; an image it gives "" is not
// published. It returns the images published, with their IDs, in
// architecture, variant and release order.
//
// Seeding again adds releases and moves recommended to the newest release
// of that call, as AWS moves it when it publishes one; a parameter whose
// value does not change keeps its version.
func (s *Server) SeedEKSOptimizedAL2023(kubernetesVersion string, releases []string, imageID func(AL2023Image) string) ([]AL2023Image, error) {
	if !versionPattern.MatchString(kubernetesVersion) {
		return nil, fmt.Errorf("ssmfake: Kubernetes version %q is not of the form 1.37", kubernetesVersion)
	}
	for _, r := range releases {
		if !releasePattern.MatchString(r) {
			return nil, fmt.Errorf("ssmfake: release %q is not of the form vYYYYMMDD", r)
		}
	}
	if imageID == nil {
		imageID = DefaultImageID
	}
	// vYYYYMMDD sorts by date.
	releases = slices.Clone(releases)
	slices.Sort(releases)
	releases = slices.Compact(releases)

	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AL2023Image
	for _, v := range al2023Variants {
		newest := "" // the ID of the newest release published
		for _, r := range releases {
			img := AL2023Image{KubernetesVersion: kubernetesVersion, Arch: v.arch, Variant: v.variant, Release: r}
			if img.ImageID = imageID(img); img.ImageID == "" {
				continue
			}
			s.putIfChangedLocked(img.ImageIDParameter(), img.ImageID)
			out = append(out, img)
			newest = img.ImageID
		}
		if newest != "" {
			s.putIfChangedLocked(RecommendedImageIDParameter(kubernetesVersion, v.arch, v.variant), newest)
		}
	}
	return out, nil
}

func (s *Server) putIfChangedLocked(name, value string) {
	if p := s.params[name]; p == nil || p.Value != value {
		s.putLocked(name, value)
	}
}
