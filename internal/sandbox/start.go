package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeforge/nodeforge/manifests"
)

// Start brings up the sandbox and returns once every component is ready.
// On error, whatever was started is stopped again.
func Start(ctx context.Context, o Options) (_ *Sandbox, err error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	switch o.CloudProvider {
	case "", "simulated", "aws":
	default:
		return nil, fmt.Errorf("cloud provider %q: choose simulated or aws", o.CloudProvider)
	}
	if err := validateFeatureGates(o.FeatureGates); err != nil {
		return nil, err
	}
	dir, err := stateDir(o.Dir)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), progress: o.Progress, restarts: map[string]int{}, quit: make(chan struct{}), featureGates: o.FeatureGates}
	// Every step records what it starts on s, so Stop ends all of it.
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()

	st, err := s.prepare(o)
	if err != nil {
		return nil, err
	}
	if err := st.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := st.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if !st.installed {
		// What the chart would install first: the CRDs, the namespace, RBAC.
		if err := applyFiles(ctx, s.Config, manifests.Install...); err != nil {
			return nil, err
		}
		if err := waitServed(ctx, s.Config); err != nil {
			return nil, err
		}
		if o.ProvisioningRequests && !o.ControlPlaneOnly {
			if err := applyFiles(ctx, s.Config, provisioningRequestFiles...); err != nil {
				return nil, err
			}
			if err := waitProvisioningRequests(ctx, s.Config); err != nil {
				return nil, err
			}
		}
		if o.CapacityBuffers && !o.ControlPlaneOnly {
			if err := applyFiles(ctx, s.Config, capacityBufferFiles...); err != nil {
				return nil, err
			}
			if err := waitCapacityBuffers(ctx, s.Config); err != nil {
				return nil, err
			}
		}
	}
	if o.ControlPlaneOnly {
		return s, nil
	}
	if err := st.install(ctx); err != nil {
		return nil, err
	}
	if err := st.startControllerManager(ctx); err != nil {
		return nil, err
	}
	if err := st.startKwok(ctx); err != nil {
		return nil, err
	}
	// A control-plane node, tainted so workloads stay off it, as every real
	// cluster has nodes before it has an autoscaler. kube-scheduler skips
	// PostFilter plugins, VirtualNodes among them, while a cluster has no
	// node at all.
	if err := applyFiles(ctx, s.Config, "examples/control-plane-node.yaml"); err != nil {
		return nil, err
	}
	if err := st.startNodeforge(ctx); err != nil {
		return nil, err
	}
	return s, s.writeEndpoints(st.p)
}

// starter is what Start's steps share.
type starter struct {
	s *Sandbox
	o Options
	// installed: Nodeforge is installed from the chart (Options.Install,
	// and more than the control plane).
	installed bool
	p         ports
	certs     *pki
	cs        *kubernetes.Clientset // the admin's
	logDir    string
}

// stateDir is the absolute path of dir, with an earlier sandbox's state
// removed and the logs and kubeconfigs directories made.
func stateDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for _, stale := range []string{"etcd", "pki", "logs", "kubeconfig", "kubeconfigs", "nodeforge-scheduler-config.yaml", "endpoints", "pods", "chart", "helm"} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, "kubeconfigs"), 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// prepare starts the fake AWS region when the sandbox has one, picks the
// components' ports, writes their certificates and kubeconfigs, starts the
// fault proxy when asked for, and makes the admin client.
func (s *Sandbox) prepare(o Options) (*starter, error) {
	st := &starter{s: s, o: o, installed: !o.ControlPlaneOnly && o.Install, logDir: filepath.Join(s.Dir, "logs")}
	var err error
	if o.CloudProvider == "aws" && !o.ControlPlaneOnly {
		if s.region, err = startAWSRegion(o.AWSRegistrationDelay); err != nil {
			return nil, fmt.Errorf("starting the fake EC2 region: %w", err)
		}
	}
	pp, err := s.freePorts(8)
	if err != nil {
		return nil, err
	}
	st.p = ports{pp[0], pp[1], pp[2], pp[3], pp[4], pp[5], pp[6], pp[7]}
	s.Server = fmt.Sprintf("https://127.0.0.1:%d", st.p.apiserver)

	if st.certs, err = newPKI(filepath.Join(s.Dir, "pki")); err != nil {
		return nil, fmt.Errorf("making certificates: %w", err)
	}
	if err := s.writeKubeconfigs(st.certs); err != nil {
		return nil, err
	}
	if o.ProvisionerFaults != nil {
		if err := s.startFaultProxy(st.certs, *o.ProvisionerFaults); err != nil {
			return nil, fmt.Errorf("starting the fault proxy: %w", err)
		}
	}
	s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
	if err != nil {
		return nil, err
	}
	s.Config.QPS, s.Config.Burst = 100, 200
	if st.cs, err = kubernetes.NewForConfig(s.Config); err != nil {
		return nil, err
	}
	return st, nil
}

