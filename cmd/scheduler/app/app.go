// Package app is nodeforge-scheduler as a library: kube-scheduler with
// Nodeforge's VirtualNodes plugin and out-of-tree plugins registered. It
// runs as a secondary scheduler (schedulerName nodeforge-scheduler) with
// the configuration in manifests/scheduler. cmd/scheduler is Main; a user
// adds plugins of their own with registry.WithPlugin (docs/plugins.md).
package app

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	kubescheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerOptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/nodeforge/nodeforge/internal/skew"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/plugin/virtualnodes"
	"github.com/nodeforge/nodeforge/version"
)

// Main runs nodeforge-scheduler with the process's arguments and exits.
// opts add scheduler plugins (registry.WithPlugin): the scheduler
// registers them, and VirtualNodes runs them when it decides fit; pass
// the same ones to the provisioner, whose bind gate runs them too.
func Main(opts ...registry.Option) {
	// Nodeforge's version, and the kube-scheduler it is built on;
	// kube-scheduler's own --version would print only the latter.
	for _, a := range os.Args[1:] {
		if a == "--version" || a == "--version=true" {
			fmt.Printf("%s (kube-scheduler %s)\n", version.String("nodeforge-scheduler"), k8sversion.Get().GitVersion)
			os.Exit(0)
		}
	}
	command, err := NewSchedulerCommand(os.Args[1:], opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeforge-scheduler:", err)
		os.Exit(1)
	}
	os.Exit(cli.Run(command))
}

// NewSchedulerCommand is kube-scheduler's command with VirtualNodes, and
// every out-of-tree plugin of registry.OutOfTree(opts...), registered, for
// a scheduler started with args: a profile that enables a plugin is run
// the same by the scheduler and in VirtualNodes' simulation.
func NewSchedulerCommand(args []string, opts ...registry.Option) (*cobra.Command, error) {
	cfg, err := schedulerConfig(args)
	if err != nil {
		return nil, err
	}
	outOfTree, err := registry.OutOfTree(opts...)
	if err != nil {
		return nil, err
	}
	all := func() (frameworkruntime.Registry, error) { return registry.All(opts...) }
	options := []kubescheduler.Option{kubescheduler.WithPlugin(virtualnodes.Name, virtualnodes.NewFactory(cfg, all))}
	for name, factory := range outOfTree {
		options = append(options, kubescheduler.WithPlugin(name, factory))
	}
	command := kubescheduler.NewSchedulerCommand(options...)
	// kube-scheduler applies --feature-gates before it runs; the features
	// the server cannot serve are turned off after that, before anything
	// reads them.
	setGates := command.PersistentPreRunE
	command.PersistentPreRunE = func(c *cobra.Command, a []string) error {
		if err := setGates(c, a); err != nil {
			return err
		}
		return fitToServer(c, cfg)
	}
	return command, nil
}

// fitToServer turns off, before kube-scheduler starts, the features whose
// APIs the API server does not serve (skew.SchedulerAPIs), whatever
// --feature-gates said, and fails with a message naming the oldest
// Kubernetes that serves an API it cannot do without. It reaches the
// server as kube-scheduler will: with --config, that file's kubeconfig
// (or the in-cluster config), else --kubeconfig; and --master.
func fitToServer(c *cobra.Command, cfg *config.KubeSchedulerConfiguration) error {
	kubeconfig, master := cfg.ClientConnection.Kubeconfig, ""
	if f := c.Flags().Lookup("config"); f != nil && f.Value.String() == "" {
		if f := c.Flags().Lookup("kubeconfig"); f != nil {
			kubeconfig = f.Value.String()
		}
	}
	if f := c.Flags().Lookup("master"); f != nil {
		master = f.Value.String()
	}
	rc, err := clientcmd.BuildConfigFromFlags(master, kubeconfig)
	if err != nil {
		return fmt.Errorf("reaching the API server to see which APIs it serves: %w", err)
	}
	return skew.Fit(c.Context(), rc, utilfeature.DefaultMutableFeatureGate, skew.SchedulerAPIs, "nodeforge-scheduler (kube-scheduler "+k8sversion.Get().GitVersion+")")
}

// schedulerConfig loads the --config file the scheduler is started with
// (defaulted as the scheduler defaults it), so that VirtualNodes can run
// its profile's plugins with the same arguments.
func schedulerConfig(args []string) (*config.KubeSchedulerConfiguration, error) {
	fs := pflag.NewFlagSet("config", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.Usage = func() {}
	path := fs.String("config", "", "")
	_ = fs.Parse(args)
	if *path == "" {
		return latest.Default()
	}
	return schedulerOptions.LoadConfigFromFile(klog.Background(), *path)
}
