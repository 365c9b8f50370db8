package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// ModulePath is the Go module the sandbox builds its components from.
const ModulePath = "github.com/nodeforge/nodeforge"

// Binaries are the programs a sandbox runs. The Kubernetes components are
// built from the Kubernetes module named in go.mod and cached per version;
// kwok is built from hack/tools; Nodeforge's own programs come from a bin
// directory (make build) or are built afresh.
type Binaries struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
	Kwok                  string
	// KwokStages is kwok's default stages as a --config file.
	KwokStages string
	// KwokLogsCRD is the CustomResourceDefinition of kwok's Logs, which
	// point `kubectl logs` of the chart's pods at their processes' logs.
	KwokLogsCRD string
	Scheduler   string
	Provisioner string
	// Helm renders the chart the sandbox installs; see Helm.
	Helm string
	// KubernetesVersion is the version the Kubernetes components report.
	KubernetesVersion string
}

// FindSource returns the root of the Nodeforge checkout: $NODEFORGE_SOURCE,
// or the nearest directory above the working directory whose go.mod is
// this module's.
func FindSource() (string, error) {
	if dir := os.Getenv("NODEFORGE_SOURCE"); dir != "" {
		return filepath.Abs(dir)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module "+ModulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no Nodeforge checkout above the working directory: run from the repository, or set NODEFORGE_SOURCE")
		}
		dir = parent
	}
}

// BuildOptions says where to find or put binaries.
type BuildOptions struct {
	// Source is the root of the Nodeforge checkout.
	Source string
	// BinDir holds nodeforge-scheduler and nodeforge-provisioner already
	// built (make build). Empty: build them into the cache.
	BinDir string
	// CacheDir holds the built Kubernetes components. Empty: the user's
	// cache directory.
	CacheDir string
	// KubernetesOnly skips Nodeforge's own programs, for tests that need
	// only the control plane.
	KubernetesOnly bool
	// Progress gets a line for each build that runs.
	Progress io.Writer
	// Oldest takes kube-apiserver and kube-controller-manager from the
	// oldest Kubernetes minor the chart accepts (the module
	// hack/tools/kube-oldest) instead of the one nodeforge-scheduler is
	// built from; etcd, kwok and Nodeforge's programs are the same.
	Oldest bool
}

// OldestModule is the module, under the checkout, that pins the oldest
// Kubernetes minor the chart's kubeVersion accepts.
const OldestModule = "hack/tools/kube-oldest"

// EnsureBinaries builds whatever is missing and returns the paths. The
// Kubernetes components are built once per (Kubernetes version, Go
// version, go.sum) and reused; a lock keeps two sandboxes from building the
// same thing at once.
func EnsureBinaries(ctx context.Context, o BuildOptions) (*Binaries, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return nil, err
		}
		o.CacheDir = filepath.Join(d, "nodeforge")
	}
	version, err := goOutput(ctx, o.Source, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return nil, fmt.Errorf("reading the Kubernetes version from go.mod: %w", err)
	}
	key, err := componentsKey(o.Source, version)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.CacheDir, "components", key)
	b := &Binaries{
		Etcd:                  filepath.Join(dir, "etcd"),
		KubeAPIServer:         filepath.Join(dir, "kube-apiserver"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kwok:                  filepath.Join(dir, "kwok"),
		KwokStages:            filepath.Join(dir, "kwok-stages.yaml"),
		KwokLogsCRD:           filepath.Join(dir, "kwok-logs-crd.yaml"),
		KubernetesVersion:     version,
	}
	if err := currentComponents(ctx, o, dir, b); err != nil {
		return nil, err
	}
	if o.Oldest {
		if err := oldestComponents(ctx, o, b); err != nil {
			return nil, err
		}
	}
	if o.KubernetesOnly {
		return b, nil
	}
	if b.Helm, err = Helm(ctx, o.Progress); err != nil {
		return nil, fmt.Errorf("building helm, which renders the chart the sandbox installs: %w", err)
	}
	if o.BinDir != "" {
		b.Scheduler = filepath.Join(o.BinDir, "nodeforge-scheduler")
		b.Provisioner = filepath.Join(o.BinDir, "nodeforge-provisioner")
		if !exists(b.Scheduler, b.Provisioner) {
			return nil, fmt.Errorf("%s has no nodeforge-scheduler and nodeforge-provisioner: run make build", o.BinDir)
		}
		return b, nil
	}
	own := filepath.Join(o.CacheDir, "dev-bin")
	fmt.Fprintln(o.Progress, "building nodeforge-scheduler and nodeforge-provisioner")
	b.Scheduler = filepath.Join(own, "nodeforge-scheduler")
	b.Provisioner = filepath.Join(own, "nodeforge-provisioner")
	if _, err := goOutput(ctx, o.Source, "build", "-o", b.Scheduler, "./cmd/scheduler"); err != nil {
		return nil, err
	}
	if _, err := goOutput(ctx, o.Source, "build", "-o", b.Provisioner, "./cmd/provisioner"); err != nil {
		return nil, err
	}
	return b, nil
}

