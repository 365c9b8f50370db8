package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/sandboxtest"
)

var (
	kube client.Client
	helm string
	// kubeconfig is the admin kubeconfig of the package's control plane,
	// which helm install and upgrade use.
	kubeconfig string
)

func TestMain(m *testing.M) {
	sandboxtest.TestMain(m, func(m *testing.M) (int, error) {
		ctx := context.Background()
		var err error
		if helm, err = sandbox.Helm(ctx, os.Stderr); err != nil {
			return 0, fmt.Errorf("building helm: %w", err)
		}
		sb, stop, err := sandboxtest.StartControlPlane(ctx, os.Stderr)
		if err != nil {
			return 0, err
		}
		defer stop()
		kubeconfig = sb.Kubeconfig
		if kube, err = sb.Client(); err != nil {
			return 0, err
		}
		return m.Run(), nil
	})
}

// repository is where the tests' images are said to be: a name no one
// can register (the .invalid top-level domain), since the chart assumes
// none.
const repository = "registry.invalid/nodeforge"

// required are the values an aws install must set: the images'
// repository, and the cluster (the provisioner discovers the rest with
// eks:DescribeCluster).
var required = []string{"image.repository=" + repository, "provisioner.clusterName=demo"}

// runHelm runs helm on this directory's chart.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Dir = wd
	// helm's caches and settings in the control plane's directory, not the
	// user's.
	home := filepath.Join(filepath.Dir(kubeconfig), "helm")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), nil
}

// render runs helm template in namespace nf-chart with the values set.
func render(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "nodeforge", ".", "--namespace", "nf-chart"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a key twice in a mapping (two templates setting one label)
	// is an error, as it is for kubectl.
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Errorf("rendered document is not strict YAML: %v\n%s", err, doc)
		}
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered chart is not YAML: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the chart renders no %s %s", kind, name)
	return nil
}

func str(o *unstructured.Unstructured, path ...string) string {
	v, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
	return fmt.Sprint(v)
}

// TestChartLints: helm lint, strict, with the values an install must set.
func TestChartLints(t *testing.T) {
	args := []string{"lint", ".", "--strict"}
	for _, s := range required {
		args = append(args, "--set", s)
	}
	if out, err := runHelm(t, args...); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint: %s", out)
	}
}

