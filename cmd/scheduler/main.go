// Command nodeforge-scheduler is kube-scheduler with Nodeforge's VirtualNodes
// plugin registered. It runs as a secondary scheduler (schedulerName
// nodeforge-scheduler) with the configuration in manifests/scheduler.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"

	"github.com/nodeforge/nodeforge/plugin/virtualnodes"
	"github.com/nodeforge/nodeforge/simulator"
	"github.com/nodeforge/nodeforge/version"
)

func main() {
	// Nodeforge's version, and the kube-scheduler it is built on;
	// kube-scheduler's own --version would print only the latter.
	for _, a := range os.Args[1:] {
		if a == "--version" || a == "--version=true" {
			fmt.Printf("%s (kube-scheduler %s)\n", version.String("nodeforge-scheduler"), k8sversion.Get().GitVersion)
			return
		}
	}
	cfg, err := schedulerConfig(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeforge-scheduler:", err)
		os.Exit(1)
	}
	// VirtualNodes, and every out-of-tree plugin the simulator knows, so a
	// profile that enables one is run the same by the scheduler and in
	// VirtualNodes' simulation.
	opts := []app.Option{app.WithPlugin(virtualnodes.Name, virtualnodes.NewFactory(cfg))}
	for name, factory := range simulator.OutOfTree() {
		opts = append(opts, app.WithPlugin(name, factory))
	}
	command := app.NewSchedulerCommand(opts...)
	os.Exit(cli.Run(command))
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
