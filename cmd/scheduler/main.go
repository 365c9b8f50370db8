// Command nodeforge-scheduler is kube-scheduler with Nodeforge's
// VirtualNodes plugin registered (package app). It runs as a secondary
// scheduler (schedulerName nodeforge-scheduler) with the configuration in
// manifests/scheduler.
package main

import "github.com/nodeforge/nodeforge/cmd/scheduler/app"

func main() { app.Main() }
