package main

import (
	"flag"
	"testing"
)

func TestFlagsFromEnv(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	qps := fs.Float64("kube-api-qps", 200, "")
	cloud := fs.String("cloud-provider", "simulated", "")
	elect := fs.Bool("leader-elect", true, "")
	t.Setenv("NODEFORGE_KUBE_API_QPS", "50")
	t.Setenv("NODEFORGE_CLOUD_PROVIDER", "aws")
	t.Setenv("NODEFORGE_LEADER_ELECT", "false")
	if err := fs.Parse([]string{"--cloud-provider=simulated"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(fs, "NODEFORGE_"); err != nil {
		t.Fatal(err)
	}
	if *qps != 50 || *elect {
		t.Errorf("environment not applied: qps=%v leaderElect=%v", *qps, *elect)
	}
	if *cloud != "simulated" {
		t.Errorf("environment overrode the command line: cloud-provider=%q", *cloud)
	}

	fresh := flag.NewFlagSet("fresh", flag.ContinueOnError)
	fresh.Float64("kube-api-qps", 200, "")
	t.Setenv("NODEFORGE_KUBE_API_QPS", "fast")
	if err := flagsFromEnv(fresh, "NODEFORGE_"); err == nil {
		t.Error("a malformed environment value was accepted")
	}
}