// TestChartDefaults renders the chart with only the required values and
// checks what an operator relies on: two replicas of each program, leader
// election in the release's namespace, the restricted security context,
// placement off Nodeforge's own nodes and across zones, probes, PDBs and
// metrics Services; the RBAC files the sandbox applies, moved to the
// release's namespace; no simulated-cloud permissions; and every object
// accepted by a real API server (server-side dry run).
func TestChartDefaults(t *testing.T) {
	objs := render(t, required...)
	for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		d := find(t, objs, "Deployment", name)
		spec, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
		if r := str(d, "spec", "replicas"); r != "2" {
			t.Errorf("%s: %s replicas, want 2", name, r)
		}
		if spec["priorityClassName"] != "system-cluster-critical" || spec["serviceAccountName"] != name {
			t.Errorf("%s: priorityClassName %v, serviceAccountName %v", name, spec["priorityClassName"], spec["serviceAccountName"])
		}
		c := spec["containers"].([]any)[0].(map[string]any)
		sc := c["securityContext"].(map[string]any)
		if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false || sc["runAsNonRoot"] != true ||
			fmt.Sprint(sc["capabilities"]) != "map[drop:[ALL]]" || fmt.Sprint(sc["seccompProfile"]) != "map[type:RuntimeDefault]" {
			t.Errorf("%s: container securityContext %v is not restricted", name, sc)
		}
		if want := repository + strings.TrimPrefix(name, "nodeforge") + ":0.1.0"; c["image"] != want {
			t.Errorf("%s: image %v, want %s (the repository set, the chart's appVersion)", name, c["image"], want)
		}
		if c["livenessProbe"] == nil || c["readinessProbe"] == nil || c["resources"] == nil {
			t.Errorf("%s: probes or resources missing", name)
		}
		aff := fmt.Sprint(spec["affinity"])
		if !strings.Contains(aff, "key:nodeforge.dev/nodepool operator:DoesNotExist") {
			t.Errorf("%s: affinity %s does not keep it off Nodeforge's nodes", name, aff)
		}
		if !strings.Contains(fmt.Sprint(spec["topologySpreadConstraints"]), "topology.kubernetes.io/zone") {
			t.Errorf("%s: not spread across zones", name)
		}
		find(t, objs, "PodDisruptionBudget", name)
		find(t, objs, "Service", name+"-metrics")
		if sa := find(t, objs, "ServiceAccount", name); sa.GetNamespace() != "nf-chart" {
			t.Errorf("ServiceAccount %s in namespace %q", name, sa.GetNamespace())
		}
	}
	prov := find(t, objs, "Deployment", "nodeforge-provisioner")
	args := str(prov, "spec", "template", "spec", "containers")
	for _, want := range []string{"--cloud-provider=aws", "--cluster-name=demo", "--leader-election-namespace=nf-chart", "--scheduler-config=/etc/nodeforge/scheduler/config.yaml"} {
		if !strings.Contains(args, want) {
			t.Errorf("provisioner args lack %s: %s", want, args)
		}
	}
	// Discovered from EKS unless set.
	for _, unwanted := range []string{"--cluster-endpoint", "--cluster-service-cidr"} {
		if strings.Contains(args, unwanted) {
			t.Errorf("provisioner args hold %s though it was not set: %s", unwanted, args)
		}
	}
	cm := find(t, objs, "ConfigMap", "nodeforge-scheduler-config")
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(str(cm, "data", "config.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	if le := cfg["leaderElection"].(map[string]any); le["resourceNamespace"] != "nf-chart" || le["leaderElect"] != true {
		t.Errorf("scheduler leader election %v, want on, in nf-chart", le)
	}
	for _, o := range objs {
		for _, s := range subjects(o) {
			if s["namespace"] == "nodeforge" {
				t.Errorf("%s %s binds a subject in namespace nodeforge, not the release's", o.GetKind(), o.GetName())
			}
		}
		if o.GetName() == "nodeforge-provisioner:simulated-cloud" {
			t.Errorf("%s %s rendered with the aws provider", o.GetKind(), o.GetName())
		}
		if o.GetKind() == "ServiceMonitor" {
			t.Error("a ServiceMonitor rendered though metrics.serviceMonitor.enabled is false")
		}
	}
	for _, crd := range []string{"nodepools.nodeforge.dev", "nodeclaims.nodeforge.dev", "ec2nodeclasses.nodeforge.dev"} {
		find(t, objs, "CustomResourceDefinition", crd)
	}
	dryRun(t, objs)
}

