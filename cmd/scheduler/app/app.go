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
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	kubescheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"

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
	all, err := registry.All(opts...)
	if err != nil {
		return nil, err
	}
	outOfTree, err := registry.OutOfTree(opts...)
	if err != nil {
		return nil, err
	}
	options := []kubescheduler.Option{kubescheduler.WithPlugin(virtualnodes.Name, virtualnodes.NewFactory(cfg, all))}
	for name, factory := range outOfTree {
		options = append(options, kubescheduler.WithPlugin(name, factory))
	}
	return kubescheduler.NewSchedulerCommand(options...), nil
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
	return options.LoadConfigFromFile(klog.Background(), *path)
}
