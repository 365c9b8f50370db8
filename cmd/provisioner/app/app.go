// Package app is nodeforge-provisioner as a library: it turns NodeClaims
// into instances, adopts their nodes and disrupts nodes safely. Every flag
// can also be set from the environment: --cloud-provider from
// NODEFORGE_CLOUD_PROVIDER, and so on. cmd/provisioner is Main; a user
// who runs nodeforge-scheduler with plugins of their own (registry.
// WithPlugin) builds the provisioner with the same options, so its bind
// gate and disruption scheduler judge pods as that scheduler does.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	schedulerOptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	provreqv1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1"
	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/skew"
	"github.com/nodeforge/nodeforge/plugin/registry"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/aws"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
	"github.com/nodeforge/nodeforge/provisioner/controllers/capacitybuffer"
	"github.com/nodeforge/nodeforge/provisioner/controllers/catalog"
	"github.com/nodeforge/nodeforge/provisioner/controllers/disruption"
	"github.com/nodeforge/nodeforge/provisioner/controllers/garbage"
	"github.com/nodeforge/nodeforge/provisioner/controllers/nodeclaim"
	"github.com/nodeforge/nodeforge/provisioner/controllers/nodepool"
	"github.com/nodeforge/nodeforge/provisioner/controllers/replicas"
	"github.com/nodeforge/nodeforge/provisioner/limits"
	"github.com/nodeforge/nodeforge/simulator"
	"github.com/nodeforge/nodeforge/version"
)

type options struct {
	cloudProvider           string
	catalog                 string
	simulatedNamespace      string
	batchIdle               time.Duration
	batchMax                time.Duration
	registrationTTL         time.Duration
	launchTTL               time.Duration
	initializationTTL       time.Duration
	unavailableTTL          time.Duration
	nodeClaimWorkers        int
	nodeClaimLaunchWorkers  int
	cloudCallTimeout        time.Duration
	gcInterval              time.Duration
	schedulerConfig         string
	schedulerProfile        string
	gcGrace                 time.Duration
	consolidationInterval   time.Duration
	disruptionPause         time.Duration
	repair                  disruption.ZoneRules
	repack                  bool
	capacityBuffers         bool
	disruption              disruption.Timers
	repairInterval          time.Duration
	nodeMonitorGrace        time.Duration
	leaderElect             bool
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	leaderElectionNamespace string
	metricsAddr             string
	healthAddr              string
	qps                     float64
	burst                   int
	aws                     awsOptions
}

