// Command nodeforge-scheduler is kube-scheduler with Nodeforge's plugins
// registered. It runs as a secondary scheduler (schedulerName
// nodeforge-scheduler) with the configuration in manifests/scheduler.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
