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
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/internal/ec2fake"
	"github.com/nodeforge/nodeforge/internal/eksfake"
	"github.com/nodeforge/nodeforge/internal/faultproxy"
	"github.com/nodeforge/nodeforge/internal/iamfake"
	"github.com/nodeforge/nodeforge/internal/sqsfake"
	"github.com/nodeforge/nodeforge/internal/ssmfake"
	"github.com/nodeforge/nodeforge/manifests"
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
	// "aws", which runs a fake EC2 region on loopback (internal/ec2fake,
	// with internal/sqsfake, internal/iamfake and internal/eksfake beside
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
	// (internal/faultproxy) between the provisioner and the API server:
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

// Start brings up the sandbox and returns once every component is ready.
// On error, whatever was started is stopped again.
//
// Not split yet: it is the start order read top to bottom (certificates,
// etcd, the API server, controller manager, kwok, the chart or the
// processes), and the deferred stop on error covers all of it; its
// pieces share the sandbox and the ports. Splitting it into start steps
// goes with issue #45's controllers that stand alone.
func Start(ctx context.Context, o Options) (_ *Sandbox, err error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch o.CloudProvider {
	case "", "simulated", "aws":
	default:
		return nil, fmt.Errorf("cloud provider %q: choose simulated or aws", o.CloudProvider)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, stale := range []string{"etcd", "pki", "logs", "kubeconfig", "kubeconfigs", "nodeforge-scheduler-config.yaml", "endpoints", "pods", "chart", "helm"} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			return nil, err
		}
	}
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "kubeconfigs"), 0o700); err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), progress: o.Progress, restarts: map[string]int{}, quit: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	if o.CloudProvider == "aws" && !o.ControlPlaneOnly {
		if s.region, err = startAWSRegion(o.AWSRegistrationDelay); err != nil {
			return nil, fmt.Errorf("starting the fake EC2 region: %w", err)
		}
	}
	pp, err := s.freePorts(8)
	if err != nil {
		return nil, err
	}
	p := ports{pp[0], pp[1], pp[2], pp[3], pp[4], pp[5], pp[6], pp[7]}
	s.Server = fmt.Sprintf("https://127.0.0.1:%d", p.apiserver)

	certs, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("making certificates: %w", err)
	}
	kubeconfigs := map[string]identity{
		"admin":                   {user: "nodeforge-sandbox-admin", groups: []string{"system:masters"}},
		"kube-controller-manager": {user: "system:kube-controller-manager"},
		"kube-scheduler":          {user: "system:kube-scheduler"},
		// kwok plays every kubelet; in a real cluster it would be many identities.
		"kwok":                  {user: "kwok", groups: []string{"system:masters"}},
		"nodeforge-scheduler":   serviceAccount(namespace, "nodeforge-scheduler"),
		"nodeforge-provisioner": serviceAccount(namespace, "nodeforge-provisioner"),
	}
	for name, id := range kubeconfigs {
		path := filepath.Join(dir, "kubeconfigs", name+".kubeconfig")
		if name == "admin" {
			path = s.Kubeconfig
		}
		if err := certs.kubeconfig(path, name, id, s.Server); err != nil {
			return nil, fmt.Errorf("writing kubeconfig for %s: %w", name, err)
		}
	}
	if o.ProvisionerFaults != nil {
		if err := s.startFaultProxy(certs, *o.ProvisionerFaults); err != nil {
			return nil, fmt.Errorf("starting the fault proxy: %w", err)
		}
	}
	s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	bin := o.Binaries

	// etcd
	etcd, err := s.start(logDir, "etcd", bin.Etcd,
		"--name=sandbox",
		"--data-dir="+filepath.Join(dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", p.etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", p.etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", p.etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", p.etcdPeer),
		fmt.Sprintf("--initial-cluster=sandbox=http://127.0.0.1:%d", p.etcdPeer),
		// A sandbox's data is disposable; fsync only slows it down.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx, etcd, httpOK(fmt.Sprintf("http://127.0.0.1:%d/health", p.etcdClient))); err != nil {
		return nil, err
	}

	// kube-apiserver
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML), 0o644); err != nil {
		return nil, err
	}
	apiserver, err := s.start(logDir, "kube-apiserver", bin.KubeAPIServer,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.etcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.apiserver),
		"--cert-dir="+filepath.Join(dir, "pki", "apiserver-generated"),
		"--tls-cert-file="+certs.path("apiserver.crt"),
		"--tls-private-key-file="+certs.path("apiserver.key"),
		"--client-ca-file="+certs.path("ca.crt"),
		"--authorization-mode=Node,RBAC",
		// The front proxy's CA, so that components serving their own
		// endpoints (scheduler, controller manager) find a complete
		// authentication configuration in kube-system.
		"--requestheader-client-ca-file="+certs.path("ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+certs.path("front-proxy-client.crt"),
		"--proxy-client-key-file="+certs.path("front-proxy-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+certs.path("sa.pub"),
		"--service-account-signing-key-file="+certs.path("sa.key"),
		"--service-cluster-ip-range="+serviceCIDR,
		// The kubernetes Service would point at 127.0.0.1, which Endpoints refuse.
		"--endpoint-reconciler-type=none",
		// kubectl logs and exec reach kwok, the nodes' kubelet, at the
		// address the control-plane node reports; node names do not resolve.
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file="+auditPolicy,
		"--audit-log-path="+filepath.Join(logDir, AuditLog),
	)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx, apiserver, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, err
	}

	installed := !o.ControlPlaneOnly && o.Install
	if !installed {
		if err := applyFiles(ctx, s.Config, manifests.Install...); err != nil {
			return nil, err
		}
		if err := waitServed(ctx, s.Config); err != nil {
			return nil, err
		}
	}
	if o.ControlPlaneOnly {
		return s, nil
	}
	defaults := []string{"provisioner/simulated-rbac.yaml", "examples/default.yaml"}
	if installed {
		// The chart has the simulated cloud's permissions.
		defaults = []string{"examples/default.yaml"}
	}
	if o.CloudProvider == "aws" {
		if err := s.region.connect(s.Config); err != nil {
			return nil, err
		}
		if err := s.region.addCluster(s.Server, filepath.Join(dir, "pki", "ca.crt"), serviceCIDR, bin.KubernetesVersion); err != nil {
			return nil, fmt.Errorf("describing the sandbox in the fake EKS: %w", err)
		}
		s.EC2, s.SQS, s.IAM, s.EKS, s.SSM = s.region.EC2, s.region.SQS, s.region.IAM, s.region.EKS, s.region.SSM
		defaults = []string{"examples/aws.yaml"}
	}
	if installed {
		crd, err := os.ReadFile(bin.KwokLogsCRD)
		if err != nil {
			return nil, err
		}
		if err := Apply(ctx, s.Config, crd); err != nil {
			return nil, fmt.Errorf("applying kwok's Logs CRD: %w", err)
		}
		rendered, err := s.renderChart(ctx, bin.Helm, s.chartValues(o))
		if err != nil {
			return nil, err
		}
		if err := applyFiles(ctx, s.Config, "namespace.yaml"); err != nil {
			return nil, err
		}
		if err := Apply(ctx, s.Config, rendered); err != nil {
			return nil, fmt.Errorf("installing the chart (%s): %w", filepath.Join(dir, "chart-rendered.yaml"), err)
		}
		if err := waitServed(ctx, s.Config); err != nil {
			return nil, err
		}
		if o.SchedulerConfig != nil || o.Timers != (Timers{}) {
			cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, "nodeforge-scheduler-config", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			config := []byte(cm.Data["config.yaml"])
			if o.SchedulerConfig != nil {
				config = o.SchedulerConfig
			}
			if config, err = o.Timers.schedulerConfig(config); err != nil {
				return nil, err
			}
			cm.Data["config.yaml"] = string(config)
			if _, err := cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
				return nil, err
			}
		}
	}
	if err := applyFiles(ctx, s.Config, defaults...); err != nil {
		return nil, err
	}

	// kube-controller-manager, with a credential per controller as kubeadm runs it.
	kcmConfig := filepath.Join(dir, "kubeconfigs", "kube-controller-manager.kubeconfig")
	kcmArgs := []string{
		"--kubeconfig=" + kcmConfig,
		"--authentication-kubeconfig=" + kcmConfig,
		"--authorization-kubeconfig=" + kcmConfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.controllerManager),
		"--cert-dir=" + filepath.Join(dir, "pki", "kube-controller-manager"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + certs.path("sa.key"),
		"--root-ca-file=" + certs.path("ca.crt"),
		"--cluster-signing-cert-file=" + certs.path("ca.crt"),
		"--cluster-signing-key-file=" + certs.path("ca.key"),
		"--profiling=false",
		// The client rate of a control plane sized for scale-ups of
		// thousands of pods (the Kubernetes project's own large-cluster
		// scalability jobs run kube-controller-manager at 100/100), not
		// the default 20 requests/s: at 20/s the ReplicaSet controller's
		// pod creation, not Nodeforge, would set the pace of a sandbox
		// scale-up.
		"--kube-api-qps=100",
		"--kube-api-burst=100",
	}
	if d := o.Timers.NodeMonitorGracePeriod; d > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-grace-period="+d.String())
	}
	if d := o.Timers.NodeMonitorPeriod; d > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-period="+d.String())
	}
	kcm, err := s.start(logDir, "kube-controller-manager", bin.KubeControllerManager, kcmArgs...)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx, kcm, func(ctx context.Context) error {
		if err := httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", p.controllerManager))(ctx); err != nil {
			return err
		}
		// Pods can only be created once the service account controller ran.
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}

	// kwok runs the nodes annotated kwok.x-k8s.io/node=fake and their pods.
	lease := 40 * time.Second
	if o.Timers.NodeLeaseDuration > 0 {
		lease = o.Timers.NodeLeaseDuration
	}
	kwokArgs := []string{
		"--kubeconfig=" + filepath.Join(dir, "kubeconfigs", "kwok.kubeconfig"),
		"--config=" + bin.KwokStages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		fmt.Sprintf("--node-lease-duration-seconds=%d", max(1, int(lease.Seconds()))),
		"--cidr=10.244.0.0/16",
		"--node-ip=10.0.0.1",
		fmt.Sprintf("--server-address=127.0.0.1:%d", p.kwok),
	}
	if installed {
		// Nodes report kwok's server as their kubelet's port, and kwok
		// serves the logs its Logs objects point at (see install.go).
		kwokArgs = append(kwokArgs, fmt.Sprintf("--node-port=%d", p.kwok), "--enable-crds=Logs")
	}
	kwok, err := s.start(logDir, "kwok", bin.Kwok, kwokArgs...)
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx, kwok, httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.kwok))); err != nil {
		return nil, err
	}
	// A control-plane node, tainted so workloads stay off it, as every real
	// cluster has nodes before it has an autoscaler. kube-scheduler skips
	// PostFilter plugins, VirtualNodes among them, while a cluster has no
	// node at all.
	if err := applyFiles(ctx, s.Config, "examples/control-plane-node.yaml"); err != nil {
		return nil, err
	}

	if installed {
		if err := s.startStockScheduler(ctx, bin.Scheduler); err != nil {
			return nil, err
		}
		if err := s.runDeployment(ctx, cs, "nodeforge-scheduler", bin.Scheduler, map[int32]int{10259: p.scheduler}); err != nil {
			return nil, err
		}
		if err := s.runDeployment(ctx, cs, "nodeforge-provisioner", bin.Provisioner, map[int32]int{8080: p.provisionerMetrics, 8081: p.provisionerHealth}); err != nil {
			return nil, err
		}
		return s, s.writeEndpoints(p)
	}

	// nodeforge-scheduler, with the shipped configuration.
	shipped, err := manifests.FS.ReadFile("scheduler/config.yaml")
	if err != nil {
		return nil, err
	}
	if o.SchedulerConfig != nil {
		shipped = o.SchedulerConfig
	}
	if shipped, err = o.Timers.schedulerConfig(shipped); err != nil {
		return nil, err
	}
	if _, err := s.startScheduler(ctx, "nodeforge-scheduler", bin.Scheduler, shipped, p.scheduler, o.SchedulerEnv, "nodeforge-scheduler", true); err != nil {
		return nil, err
	}
	for i := 2; i <= o.SchedulerReplicas; i++ {
		port, err := s.freePorts(1)
		if err != nil {
			return nil, err
		}
		if _, err := s.startScheduler(ctx, fmt.Sprintf("nodeforge-scheduler-%d", i), bin.Scheduler, shipped, port[0], o.SchedulerEnv, "nodeforge-scheduler", true); err != nil {
			return nil, err
		}
	}

	// nodeforge-provisioner, with the simulated cloud or the fake EC2 region:
	// it has no default provider, so the sandbox always names one.
	cloud := "simulated"
	if s.region != nil {
		cloud = "aws"
	}
	provArgs := []string{
		"--kubeconfig=" + filepath.Join(dir, "kubeconfigs", "nodeforge-provisioner.kubeconfig"),
		"--cloud-provider=" + cloud,
		"--simulated-namespace=" + namespace,
		// Binds are judged by the scheduler's own profile.
		"--scheduler-config=" + filepath.Join(dir, "nodeforge-scheduler-config.yaml"),
		"--leader-elect=true",
		"--leader-election-namespace=" + namespace,
	}
	provArgs = append(provArgs, o.Timers.provisionerArgs()...)
	var provEnv []string
	if s.region != nil {
		provArgs = append(provArgs,
			"--aws-region=us-west-2",
			"--aws-ec2-endpoint="+s.region.URL,
			"--aws-sqs-endpoint="+s.region.SQSURL,
			"--aws-iam-endpoint="+s.region.IAMURL,
			// The API server, CA and service range are discovered there.
			"--aws-eks-endpoint="+s.region.EKS.URL(),
			"--aws-ssm-endpoint="+s.region.SSM.URL(),
			"--interruption-queue="+InterruptionQueue,
			"--cluster-name="+ClusterName,
			// The sandbox reaches no AWS host: keep the shipped prices.
			"--aws-pricing-refresh-interval=0",
		)
		// Static credentials for the SDK's default chain; the fake checks
		// that requests are signed, not by whom.
		provEnv = []string{"AWS_ACCESS_KEY_ID=AKIASANDBOX", "AWS_SECRET_ACCESS_KEY=sandbox", "AWS_EC2_METADATA_DISABLED=true"}
	}
	for i := 1; i <= max(o.ProvisionerReplicas, 1); i++ {
		name, health, metrics := "nodeforge-provisioner", p.provisionerHealth, p.provisionerMetrics
		if i > 1 {
			pp, err := s.freePorts(2)
			if err != nil {
				return nil, err
			}
			name, health, metrics = fmt.Sprintf("nodeforge-provisioner-%d", i), pp[0], pp[1]
		}
		args := append(slices.Clone(provArgs),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics))
		prov, err := s.startWithEnv(logDir, name, bin.Provisioner, append(provEnv, o.ProvisionerEnv...), true, append(args, o.ProvisionerArgs...)...)
		if err != nil {
			return nil, err
		}
		if err := s.ready(ctx, prov, httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))); err != nil {
			return nil, err
		}
	}
	return s, s.writeEndpoints(p)
}

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
// pointed at it.
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
	p, err := s.startWithEnv(filepath.Join(s.Dir, "logs"), name, bin, env, restart,
		"--config="+path,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(s.Dir, "pki", name),
		"--v=2",
	)
	if err != nil {
		return nil, err
	}
	return p, s.ready(ctx, p, httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port)))
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
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		list, err := cs.Discovery().ServerResourcesForGroupVersion("nodeforge.dev/v1alpha1")
		if err == nil {
			served := map[string]bool{}
			for _, r := range list.APIResources {
				served[r.Name] = true
			}
			if served["nodepools"] && served["nodeclaims"] && served["simulatednodeclasses"] && served["instancetypecatalogs"] {
				return nil
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("waiting for the Nodeforge CRDs: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Nodeforge CRDs were not served within a minute")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
