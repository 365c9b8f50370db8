package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws/pricing"
)

const (
	karpenterModule         = "github.com/aws/karpenter-provider-aws"
	defaultKarpenterVersion = "v1.15.1"
	karpenterPricingDir     = "pkg/providers/pricing"
)

// karpenterFiles are the tables read from karpenterPricingDir. The
// commercial table holds us-east-1 only (the Karpenter provider refreshes
// other regions at run time); the GovCloud table adds us-gov-east-1 and
// us-gov-west-1, which matter more here because the Pricing API is not
// served in GovCloud, so clusters there can never refresh. The China table
// (zz_generated.pricing_aws_cn.go) is left out on purpose: its figures are
// in CNY, the currency the Price List uses for cn- regions, and ours are USD.
var karpenterFiles = []string{
	"zz_generated.pricing_aws.go",
	"zz_generated.pricing_aws_us_gov.go",
}

// moduleInfo is the part of `go mod download -json` output we use; the
// field names are those of the Module struct documented by `go help mod
// download`.
type moduleInfo struct {
	Path    string
	Version string
	Error   string
	Dir     string
	Zip     string
}

// fromKarpenter reads the Karpenter AWS provider's published price tables.
func fromKarpenter(ctx context.Context, o options) (*pricing.File, error) {
	mod, err := o.download(ctx, karpenterModule, o.version)
	if err != nil {
		return nil, err
	}
	f := &pricing.File{
		Source:     karpenterModule,
		Version:    mod.Version,
		PricesAsOf: map[string]string{},
		Regions:    map[string]map[string]float64{},
	}
	for _, name := range karpenterFiles {
		rel := path.Join(karpenterPricingDir, name)
		src, err := readModuleFile(mod, rel)
		if err != nil {
			return nil, err
		}
		table, err := parseKarpenterTable(rel, src)
		if err != nil {
			return nil, err
		}
		for region, prices := range table.regions {
			if _, dup := f.Regions[region]; dup {
				return nil, fmt.Errorf("%s: region %s is in more than one file", rel, region)
			}
			f.Regions[region] = prices
			if table.asOf != "" {
				f.PricesAsOf[region] = table.asOf
			}
		}
	}
	if err := keepRegions(f, o.regions); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", karpenterModule, mod.Version, err)
	}
	return f, nil
}

// goModDownload fetches a module into the module cache with `go mod
// download -json` and reports where it is. It runs in an empty temporary
// directory with GOFLAGS=-mod=mod and GOWORK=off so that it never reads or
// writes this repository's go.mod, and with GOTOOLCHAIN=local so that a
// module asking for a newer Go does not set off a toolchain download.
//
// Such a module still downloads, but the go command then exits non-zero and
// puts "requires go >= …" in the Error field while still naming the Zip (and
// not the Dir); we take the files from the zip then, so a newer upstream
// does not stop the generator.
func goModDownload(ctx context.Context, modPath, version string) (moduleInfo, error) {
	return goModDownloadEnv(ctx, modPath, version, nil)
}

// goModDownloadEnv is goModDownload with extra environment variables, which
// tests use to keep the go command off the network.
func goModDownloadEnv(ctx context.Context, modPath, version string, env []string) (moduleInfo, error) {
	tmp, err := os.MkdirTemp("", "nodeforge-pricing-")
	if err != nil {
		return moduleInfo{}, fmt.Errorf("go mod download: %w", err)
	}
	defer os.RemoveAll(tmp)
	query := modPath + "@" + version
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", query)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	mod, err := decodeModuleInfo(stdout.Bytes())
	if err != nil {
		return moduleInfo{}, fmt.Errorf("go mod download %s: %w (exit: %v; stderr: %s)", query, err, runErr, bytes.TrimSpace(stderr.Bytes()))
	}
	if mod.Error != "" || runErr != nil {
		klog.InfoS("go mod download reported a problem; using the files it downloaded", "module", query, "error", mod.Error, "exit", fmt.Sprint(runErr))
	}
	klog.V(2).InfoS("Downloaded module", "module", mod.Path, "version", mod.Version, "dir", mod.Dir, "zip", mod.Zip)
	return mod, nil
}

// decodeModuleInfo reads `go mod download -json` output for one module and
// checks that it says where the files are.
func decodeModuleInfo(out []byte) (moduleInfo, error) {
	var mod moduleInfo
	if err := json.Unmarshal(out, &mod); err != nil {
		return moduleInfo{}, fmt.Errorf("reading its output: %w", err)
	}
	if mod.Path == "" || mod.Version == "" {
		return moduleInfo{}, fmt.Errorf("its output names no module: %q", out)
	}
	if mod.Dir == "" && mod.Zip == "" {
		if mod.Error != "" {
			return moduleInfo{}, errors.New(mod.Error)
		}
		return moduleInfo{}, errors.New("its output has neither Dir nor Zip")
	}
	return mod, nil
}