// currentComponents builds (once per key) etcd, kube-apiserver and
// kube-controller-manager of go.mod's Kubernetes, kwok and its files into
// dir, under dir's lock, which it holds only while it builds them.
func currentComponents(ctx context.Context, o BuildOptions, dir string, b *Binaries) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	version := b.KubernetesVersion
	if !exists(b.Etcd, b.KubeAPIServer, b.KubeControllerManager) {
		fmt.Fprintf(o.Progress, "building etcd, kube-apiserver and kube-controller-manager %s (first run only; several minutes)\n", version)
		if err := buildControlPlane(ctx, o.Source, dir, version, true); err != nil {
			return err
		}
	}
	if !exists(b.Kwok, b.KwokStages) {
		fmt.Fprintln(o.Progress, "building kwok from hack/tools (first run only)")
		tools := filepath.Join(o.Source, "hack", "tools")
		if _, err := goOutput(ctx, tools, "build", "-o", b.Kwok+".tmp", "sigs.k8s.io/kwok/cmd/kwok"); err != nil {
			return err
		}
		stages, err := goOutput(ctx, tools, "run", "./kwokstages")
		if err != nil {
			return err
		}
		if err := os.WriteFile(b.KwokStages, []byte(stages+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(b.Kwok+".tmp", b.Kwok); err != nil {
			return err
		}
	}

	if !exists(b.KwokLogsCRD) {
		crd, err := goOutput(ctx, filepath.Join(o.Source, "hack", "tools"), "run", "./kwokcrds")
		if err != nil {
			return err
		}
		if err := os.WriteFile(b.KwokLogsCRD+".tmp", []byte(crd+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(b.KwokLogsCRD+".tmp", b.KwokLogsCRD); err != nil {
			return err
		}
	}
	return nil
}

// oldestComponents builds (once per version, Go and go.sum)
// kube-apiserver and kube-controller-manager from OldestModule and points
// b at them.
func oldestComponents(ctx context.Context, o BuildOptions, b *Binaries) error {
	mod := filepath.Join(o.Source, OldestModule)
	version, err := goOutput(ctx, mod, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return fmt.Errorf("reading the oldest Kubernetes version from %s: %w", OldestModule, err)
	}
	sum, err := os.ReadFile(filepath.Join(mod, "go.sum"))
	if err != nil {
		return err
	}
	h := sha256.Sum256(sum)
	dir := filepath.Join(o.CacheDir, "components", fmt.Sprintf("%s-%s-%s", version, runtime.Version(), hex.EncodeToString(h[:])[:12]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	b.KubeAPIServer = filepath.Join(dir, "kube-apiserver")
	b.KubeControllerManager = filepath.Join(dir, "kube-controller-manager")
	b.KubernetesVersion = version
	if exists(b.KubeAPIServer, b.KubeControllerManager) {
		return nil
	}
	fmt.Fprintf(o.Progress, "building kube-apiserver and kube-controller-manager %s from %s (first run only; several minutes)\n", version, OldestModule)
	return buildControlPlane(ctx, mod, dir, version, false)
}

// buildControlPlane builds kube-apiserver and kube-controller-manager of
// the module in mod, stamped with version, and etcd too when withEtcd,
// into dir: through a temporary directory there, so that a build cut
// short leaves no half-written binary for the next run to take.
func buildControlPlane(ctx context.Context, mod, dir, version string, withEtcd bool) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	names := []string{"kube-apiserver", "kube-controller-manager"}
	if _, err := goOutput(ctx, mod, "build", "-o", tmp+"/", "-ldflags", versionLDFlags(version),
		"k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-controller-manager"); err != nil {
		return err
	}
	if withEtcd {
		if _, err := goOutput(ctx, mod, "build", "-o", filepath.Join(tmp, "etcd"), "go.etcd.io/etcd/server/v3"); err != nil {
			return err
		}
		names = append(names, "etcd")
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// versionLDFlags stamps the Kubernetes components with the version of the
// module they are built from, as the Kubernetes release build does, so that
// `kubectl version` reports it.
func versionLDFlags(version string) string {
	major, minor := "", ""
	if parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	pkg := "k8s.io/component-base/version"
	return strings.Join([]string{
		"-s", "-w",
		"-X", pkg + ".gitVersion=" + version,
		"-X", pkg + ".gitMajor=" + major,
		"-X", pkg + ".gitMinor=" + minor,
		"-X", pkg + ".gitTreeState=clean",
	}, " ")
}

// componentsKey names the cache directory of one set of components: the
// Kubernetes version, the Go toolchain and the exact dependency sets.
func componentsKey(source, version string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.sum", "hack/tools/go.sum", "hack/tools/kwokstages/main.go"} {
		b, err := os.ReadFile(filepath.Join(source, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return fmt.Sprintf("%s-%s-%s", version, runtime.Version(), hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// goOutput runs the go command in dir with the build settings of the
// Makefile (static, -trimpath), so that the components share the compiled
// packages of make build and of the test binaries instead of compiling
// the Kubernetes tree again with other settings.
func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	// Cancelled, the go command is interrupted rather than killed, so that
	// it stops its compilers and removes its work directory.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = dir
	goflags := strings.TrimSpace(strings.ReplaceAll(os.Getenv("GOFLAGS"), "-trimpath", "") + " -trimpath")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS="+goflags)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

func exists(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Helm returns the helm binary pinned in hack/tools/helm, building it into
// the cache the first time (a minute or two), for the chart's tests and
// the sandbox's install from the chart.
func Helm(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	src, err := FindSource()
	if err != nil {
		return "", err
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(src, "hack", "tools", "helm", "go.sum"))
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(sum)
	dir := filepath.Join(d, "nodeforge", "tools", runtime.Version()+"-"+hex.EncodeToString(h[:])[:12])
	bin := filepath.Join(dir, "helm")
	if exists(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if exists(bin) {
		return bin, nil
	}
	fmt.Fprintln(progress, "building helm from hack/tools/helm (first run only)")
	if _, err := goOutput(ctx, filepath.Join(src, "hack", "tools", "helm"), "build", "-o", bin+".tmp", "helm.sh/helm/v4/cmd/helm"); err != nil {
		return "", err
	}
	return bin, os.Rename(bin+".tmp", bin)
}