// TestChartValues renders non-default values and checks each is acted on.
func TestChartValues(t *testing.T) {
	objs := render(t,
		"image.repository="+repository,
		"provisioner.cloudProvider=simulated",
		"scheduler.replicas=3",
		"scheduler.virtualNodesArgs.maxClaimsTried=8",
		"scheduler.extraProfiles[0].schedulerName=second",
		"provisioner.extraArgs[0]=--batch-max-duration=5s",
		`provisioner.serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::111122223333:role/nodeforge`,
		"metrics.serviceMonitor.enabled=true",
		"metrics.tls.secretName=nodeforge-scheduler-tls",
		"topologySpread=false",
		"commonAnnotations.example\\.com/owner=platform",
	)
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" && o.GetAnnotations()["example.com/owner"] != "platform" {
			t.Errorf("%s %s lacks commonAnnotations: %v", o.GetKind(), o.GetName(), o.GetAnnotations())
		}
	}
	if r := str(find(t, objs, "Deployment", "nodeforge-scheduler"), "spec", "replicas"); r != "3" {
		t.Errorf("scheduler replicas %s, want 3", r)
	}
	prov := find(t, objs, "Deployment", "nodeforge-provisioner")
	args := str(prov, "spec", "template", "spec", "containers")
	for _, want := range []string{"--cloud-provider=simulated", "--simulated-namespace=nf-chart", "--batch-max-duration=5s"} {
		if !strings.Contains(args, want) {
			t.Errorf("provisioner args lack %s: %s", want, args)
		}
	}
	if strings.Contains(args, "--cluster-name") {
		t.Errorf("simulated provisioner given aws flags: %s", args)
	}
	if ts := str(prov, "spec", "template", "spec", "topologySpreadConstraints"); ts != "<nil>" {
		t.Errorf("topologySpread=false left %s", ts)
	}
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
			PluginConfig  []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(str(find(t, objs, "ConfigMap", "nodeforge-scheduler-config"), "data", "config.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 2 || cfg.Profiles[1].SchedulerName != "second" {
		t.Errorf("profiles %+v, want nodeforge-scheduler and second", cfg.Profiles)
	} else if args := cfg.Profiles[0].PluginConfig[0].Args; fmt.Sprint(args["maxClaimsTried"]) != "8" || fmt.Sprint(args["maxInstanceTypes"]) != "60" {
		t.Errorf("VirtualNodes args %v, want maxClaimsTried 8 over the shipped ones", args)
	}
	sa := find(t, objs, "ServiceAccount", "nodeforge-provisioner")
	if sa.GetAnnotations()["eks.amazonaws.com/role-arn"] != "arn:aws:iam::111122223333:role/nodeforge" {
		t.Errorf("provisioner ServiceAccount annotations %v", sa.GetAnnotations())
	}
	if _, ok := find(t, objs, "ServiceAccount", "nodeforge-scheduler").GetAnnotations()["eks.amazonaws.com/role-arn"]; ok {
		t.Error("the provisioner's annotations went on the scheduler's ServiceAccount too")
	}
	role := find(t, objs, "Role", "nodeforge-provisioner:simulated-cloud")
	if ns := role.GetNamespace(); ns != "nf-chart" && ns != "kube-node-lease" {
		t.Errorf("simulated-cloud Role in %s", ns)
	}
	find(t, objs, "ServiceMonitor", "nodeforge-scheduler")
	find(t, objs, "ServiceMonitor", "nodeforge-provisioner")
	dryRun(t, slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ServiceMonitor" }))
}

// TestChartGivesBothProgramsTheFeatureGates: featureGates reaches both
// programs as one --feature-gates, sorted, so that the provisioner's
// simulation runs the scheduler's plugins with the scheduler's gates; a
// --feature-gates in one program's extraArgs, or a gate that is not
// true or false, is refused.
func TestChartGivesBothProgramsTheFeatureGates(t *testing.T) {
	objs := render(t, append(required, "featureGates.GenericWorkload=true", "featureGates.DRAPartitionableDevices=false")...)
	const want = "--feature-gates=DRAPartitionableDevices=false,GenericWorkload=true"
	for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		if args := str(find(t, objs, "Deployment", name), "spec", "template", "spec", "containers"); strings.Count(args, "--feature-gates") != 1 || !strings.Contains(args, want) {
			t.Errorf("%s args: %s, want one %s", name, args, want)
		}
	}
	if args := str(find(t, render(t, required...), "Deployment", "nodeforge-provisioner"), "spec", "template", "spec", "containers"); strings.Contains(args, "--feature-gates") {
		t.Errorf("no featureGates, yet the provisioner got %s", args)
	}
	for _, tc := range []struct{ set, want string }{
		{"scheduler.extraArgs[0]=--feature-gates=GenericWorkload=true", "set featureGates instead, which both programs get"},
		{"featureGates.GenericWorkload=yes", "featureGates.GenericWorkload yes: want true or false"},
	} {
		set := strings.Join(append(slices.Clone(required), tc.set), ",")
		if _, err := runHelm(t, "template", "nodeforge", ".", "--set", set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want an error saying %q", tc.set, err, tc.want)
		}
	}
}

