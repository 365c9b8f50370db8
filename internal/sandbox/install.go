package sandbox

// The sandbox runs Nodeforge as a cluster installs it: it renders the chart
// in manifests/ with helm and applies it; kube-controller-manager makes the
// Deployments' pods, the stock scheduler places them on the control-plane
// node (by the chart's tolerations and affinity) and kwok runs them. For
// each such pod the sandbox then plays the kubelet's part on this machine:
// it starts the real program with the pod's container arguments and
// environment, its ConfigMap volumes written to a directory of the pod's,
// its ports mapped to free loopback ports, and the pod's ServiceAccount
// identity (a token bound to the pod, from the TokenRequest API, where the
// pod would read its projected token). The output goes to a CRI log file
// that kwok serves, so `kubectl logs` of the pod shows the program's log.

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeforge/nodeforge/manifests"
)

// Release is the Helm release name the sandbox installs the chart as.
const Release = "nodeforge"

// tokenLifetime of the ServiceAccount tokens the pods' processes use: a
// sandbox lives for a session, and the token dies with its pod anyway.
const tokenLifetime = 48 * time.Hour

var kwokLogs = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}

// renderChart writes the embedded chart to <dir>/chart, the values to
// <dir>/chart-values.yaml, and returns `helm template` of the two for the
// sandbox's API server version (also kept in <dir>/chart-rendered.yaml),
// the CRDs among the templates.
func (s *Sandbox) renderChart(ctx context.Context, helm string, values map[string]any) ([]byte, error) {
	chart := filepath.Join(s.Dir, "chart")
	if err := os.RemoveAll(chart); err != nil {
		return nil, err
	}
	err := fs.WalkDir(manifests.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(chart, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := manifests.FS.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		return nil, fmt.Errorf("writing the chart: %w", err)
	}
	raw, err := yaml.Marshal(values)
	if err != nil {
		return nil, err
	}
	valuesPath := filepath.Join(s.Dir, "chart-values.yaml")
	if err := os.WriteFile(valuesPath, raw, 0o644); err != nil {
		return nil, err
	}
	// The chart's kubeVersion is checked against the server it goes to,
	// as helm install does, not against helm's own default.
	disco, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		return nil, err
	}
	server, err := disco.ServerVersionWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version for the chart's kubeVersion: %w", err)
	}
	// Relative paths: helm splits --values at commas, which test
	// directories' names can hold.
	cmd := exec.CommandContext(ctx, helm, "template", Release, "./chart", "--namespace", namespace, "--values", "chart-values.yaml", "--kube-version", server.GitVersion)
	cmd.Dir = s.Dir
	// helm keeps caches and settings under these; the sandbox's own.
	home := filepath.Join(s.Dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template of manifests/ with %s: %w\n%s", valuesPath, err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "chart-rendered.yaml"), stdout.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return stdout.Bytes(), nil
}