// writeKubeconfigs writes a kubeconfig for each identity of the sandbox:
// the admin's at s.Kubeconfig, the others in kubeconfigs/.
func (s *Sandbox) writeKubeconfigs(certs *pki) error {
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
		path := filepath.Join(s.Dir, "kubeconfigs", name+".kubeconfig")
		if name == "admin" {
			path = s.Kubeconfig
		}
		if err := certs.kubeconfig(path, name, id, s.Server); err != nil {
			return fmt.Errorf("writing kubeconfig for %s: %w", name, err)
		}
	}
	return nil
}

func (st *starter) startEtcd(ctx context.Context) error {
	p := st.p
	etcd, err := st.s.start(st.logDir, "etcd", st.o.Binaries.Etcd,
		"--name=sandbox",
		"--data-dir="+filepath.Join(st.s.Dir, "etcd"),
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
		return err
	}
	return st.s.ready(ctx, etcd, httpOK(fmt.Sprintf("http://127.0.0.1:%d/health", p.etcdClient)))
}

// startAPIServer starts kube-apiserver, with the audit log of AuditLog.
func (st *starter) startAPIServer(ctx context.Context) error {
	dir, certs := st.s.Dir, st.certs
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML), 0o644); err != nil {
		return err
	}
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", st.p.etcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", st.p.apiserver),
		"--cert-dir=" + filepath.Join(dir, "pki", "apiserver-generated"),
		"--tls-cert-file=" + certs.path("apiserver.crt"),
		"--tls-private-key-file=" + certs.path("apiserver.key"),
		"--client-ca-file=" + certs.path("ca.crt"),
		"--authorization-mode=Node,RBAC",
		// The front proxy's CA, so that components serving their own
		// endpoints (scheduler, controller manager) find a complete
		// authentication configuration in kube-system.
		"--requestheader-client-ca-file=" + certs.path("ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + certs.path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + certs.path("front-proxy-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + certs.path("sa.pub"),
		"--service-account-signing-key-file=" + certs.path("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		// The kubernetes Service would point at 127.0.0.1, which Endpoints refuse.
		"--endpoint-reconciler-type=none",
		// kubectl logs and exec reach kwok, the nodes' kubelet, at the
		// address the control-plane node reports; node names do not resolve.
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + auditPolicy,
		"--audit-log-path=" + filepath.Join(st.logDir, AuditLog),
	}
	apiserver, err := st.s.start(st.logDir, "kube-apiserver", st.o.Binaries.KubeAPIServer, append(args, apiServerArgs(st.o.FeatureGates)...)...)
	if err != nil {
		return err
	}
	return st.s.ready(ctx, apiserver, func(ctx context.Context) error {
		_, err := st.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// install installs Nodeforge on the running API server: the sandbox is
// described in the fake EKS when it has one, the chart installed when
// asked for, and the cloud provider's default NodePool applied.
func (st *starter) install(ctx context.Context) error {
	if st.o.CloudProvider == "aws" {
		if err := st.describeInEKS(); err != nil {
			return err
		}
	}
	if st.installed {
		if err := st.installChart(ctx); err != nil {
			return err
		}
	}
	return applyFiles(ctx, st.s.Config, st.examples()...)
}

// describeInEKS connects the fake AWS region to the API server and
// describes the sandbox there as cluster ClusterName.
func (st *starter) describeInEKS() error {
	s := st.s
	if err := s.region.connect(s.Config); err != nil {
		return err
	}
	if err := s.region.addCluster(s.Server, filepath.Join(s.Dir, "pki", "ca.crt"), serviceCIDR, st.o.Binaries.KubernetesVersion); err != nil {
		return fmt.Errorf("describing the sandbox in the fake EKS: %w", err)
	}
	s.EC2, s.SQS, s.IAM, s.EKS, s.SSM = s.region.EC2, s.region.SQS, s.region.IAM, s.region.EKS, s.region.SSM
	return nil
}

// installChart installs kwok's Logs CRD and the chart (see install.go),
// and gives the chart's scheduler configuration the options' scheduler
// configuration and timers.
func (st *starter) installChart(ctx context.Context) error {
	s := st.s
	crd, err := os.ReadFile(st.o.Binaries.KwokLogsCRD)
	if err != nil {
		return err
	}
	if err := Apply(ctx, s.Config, crd); err != nil {
		return fmt.Errorf("applying kwok's Logs CRD: %w", err)
	}
	rendered, err := s.renderChart(ctx, st.o.Binaries.Helm, s.chartValues(st.o))
	if err != nil {
		return err
	}
	if err := applyFiles(ctx, s.Config, "namespace.yaml"); err != nil {
		return err
	}
	if err := Apply(ctx, s.Config, rendered); err != nil {
		return fmt.Errorf("installing the chart (%s): %w", filepath.Join(s.Dir, "chart-rendered.yaml"), err)
	}
	if err := waitServed(ctx, s.Config); err != nil {
		return err
	}
	if st.o.SchedulerConfig == nil && st.o.Timers == (Timers{}) {
		return nil
	}
	cm, err := st.cs.CoreV1().ConfigMaps(namespace).Get(ctx, "nodeforge-scheduler-config", metav1.GetOptions{})
	if err != nil {
		return err
	}
	config := []byte(cm.Data["config.yaml"])
	if st.o.SchedulerConfig != nil {
		config = st.o.SchedulerConfig
	}
	if config, err = st.o.Timers.schedulerConfig(config); err != nil {
		return err
	}
	cm.Data["config.yaml"] = string(config)
	_, err = st.cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// examples are the manifests applied once Nodeforge is installed: the
// default NodePool of the cloud provider and, without the chart, the
// simulated cloud's RBAC.
func (st *starter) examples() []string {
	if st.o.CloudProvider == "aws" {
		return []string{"examples/aws.yaml"}
	}
	if st.installed {
		// The chart has the simulated cloud's permissions.
		return []string{"examples/default.yaml"}
	}
	return []string{"provisioner/simulated-rbac.yaml", "examples/default.yaml"}
}

// startControllerManager starts kube-controller-manager, with a credential
// per controller as kubeadm runs it.
func (st *starter) startControllerManager(ctx context.Context) error {
	dir, certs := st.s.Dir, st.certs
	kcmConfig := filepath.Join(dir, "kubeconfigs", "kube-controller-manager.kubeconfig")
	kcmArgs := []string{
		"--kubeconfig=" + kcmConfig,
		"--authentication-kubeconfig=" + kcmConfig,
		"--authorization-kubeconfig=" + kcmConfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", st.p.controllerManager),
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
	if d := st.o.Timers.NodeMonitorGracePeriod; d > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-grace-period="+d.String())
	}
	if d := st.o.Timers.NodeMonitorPeriod; d > 0 {
		kcmArgs = append(kcmArgs, "--node-monitor-period="+d.String())
	}
	kcmArgs = append(kcmArgs, featureGateArgs(st.o.FeatureGates)...)
	kcm, err := st.s.start(st.logDir, "kube-controller-manager", st.o.Binaries.KubeControllerManager, kcmArgs...)
	if err != nil {
		return err
	}
	return st.s.ready(ctx, kcm, func(ctx context.Context) error {
		if err := httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", st.p.controllerManager))(ctx); err != nil {
			return err
		}
		// Pods can only be created once the service account controller ran.
		_, err := st.cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// startKwok starts kwok, which runs the nodes annotated
// kwok.x-k8s.io/node=fake and their pods.
func (st *starter) startKwok(ctx context.Context) error {
	bin := st.o.Binaries
	lease := 40 * time.Second
	if st.o.Timers.NodeLeaseDuration > 0 {
		lease = st.o.Timers.NodeLeaseDuration
	}
	kwokArgs := []string{
		"--kubeconfig=" + filepath.Join(st.s.Dir, "kubeconfigs", "kwok.kubeconfig"),
		"--config=" + bin.KwokStages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		fmt.Sprintf("--node-lease-duration-seconds=%d", max(1, int(lease.Seconds()))),
		"--cidr=10.244.0.0/16",
		"--node-ip=10.0.0.1",
		fmt.Sprintf("--server-address=127.0.0.1:%d", st.p.kwok),
	}
	if st.installed {
		// Nodes report kwok's server as their kubelet's port, and kwok
		// serves the logs its Logs objects point at (see install.go).
		kwokArgs = append(kwokArgs, fmt.Sprintf("--node-port=%d", st.p.kwok), "--enable-crds=Logs")
	}
	kwok, err := st.s.start(st.logDir, "kwok", bin.Kwok, kwokArgs...)
	if err != nil {
		return err
	}
	return st.s.ready(ctx, kwok, httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", st.p.kwok)))
}

// startNodeforge runs Nodeforge's programs: the chart's pods when it was
// installed, plain processes otherwise.
func (st *starter) startNodeforge(ctx context.Context) error {
	if st.installed {
		return st.runChart(ctx)
	}
	if err := st.startSchedulers(ctx); err != nil {
		return err
	}
	return st.startProvisioners(ctx)
}

// runChart starts the stock scheduler, which places the chart's pods, and
// runs the pods of the chart's Deployments (see install.go).
func (st *starter) runChart(ctx context.Context) error {
	s, bin, p := st.s, st.o.Binaries, st.p
	if err := s.startStockScheduler(ctx, bin.Scheduler); err != nil {
		return err
	}
	if err := s.runDeployment(ctx, st.cs, "nodeforge-scheduler", bin.Scheduler, map[int32]int{10259: p.scheduler}); err != nil {
		return err
	}
	return s.runDeployment(ctx, st.cs, "nodeforge-provisioner", bin.Provisioner, map[int32]int{8080: p.provisionerMetrics, 8081: p.provisionerHealth})
}

// startSchedulers starts the replicas of nodeforge-scheduler as processes,
// with the shipped configuration.
func (st *starter) startSchedulers(ctx context.Context) error {
	s, o := st.s, st.o
	shipped, err := manifests.FS.ReadFile("scheduler/config.yaml")
	if err != nil {
		return err
	}
	if o.SchedulerConfig != nil {
		shipped = o.SchedulerConfig
	}
	if o.ProvisioningRequests {
		if shipped, err = servingProvisioningRequests(shipped); err != nil {
			return err
		}
	}
	if o.CapacityBuffers {
		if shipped, err = keepingCapacityBuffers(shipped); err != nil {
			return err
		}
	}
	if shipped, err = o.Timers.schedulerConfig(shipped); err != nil {
		return err
	}
	if _, err := s.startScheduler(ctx, "nodeforge-scheduler", o.Binaries.Scheduler, shipped, st.p.scheduler, o.SchedulerEnv, "nodeforge-scheduler", true); err != nil {
		return err
	}
	for i := 2; i <= o.SchedulerReplicas; i++ {
		port, err := s.freePorts(1)
		if err != nil {
			return err
		}
		if _, err := s.startScheduler(ctx, fmt.Sprintf("nodeforge-scheduler-%d", i), o.Binaries.Scheduler, shipped, port[0], o.SchedulerEnv, "nodeforge-scheduler", true); err != nil {
			return err
		}
	}
	return nil
}

// startProvisioners starts the replicas of nodeforge-provisioner as
// processes, each ready before the next starts.
func (st *starter) startProvisioners(ctx context.Context) error {
	s, o := st.s, st.o
	provArgs, provEnv := st.provisionerCommand()
	for i := 1; i <= max(o.ProvisionerReplicas, 1); i++ {
		name, health, metrics := "nodeforge-provisioner", st.p.provisionerHealth, st.p.provisionerMetrics
		if i > 1 {
			pp, err := s.freePorts(2)
			if err != nil {
				return err
			}
			name, health, metrics = fmt.Sprintf("nodeforge-provisioner-%d", i), pp[0], pp[1]
		}
		args := append(slices.Clone(provArgs),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics))
		prov, err := s.startWithEnv(st.logDir, name, o.Binaries.Provisioner, append(provEnv, o.ProvisionerEnv...), true, append(args, o.ProvisionerArgs...)...)
		if err != nil {
			return err
		}
		if err := s.ready(ctx, prov, httpOK(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))); err != nil {
			return err
		}
	}
	return nil
}

// provisionerCommand is the arguments and environment every replica of
// nodeforge-provisioner shares: the simulated cloud or the fake EC2
// region, and the feature gates. It has no default provider, so the
// sandbox always names one.
func (st *starter) provisionerCommand() (args, env []string) {
	s := st.s
	cloud := "simulated"
	if s.region != nil {
		cloud = "aws"
	}
	args = []string{
		"--kubeconfig=" + filepath.Join(s.Dir, "kubeconfigs", "nodeforge-provisioner.kubeconfig"),
		"--cloud-provider=" + cloud,
		"--simulated-namespace=" + namespace,
		// Binds are judged by the scheduler's own profile.
		"--scheduler-config=" + filepath.Join(s.Dir, "nodeforge-scheduler-config.yaml"),
		"--leader-elect=true",
		"--leader-election-namespace=" + namespace,
	}
	args = append(args, st.o.Timers.provisionerArgs()...)
	args = append(args, featureGateArgs(st.o.FeatureGates)...)
	if st.o.CapacityBuffers {
		args = append(args, "--capacity-buffers")
	}
	if s.region == nil {
		return args, nil
	}
	args = append(args,
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
	env = []string{"AWS_ACCESS_KEY_ID=AKIASANDBOX", "AWS_SECRET_ACCESS_KEY=sandbox", "AWS_EC2_METADATA_DISABLED=true"}
	return args, env
}
