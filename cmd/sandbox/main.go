// Command nodeforge-sandbox runs Nodeforge on one machine: a real control
// plane (etcd, kube-apiserver, kube-controller-manager), kwok for nodes and
// pods, and Nodeforge's scheduler and provisioner with the simulated cloud.
//
//	nodeforge-sandbox up --dir DIR   start, print "ready kubeconfig=DIR/kubeconfig", run until SIGINT/SIGTERM
//	nodeforge-sandbox build          build (or find in the cache) every component, print their paths
//	nodeforge-sandbox demo           the walk-through that `make demo` runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// kubernetesUsage documents the --kubernetes flag of up and build.
const kubernetesUsage = "the control plane's Kubernetes minor: current (the one nodeforge-scheduler is built from) or oldest (the oldest the chart's kubeVersion accepts; its kube-apiserver and kube-controller-manager are built from " + sandbox.OldestModule + ")"

const usage = `usage:
  nodeforge-sandbox up --dir DIR [--cloud-provider aws] [--kubernetes oldest] [--feature-gates A=true,B=false]
                                   start the sandbox; print "ready kubeconfig=DIR/kubeconfig"; stop on SIGINT/SIGTERM
  nodeforge-sandbox build [--kubernetes oldest]
                                   build or reuse every component and print their paths
  nodeforge-sandbox demo [--cloud-provider aws] [--feature-gates A=true,B=false]
                                   run the walk-through in a temporary sandbox

--feature-gates defaults to $NODEFORGE_FEATURE_GATES.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctrllog.SetLogger(klog.Background())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, os.Args[2:])
	case "build":
		err = build(ctx, os.Args[2:])
	case "demo":
		err = demo(ctx, os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeforge-sandbox:", err)
		os.Exit(1)
	}
}

// binaries finds or builds the components. Nodeforge's own programs are
// taken from the directory of this executable when they are there (make
// build puts all three in bin/), else from $NODEFORGE_BIN_DIR, else built.
func binaries(ctx context.Context, kubernetes string) (*sandbox.Binaries, error) {
	if kubernetes != "current" && kubernetes != "oldest" {
		return nil, fmt.Errorf("--kubernetes=%s: must be current (the minor nodeforge-scheduler is built from) or oldest (the oldest the chart accepts, from %s)", kubernetes, sandbox.OldestModule)
	}
	src, err := sandbox.FindSource()
	if err != nil {
		return nil, err
	}
	binDir := os.Getenv("NODEFORGE_BIN_DIR")
	if binDir == "" {
		if exe, err := os.Executable(); err == nil {
			dir := filepath.Dir(exe)
			if _, err := os.Stat(filepath.Join(dir, "nodeforge-scheduler")); err == nil {
				binDir = dir
			}
		}
	}
	return sandbox.EnsureBinaries(ctx, sandbox.BuildOptions{Source: src, BinDir: binDir, Progress: os.Stderr, Oldest: kubernetes == "oldest"})
}

func build(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	kubernetes := fs.String("kubernetes", "current", kubernetesUsage)
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := binaries(ctx, *kubernetes)
	if err != nil {
		return err
	}
	for _, kv := range [][2]string{
		{"etcd", b.Etcd}, {"kube-apiserver", b.KubeAPIServer}, {"kube-controller-manager", b.KubeControllerManager},
		{"kwok", b.Kwok}, {"nodeforge-scheduler", b.Scheduler}, {"nodeforge-provisioner", b.Provisioner},
	} {
		fmt.Printf("%-24s %s\n", kv[0], kv[1])
	}
	fmt.Printf("%-24s %s\n", "kubernetes", b.KubernetesVersion)
	return nil
}

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the sandbox's kubeconfig, logs and data (required)")
	cloud := fs.String("cloud-provider", "simulated", "simulated, or aws: the provisioner launches through the AWS SDK into a fake EC2 region on loopback")
	delay := fs.Duration("aws-registration-delay", 2*time.Second, "with aws: how long an instance takes to join as a node")
	replicas := fs.Int("replicas", 1, "replicas of nodeforge-scheduler and of nodeforge-provisioner (the chart's scheduler.replicas and provisioner.replicas); each elects a leader, the others stand by (logs: kubectl logs of each pod, or logs/nodeforge-scheduler-2.log...)")
	processes := fs.Bool("processes", false, "run the scheduler and provisioner as plain processes instead of installing the chart")
	kubernetes := fs.String("kubernetes", "current", kubernetesUsage)
	gates := featureGatesFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	featureGates, err := gates()
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	if *dir == "" {
		return errors.New("up: --dir is required")
	}
	if *replicas < 1 || *replicas > 5 {
		return fmt.Errorf("up: --replicas=%d: must be from 1 to 5", *replicas)
	}
	b, err := binaries(ctx, *kubernetes)
	if err != nil {
		return err
	}
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: *dir, Binaries: b, Progress: os.Stderr, CloudProvider: *cloud, AWSRegistrationDelay: *delay,
		SchedulerReplicas: *replicas, ProvisionerReplicas: *replicas, Install: !*processes,
		SchedulerEnv: programEnv(), ProvisionerEnv: programEnv(), FeatureGates: featureGates})
	if err != nil {
		return err
	}
	defer sb.Stop()
	fmt.Printf("ready kubeconfig=%s\n", sb.Kubeconfig)
	if !*processes {
		fmt.Printf("decisions: kubectl --kubeconfig %s -n nodeforge logs deploy/nodeforge-provisioner (and deploy/nodeforge-scheduler)\n", sb.Kubeconfig)
	}
	// Nodeforge's programs are started again when they exit (as a
	// kubelet would); a control-plane component that exits ends the run.
	exited := sb.Exited()
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "stopping the sandbox")
		return nil
	case name := <-exited:
		return fmt.Errorf("%s exited; see %s", name, sb.Log(name))
	}
}

// programEnv is what of up's environment the programs get: NODEFORGE_*
// variables (the provisioner takes every flag as NODEFORGE_<FLAG>, and
// both take crash and pause points), but for the sandbox's own
// (NODEFORGE_FEATURE_GATES is the sandbox's: every component gets it as
// --feature-gates, not the provisioner alone). Installed
// from the chart they reach the pods' env through its values.
func programEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NODEFORGE_BIN_DIR", "NODEFORGE_SOURCE", "NODEFORGE_E2E_LOGS", featureGatesEnv:
			continue
		}
		if strings.HasPrefix(name, "NODEFORGE_") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	return env
}

// featureGatesEnv is the variable --feature-gates defaults to.
const featureGatesEnv = "NODEFORGE_FEATURE_GATES"

// featureGatesFlag adds --feature-gates to fs and returns what it (or,
// when not given, $NODEFORGE_FEATURE_GATES) says, once fs is parsed:
// the gates every component of the sandbox gets (sandbox.Options.FeatureGates).
func featureGatesFlag(fs *flag.FlagSet) func() (map[string]bool, error) {
	value := fs.String("feature-gates", os.Getenv(featureGatesEnv), "feature gates of every component (kube-apiserver, kube-controller-manager, both schedulers, the provisioner), name=true|false pairs separated by commas, e.g. GenericWorkload=true,TopologyAwareWorkloadScheduling=true; GenericWorkload on also serves scheduling.k8s.io/v1beta1 (default $"+featureGatesEnv+")")
	return func() (map[string]bool, error) {
		gates, err := sandbox.ParseFeatureGates(*value)
		if err != nil {
			return nil, fmt.Errorf("--feature-gates (or $%s): %w", featureGatesEnv, err)
		}
		return gates, nil
	}
}