// Main runs the provisioner with the process's arguments and exits when it
// fails. opts add scheduler plugins (registry.WithPlugin): pass the same
// ones nodeforge-scheduler is built with.
func Main(opts ...registry.Option) {
	if err := Run(os.Args[1:], opts...); err != nil {
		klog.ErrorS(err, "Provisioner failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

// Run runs the provisioner with args (without the program name) until it
// is stopped; opts are as for Main.
func Run(args []string, opts ...registry.Option) error {
	fs := flag.CommandLine
	// The logging flags of kube-scheduler (component-base's):
	// --logging-format text or json, -v, --vmodule and the rest, so that
	// both programs log alike.
	logging := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logging, fs)
	var o options
	printVersion := fs.Bool("version", false, "Print the version and exit.")
	// The scheduler's feature gates, as kube-scheduler takes them: the
	// provisioner's simulation must run the plugins as the scheduler runs
	// them, so both programs get the same --feature-gates (the chart's
	// featureGates).
	fs.Func("feature-gates", "The scheduler's feature gates, key=value pairs separated by commas, as nodeforge-scheduler is given them (kube-scheduler's --feature-gates); its simulation runs the scheduler's plugins with them.", utilfeature.DefaultMutableFeatureGate.Set)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printVersion {
		fmt.Println(version.String("nodeforge-provisioner"))
		return nil
	}
	if err := flagsFromEnv(fs, "NODEFORGE_"); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	if err := o.validate(); err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())

	cfg, mgr, err := o.newManager()
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	// The scheduler's features whose APIs the server does not serve are
	// turned off before the scheduler simulation reads them (package skew).
	if err := skew.Fit(ctx, cfg, utilfeature.DefaultMutableFeatureGate, slices.Concat(skew.SchedulerAPIs, skew.ProvisionerAPIs),
		"nodeforge-provisioner (scheduler framework "+k8sversion.Get().GitVersion+")"); err != nil {
		return err
	}
	var d shared
	if d.cloud, d.onMeasured, err = o.cloudProviderOf(ctx, cfg, mgr); err != nil {
		return err
	}
	d.measured = cloudprovider.WithMetrics(cloudprovider.WithDeadline(d.cloud, o.cloudCallTimeout))
	d.unavailable = cloudprovider.NewUnavailableOfferings(o.unavailableTTL)
	if d.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if d.gate, d.sched, err = o.simulators(ctx, d.cs, opts...); err != nil {
		return err
	}
	if err := o.addControllers(ctx, mgr, d); err != nil {
		return err
	}
	if err := addHealthChecks(mgr); err != nil {
		return err
	}
	klog.InfoS("Starting provisioner", "cloudProvider", o.cloudProvider, "nodeClasses", cloudprovider.ServedKinds(d.cloud.NodeClasses()), "leaderElect", o.leaderElect,
		"batchIdleDuration", o.batchIdle, "batchMaxDuration", o.batchMax, "repack", o.repack, "registrationTTL", o.registrationTTL)
	return mgr.Start(ctx)
}

// addFlags adds the provisioner's flags to fs, the aws provider's among
// them.
func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.cloudProvider, "cloud-provider", "", "Cloud provider that launches instances: simulated or aws. Required: a provisioner that guessed would launch nothing real, or real instances by mistake.")
	fs.StringVar(&o.catalog, "simulated-catalog", "", "Catalog file of the simulated cloud; empty: the built-in one.")
	fs.StringVar(&o.simulatedNamespace, "simulated-namespace", "nodeforge", "Namespace of the ConfigMaps that hold the simulated cloud's instances, where every replica sees them.")
	fs.DurationVar(&o.batchIdle, "batch-idle-duration", time.Second, "Launch a NodeClaim once no pod has been nominated to it for this long...")
	fs.DurationVar(&o.batchMax, "batch-max-duration", 10*time.Second, "...or once it has been open this long.")
	fs.BoolVar(&o.repack, "repack", true, "Before launch, pack each batch of closed NodeClaims (one pool, zone, capacity type and architecture) again into the cheapest set of nodes the scheduling simulator accepts, and move the nominations; false launches each claim as the scheduler plugin packed it.")
	fs.BoolVar(&o.capacityBuffers, "capacity-buffers", false, "Keep CapacityBuffers (autoscaling.x-k8s.io/v1beta1) of the buffer.x-k8s.io/active-capacity strategy: write their status (the chunks' PodTemplate and number, ReadyForProvisioning, Provisioning, LimitedByQuotas), and keep the nodes their room is on from emptiness and consolidation. Needs the CRD, and nodeforge-scheduler's VirtualNodes argument capacityBuffers: true, which keeps the room.")
	fs.DurationVar(&o.unavailableTTL, "unavailable-offering-ttl", 3*time.Minute, "How long an offering that had no capacity, or whose node never joined, is not launched.")
	fs.DurationVar(&o.launchTTL, "launch-ttl", 10*time.Minute, "Delete a NodeClaim not launched this long after it was made (every launch failed); its offerings are avoided for a while and its pods get another claim.")
	fs.DurationVar(&o.initializationTTL, "initialization-ttl", 10*time.Minute, "Delete a NodeClaim, terminating its instance, when its node is not ready for pods (Ready, startup taints gone, promised extended resources in allocatable) this long after registering.")
	fs.DurationVar(&o.registrationTTL, "registration-ttl", 15*time.Minute, "Delete a launched NodeClaim, and terminate its instance, when its node has not registered by then.")
	fs.IntVar(&o.nodeClaimWorkers, "nodeclaim-workers", 4, "NodeClaims reconciled at once (register, bind, drain; and launch when --nodeclaim-launch-workers is 0), so one slow cloud call does not hold up the others.")
	fs.IntVar(&o.nodeClaimLaunchWorkers, "nodeclaim-launch-workers", 64, "NodeClaims launched at once, by workers of their own: a launch waits on the cloud (throttled calls are retried with backoff) and must not hold up registration, binding or draining. Launches that arrive together with the same options are sent as one request, so this also bounds how many one request can carry. 0 launches in the --nodeclaim-workers.")
	fs.DurationVar(&o.cloudCallTimeout, "cloud-call-timeout", 2*time.Minute, "Longest a cloud provider call may take, its SDK retries included; past it the call fails and is retried with backoff.")
	fs.DurationVar(&o.gcInterval, "garbage-collection-interval", 30*time.Second, "How often instances no NodeClaim accounts for, claims whose instance is gone and nodes whose instance is gone are looked for.")
	fs.DurationVar(&o.gcGrace, "garbage-collection-grace", 2*time.Minute, "How old an instance or node must be before garbage collection may remove it (a launch records its claim's providerID a moment after the cloud answers; a cloud's list may lag).")
	fs.DurationVar(&o.consolidationInterval, "consolidation-interval", 10*time.Second, "How often consolidation looks for nodes whose pods fit elsewhere.")
	fs.DurationVar(&o.disruptionPause, "disruption-validation-pause", 5*time.Second, "How long a voluntary disruption (empty, underutilized, drifted, expired) waits, with the chosen nodes tainted, before it looks at live state again and disrupts them: a pod being bound there meanwhile calls it off.")
	fs.DurationVar(&o.disruptionPause, "consolidation-validation-pause", 5*time.Second, "Deprecated: the old name of --disruption-validation-pause.")
	fs.DurationVar(&o.disruption.BudgetRetry, "disruption-budget-retry", disruption.DefaultTimers.BudgetRetry, "How long a node a disruption budget holds back waits before it is asked about again (sooner when a budget's schedule window opens or closes).")
	fs.DurationVar(&o.disruption.ReplacementGrace, "replacement-grace", disruption.DefaultTimers.ReplacementGrace, "How long a node being replaced waits for its named replacement NodeClaim to appear before calling the replacement off.")
	fs.DurationVar(&o.disruption.ReplacementRetry, "replacement-retry", disruption.DefaultTimers.ReplacementRetry, "How long a node whose replacement was called off keeps running before it may be chosen for disruption again.")
	fs.DurationVar(&o.nodeMonitorGrace, "node-monitor-grace-period", nodeclaim.DefaultNodeMonitorGracePeriod, "A node being drained that has not been Ready for longer than this has its pods deleted, each with its own grace period, PodDisruptionBudgets notwithstanding, as the node lifecycle controller treats a node it cannot reach; set it to kube-controller-manager's --node-monitor-grace-period.")
	fs.DurationVar(&o.repairInterval, "node-repair-interval", 5*time.Second, "How often unhealthy nodes are looked for and repaired (each zone at --node-repair-rate).")
	fs.Float64Var(&o.repair.Rate, "node-repair-rate", disruption.DefaultZoneRules.Rate, "Unhealthy nodes repaired per second in a zone, as kube-controller-manager's --node-eviction-rate.")
	fs.Float64Var(&o.repair.SecondaryRate, "secondary-node-repair-rate", disruption.DefaultZoneRules.SecondaryRate, "Unhealthy nodes repaired per second in a zone in PartialDisruption, as kube-controller-manager's --secondary-node-eviction-rate; none when the zone has no more than --large-cluster-size-threshold nodes.")
	fs.Float64Var(&o.repair.UnhealthyThreshold, "unhealthy-zone-threshold", disruption.DefaultZoneRules.UnhealthyThreshold, "Share of a zone's nodes not Ready (more than 2 of them) at which the zone is in PartialDisruption, as kube-controller-manager's flag of that name.")
	fs.IntVar(&o.repair.LargeClusterThreshold, "large-cluster-size-threshold", disruption.DefaultZoneRules.LargeClusterThreshold, "A zone in PartialDisruption with no more nodes than this is not repaired at all, as kube-controller-manager's flag of that name.")
	fs.StringVar(&o.schedulerConfig, "scheduler-config", "", "KubeSchedulerConfiguration of nodeforge-scheduler (the file or ConfigMap the scheduler is given): pods are bound only where its profile's PreFilter and Filter plugins accept them. Empty: the scheduler's defaults.")
	fs.StringVar(&o.schedulerProfile, "scheduler-profile", "nodeforge-scheduler", "Profile of --scheduler-config to judge binds by (ignored without --scheduler-config).")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader, so that only one replica acts at a time.")
	// The names and defaults of kube-scheduler's and kube-controller-manager's leader election flags.
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a standby replica waits after the leader's last renewal before it takes the lease: how long a crashed leader is not replaced.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew its lease before it stops leading (and exits); less than --leader-elect-lease-duration.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often replicas try to take or renew the lease.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "nodeforge", "Namespace of the leader election lease.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "Queries per second to the API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 300, "Burst of queries to the API server.")
	o.aws.addFlags(fs)
}