// chartValues are the values the sandbox installs the chart with: what a
// user sets to run Nodeforge on a cluster whose only node is a tainted
// control-plane node, and the options' replicas, flags, environment and
// feature gates.
func (s *Sandbox) chartValues(o Options) map[string]any {
	controlPlane := []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}}
	scheduler := map[string]any{
		"replicas":    max(o.SchedulerReplicas, 1),
		"tolerations": controlPlane,
		"env":         envVars(o.SchedulerEnv),
		// /debug/pprof on loopback, for the benchmarks' CPU profiles
		// (NODEFORGE_BENCH_PROFILE); a cluster's chart has it off.
		"profiling": true,
	}
	provisioner := map[string]any{
		"replicas":      max(o.ProvisionerReplicas, 1),
		"tolerations":   controlPlane,
		"cloudProvider": "simulated",
		"extraArgs":     append(o.Timers.provisionerArgs(), o.ProvisionerArgs...),
		"env":           envVars(o.ProvisionerEnv),
	}
	if s.region != nil {
		provisioner["cloudProvider"] = "aws"
		// No clusterEndpoint, serviceCIDR or CA: the provisioner
		// discovers them in the fake EKS.
		provisioner["clusterName"] = ClusterName
		provisioner["region"] = "us-west-2"
		provisioner["interruptionQueue"] = InterruptionQueue
		provisioner["extraArgs"] = append([]string{
			"--aws-ec2-endpoint=" + s.region.URL,
			"--aws-sqs-endpoint=" + s.region.SQSURL,
			"--aws-iam-endpoint=" + s.region.IAMURL,
			"--aws-eks-endpoint=" + s.region.EKS.URL(),
			"--aws-ssm-endpoint=" + s.region.SSM.URL(),
			// The sandbox reaches no AWS host: keep the shipped prices.
			"--aws-pricing-refresh-interval=0",
		}, provisioner["extraArgs"].([]string)...)
		// Static credentials for the SDK's default chain, as IRSA or Pod
		// Identity would provide; the fake checks that requests are signed,
		// not by whom.
		provisioner["env"] = append(envVars([]string{"AWS_ACCESS_KEY_ID=AKIASANDBOX", "AWS_SECRET_ACCESS_KEY=sandbox", "AWS_EC2_METADATA_DISABLED=true"}), envVars(o.ProvisionerEnv)...)
	}
	// The chart assumes no image repository. kwok runs the pods and the
	// sandbox starts bin/'s programs for them, so nothing is pulled:
	// localhost names images built on this machine. One node, without a
	// zone label: replicas apart where they can be.
	image := map[string]any{"repository": "localhost/nodeforge"}
	values := map[string]any{"image": image, "scheduler": scheduler, "provisioner": provisioner, "spreadReplicas": "preferred"}
	if o.ProvisioningRequests {
		values["provisioningRequests"] = map[string]any{"enabled": true, "installCRD": true}
	}
	if o.CapacityBuffers {
		values["capacityBuffers"] = map[string]any{"enabled": true, "installCRD": true}
	}
	if len(o.FeatureGates) > 0 {
		// Both programs get them as --feature-gates, as a cluster's would.
		values["featureGates"] = o.FeatureGates
	}
	return values
}

func envVars(env []string) []any {
	out := []any{}
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		out = append(out, map[string]any{"name": name, "value": value})
	}
	return out
}