// TestChartClusterOverrides: clusterEndpoint and serviceCIDR, when set,
// become the flags that win over what EKS says.
func TestChartClusterOverrides(t *testing.T) {
	objs := render(t, append(required, "provisioner.clusterEndpoint=https://demo.example", "provisioner.serviceCIDR=172.20.0.0/16")...)
	args := str(find(t, objs, "Deployment", "nodeforge-provisioner"), "spec", "template", "spec", "containers")
	for _, want := range []string{"--cluster-endpoint=https://demo.example", "--cluster-service-cidr=172.20.0.0/16"} {
		if !strings.Contains(args, want) {
			t.Errorf("provisioner args lack %s: %s", want, args)
		}
	}
}

// TestChartImagesPinnedByDigest: with image.digests set, each program's
// image is its repository at its own digest, the tag left out.
func TestChartImagesPinnedByDigest(t *testing.T) {
	scheduler, provisioner := "sha256:"+strings.Repeat("a1", 32), "sha256:"+strings.Repeat("b2", 32)
	objs := render(t, append(required, "image.tag=v9", "image.digests.scheduler="+scheduler, "image.digests.provisioner="+provisioner)...)
	for name, want := range map[string]string{
		"nodeforge-scheduler":   repository + "-scheduler@" + scheduler,
		"nodeforge-provisioner": repository + "-provisioner@" + provisioner,
	} {
		containers, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", name).Object, "spec", "template", "spec", "containers")
		if got := containers[0].(map[string]any)["image"]; got != want {
			t.Errorf("%s: image %v, want %s", name, got, want)
		}
	}
}

// TestChartRefusesBadValues: no image repository, a digest that is not
// one or only one of the two, a provider the provisioner does not have,
// or aws without its cluster, is refused by helm with a message saying so.
func TestChartRefusesBadValues(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0f", 32)
	image := []string{"image.repository=r/nf", "provisioner.clusterName=demo"}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"provisioner.clusterName=demo"}, "image.repository is required: the project publishes no images. Build them with make images, push"},
		{append(image, "image.digests.scheduler="+digest, "image.digests.provisioner=sha256:ABC"), `image.digests.provisioner "sha256:ABC" is not a digest`},
		{append(image, "image.digests.scheduler="+strings.TrimPrefix(digest, "sha256:"), "image.digests.provisioner="+digest), "is not a digest: want sha256: and 64 lower-case hex digits"},
		{append(image, "image.digests.scheduler="+digest), "image.digests: set both scheduler and provisioner, or neither"},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=gce"}, `provisioner.cloudProvider "gce": choose aws or simulated`},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=aws"}, "provisioner.clusterName is required"},
		{[]string{"image.repository=r/nf", "provisioner.clusterEndpoint=https://demo.example"}, "provisioner.clusterName is required"},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=simulated", "scheduler.affinity.nodeAffinity.x=y"}, "scheduler.affinity.nodeAffinity is not supported: use scheduler.nodeSelector"},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=simulated", "spreadReplicas=sometimes"}, `spreadReplicas "sometimes": choose required`},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=simulated", "scheduler.resources.limits.memory=lots"}, `memory limit "lots": the chart reads a number of bytes`},
		{[]string{"image.repository=r/nf", "provisioner.cloudProvider=simulated", "metrics.serviceMonitor.enabled=true"}, "metrics.serviceMonitor.enabled needs metrics.tls.secretName"},
	} {
		set := strings.Join(tc.set, ",")
		_, err := runHelm(t, "template", "nodeforge", ".", "--set", set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want an error saying %q", set, err, tc.want)
		}
	}
}