// newManager makes the controller manager, with leader election, metrics
// and health endpoints, and the REST config it talks to the API server
// with.
func (o *options) newManager() (*rest.Config, manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme), provreqv1.AddToScheme(scheme), bufferv1beta1.AddToScheme(scheme)); err != nil {
		return nil, nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "nodeforge-provisioner"
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.healthAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "nodeforge-provisioner",
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	return cfg, mgr, nil
}

// shared is what the provisioner's controllers share.
type shared struct {
	// cloud is the provider as built, measured the same with a deadline
	// on every call and metrics; onMeasured is as cloudProviderOf returns.
	cloud, measured cloudprovider.CloudProvider
	onMeasured      func(func())
	unavailable     *cloudprovider.UnavailableOfferings
	cs              *kubernetes.Clientset
	gate            *simulator.Gate
	sched           *simulator.Scheduler
}

// addControllers adds the provisioner's controllers and runnables to mgr:
// garbage collection, the disruption executor and its methods, the
// nodeclaim, nodepool status and catalog controllers.
func (o *options) addControllers(ctx context.Context, mgr manager.Manager, d shared) error {
	cloud, measured, unavailable, cs := d.cloud, d.measured, d.unavailable, d.cs
	collector := garbage.New(mgr.GetClient(), measured)
	collector.Interval, collector.Grace = o.gcInterval, o.gcGrace
	if err := mgr.Add(collector); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("nodeforge-provisioner")
	claimOpts := nodeclaim.Options{
		BatchIdle: o.batchIdle, BatchMax: o.batchMax, RegistrationTTL: o.registrationTTL, LaunchTTL: o.launchTTL, InitializationTTL: o.initializationTTL, Workers: o.nodeClaimWorkers, LaunchWorkers: o.nodeClaimLaunchWorkers, Gate: d.gate,
		NodeMonitorGracePeriod: o.nodeMonitorGrace,
	}
	if o.repack {
		claimOpts.Repack, claimOpts.Claims = d.sched, mgr.GetAPIReader()
	}
	// One executor carries out every disruption; the methods only decide.
	exec := disruption.NewExecutor(mgr.GetClient(), mgr.GetAPIReader(), cs, recorder, time.Now)
	// One ledger of the pools' limits: launches reserve against it, and
	// replacements are planned within what it counts.
	ledger := limits.NewLedger(mgr.GetClient(), measured)
	claimOpts.Limits = ledger
	exec.SetReplacer(disruption.NewReplacer(mgr.GetClient(), mgr.GetAPIReader(), d.sched, ledger))
	exec.SetTimers(o.disruption)
	if err := mgr.Add(exec); err != nil {
		return err
	}
	emptiness := disruption.NewEmptiness(mgr.GetClient(), cs, time.Now)
	if o.capacityBuffers {
		emptiness.Buffers = d.sched
	}
	perClaim := disruption.New(exec, emptiness, disruption.NewExpiration(time.Now), disruption.NewDrift(mgr.GetClient(), cloud.NodeClasses()),
		disruption.NewScaleDown(mgr.GetClient(), mgr.GetAPIReader()))
	perClaim.Pause = o.disruptionPause
	if err := perClaim.SetupWithManager(ctx, mgr, cloud.NodeClasses(), o.nodeClaimWorkers); err != nil {
		return err
	}
	claims := nodeclaim.NewController(mgr.GetClient(), cs, measured, unavailable, recorder, claimOpts)
	if err := claims.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	consolidation := disruption.NewConsolidation(exec, mgr.GetClient(), mgr.GetAPIReader(), d.sched, time.Now)
	consolidation.Interval, consolidation.Pause = o.consolidationInterval, o.disruptionPause
	consolidation.KeepBufferRoom = o.capacityBuffers
	if err := mgr.Add(consolidation); err != nil {
		return err
	}
	repair := disruption.NewRepair(exec, mgr.GetClient(), time.Now)
	repair.Rules, repair.Interval = o.repair, o.repairInterval
	if err := mgr.Add(repair); err != nil {
		return err
	}
	if q := o.aws.interruptionQueue(); q != nil {
		q.Timeout = o.cloudCallTimeout
		if err := mgr.Add(disruption.NewInterruption(exec, mgr.GetClient(), mgr.GetAPIReader(), q, unavailable, time.Now)); err != nil {
			return err
		}
	}
	if err := replicas.New(mgr.GetClient(), ledger, time.Now).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := nodepool.NewStatusController(mgr.GetClient(), cloud.NodeClasses(), recorder).SetupWithManager(mgr); err != nil {
		return err
	}
	catalogs := catalog.NewController(mgr.GetClient(), measured, unavailable, recorder)
	if err := catalogs.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := catalog.NewTemplateStatus(mgr.GetClient()).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := catalog.NewOverlayStatus(mgr.GetClient()).SetupWithManager(mgr); err != nil {
		return err
	}
	if o.capacityBuffers {
		if err := capacitybuffer.New(mgr.GetClient(), mgr.GetAPIReader(), d.sched).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if d.onMeasured != nil {
		// The memory a registered node reported is offered at once.
		d.onMeasured(catalogs.RepublishAll)
	}
	return nil
}

// addHealthChecks serves /healthz, and /readyz once the informers synced.
func addHealthChecks(mgr manager.Manager) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("informers", func(r *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(r.Context()) {
			return errors.New("informers not synced")
		}
		return nil
	})
}

