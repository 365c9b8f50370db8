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
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/version"
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
// supported API server serves (core, apps, policy, storage): read from
// its scheduler.New and plugins in k8s.io/kubernetes v1.37.2, and seen
// failing to list against kube-apiserver v1.33 (the four resource.k8s.io/v1
// resources). DynamicResourceAllocation is locked on in 1.37;
// DRADeviceTaintRules may still be turned off.
var SchedulerAPIs = []API{
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "resourceclaims", Since: "1.34"},
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "resourceslices", Since: "1.34"},
	{Feature: "DynamicResourceAllocation", GroupVersion: "resource.k8s.io/v1", Resource: "deviceclasses", Since: "1.34"},
	{Feature: "DRADeviceTaintRules", GroupVersion: "resource.k8s.io/v1", Resource: "devicetaintrules", Since: "1.37"},
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
// and whether it may be turned off (kube-scheduler's --feature-gates).
type Gates interface {
	Enabled(featuregate.Feature) bool
	GetAll() map[featuregate.Feature]featuregate.FeatureSpec
}

// Decision is what Check concluded about one API.
type Decision struct {
	API API
	// Off is true when the feature must be turned off: the API is not
	// served and the feature may be turned off.
	Off bool
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
// APIs of features that are off are not asked about.
func Check(ctx context.Context, disco Discovery, gates Gates, apis []API, program string, timeout time.Duration) ([]featuregate.Feature, error) {
	logger := klog.FromContext(ctx)
	var serverVersion string
	served := map[string]map[string]bool{} // group version -> resources
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		v, err := disco.ServerVersionWithContext(ctx)
		if err != nil {
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
	if err != nil {
		return nil, fmt.Errorf("asking the API server which APIs it serves: %w", err)
	}
	specs := gates.GetAll()
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
		if !gates.Enabled(api.Feature) {
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
	return features, nil
}

// Off is the feature gate settings that turn off features.
func Off(features []featuregate.Feature) map[string]bool {
	m := make(map[string]bool, len(features))
	for _, f := range features {
		m[string(f)] = false
	}
	return m
}

// dedupe keeps the first error of each feature (or of each group version,
// for APIs listed whatever the features), so that one cause is one message.
func dedupe(errs []error) []error {
	seen := map[string]bool{}
	var out []error
	for _, err := range errs {
		var u *UnservedError
		key := err.Error()
		if errors.As(err, &u) {
			key = cmp.Or(string(u.API.Feature), u.API.GroupVersion)
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, err)
		}
	}
	return out
}
