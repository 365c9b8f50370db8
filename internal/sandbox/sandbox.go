// Package sandbox runs a real Kubernetes control plane on one machine: etcd,
// kube-apiserver and kube-controller-manager built from the Kubernetes
// module in go.mod, kwok for nodes and pods, and Nodeforge's scheduler and
// provisioner with the simulated cloud, each as a separate process with its
// own identity and log. `nodeforge-sandbox up` and the integration and
// end-to-end tests use this same package, so what is tested is what users
// run.
package sandbox

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/internal/sandbox/ec2fake"
	"github.com/nodeforge/nodeforge/internal/sandbox/eksfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/faultproxy"
	"github.com/nodeforge/nodeforge/internal/sandbox/iamfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/sqsfake"
	"github.com/nodeforge/nodeforge/internal/sandbox/ssmfake"
)

// Options configure a sandbox.
type Options struct {
	// Dir holds the sandbox's state: kubeconfig, pki/, logs/, etcd/. Earlier
	// state there is removed.
	Dir string
	// Binaries to run; see EnsureBinaries.
	Binaries *Binaries
	// ControlPlaneOnly starts only etcd and kube-apiserver and installs the
	// CRDs and RBAC: enough for API tests, and quicker.
	ControlPlaneOnly bool
	// ProvisionerArgs are added to the provisioner's command line.
	ProvisionerArgs []string
	// ProvisionerEnv and SchedulerEnv are added to those components'
	// environments (crash points: see internal/crashpoint).
	ProvisionerEnv, SchedulerEnv []string
	// SchedulerReplicas of nodeforge-scheduler run, with the shipped
	// configuration and so one leader election lease; 0 means 1. The
	// first is "nodeforge-scheduler", the others "nodeforge-scheduler-2"...
	SchedulerReplicas int
	// ProvisionerReplicas of nodeforge-provisioner run, with leader
	// election on one lease; 0 means 1. Named like the scheduler's.
	ProvisionerReplicas int
	// CloudProvider of the provisioner: "simulated" (the default) or
	// "aws", which runs a fake EC2 region on loopback (internal/sandbox/ec2fake,
	// with internal/sandbox/sqsfake, internal/sandbox/iamfake and internal/sandbox/eksfake beside
	// it) that the provisioner reaches through the real AWS SDK; it
	// discovers the cluster in the fake EKS, and its instances register
	// as kwok nodes after AWSRegistrationDelay.
	CloudProvider        string
	AWSRegistrationDelay time.Duration
	// Progress gets one line per component as it comes up.
	Progress io.Writer
	// SchedulerConfig, when set, is the KubeSchedulerConfiguration of
	// nodeforge-scheduler instead of the shipped one (in the chart's
	// ConfigMap, as a user would edit it); the provisioner's bind gate
	// reads the same.
	SchedulerConfig []byte
	// Timers tests wait on. Zero keeps the default a real cluster runs
	// with, named on each; a test sets the shortest value that still tests
	// what it says.
	Timers Timers
	// ProvisionerFaults, when set, puts a fault-injecting proxy
	// (internal/sandbox/faultproxy) between the provisioner and the API server:
	// a share of its requests fail with 429, 500, a dropped connection,
	// or a timeout after the write was applied. Sandbox.Faults reports
	// what was injected.
	ProvisionerFaults *faultproxy.Config
	// Install installs Nodeforge from the chart (see install.go), as
	// `nodeforge-sandbox up` and the demo do. Without it the scheduler and
	// provisioner run as plain processes with certificates of their
	// ServiceAccounts' names and the same RBAC: for tests of the programs
	// that need nothing of the install.
	Install bool
	// FeatureGates, name to on or off, are given as --feature-gates to
	// every Kubernetes component and Nodeforge program that takes them:
	// kube-apiserver, kube-controller-manager, each nodeforge-scheduler
	// and the cluster's kube-scheduler, each nodeforge-provisioner (with
	// Install, through the chart's featureGates value). kube-apiserver
	// also serves the APIs of the gates that are on which it serves only
	// when asked (--runtime-config): scheduling.k8s.io/v1beta1 for
	// GenericWorkload, v1alpha3 for CompositePodGroup. ParseFeatureGates
	// reads the name=true,name=false form. Nil: every default.
	FeatureGates map[string]bool
	// ProvisioningRequests installs the ProvisioningRequest CRD
	// (autoscaling.x-k8s.io/v1) and has VirtualNodes serve it, as the
	// chart's provisioningRequests values do (with Install, through them).
	ProvisioningRequests bool
	// CapacityBuffers installs the CapacityBuffer CRD
	// (autoscaling.x-k8s.io/v1beta1), has VirtualNodes keep room for
	// buffers' chunks and the provisioner keep their status and nodes
	// (--capacity-buffers), as the chart's capacityBuffers values do
	// (with Install, through them).
	CapacityBuffers bool
}