// cloudProviderOf builds the cloud provider --cloud-provider names, with
// the controllers and runnables of its own (the aws provider's node class
// controller, price refresh and launch template collector; the simulated
// cloud's kubelets). onMeasured, for a provider that measures its nodes'
// memory, takes what to call when a measurement changes its offerings.
func (o *options) cloudProviderOf(ctx context.Context, cfg *rest.Config, mgr manager.Manager) (_ cloudprovider.CloudProvider, onMeasured func(func()), _ error) {
	switch o.cloudProvider {
	case "aws":
		o.aws.recorder = mgr.GetEventRecorder("nodeforge-provisioner")
		provider, err := o.aws.provider(ctx, cfg, mgr.GetClient())
		if err != nil {
			return nil, nil, err
		}
		classes := aws.NewNodeClassController(mgr.GetClient(), provider)
		classes.Timeout = o.cloudCallTimeout
		classes.Live = mgr.GetAPIReader()
		if err := classes.SetupWithManager(mgr); err != nil {
			return nil, nil, err
		}
		if err := mgr.Add(manager.RunnableFunc(o.aws.refreshPrices)); err != nil {
			return nil, nil, err
		}
		templates := aws.NewLaunchTemplateCollector(mgr.GetClient(), provider)
		templates.Timeout = o.cloudCallTimeout
		if err := mgr.Add(templates); err != nil {
			return nil, nil, err
		}
		return provider, provider.OnMeasured, nil
	case "simulated":
		catalogSource, err := simulated.NewCatalog(o.catalog)
		if err != nil {
			return nil, nil, err
		}
		// Its own clients, with its own user agent, reading the manager's
		// cache: the audit log tells its requests from the provisioner's.
		kube, api, err := simulated.NewClients(cfg, mgr.GetCache(), mgr.GetScheme(), mgr.GetRESTMapper())
		if err != nil {
			return nil, nil, err
		}
		sim := simulated.NewCloud(catalogSource, kube, api, o.simulatedNamespace)
		// The simulated instances' kubelets: only the leader registers nodes.
		if err := mgr.Add(manager.RunnableFunc(sim.Run)); err != nil {
			return nil, nil, err
		}
		return sim, nil, nil
	}
	return nil, nil, fmt.Errorf("--cloud-provider=%s: not a provider this build has", o.cloudProvider)
}