// readModuleFile returns one file of a downloaded module, from its
// extracted directory when the go command gave one, else from its zip.
func readModuleFile(mod moduleInfo, rel string) ([]byte, error) {
	if mod.Dir != "" {
		data, err := os.ReadFile(filepath.Join(mod.Dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s@%s: %w", rel, mod.Path, mod.Version, err)
		}
		return data, nil
	}
	zr, err := zip.OpenReader(mod.Zip)
	if err != nil {
		return nil, fmt.Errorf("reading %s@%s: %w", mod.Path, mod.Version, err)
	}
	defer zr.Close()
	// Module zips hold every file under "<module path>@<version>/".
	name := mod.Path + "@" + mod.Version + "/" + rel
	for _, zf := range zr.File {
		if zf.Name != name {
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", rel, mod.Zip, err)
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", rel, mod.Zip, err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("reading %s from %s@%s: %w", rel, mod.Path, mod.Version, os.ErrNotExist)
}

// karpenterTable is what one upstream file holds.
type karpenterTable struct {
	// asOf is when upstream read the figures from the Pricing API, from its
	// "// generated at <RFC 3339 time> for <region>" comment; empty if the
	// file has none.
	asOf    string
	regions map[string]map[string]float64
}

// generatedAt matches the comment upstream puts above its table.
var generatedAt = regexp.MustCompile(`^//\s*generated at (\S+)`)

// parseKarpenterTable reads an upstream price table without compiling or
// importing it. The file is Go source holding one package-level variable of
// type map[string]map[ec2types.InstanceType]float64, a composite literal
// keyed by region, each value a literal keyed by instance type with a
// numeric literal price:
//
//	var InitialOnDemandPricesAWS = map[string]map[ec2types.InstanceType]float64{
//		"us-east-1": {"m5.large": 0.096000, …},
//	}
//
// Anything else in those literals (a constant, an expression) is an error
// rather than a guess.
func parseKarpenterTable(filename string, src []byte) (karpenterTable, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return karpenterTable{}, fmt.Errorf("parsing %s: %w", filename, err)
	}
	var table karpenterTable
	for _, group := range file.Comments {
		for _, c := range group.List {
			if m := generatedAt.FindStringSubmatch(c.Text); m != nil && table.asOf == "" {
				if _, err := time.Parse(time.RFC3339, m[1]); err != nil {
					return karpenterTable{}, fmt.Errorf("%s: generated-at comment: %w", fset.Position(c.Pos()), err)
				}
				table.asOf = m[1]
			}
		}
	}

	var lits []*ast.CompositeLit
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			for _, v := range spec.(*ast.ValueSpec).Values {
				if lit, ok := v.(*ast.CompositeLit); ok && isMapOfMaps(lit.Type) {
					lits = append(lits, lit)
				}
			}
		}
	}
	if len(lits) != 1 {
		return karpenterTable{}, fmt.Errorf("%s: want one map[string]map[…]float64 variable, found %d", filename, len(lits))
	}

	pos := func(n ast.Node) token.Position { return fset.Position(n.Pos()) }
	table.regions = map[string]map[string]float64{}
	for _, elt := range lits[0].Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			return karpenterTable{}, fmt.Errorf("%s: want a region: {…} entry", pos(elt))
		}
		region, err := stringLit(kv.Key)
		if err != nil {
			return karpenterTable{}, fmt.Errorf("%s: region: %w", pos(kv.Key), err)
		}
		if _, dup := table.regions[region]; dup {
			return karpenterTable{}, fmt.Errorf("%s: region %s twice", pos(kv.Key), region)
		}
		inner, ok := kv.Value.(*ast.CompositeLit)
		if !ok {
			return karpenterTable{}, fmt.Errorf("%s: prices of %s: want a composite literal", pos(kv.Value), region)
		}
		prices := map[string]float64{}
		for _, elt := range inner.Elts {
			kv, ok := elt.(*ast.KeyValueExpr)
			if !ok {
				return karpenterTable{}, fmt.Errorf("%s: want an \"instance-type\": price entry", pos(elt))
			}
			instanceType, err := stringLit(kv.Key)
			if err != nil {
				return karpenterTable{}, fmt.Errorf("%s: instance type: %w", pos(kv.Key), err)
			}
			if _, dup := prices[instanceType]; dup {
				return karpenterTable{}, fmt.Errorf("%s: %s in %s twice", pos(kv.Key), instanceType, region)
			}
			price, err := numberLit(kv.Value)
			if err != nil {
				return karpenterTable{}, fmt.Errorf("%s: price of %s in %s: %w", pos(kv.Value), instanceType, region, err)
			}
			if price == 0 {
				// Upstream has no figure for the type; we leave it out
				// rather than ship a free instance.
				klog.V(2).InfoS("Skipping an instance type priced at zero", "file", filename, "region", region, "instanceType", instanceType)
				continue
			}
			prices[instanceType] = price
		}
		table.regions[region] = prices
	}
	if len(table.regions) == 0 {
		return karpenterTable{}, fmt.Errorf("%s: the price map is empty", filename)
	}
	return table, nil
}

// isMapOfMaps says whether expr is a type map[K]map[K2]V.
func isMapOfMaps(expr ast.Expr) bool {
	outer, ok := expr.(*ast.MapType)
	if !ok {
		return false
	}
	_, ok = outer.Value.(*ast.MapType)
	return ok
}

func stringLit(expr ast.Expr) (string, error) {
	lit, ok := expr.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", fmt.Errorf("want a string literal, found %T", expr)
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return "", fmt.Errorf("string literal %s: %w", lit.Value, err)
	}
	if s == "" {
		return "", errors.New("empty string")
	}
	return s, nil
}

func numberLit(expr ast.Expr) (float64, error) {
	lit, ok := expr.(*ast.BasicLit)
	if !ok || (lit.Kind != token.FLOAT && lit.Kind != token.INT) {
		return 0, fmt.Errorf("want a number literal, found %T", expr)
	}
	v, err := strconv.ParseFloat(lit.Value, 64)
	if err != nil {
		return 0, fmt.Errorf("number literal %s: %w", lit.Value, err)
	}
	return v, nil
}
