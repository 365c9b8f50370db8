package aws

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// SSMAPI is the part of the SSM client the provider calls, to read the
// public parameters that name the EKS-optimised images; *ssm.Client
// implements it.
type SSMAPI interface {
	GetParameters(context.Context, *ssm.GetParametersInput, ...func(*ssm.Options)) (*ssm.GetParametersOutput, error)
}

var _ SSMAPI = (*ssm.Client)(nil)

// Image variants of the EKS-optimised Amazon Linux 2023 AMIs, chosen per
// instance type (variantOf).
const (
	VariantStandard = "standard"
	VariantNVIDIA   = "nvidia"
	VariantNeuron   = "neuron"
)

// aliasImage is one image an alias stands for: where its id is published
// and which types it is for.
type aliasImage struct {
	param, arch, variant string // arch in Kubernetes terms
}

// aliasImages are the SSM public parameters of an al2023 alias for a
// Kubernetes version, per architecture and variant, as AWS publishes them
// for the EKS-optimised AL2023 AMIs:
// /aws/service/eks/optimized-ami/<version>/amazon-linux-2023/<x86_64|arm64>/<variant>/recommended/image_id
// for @latest, and .../<variant>/amazon-eks-node-al2023-<arch>-<variant>-<version>-v<date>/image_id
// for a pinned release (al2023@v20261101). Neuron images exist for x86_64
// only.
func aliasImages(alias, kubernetesVersion string) []aliasImage {
	_, release, _ := strings.Cut(alias, "@")
	var out []aliasImage
	for _, arch := range []struct{ ec2, kube string }{{"x86_64", "amd64"}, {"arm64", "arm64"}} {
		variants := []string{VariantStandard, VariantNVIDIA}
		if arch.ec2 == "x86_64" {
			variants = append(variants, VariantNeuron)
		}
		for _, variant := range variants {
			leaf := "recommended"
			if release != "latest" {
				leaf = fmt.Sprintf("amazon-eks-node-al2023-%s-%s-%s-%s", arch.ec2, variant, kubernetesVersion, release)
			}
			out = append(out, aliasImage{
				param: fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/%s/%s/image_id", kubernetesVersion, arch.ec2, variant, leaf),
				arch:  arch.kube, variant: variant,
			})
		}
	}
	return out
}

// aliasImagesFromSSM resolves an alias through SSM: the image each
// published parameter names, described by EC2 for its name, and kept only
// while available. A variant or architecture with no parameter (a release
// without a neuron image, say) is left out, and so are the types that
// would need it.
func (p *Provider) aliasImagesFromSSM(ctx context.Context, alias string) ([]v1alpha1.ResolvedAMI, error) {
	wanted := aliasImages(alias, p.opts.KubernetesVersion)
	ids := map[string]string{}                    // parameter -> image id
	for batch := range slices.Chunk(wanted, 10) { // GetParameters takes at most 10 names
		names := make([]string, len(batch))
		for i, w := range batch {
			names[i] = w.param
		}
		out, err := p.opts.SSM.GetParameters(ctx, &ssm.GetParametersInput{Names: names})
		if err != nil {
			return nil, classify("ssm:GetParameters", err)
		}
		for _, prm := range out.Parameters {
			ids[sdkaws.ToString(prm.Name)] = sdkaws.ToString(prm.Value)
		}
	}
	var imageIDs []string
	for _, id := range ids {
		if !slices.Contains(imageIDs, id) {
			imageIDs = append(imageIDs, id)
		}
	}
	if len(imageIDs) == 0 {
		return nil, nil
	}
	slices.Sort(imageIDs)
	images := map[string]ec2types.Image{}
	pages := ec2.NewDescribeImagesPaginator(p.ec2, &ec2.DescribeImagesInput{Filters: []ec2types.Filter{
		{Name: sdkaws.String("image-id"), Values: imageIDs},
		{Name: sdkaws.String("state"), Values: []string{"available"}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("DescribeImages", err)
		}
		for _, img := range page.Images {
			images[sdkaws.ToString(img.ImageId)] = img
		}
	}
	var out []v1alpha1.ResolvedAMI
	for _, w := range wanted {
		img, ok := images[ids[w.param]]
		if !ok {
			continue
		}
		out = append(out, v1alpha1.ResolvedAMI{ID: sdkaws.ToString(img.ImageId), Name: sdkaws.ToString(img.Name), Architecture: w.arch, Variant: w.variant})
	}
	return out, nil
}

// variantOf is the image variant an instance type needs: nvidia for one
// with NVIDIA GPUs, neuron for Inferentia and Trainium, standard for the
// rest.
func variantOf(info ec2types.InstanceTypeInfo) string {
	if info.GpuInfo != nil {
		for _, g := range info.GpuInfo.Gpus {
			if strings.EqualFold(sdkaws.ToString(g.Manufacturer), "NVIDIA") {
				return VariantNVIDIA
			}
		}
	}
	if info.NeuronInfo != nil {
		return VariantNeuron
	}
	if info.InferenceAcceleratorInfo != nil {
		for _, a := range info.InferenceAcceleratorInfo.Accelerators {
			if strings.EqualFold(sdkaws.ToString(a.Manufacturer), "AWS") {
				return VariantNeuron
			}
		}
	}
	return VariantStandard
}

// variantOfType is the variant of a type of the region's catalog
// (standard for one not described).
func (p *Provider) variantOfType(name string) string {
	p.mu.Lock()
	info, ok := p.catalog.types[name]
	p.mu.Unlock()
	if !ok {
		return VariantStandard
	}
	return variantOf(info)
}

// imageFor is the class's image for a type of arch and variant: the one
// resolved for exactly that, or one resolved for every variant.
func imageFor(amis []v1alpha1.ResolvedAMI, arch, variant string) (v1alpha1.ResolvedAMI, bool) {
	for _, a := range amis {
		if a.Architecture == arch && a.Variant == variant {
			return a, true
		}
	}
	for _, a := range amis {
		if a.Architecture == arch && a.Variant == "" {
			return a, true
		}
	}
	return v1alpha1.ResolvedAMI{}, false
}

// imageDrifted says why a claim's instance no longer has the image its
// class would launch it with now, or "": the class resolves, for the
// instance's architecture and variant, to another image than the one
// recorded at launch (a new recommended image, a changed selector). A
// class not Ready, a type not described yet, or a variant the class has no
// image for now (nothing to replace the node with) says nothing.
func (p *Provider) imageDrifted(class *v1alpha1.EC2NodeClass, nc *v1alpha1.NodeClaim) string {
	if nc.Status.ImageID == "" || len(class.Status.AMIs) == 0 || notReady(class) != "" {
		return ""
	}
	p.mu.Lock()
	info, ok := p.catalog.types[nc.Status.InstanceType]
	p.mu.Unlock()
	if !ok {
		return ""
	}
	now, ok := imageFor(class.Status.AMIs, architecture(info), variantOf(info))
	if !ok || now.ID == nc.Status.ImageID {
		return ""
	}
	return fmt.Sprintf("image %s is not the one EC2NodeClass %s now launches %s from (%s, %s)", nc.Status.ImageID, class.Name, nc.Status.InstanceType, now.ID, cmp.Or(now.Name, "unnamed"))
}