// simulators builds, from --scheduler-config, the scheduler's verdict on
// binds and the scheduler consolidation places evicted pods with, and
// starts their informers.
func (o *options) simulators(ctx context.Context, cs kubernetes.Interface, plugins ...registry.Option) (*simulator.Gate, *simulator.Scheduler, error) {
	var cfg *config.KubeSchedulerConfiguration
	var err error
	name := o.schedulerProfile
	if o.schedulerConfig == "" {
		name = "" // the defaults' one profile
		if cfg, err = latest.Default(); err != nil {
			return nil, nil, err
		}
	} else if cfg, err = schedulerOptions.LoadConfigFromFile(klog.Background(), o.schedulerConfig); err != nil {
		return nil, nil, fmt.Errorf("--scheduler-config: %w", err)
	}
	profile, err := simulator.FindProfile(cfg, name)
	if err != nil {
		return nil, nil, fmt.Errorf("--scheduler-profile: %w", err)
	}
	// VirtualNodes is the scheduler's PostFilter, not a plugin that judges fit.
	reg, err := registry.All(plugins...)
	if err != nil {
		return nil, nil, err
	}
	gate, err := simulator.NewGate(ctx, reg, cs, profile, v1alpha1.TaintBinding, "VirtualNodes")
	if err != nil {
		return nil, nil, err
	}
	sched, err := gate.Scheduler(ctx, cfg.PercentageOfNodesToScore)
	if err != nil {
		return nil, nil, err
	}
	if err := gate.Start(ctx, 2*time.Minute); err != nil {
		return nil, nil, err
	}
	klog.InfoS("Scheduling simulator ready", "schedulerConfig", o.schedulerConfig, "profile", profile.SchedulerName)
	return gate, sched, nil
}

