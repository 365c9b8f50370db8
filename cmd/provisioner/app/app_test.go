package app

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodeforge/nodeforge/provisioner/controllers/disruption"
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

// TestValidateRefusesFlagsItCannotActOn: each bad or missing value is
// named in the error; the defaults, with a cloud provider chosen, pass.
func TestValidateRefusesFlagsItCannotActOn(t *testing.T) {
	good := options{cloudProvider: "simulated", batchIdle: time.Second, batchMax: 10 * time.Second, registrationTTL: 15 * time.Minute, launchTTL: 10 * time.Minute, initializationTTL: 10 * time.Minute,
		unavailableTTL: 3 * time.Minute, nodeClaimWorkers: 4, cloudCallTimeout: 2 * time.Minute, gcInterval: 30 * time.Second, gcGrace: 2 * time.Minute, consolidationInterval: 10 * time.Second, disruptionPause: 5 * time.Second, qps: 200, burst: 300,
		disruption: disruption.DefaultTimers, repairInterval: 5 * time.Second, nodeMonitorGrace: 50 * time.Second,
		leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second,
		repair: disruption.DefaultZoneRules}
	if err := good.validate(); err != nil {
		t.Fatalf("the defaults were refused: %v", err)
	}
	for want, edit := range map[string]func(*options){
		`--cloud-provider="gce": choose simulated or aws`:                                                    func(o *options) { o.cloudProvider = "gce" },
		"--cloud-provider (or NODEFORGE_CLOUD_PROVIDER) is required: choose simulated or aws":                func(o *options) { o.cloudProvider = "" },
		"--disruption-validation-pause=0s: must be more than 0":                                              func(o *options) { o.disruptionPause = 0 },
		"--registration-ttl=0s: must be more than 0":                                                         func(o *options) { o.registrationTTL = 0 },
		"--node-monitor-grace-period=0s: must be more than 0":                                                func(o *options) { o.nodeMonitorGrace = 0 },
		"--batch-idle-duration=-1s: must be more than 0":                                                     func(o *options) { o.batchIdle = -time.Second },
		"--batch-max-duration=500ms: must not be less than --batch-idle-duration=1s":                         func(o *options) { o.batchMax = 500 * time.Millisecond },
		"--unavailable-offering-ttl=0s: must be more than 0":                                                 func(o *options) { o.unavailableTTL = 0 },
		"--launch-ttl=0s: must be more than 0":                                                               func(o *options) { o.launchTTL = 0 },
		"--initialization-ttl=-1s: must be more than 0":                                                      func(o *options) { o.initializationTTL = -time.Second },
		"--cloud-call-timeout=0s: must be more than 0":                                                       func(o *options) { o.cloudCallTimeout = 0 },
		"--garbage-collection-grace=0s: must be more than 0":                                                 func(o *options) { o.gcGrace = 0 },
		"--nodeclaim-workers=0: must be from 1 to 64":                                                        func(o *options) { o.nodeClaimWorkers = 0 },
		"--unhealthy-zone-threshold=1.5":                                                                     func(o *options) { o.repair.UnhealthyThreshold = 1.5 },
		"--interruption-queue=q: only the aws provider has an interruption queue":                            func(o *options) { o.aws.queue = "q" },
		"--secondary-node-repair-rate=-1":                                                                    func(o *options) { o.repair.SecondaryRate = -1 },
		"--kube-api-qps=0 --kube-api-burst=300: both must be more than 0":                                    func(o *options) { o.qps = 0 },
		"--replacement-grace=0s: must be more than 0":                                                        func(o *options) { o.disruption.ReplacementGrace = 0 },
		"--leader-elect-retry-period=0s: must be more than 0":                                                func(o *options) { o.retryPeriod = 0 },
		"--leader-elect-renew-deadline=15s, --leader-elect-retry-period=2s: each must be more than the next": func(o *options) { o.renewDeadline = 15 * time.Second },
	} {
		o := good
		edit(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error saying %q", err, want)
		}
	}
}

// TestRunRefusesToStartWithoutCloudProvider runs the command as shipped
// with no --cloud-provider: it stops before reaching any cluster, saying
// the choices, and logs that in JSON as --logging-format=json asks. (run
// registers its flags on the process's flag set, so this is the one test
// that calls it.) Its --feature-gates sets the scheduler's gates.
func TestRunRefusesToStartWithoutCloudProvider(t *testing.T) {
	t.Setenv("NODEFORGE_CLOUD_PROVIDER", "") // restored after the test...
	os.Unsetenv("NODEFORGE_CLOUD_PROVIDER")  // ...and unset during it
	t.Setenv("KUBECONFIG", "/nonexistent")
	// The JSON logger writes to the os.Stderr of when the flags are applied.
	logFile, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = logFile
	defer func() {
		os.Stderr = stderr
		if err := logsapi.ResetForTest(nil); err != nil {
			t.Error(err)
		}
	}()
	defer func() {
		if err := utilfeature.DefaultMutableFeatureGate.Set("GenericWorkload=false"); err != nil {
			t.Error(err)
		}
	}()
	err = Run([]string{"--leader-elect=false", "--logging-format=json", "--feature-gates=GenericWorkload=true"})
	if want := "--cloud-provider (or NODEFORGE_CLOUD_PROVIDER) is required: choose simulated or aws"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("run without --cloud-provider = %v, want an error saying %q", err, want)
	}
	// The scheduler's gates are the simulation's (GenericWorkload is off
	// unless set).
	if !utilfeature.DefaultFeatureGate.Enabled("GenericWorkload") {
		t.Error("--feature-gates=GenericWorkload=true left the gate off")
	}
	klog.ErrorS(err, "Provisioner failed", "cloudProvider", "") // as Main logs it
	klog.Flush()
	raw, err := os.ReadFile(logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &line); err != nil {
		t.Fatalf("the last log line is not JSON (%v): %s", err, raw)
	}
	if line["msg"] != "Provisioner failed" || !strings.Contains(fmt.Sprint(line["err"]), "--cloud-provider") {
		t.Errorf("log line %v: want msg \"Provisioner failed\" and the error under err", line)
	}
	if _, ok := line["cloudProvider"]; !ok {
		t.Errorf("log line %v: want the key cloudProvider as given", line)
	}
}