// startStockScheduler starts the cluster's default scheduler, which places
// the chart's pods: the nodeforge-scheduler binary is kube-scheduler with
// one more plugin registered, and with the stock profile below (no
// VirtualNodes) it schedules exactly as kube-scheduler does.
func (s *Sandbox) startStockScheduler(ctx context.Context, bin string) error {
	const config = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: default-scheduler
`
	port, err := s.freePorts(1)
	if err != nil {
		return err
	}
	_, err = s.startScheduler(ctx, "kube-scheduler", bin, []byte(config), port[0], nil, "kube-scheduler", true)
	return err
}

// runDeployment waits until the pods of a Deployment of the chart run (on
// kwok's control-plane node) and starts a process for each, oldest pod
// first: the first is the component, the others component-2, -3... The
// first pod's container ports map to the host ports given in first.
func (s *Sandbox) runDeployment(ctx context.Context, cs kubernetes.Interface, deployment, bin string, first map[int32]int) error {
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the chart's Deployment %s: %w", deployment, err)
	}
	want := int(ptr.Deref(d.Spec.Replicas, 1))
	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := time.Now().Add(startupTimeout)
	var pods []corev1.Pod
	for {
		list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil {
			return err
		}
		pods = pods[:0]
		var waiting []string
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				pods = append(pods, p)
				continue
			}
			why := string(p.Status.Phase)
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
					why = "not scheduled: " + c.Message
				}
			}
			waiting = append(waiting, p.Name+" ("+why+")")
		}
		if len(pods) >= want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods of Deployment %s/%s running after %s; waiting: %s", len(pods), want, namespace, deployment, startupTimeout, strings.Join(waiting, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	fmt.Fprintf(s.progress, "%-24s %d pods running in %4.1fs on %s\n", "deploy/"+deployment, len(pods), time.Since(start).Seconds(), pods[0].Spec.NodeName)
	for i := range pods[:want] {
		name, ports := deployment, first
		if i > 0 {
			name, ports = fmt.Sprintf("%s-%d", deployment, i+1), nil
		}
		if err := s.runPod(ctx, cs, &pods[i], name, bin, ports); err != nil {
			return fmt.Errorf("running pod %s/%s: %w", namespace, pods[i].Name, err)
		}
	}
	return nil
}

// listenFlag is a bind address on every interface (":8080", "0.0.0.0:8080").
var listenFlag = regexp.MustCompile(`^(--[a-z-]+=)(0\.0\.0\.0)?:([0-9]+)$`)

// runPod starts the process of a pod's only container as component: the
// steps the kubelet takes for a pod, on this machine.
func (s *Sandbox) runPod(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, component, bin string, fixed map[int32]int) error {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
		return fmt.Errorf("the sandbox runs pods of one container and no init container; this one has %d and %d", len(pod.Spec.Containers), len(pod.Spec.InitContainers))
	}
	c := pod.Spec.Containers[0]
	root := filepath.Join(s.Dir, "pods", pod.Name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	token, kubeconfig, err := s.podIdentity(ctx, cs, pod, root)
	if err != nil {
		return err
	}
	mounts, err := podVolumes(ctx, cs, pod, c, root, token)
	if err != nil {
		return err
	}
	ports, err := s.podPorts(c, fixed)
	if err != nil {
		return err
	}
	args, err := programArgs(c, podArgs(c, mounts, ports, s.Dir), ports, kubeconfig, root)
	if err != nil {
		return err
	}
	env, err := containerEnv(pod, c)
	if err != nil {
		return err
	}
	criLog := filepath.Join(s.Dir, "logs", "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), c.Name, "0.log")
	p, err := startSpec(filepath.Join(s.Dir, "logs"), spec{name: component, bin: bin, args: args, env: append(processEnv(root, mounts), env...), ownEnv: true, criLog: criLog, restart: true})
	if err != nil {
		return err
	}
	s.add(p)
	if s.pods == nil {
		s.pods = map[string]string{}
	}
	s.pods[component] = pod.Name
	if err := s.serveLog(ctx, pod, c.Name, criLog); err != nil {
		return err
	}
	check, err := readiness(c, ports)
	if err != nil {
		return err
	}
	return s.ready(ctx, p, check)
}

// podIdentity writes <root>/kubeconfig with the pod's identity: a token of
// its ServiceAccount bound to the pod, as its projected token volume would
// hold. It returns the token too.
func (s *Sandbox) podIdentity(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, root string) (token, kubeconfig string, _ error) {
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds())),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("a token of ServiceAccount %s: %w", pod.Spec.ServiceAccountName, err)
	}
	kubeconfig = filepath.Join(root, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sandbox"] = &clientcmdapi.Cluster{Server: s.Server, CertificateAuthority: filepath.Join(s.Dir, "pki", "ca.crt")}
	cfg.AuthInfos[pod.Spec.ServiceAccountName] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sandbox"] = &clientcmdapi.Context{Cluster: "sandbox", AuthInfo: pod.Spec.ServiceAccountName, Namespace: pod.Namespace}
	cfg.CurrentContext = "sandbox"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return "", "", err
	}
	return tr.Status.Token, kubeconfig, nil
}

// podVolumes writes the container's volumes under <root>/volumes:
// ConfigMaps written out, emptyDirs made. It returns the directory of
// each mount path; an argument naming a mount path names the directory
// instead (podArgs).
func podVolumes(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c corev1.Container, root, token string) (map[string]string, error) {
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, fmt.Errorf("volume mount %s names no volume", m.Name)
		}
		v := pod.Spec.Volumes[i]
		dir := filepath.Join(root, "volumes", m.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		switch {
		case v.ConfigMap != nil:
			cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("ConfigMap %s of volume %s: %w", v.ConfigMap.Name, v.Name, err)
			}
			for key, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, key), []byte(data), 0o644); err != nil {
					return nil, err
				}
			}
		case v.EmptyDir != nil:
		case v.Projected != nil:
			if err := writeProjected(ctx, cs, pod, v, dir, token); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("volume %s: the sandbox mounts ConfigMaps, emptyDirs and the ServiceAccount's projected volume only", v.Name)
		}
		mounts[m.MountPath] = dir
	}
	return mounts, nil
}

// writeProjected writes the ServiceAccount volume the API server adds to
// dir: the token (the pod's, from podIdentity), the cluster's CA and the
// namespace.
func writeProjected(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, v corev1.Volume, dir, token string) error {
	for _, src := range v.Projected.Sources {
		var path, data string
		switch {
		case src.ServiceAccountToken != nil:
			path, data = src.ServiceAccountToken.Path, token
		case src.ConfigMap != nil:
			cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("ConfigMap %s of volume %s: %w", src.ConfigMap.Name, v.Name, err)
			}
			for _, item := range src.ConfigMap.Items {
				if err := os.WriteFile(filepath.Join(dir, item.Path), []byte(cm.Data[item.Key]), 0o644); err != nil {
					return err
				}
			}
			continue
		case src.DownwardAPI != nil:
			for _, item := range src.DownwardAPI.Items {
				if item.FieldRef == nil {
					return fmt.Errorf("volume %s: the sandbox resolves downward API fieldRefs only", v.Name)
				}
				value, err := fieldValue(pod, item.FieldRef.FieldPath)
				if err != nil {
					return fmt.Errorf("volume %s: %w", v.Name, err)
				}
				if err := os.WriteFile(filepath.Join(dir, item.Path), []byte(value), 0o644); err != nil {
					return err
				}
			}
			continue
		default:
			return fmt.Errorf("volume %s: a projected source the sandbox does not write", v.Name)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(data), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// podPorts maps each container port to a free loopback port, or to the
// host port fixed names for it.
func (s *Sandbox) podPorts(c corev1.Container, fixed map[int32]int) (map[int32]int, error) {
	ports := map[int32]int{}
	for _, p := range c.Ports {
		if host, ok := fixed[p.ContainerPort]; ok {
			ports[p.ContainerPort] = host
			continue
		}
		free, err := s.freePorts(1)
		if err != nil {
			return nil, err
		}
		ports[p.ContainerPort] = free[0]
	}
	return ports, nil
}

// programArgs adds to a container's command line (podArgs) what the
// program is told on this machine: where a pod's program reads its
// in-cluster credentials and listens on the pod's own address, the
// sandbox's must be told, per program.
func programArgs(c corev1.Container, args []string, ports map[int32]int, kubeconfig, root string) ([]string, error) {
	switch c.Name {
	case "provisioner":
		args = append(args, "--kubeconfig="+kubeconfig)
	case "scheduler":
		if err := schedulerClientConnection(args, kubeconfig); err != nil {
			return nil, err
		}
		secure, ok := ports[10259]
		if !ok {
			return nil, fmt.Errorf("the scheduler container has no port 10259")
		}
		args = append(args,
			"--authentication-kubeconfig="+kubeconfig,
			"--authorization-kubeconfig="+kubeconfig,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", secure),
			"--cert-dir="+filepath.Join(root, "certs"),
		)
	default:
		return nil, fmt.Errorf("container %s: the sandbox runs the scheduler and provisioner containers", c.Name)
	}
	return args, nil
}

// processEnv is the environment a pod's process starts from, before its
// container's own: PATH, HOME in the pod's directory, and TMPDIR when the
// pod mounts /tmp.
func processEnv(root string, mounts map[string]string) []string {
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root}
	if tmp, ok := mounts["/tmp"]; ok {
		base = append(base, "TMPDIR="+tmp)
	}
	// Kept from the sandbox's environment: how Go programs report.
	for _, k := range []string{"GOCOVERDIR", "GORACE", "GOTRACEBACK"} {
		if v, ok := os.LookupEnv(k); ok {
			base = append(base, k+"="+v)
		}
	}
	return base
}

// serveLog points kwok at the CRI log of a pod's container, so that
// `kubectl logs` of the pod shows it.
func (s *Sandbox) serveLog(ctx context.Context, pod *corev1.Pod, container, criLog string) error {
	dyn, err := dynamic.NewForConfig(s.Config)
	if err != nil {
		return err
	}
	logs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Logs",
		"metadata":   map[string]any{"name": pod.Name, "namespace": pod.Namespace},
		"spec": map[string]any{"logs": []any{map[string]any{
			"containers": []any{container},
			"logsFile":   criLog,
			"follow":     true,
		}}},
	}}
	if _, err := dyn.Resource(kwokLogs).Namespace(pod.Namespace).Create(ctx, logs, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("pointing kwok at the log of %s: %w", pod.Name, err)
	}
	return nil
}

// podArgs is a container's command line as it runs on this machine: an
// argument that names a mount path names the directory standing for it,
// and one that listens on every interface at a container port listens on
// loopback at the port it is mapped to. A path in the sandbox's own
// directory (sandboxDir: files the sandbox passes through the chart's
// extraArgs, such as the cluster CA) is a path on this machine already.
func podArgs(c corev1.Container, mounts map[string]string, ports map[int32]int, sandboxDir string) []string {
	args := make([]string, 0, len(c.Command)+len(c.Args)+8)
	for _, a := range slices.Concat(c.Command, c.Args) {
		// The longest mount path the value is in, once.
		if flag, value, ok := strings.Cut(a, "="); ok && !strings.HasPrefix(value, sandboxDir+"/") {
			best := ""
			for mount := range mounts {
				if (value == mount || strings.HasPrefix(value, mount+"/")) && len(mount) > len(best) {
					best = mount
				}
			}
			if best != "" {
				a = flag + "=" + mounts[best] + strings.TrimPrefix(value, best)
			}
		}
		if m := listenFlag.FindStringSubmatch(a); m != nil {
			port, _ := strconv.Atoi(m[3])
			if host, ok := ports[int32(port)]; ok {
				a = fmt.Sprintf("%s127.0.0.1:%d", m[1], host)
			}
		}
		args = append(args, a)
	}
	return args
}

// schedulerClientConnection sets the kubeconfig of the scheduler
// configuration that --config names (the pod's own copy of the ConfigMap):
// in a pod it is empty and the in-cluster credentials are used.
func schedulerClientConnection(args []string, kubeconfig string) error {
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--config=") })
	if i < 0 {
		return fmt.Errorf("the scheduler container has no --config argument")
	}
	path := strings.TrimPrefix(args[i], "--config=")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := withConfigFields(raw, "clientConnection", map[string]any{"kubeconfig": kubeconfig})
	if err != nil {
		return fmt.Errorf("the scheduler configuration %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// containerEnv resolves a container's environment as the kubelet would,
// for the sources the chart can use: values and the pod's own fields.
func containerEnv(pod *corev1.Pod, c corev1.Container) ([]string, error) {
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %s: envFrom is not run by the sandbox", c.Name)
	}
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out = append(out, e.Name+"="+e.Value)
			continue
		}
		f := e.ValueFrom.FieldRef
		if f == nil {
			return nil, fmt.Errorf("container %s: env %s: the sandbox resolves value and fieldRef only", c.Name, e.Name)
		}
		v, err := fieldValue(pod, f.FieldPath)
		if err != nil {
			return nil, fmt.Errorf("container %s: env %s: %w", c.Name, e.Name, err)
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

// fieldValue is a field of the pod a downward API reference names.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("fieldRef %s is not resolved by the sandbox", path)
}

// readiness is the container's readiness probe, against its mapped port.
func readiness(c corev1.Container, ports map[int32]int) (func(context.Context) error, error) {
	probe := c.ReadinessProbe
	if probe == nil || probe.HTTPGet == nil {
		return nil, fmt.Errorf("container %s has no HTTP readiness probe for the sandbox to wait on", c.Name)
	}
	get := probe.HTTPGet
	port := get.Port.IntVal
	if get.Port.StrVal != "" {
		i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == get.Port.StrVal })
		if i < 0 {
			return nil, fmt.Errorf("container %s: readiness probe port %s is not a port of the container", c.Name, get.Port.StrVal)
		}
		port = c.Ports[i].ContainerPort
	}
	host, ok := ports[port]
	if !ok {
		return nil, fmt.Errorf("container %s: readiness probe port %d is not a port of the container", c.Name, port)
	}
	scheme := "http"
	if get.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	return httpOK(fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, host, get.Path)), nil
}

// Pod returns the name of the pod whose process a component is, in a
// sandbox that installed the chart.
func (s *Sandbox) Pod(component string) (string, error) {
	pod, ok := s.pods[component]
	if !ok {
		return "", fmt.Errorf("no pod runs as component %q (the sandbox installs the chart with Options.Install)", component)
	}
	return pod, nil
}

// PodKubeconfig returns the path of the kubeconfig a component's process
// uses: its pod's ServiceAccount token.
func (s *Sandbox) PodKubeconfig(component string) string {
	return filepath.Join(s.Dir, "pods", s.pods[component], "kubeconfig")
}