// validate refuses flag values the provisioner cannot act on sensibly,
// naming the flag: no --cloud-provider (there is no default, so that a
// manifest that forgot it fails at start rather than launching into the
// wrong cloud), a zero --registration-ttl would delete every launched
// claim before its node could join, a zero batch window would launch a
// node per pod.
func (o *options) validate() error {
	var errs []error
	switch o.cloudProvider {
	case "simulated", "aws":
	case "":
		errs = append(errs, errors.New("--cloud-provider (or NODEFORGE_CLOUD_PROVIDER) is required: choose simulated or aws"))
	default:
		errs = append(errs, fmt.Errorf("--cloud-provider=%q: choose simulated or aws", o.cloudProvider))
	}
	positive := []struct {
		flag string
		d    time.Duration
	}{
		{"batch-idle-duration", o.batchIdle}, {"batch-max-duration", o.batchMax},
		{"registration-ttl", o.registrationTTL}, {"unavailable-offering-ttl", o.unavailableTTL},
		{"launch-ttl", o.launchTTL}, {"initialization-ttl", o.initializationTTL},
		{"cloud-call-timeout", o.cloudCallTimeout},
		{"garbage-collection-interval", o.gcInterval}, {"garbage-collection-grace", o.gcGrace},
		{"consolidation-interval", o.consolidationInterval}, {"disruption-validation-pause", o.disruptionPause},
		{"disruption-budget-retry", o.disruption.BudgetRetry}, {"replacement-grace", o.disruption.ReplacementGrace}, {"replacement-retry", o.disruption.ReplacementRetry},
		{"node-repair-interval", o.repairInterval}, {"node-monitor-grace-period", o.nodeMonitorGrace},
		{"leader-elect-lease-duration", o.leaseDuration}, {"leader-elect-renew-deadline", o.renewDeadline}, {"leader-elect-retry-period", o.retryPeriod},
	}
	for _, f := range positive {
		if f.d <= 0 {
			errs = append(errs, fmt.Errorf("--%s=%s: must be more than 0", f.flag, f.d))
		}
	}
	if o.batchMax < o.batchIdle {
		errs = append(errs, fmt.Errorf("--batch-max-duration=%s: must not be less than --batch-idle-duration=%s", o.batchMax, o.batchIdle))
	}
	if o.renewDeadline >= o.leaseDuration || o.retryPeriod >= o.renewDeadline {
		errs = append(errs, fmt.Errorf("--leader-elect-lease-duration=%s, --leader-elect-renew-deadline=%s, --leader-elect-retry-period=%s: each must be more than the next", o.leaseDuration, o.renewDeadline, o.retryPeriod))
	}
	if r := o.repair; r.Rate < 0 || r.SecondaryRate < 0 || r.UnhealthyThreshold <= 0 || r.UnhealthyThreshold > 1 || r.LargeClusterThreshold < 0 {
		errs = append(errs, fmt.Errorf("--node-repair-rate=%g, --secondary-node-repair-rate=%g, --unhealthy-zone-threshold=%g, --large-cluster-size-threshold=%d: rates must not be negative, the threshold must be in (0, 1], the size not negative",
			r.Rate, r.SecondaryRate, r.UnhealthyThreshold, r.LargeClusterThreshold))
	}
	if o.aws.queue != "" && o.cloudProvider != "aws" {
		errs = append(errs, fmt.Errorf("--interruption-queue=%s: only the aws provider has an interruption queue", o.aws.queue))
	}
	if o.nodeClaimWorkers < 1 || o.nodeClaimWorkers > 64 {
		errs = append(errs, fmt.Errorf("--nodeclaim-workers=%d: must be from 1 to 64", o.nodeClaimWorkers))
	}
	if o.nodeClaimLaunchWorkers < 0 || o.nodeClaimLaunchWorkers > 512 {
		errs = append(errs, fmt.Errorf("--nodeclaim-launch-workers=%d: must be from 0 to 512", o.nodeClaimLaunchWorkers))
	}
	if o.qps <= 0 || o.burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps=%v --kube-api-burst=%d: both must be more than 0", o.qps, o.burst))
	}
	return errors.Join(errs...)
}

// flagsFromEnv sets every flag not given on the command line from the
// environment variable prefix+NAME, where NAME is the flag's name in upper
// case with dashes as underscores (--kube-api-qps: NODEFORGE_KUBE_API_QPS).
func flagsFromEnv(fs *flag.FlagSet, prefix string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}