// TestChartKubeVersion: the chart installs on the oldest minor its
// kubeVersion names and on the minor nodeforge-scheduler is built from,
// and refuses the minor before the oldest, whose API server lacks
// resource.k8s.io/v1 (internal/skew). The sandbox installs the chart for
// the server's own version, so the e2e tests run it on both minors
// (test/e2e, TestKubernetesMinors).
func TestChartKubeVersion(t *testing.T) {
	args := []string{"template", "nodeforge", "."}
	for _, s := range required {
		args = append(args, "--set", s)
	}
	for version, want := range map[string]string{"v1.34.0": "", "v1.37.2": "", "v1.33.9": "chart requires kubeVersion: >=1.34.0-0 which is incompatible with Kubernetes v1.33.9"} {
		_, err := runHelm(t, append(args, "--kube-version", version)...)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("helm template --kube-version %s: %v, want %q", version, err, want)
		}
	}
}

func subjects(o *unstructured.Unstructured) []map[string]any {
	list, _, _ := unstructured.NestedSlice(o.Object, "subjects")
	var out []map[string]any
	for _, s := range list {
		if m, ok := s.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// dryRun applies every object server-side, dry run, into namespace
// nf-chart (created for real).
func dryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nf-chart"}}
	if err := kube.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := kube.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll, client.ForceOwnership, client.FieldOwner("helm")); err != nil {
			t.Errorf("the API server refused %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// schedulerConfig is the rendered scheduler ConfigMap's configuration.
func schedulerConfig(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(str(find(t, objs, "ConfigMap", "nodeforge-scheduler-config"), "data", "config.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestProvisionerRestartsWithSchedulerConfig: the provisioner reads the
// scheduler's configuration once, at start, so its pod template carries
// the configuration's checksum, as the scheduler's does: helm upgrade with
// new plugin arguments rolls both Deployments, and one with the same
// values rolls neither.
func TestProvisionerRestartsWithSchedulerConfig(t *testing.T) {
	checksums := func(set ...string) (scheduler, provisioner string) {
		objs := render(t, append(required, set...)...)
		annotation := func(name, key string) string {
			d := find(t, objs, "Deployment", name)
			v, _, _ := unstructured.NestedString(d.Object, "spec", "template", "metadata", "annotations", key)
			if v == "" {
				t.Fatalf("Deployment %s: pod template has no annotation %s", name, key)
			}
			return v
		}
		return annotation("nodeforge-scheduler", "checksum/config"), annotation("nodeforge-provisioner", "checksum/scheduler-config")
	}
	s0, p0 := checksums()
	if s0 != p0 {
		t.Errorf("the provisioner's checksum %s is not the scheduler's %s: they judge by one configuration", p0, s0)
	}
	if s, p := checksums(); s != s0 || p != p0 {
		t.Errorf("the same values gave checksums %s and %s, then %s and %s: every upgrade would restart both", s0, p0, s, p)
	}
	for _, set := range []string{"scheduler.virtualNodesArgs.maxClaimsTried=8", "scheduler.extraPluginConfig[0].name=NodeResourcesFit", "scheduler.profiling=true"} {
		if _, p := checksums(set); p == p0 {
			t.Errorf("--set %s changes the scheduler's configuration but not the provisioner's checksum", set)
		}
	}
	if _, p := checksums("provisioner.verbosity=4"); p != p0 {
		t.Error("a value outside the scheduler's configuration changed its checksum")
	}
}

// TestSchedulerProfilingOffUnlessAsked: kube-scheduler serves
// /debug/pprof by default; the chart turns it off unless
// scheduler.profiling is set.
func TestSchedulerProfilingOffUnlessAsked(t *testing.T) {
	if got := schedulerConfig(t, render(t, required...))["enableProfiling"]; got != false {
		t.Errorf("enableProfiling %v by default, want false", got)
	}
	if got := schedulerConfig(t, render(t, append(required, "scheduler.profiling=true")...))["enableProfiling"]; got != true {
		t.Errorf("enableProfiling %v with scheduler.profiling=true, want true", got)
	}
}

// TestChartSpreadsReplicas: by default no two replicas of a program share
// a node (required anti-affinity on the hostname) and zones stay within
// one replica (DoNotSchedule), counting only nodes the pods tolerate, and
// a rollout replaces one pod at a time, so that the new pod can take its
// predecessor's node; spreadReplicas=preferred asks the same where it can,
// for one-node clusters.
func TestChartSpreadsReplicas(t *testing.T) {
	for _, c := range []struct {
		spread, antiAffinity, whenUnsatisfiable string
	}{
		{"", "requiredDuringSchedulingIgnoredDuringExecution", "DoNotSchedule"},
		{"preferred", "preferredDuringSchedulingIgnoredDuringExecution", "ScheduleAnyway"},
	} {
		set := required
		if c.spread != "" {
			set = append(set, "spreadReplicas="+c.spread)
		}
		objs := render(t, set...)
		for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
			d := find(t, objs, "Deployment", name)
			anti, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity")
			terms, _ := anti[c.antiAffinity].([]any)
			if len(anti) != 1 || len(terms) != 1 {
				t.Fatalf("spreadReplicas %q: %s podAntiAffinity %v, want one %s term", c.spread, name, anti, c.antiAffinity)
			}
			term := terms[0].(map[string]any)
			if pa, ok := term["podAffinityTerm"].(map[string]any); ok {
				term = pa
			}
			if want := "map[app.kubernetes.io/instance:nodeforge app.kubernetes.io/name:" + name + "]"; term["topologyKey"] != "kubernetes.io/hostname" || fmt.Sprint(term["labelSelector"].(map[string]any)["matchLabels"]) != want {
				t.Errorf("spreadReplicas %q: %s anti-affinity term %v, want its own pods on kubernetes.io/hostname", c.spread, name, term)
			}
			tsc, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "topologySpreadConstraints")
			if len(tsc) != 1 {
				t.Fatalf("%s: topologySpreadConstraints %v, want one", name, tsc)
			}
			if z := tsc[0].(map[string]any); z["topologyKey"] != "topology.kubernetes.io/zone" || z["whenUnsatisfiable"] != c.whenUnsatisfiable || z["nodeTaintsPolicy"] != "Honor" || fmt.Sprint(z["maxSkew"]) != "1" {
				t.Errorf("spreadReplicas %q: %s zone spread %v, want maxSkew 1, %s, nodeTaintsPolicy Honor", c.spread, name, z, c.whenUnsatisfiable)
			}
			if ru := str(d, "spec", "strategy", "rollingUpdate"); ru != "map[maxSurge:0 maxUnavailable:1]" {
				t.Errorf("%s: rollingUpdate %s, want maxSurge 0, maxUnavailable 1", name, ru)
			}
		}
	}
}

// containerEnv is the environment of a Deployment's container, by name;
// a name set twice fails the test.
func containerEnv(t *testing.T, objs []*unstructured.Unstructured, deployment string) map[string]string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", deployment).Object, "spec", "template", "spec", "containers")
	env := map[string]string{}
	list, _ := containers[0].(map[string]any)["env"].([]any)
	for _, e := range list {
		e := e.(map[string]any)
		name := e["name"].(string)
		if _, ok := env[name]; ok {
			t.Errorf("%s: env %s set twice", deployment, name)
		}
		env[name] = fmt.Sprint(e["value"])
	}
	return env
}

// TestChartSetsGOMEMLIMIT: each container's GOMEMLIMIT is 90% of its
// memory limit, in MiB (the Go GC guide's headroom for memory the runtime
// does not count); a GOMEMLIMIT of the values' env wins, and a container
// without a memory limit gets none.
func TestChartSetsGOMEMLIMIT(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want map[string]string // deployment → GOMEMLIMIT ("" for none)
	}{
		{nil, map[string]string{"nodeforge-scheduler": "921MiB", "nodeforge-provisioner": "921MiB"}},
		{[]string{"scheduler.resources.limits.memory=2Gi", "provisioner.resources.limits.memory=1500M"},
			map[string]string{"nodeforge-scheduler": "1843MiB", "nodeforge-provisioner": "1287MiB"}},
		{[]string{"scheduler.env[0].name=GOMEMLIMIT", "scheduler.env[0].value=600MiB", "provisioner.resources.limits.memory=null"},
			map[string]string{"nodeforge-scheduler": "600MiB", "nodeforge-provisioner": ""}},
	} {
		objs := render(t, append(slices.Clone(required), c.set...)...)
		for deployment, want := range c.want {
			if got := containerEnv(t, objs, deployment)["GOMEMLIMIT"]; got != want {
				t.Errorf("--set %v: %s GOMEMLIMIT %q, want %q", c.set, deployment, got, want)
			}
		}
	}
}

// TestServiceMonitorVerifiesTLS: with a serving certificate of the
// user's, the scheduler serves it (flags and the Secret mounted) and its
// ServiceMonitor verifies it, by the Secret's CA and the Service's name,
// never skipping verification; without one the scheduler mounts no
// Secret (it makes its own certificate).
func TestServiceMonitorVerifiesTLS(t *testing.T) {
	objs := render(t, append(slices.Clone(required), "metrics.serviceMonitor.enabled=true", "metrics.tls.secretName=nodeforge-scheduler-tls")...)
	sm := find(t, objs, "ServiceMonitor", "nodeforge-scheduler")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("scheduler ServiceMonitor endpoints %v, want one", endpoints)
	}
	tls := endpoints[0].(map[string]any)["tlsConfig"]
	want := map[string]any{
		"serverName": "nodeforge-scheduler-metrics.nf-chart.svc",
		"ca":         map[string]any{"secret": map[string]any{"name": "nodeforge-scheduler-tls", "key": "ca.crt"}},
	}
	if diff := cmp.Diff(want, tls); diff != "" {
		t.Errorf("scheduler ServiceMonitor tlsConfig (-want,+got):\n%s", diff)
	}
	d := find(t, objs, "Deployment", "nodeforge-scheduler")
	spec := str(d, "spec", "template", "spec")
	for _, w := range []string{"--tls-cert-file=/etc/nodeforge/tls/tls.crt", "--tls-private-key-file=/etc/nodeforge/tls/tls.key", "mountPath:/etc/nodeforge/tls", "secretName:nodeforge-scheduler-tls"} {
		if !strings.Contains(spec, w) {
			t.Errorf("scheduler pod lacks %s: %s", w, spec)
		}
	}
	dryRun(t, []*unstructured.Unstructured{d})

	d = find(t, render(t, required...), "Deployment", "nodeforge-scheduler")
	if spec := str(d, "spec", "template", "spec"); strings.Contains(spec, "--tls-cert-file") || strings.Contains(spec, "secretName") {
		t.Errorf("without metrics.tls.secretName the scheduler pod still mounts a certificate: %s", spec)
	}
}

// TestChartServesProvisioningRequestsWhenAsked: off by default (no CRD, no
// permission, no argument); provisioningRequests.enabled turns
// VirtualNodes' provisioningRequests argument on and grants both programs
// what they read and write of ProvisioningRequests, and installCRD adds
// the CRD, kept on uninstall.
func TestChartServesProvisioningRequestsWhenAsked(t *testing.T) {
	const crd = "provisioningrequests.autoscaling.x-k8s.io"
	off := render(t, required...)
	if virtualNodesArgs(t, off)["provisioningRequests"] != nil || hasObject(off, "ClusterRole", "nodeforge-scheduler:provisioning-requests") || hasObject(off, "CustomResourceDefinition", crd) {
		t.Error("ProvisioningRequests are served, permitted or installed by default")
	}
	on := render(t, append(required, "provisioningRequests.enabled=true", "provisioningRequests.installCRD=true")...)
	if virtualNodesArgs(t, on)["provisioningRequests"] != true {
		t.Errorf("VirtualNodes args %v, want provisioningRequests: true", virtualNodesArgs(t, on))
	}
	for _, role := range []string{"nodeforge-scheduler:provisioning-requests", "nodeforge-provisioner:provisioning-requests"} {
		find(t, on, "ClusterRole", role)
		find(t, on, "ClusterRoleBinding", role)
	}
	if c := find(t, on, "CustomResourceDefinition", crd); c.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the ProvisioningRequest CRD is not kept on uninstall: %v", c.GetAnnotations())
	}
	if only := render(t, append(required, "provisioningRequests.enabled=true")...); hasObject(only, "CustomResourceDefinition", crd) {
		t.Error("the ProvisioningRequest CRD is installed without installCRD")
	}
	dryRun(t, on)
}