// Timers of the control plane and of Nodeforge's leader election.
type Timers struct {
	// NodeMonitorGracePeriod is how long a node's lease may go unrenewed
	// before kube-controller-manager's node lifecycle controller marks the
	// node Ready=Unknown (--node-monitor-grace-period, 50s), and
	// NodeMonitorPeriod how often it checks (--node-monitor-period, 5s).
	NodeMonitorGracePeriod, NodeMonitorPeriod time.Duration
	// NodeLeaseDuration is the lease of the nodes kwok runs (a kubelet's
	// nodeLeaseDurationSeconds, 40s here); kwok renews a lease every
	// quarter of it. Keep a renewal well inside NodeMonitorGracePeriod,
	// or healthy nodes turn Unknown on a busy machine.
	NodeLeaseDuration time.Duration
	// LeaderElection of nodeforge-scheduler and nodeforge-provisioner
	// (15s lease, 10s renew deadline, 2s retry): how long a killed
	// leader's replacement waits before it acts.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// provisionerArgs are the provisioner's flags for the leader election
// timers that are set, and the node monitor grace period the control
// plane runs with (the provisioner drains a node not Ready for longer
// as the node lifecycle controller treats it).
func (t Timers) provisionerArgs() []string {
	var args []string
	for flag, d := range map[string]time.Duration{"leader-elect-lease-duration": t.LeaseDuration, "leader-elect-renew-deadline": t.RenewDeadline, "leader-elect-retry-period": t.RetryPeriod, "node-monitor-grace-period": t.NodeMonitorGracePeriod} {
		if d > 0 {
			args = append(args, fmt.Sprintf("--%s=%s", flag, d))
		}
	}
	slices.Sort(args)
	return args
}

// schedulerConfig sets the leader election timers that are set in a
// KubeSchedulerConfiguration, keeping its other fields.
func (t Timers) schedulerConfig(config []byte) ([]byte, error) {
	fields := map[string]any{}
	for field, d := range map[string]time.Duration{"leaseDuration": t.LeaseDuration, "renewDeadline": t.RenewDeadline, "retryPeriod": t.RetryPeriod} {
		if d > 0 {
			fields[field] = d.String()
		}
	}
	if len(fields) == 0 {
		return config, nil
	}
	return withConfigFields(config, "leaderElection", fields)
}

// Sandbox is a running control plane.
type Sandbox struct {
	// Dir is the sandbox's state directory.
	Dir string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is the admin REST config.
	Config *rest.Config
	// Server is the API server's URL.
	Server string

	// EC2 is the fake EC2 region of a sandbox with the aws provider, for
	// tests to inject faults into and inspect; nil otherwise.
	EC2 *ec2fake.Server
	// SQS is the fake SQS endpoint of a sandbox with the aws provider,
	// holding the interruption queue (InterruptionQueue) the provisioner
	// watches; EventBridge's part is played by the sandbox: instance state
	// changes are sent to it, and SpotInterruption sends a warning.
	SQS *sqsfake.Server
	// IAM is the fake IAM endpoint of a sandbox with the aws provider,
	// where the provisioner keeps the instance profiles of EC2NodeClasses
	// with spec.role; it holds the nodes' role, NodeRole. Nil otherwise.
	IAM *iamfake.Server
	// EKS is the fake EKS endpoint of a sandbox with the aws provider,
	// describing the sandbox as cluster ClusterName (its API server, CA,
	// service range and version), where the provisioner discovers them.
	// Nil otherwise.
	EKS *eksfake.Server
	// SSM is the fake SSM endpoint of a sandbox with the aws provider,
	// publishing the EKS-optimised images' parameters.
	SSM *ssmfake.Server
	// Faults is the proxy in front of the provisioner when
	// Options.ProvisionerFaults is set; nil otherwise.
	Faults *faultproxy.Proxy

	// mu guards procs, restarts and stopped: supervise replaces a
	// program that exited on its own.
	mu       sync.Mutex
	procs    []*process
	restarts map[string]int // component → restarts after it exited on its own
	stopped  bool
	quit     chan struct{} // closed by Stop
	// restartBackoff replaces the first restart's wait (restartBackoff)
	// when set: for tests of the supervision itself.
	restartBackoff time.Duration
	featureGates   map[string]bool   // Options.FeatureGates, for every scheduler started
	ports          []heldPort        // the components' ports, held until Stop
	pods           map[string]string // component → pod, when the chart is installed
	progress       io.Writer
	region         *awsRegion
	faultServer    *http.Server
}

// AuditLog is the file, in the sandbox's logs directory, where the API
// server records every request Nodeforge's programs make (auditPolicyYAML):
// one JSON line each, with the program's service account as the user, so
// that what the scheduler and the provisioner ask of the API server can be
// counted and read back (package auditlog; the simulated cloud's requests,
// made as the provisioner, by their user agent).
const AuditLog = "audit.log"

// auditPolicyYAML records, at the Metadata level (who, what, which object,
// the answer's code; no bodies) and once each when its answer is complete,
// the requests of the service accounts of Nodeforge's namespace, and
// nothing else.
const auditPolicyYAML = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:` + namespace + `"]
- level: None
`

// ports the sandbox listens on, all on 127.0.0.1.
type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, kwok, scheduler, provisionerHealth, provisionerMetrics int
}

const (
	namespace      = "nodeforge"
	serviceCIDR    = "10.96.0.0/16" // the API server's Service range
	startupTimeout = 2 * time.Minute
	stopGrace      = 10 * time.Second
)

// writeEndpoints writes <dir>/endpoints: where the components listen.
func (s *Sandbox) writeEndpoints(p ports) error {
	endpoints := fmt.Sprintf("apiserver=%s\nprovisioner-metrics=http://127.0.0.1:%d/metrics\nprovisioner-health=http://127.0.0.1:%d/readyz\nscheduler-metrics=https://127.0.0.1:%d/metrics\n",
		s.Server, p.provisionerMetrics, p.provisionerHealth, p.scheduler)
	if s.region != nil {
		endpoints += "ec2=" + s.region.URL + "\nsqs=" + s.region.SQSURL + "\niam=" + s.region.IAMURL + "\neks=" + s.region.EKS.URL() + "\nssm=" + s.region.SSM.URL() + "\n"
	}
	return os.WriteFile(filepath.Join(s.Dir, "endpoints"), []byte(endpoints), 0o644)
}

// SQSURL is the fake SQS endpoint of a sandbox with the aws provider.
func (s *Sandbox) SQSURL() string {
	if s.region == nil {
		return ""
	}
	return s.region.SQSURL
}

// Stop stops every component, newest first, and waits for them to exit.
func (s *Sandbox) Stop() {
	s.mu.Lock()
	procs := s.procs
	if !s.stopped && s.quit != nil {
		close(s.quit) // never set again: supervise reads it unlocked
	}
	s.procs, s.stopped = nil, true
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(stopGrace)
	}
	if s.region != nil {
		s.region.close()
		s.region = nil
	}
	if s.faultServer != nil {
		_ = s.faultServer.Close()
		s.faultServer = nil
	}
	s.releasePorts()
}

// Exited returns a channel that receives the name of the first component
// to exit on its own.
func (s *Sandbox) Exited() <-chan string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan string, len(s.procs))
	for _, p := range s.procs {
		if p.spec.restart {
			continue // started again when it exits (supervise)
		}
		go func() {
			<-p.done
			ch <- p.name
		}()
	}
	return ch
}

// Kill kills a component with SIGKILL and leaves it dead, as a lost
// machine would: failover tests use it on the leader of several replicas.
func (s *Sandbox) Kill(component string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.name == component {
			p.stopping.Store(true)
			if !p.exited() {
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
			}
			return nil
		}
	}
	return fmt.Errorf("no component %q in the sandbox", component)
}

// KillAndRestart kills a component with SIGKILL, as a crash or an OOM kill
// would, then starts it again with the same command line and waits until it
// is ready. Tests use it to check that a crash at any point loses nothing.
func (s *Sandbox) KillAndRestart(ctx context.Context, component string) error {
	s.mu.Lock()
	i := slices.IndexFunc(s.procs, func(p *process) bool { return p.name == component })
	if i < 0 {
		s.mu.Unlock()
		return fmt.Errorf("no component %q in the sandbox", component)
	}
	p := s.procs[i]
	p.stopping.Store(true)
	if !p.exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	next, err := startSpec(filepath.Join(s.Dir, "logs"), p.spec)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.procs[i] = next
	s.mu.Unlock()
	if next.spec.restart {
		s.supervise(next)
	}
	return s.ready(ctx, next, p.check)
}

// add records a started process; one whose spec says so is started again
// when it exits on its own (supervise).
func (s *Sandbox) add(p *process) {
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	if p.spec.restart {
		s.supervise(p)
	}
}

// Log returns the path of a component's log.
func (s *Sandbox) Log(component string) string {
	return filepath.Join(s.Dir, "logs", component+".log")
}

// PIDs returns the process IDs of the running components.
func (s *Sandbox) PIDs() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, p := range s.procs {
		if !p.exited() {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}

func (s *Sandbox) start(logDir, name, bin string, args ...string) (*process, error) {
	return s.startWithEnv(logDir, name, bin, nil, false, args...)
}

// startWithEnv starts a component with env added to the sandbox's; with
// restart, it is started again whenever it exits on its own.
func (s *Sandbox) startWithEnv(logDir, name, bin string, env []string, restart bool, args ...string) (*process, error) {
	p, err := startSpec(logDir, spec{name: name, bin: bin, args: args, env: env, restart: restart})
	if err != nil {
		return nil, err
	}
	s.add(p)
	return p, nil
}

func (s *Sandbox) ready(ctx context.Context, p *process, check func(context.Context) error) error {
	p.check = check
	start := time.Now()
	if err := p.waitReady(ctx, startupTimeout, check); err != nil {
		return err
	}
	fmt.Fprintf(s.progress, "%-24s ready in %4.1fs  log=%s\n", p.name, time.Since(start).Seconds(), p.logPath)
	return nil
}

// httpOK checks that url answers 200. Components serve their health
// endpoints with self-signed certificates, so this check does not verify them.
func httpOK(url string) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // health probe on loopback
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("%s: %s %s", url, resp.Status, body)
		}
		return nil
	}
}

// StartScheduler starts a nodeforge-scheduler binary with the given
// KubeSchedulerConfiguration (its client connection is filled in: the
// scheduler's own identity) and waits until it is healthy. Tests use it to
// run schedulers with and without VirtualNodes against one control plane.
// stop ends it; the sandbox's Stop ends it too.
func (s *Sandbox) StartScheduler(ctx context.Context, name, bin string, config []byte) (stop func(), err error) {
	pp, err := s.freePorts(1)
	if err != nil {
		return nil, err
	}
	p, err := s.startScheduler(ctx, name, bin, config, pp[0], nil, "nodeforge-scheduler", false)
	if err != nil {
		return nil, err
	}
	return func() { p.stop(stopGrace) }, nil // stop marks it stopping: no restart
}

// startScheduler runs a scheduler binary as the identity of
// kubeconfigs/<identity>.kubeconfig, with config's client connection
// pointed at it and the sandbox's feature gates.
func (s *Sandbox) startScheduler(ctx context.Context, name, bin string, config []byte, port int, env []string, identity string, restart bool) (*process, error) {
	kubeconfig := filepath.Join(s.Dir, "kubeconfigs", identity+".kubeconfig")
	raw, err := withConfigFields(config, "clientConnection", map[string]any{"kubeconfig": kubeconfig, "qps": 200, "burst": 400})
	if err != nil {
		return nil, fmt.Errorf("the configuration of %s: %w", name, err)
	}
	path := filepath.Join(s.Dir, name+"-config.yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return nil, err
	}
	p, err := s.startWithEnv(filepath.Join(s.Dir, "logs"), name, bin, env, restart, s.schedulerArgs(name, path, kubeconfig, port)...)
	if err != nil {
		return nil, err
	}
	return p, s.ready(ctx, p, httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port)))
}

// schedulerArgs is the command line of scheduler name: its configuration
// file, its identity's kubeconfig, its secure port, and the sandbox's
// feature gates.
func (s *Sandbox) schedulerArgs(name, config, kubeconfig string, port int) []string {
	return append([]string{
		"--config=" + config,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(s.Dir, "pki", name),
		"--v=2",
	}, featureGateArgs(s.featureGates)...)
}

// withConfigFields sets fields of one section of a
// KubeSchedulerConfiguration (clientConnection, leaderElection), keeping
// the others.
func withConfigFields(config []byte, section string, fields map[string]any) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return nil, err
	}
	sec, _ := cfg[section].(map[string]any)
	if sec == nil {
		sec = map[string]any{}
	}
	maps.Copy(sec, fields)
	cfg[section] = sec
	return yaml.Marshal(cfg)
}

// waitServed waits until the API server serves every Nodeforge resource.
func waitServed(ctx context.Context, cfg *rest.Config) error {
	return waitResources(ctx, cfg, "nodeforge.dev/v1alpha1", "nodepools", "nodeclaims", "simulatednodeclasses", "instancetypecatalogs")
}

// waitResources waits, a minute at most, until the API server serves
// each of resources in groupVersion (their CRDs established).
func waitResources(ctx context.Context, cfg *rest.Config, groupVersion string, resources ...string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		list, err := cs.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err == nil {
			served := map[string]bool{}
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
			if !slices.ContainsFunc(resources, func(r string) bool { return !served[r] }) {
				return nil
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("waiting for the CRDs of %s: %w", groupVersion, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server did not serve %s of %s within a minute", strings.Join(resources, ", "), groupVersion)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
