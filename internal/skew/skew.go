// Package skew fits Nodeforge's programs to the API server they talk to.
// nodeforge-scheduler is kube-scheduler of one minor (go.mod's
// k8s.io/kubernetes), and both programs run the scheduler's plugins; a
// feature of that minor may list an API an older API server does not
// serve, and an informer of an API that is not served never syncs, so the
// program would wait for ever without a word. Check asks the server which
// of those APIs it serves before anything starts: a feature whose API is
// missing is turned off with a log line, and one that cannot be turned
// off (locked on in this minor) is an error that names the API, the
// server's version and the oldest Kubernetes that serves it.
package skew

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
)

// API is a resource a program lists while Feature is on ("" when it
// lists it whatever the features).
type API struct {
	Feature      featuregate.Feature
	GroupVersion string
	Resource     string
	// Since is the first Kubernetes minor that serves it, for messages.
	Since string
}

// SchedulerAPIs are the APIs kube-scheduler v1.37 lists beyond those every
// supported API server serves (core, apps, policy, storage), each while a
// feature is on: read from its scheduler.New and eventhandlers.go in
// k8s.io/kubernetes v1.37.2, and seen failing to list against
// kube-apiserver v1.33 (the four resource.k8s.io/v1 resources).
// DynamicResourceAllocation is locked on in 1.37; the others may be turned
// off.
var SchedulerAPIs = []API{
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "resourceclaims", Since: "1.34"},
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "resourceslices", Since: "1.34"},
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "deviceclasses", Since: "1.34"},
	{Feature: "DRADeviceTaintRules", GroupVersion: "resource.k8s.io/v1", Resource: "devicetaintrules", Since: "1.37"},
	// Off by default in 1.37, and their APIs are served only where the
	// server enables them (the gate and --runtime-config of
	// scheduling.k8s.io/v1beta1, v1alpha3 for compositepodgroups); a
	// user who turns them on against a server that does not serve them
	// gets them turned off again, with a log line, and with them the
	// features that depend on them (Check). kube-scheduler v1.37 lists
	// PodGroups only: it never reads a Workload (the API server serves
	// workloads beside podgroups, and the controllers that make
	// PodGroups read them), and TopologyAwareWorkloadScheduling and
	// DRAWorkloadResourceClaims, which depend on GenericWorkload, add
	// PodGroup fields (spec.schedulingConstraints, spec.resourceClaims)
	// and no API. Whether the server accepts those fields (its own gates)
	// discovery does not say.
	{Feature: "GenericWorkload", GroupVersion: "scheduling.k8s.io/v1beta1", Resource: "podgroups", Since: "1.37"},
	{Feature: "CompositePodGroup", GroupVersion: "scheduling.k8s.io/v1alpha3", Resource: "compositepodgroups", Since: "1.37"},
}

// ProvisionerAPIs are the APIs the provisioner's scheduler simulation
// (simulator.SharedState) lists whatever the features.
var ProvisionerAPIs = []API{
	{GroupVersion: "resource.k8s.io/v1", Resource: "resourceclaims", Since: "1.34"},
	{GroupVersion: "resource.k8s.io/v1", Resource: "resourceslices", Since: "1.34"},
	{GroupVersion: "resource.k8s.io/v1", Resource: "deviceclasses", Since: "1.34"},
}