// TestChartKeepsCapacityBuffersWhenAsked: off by default (no CRD, no
// permission, no argument, no flag); capacityBuffers.enabled turns
// VirtualNodes' capacityBuffers argument and the provisioner's
// --capacity-buffers on and grants both programs what they read and
// write of CapacityBuffers, PodTemplates and workloads, and installCRD
// adds the CRD, kept on uninstall.
func TestChartKeepsCapacityBuffersWhenAsked(t *testing.T) {
	flagged := func(objs []*unstructured.Unstructured) bool {
		return strings.Contains(str(find(t, objs, "Deployment", "nodeforge-provisioner"), "spec", "template", "spec"), "--capacity-buffers")
	}
	const crd = "capacitybuffers.autoscaling.x-k8s.io"
	off := render(t, required...)
	if virtualNodesArgs(t, off)["capacityBuffers"] != nil || flagged(off) || hasObject(off, "ClusterRole", "nodeforge-scheduler:capacity-buffers") || hasObject(off, "CustomResourceDefinition", crd) {
		t.Error("CapacityBuffers are kept, permitted or installed by default")
	}
	on := render(t, append(required, "capacityBuffers.enabled=true", "capacityBuffers.installCRD=true")...)
	if virtualNodesArgs(t, on)["capacityBuffers"] != true {
		t.Errorf("VirtualNodes args %v, want capacityBuffers: true", virtualNodesArgs(t, on))
	}
	if !flagged(on) {
		t.Error("the provisioner is not given --capacity-buffers")
	}
	for _, role := range []string{"nodeforge-scheduler:capacity-buffers", "nodeforge-provisioner:capacity-buffers"} {
		find(t, on, "ClusterRole", role)
		find(t, on, "ClusterRoleBinding", role)
	}
	rules := str(find(t, on, "ClusterRole", "nodeforge-provisioner:capacity-buffers"), "rules")
	for _, w := range []string{"capacitybuffers/status", "podtemplates", "create", "deployments", "statefulsets", "replicasets"} {
		if !strings.Contains(rules, w) {
			t.Errorf("the provisioner's capacity-buffers role lacks %s: %s", w, rules)
		}
	}
	if c := find(t, on, "CustomResourceDefinition", crd); c.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CapacityBuffer CRD is not kept on uninstall: %v", c.GetAnnotations())
	}
	if only := render(t, append(required, "capacityBuffers.enabled=true")...); hasObject(only, "CustomResourceDefinition", crd) {
		t.Error("the CapacityBuffer CRD is installed without installCRD")
	}
	dryRun(t, on)
}

// virtualNodesArgs are the VirtualNodes arguments of the shipped profile
// in the rendered scheduler configuration.
func virtualNodesArgs(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	cfg := schedulerConfig(t, objs)
	for _, pc := range cfg["profiles"].([]any)[0].(map[string]any)["pluginConfig"].([]any) {
		if m := pc.(map[string]any); m["name"] == "VirtualNodes" {
			return m["args"].(map[string]any)
		}
	}
	t.Fatal("no VirtualNodes pluginConfig")
	return nil
}

// hasObject says whether objs hold an object of kind named name.
func hasObject(objs []*unstructured.Unstructured, kind, name string) bool {
	return slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
}