// Discovery is what Check asks the API server (a discovery client).
type Discovery interface {
	ServerVersionWithContext(ctx context.Context) (*version.Info, error)
	ServerResourcesForGroupVersionWithContext(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// Gates is what Check needs of a feature gate: whether a feature is on,
// whether it may be turned off (kube-scheduler's --feature-gates), and
// which features need which others on.
type Gates interface {
	Enabled(featuregate.Feature) bool
	GetAll() map[featuregate.Feature]featuregate.FeatureSpec
	Dependencies() map[featuregate.Feature][]featuregate.Feature
}

// UnservedError is an API a program cannot run without that the server
// does not serve.
type UnservedError struct {
	API           API
	ServerVersion string
	Program       string
}

func (e *UnservedError) Error() string {
	why := "which it lists whatever its settings"
	if e.API.Feature != "" {
		why = fmt.Sprintf("which it lists while its feature %s is on, and that feature cannot be turned off in this version", e.API.Feature)
	}
	return fmt.Sprintf("the API server (%s) does not serve %s %s, %s; %s needs Kubernetes %s or newer", e.ServerVersion, e.API.GroupVersion, e.API.Resource, why, e.Program, e.API.Since)
}

// Check asks the server which of apis it serves, retrying a server that
// does not answer with backoff for up to timeout (it may be starting
// too), and returns the features to turn off (each logged), or an
// *UnservedError for an API that is missing and cannot be done without.
// APIs of features that are off are not asked about. A feature that is on
// and depends on one turned off is turned off too
// (TopologyAwareWorkloadScheduling with GenericWorkload): the gate
// refuses a feature on whose dependency is off.
func Check(ctx context.Context, disco Discovery, gates Gates, apis []API, program string, timeout time.Duration) ([]featuregate.Feature, error) {
	logger := klog.FromContext(ctx)
	specs := gates.GetAll()
	apis = slices.DeleteFunc(slices.Clone(apis), func(api API) bool {
		_, known := specs[api.Feature]
		return api.Feature != "" && (!known || !gates.Enabled(api.Feature))
	})
	var serverVersion string
	var last error
	served := map[string]map[string]bool{} // group version -> resources
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		v, err := disco.ServerVersionWithContext(ctx)
		if err != nil {
			last = err
			logger.Info("Waiting for the API server to answer discovery", "err", err)
			return false, nil
		}
		serverVersion = v.GitVersion
		for _, api := range apis {
			if _, asked := served[api.GroupVersion]; asked {
				continue
			}
			list, err := disco.ServerResourcesForGroupVersionWithContext(ctx, api.GroupVersion)
			if apierrors.IsNotFound(err) {
				served[api.GroupVersion] = map[string]bool{}
				continue
			}
			if err != nil {
				last = fmt.Errorf("%s: %w", api.GroupVersion, err)
				logger.Info("Waiting for the API server to answer discovery", "groupVersion", api.GroupVersion, "err", err)
				return false, nil
			}
			served[api.GroupVersion] = map[string]bool{}
			for _, r := range list.APIResources {
				served[api.GroupVersion][r.Name] = true
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return nil, fmt.Errorf("asking the API server which APIs it serves: %w (last answer: %w)", err, last)
	} else if err != nil {
		return nil, fmt.Errorf("asking the API server which APIs it serves: %w", err)
	}
	var off []API
	var errs []error
	for _, api := range apis {
		if served[api.GroupVersion][api.Resource] {
			continue
		}
		if api.Feature == "" {
			errs = append(errs, &UnservedError{API: api, ServerVersion: serverVersion, Program: program})
			continue
		}
		if specs[api.Feature].LockToDefault {
			errs = append(errs, &UnservedError{API: api, ServerVersion: serverVersion, Program: program})
			continue
		}
		if !slices.ContainsFunc(off, func(o API) bool { return o.Feature == api.Feature }) {
			off = append(off, api)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(dedupe(errs)...)
	}
	features := make([]featuregate.Feature, len(off))
	for i, api := range off {
		logger.Info("Turning a feature off: the API server does not serve its API", "feature", api.Feature, "groupVersion", api.GroupVersion, "resource", api.Resource, "serverVersion", serverVersion, "servedSince", api.Since)
		features[i] = api.Feature
	}
	for _, d := range dependents(gates, features) {
		logger.Info("Turning a feature off: it depends on a feature turned off", "feature", d[0], "dependsOn", d[1])
		features = append(features, d[0])
	}
	return features, nil
}

// dependents are the features that are on and depend, directly or
// through others, on one of off, each with the feature it depends on
// that is turned off, in the order of their names.
func dependents(gates Gates, off []featuregate.Feature) [][2]featuregate.Feature {
	deps := gates.Dependencies()
	specs := gates.GetAll()
	turned := map[featuregate.Feature]bool{}
	for _, f := range off {
		turned[f] = true
	}
	features := slices.Sorted(maps.Keys(deps))
	var out [][2]featuregate.Feature
	for changed := len(off) > 0; changed; {
		changed = false
		for _, f := range features {
			if _, known := specs[f]; turned[f] || !known || !gates.Enabled(f) {
				continue
			}
			if i := slices.IndexFunc(deps[f], func(dep featuregate.Feature) bool { return turned[dep] }); i >= 0 {
				turned[f], changed = true, true
				out = append(out, [2]featuregate.Feature{f, deps[f][i]})
			}
		}
	}
	return out
}

// Off is the feature gate settings that turn off features.
func Off(features []featuregate.Feature) map[string]bool {
	m := make(map[string]bool, len(features))
	for _, f := range features {
		m[string(f)] = false
	}
	return m
}

// dedupe keeps the first error of each group version, so that one cause
// (the server serves none of it) is one message.
func dedupe(errs []error) []error {
	seen := map[string]bool{}
	var out []error
	for _, err := range errs {
		var u *UnservedError
		key := err.Error()
		if errors.As(err, &u) {
			key = u.API.GroupVersion
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, err)
		}
	}
	return out
}

// Fit runs Check against the server cfg reaches and turns off, in gates,
// the features whose APIs it does not serve. Both programs call it before
// they build anything that reads the features.
func Fit(ctx context.Context, cfg *rest.Config, gates featuregate.MutableFeatureGate, apis []API, program string) error {
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("a discovery client to see which APIs the server serves: %w", err)
	}
	off, err := Check(klog.NewContext(ctx, klog.FromContext(ctx).WithName("skew")), disco, gates, apis, program, FitTimeout)
	if err != nil || len(off) == 0 {
		return err
	}
	return gates.SetFromMap(Off(off))
}

// FitTimeout bounds how long Fit waits for a server that does not answer:
// the program then exits, and its restart tries again.
const FitTimeout = 2 * time.Minute
