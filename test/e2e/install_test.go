package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// workload creates a Deployment of n pods for nodeforge-scheduler, one cpu
// each, and waits until they run.
func workload(t *testing.T, cs kubernetes.Interface, name string, n int32) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(n), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, fmt.Sprintf("%d %s pods Running", n, name), func() (bool, error) {
		got, err := runningPods(ctx, cs, "app="+name)
		return got == int(n), err
	})
}

// kubectlLogs runs `kubectl logs deploy/<name>` against the sandbox, as
// an operator would.
func kubectlLogs(t *testing.T, sb *sandbox.Sandbox, deployment string) string {
	t.Helper()
	out, err := exec.Command("kubectl", "--kubeconfig", sb.Kubeconfig, "-n", "nodeforge", "logs", "deploy/"+deployment).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl logs deploy/%s: %v\n%s", deployment, err, out)
	}
	return string(out)
}

// podLog reads a pod's log through the API server, as kubectl logs does.
func podLog(t *testing.T, cs kubernetes.Interface, pod string) string {
	t.Helper()
	raw, err := cs.CoreV1().Pods("nodeforge").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of pod nodeforge/%s: %v", pod, err)
	}
	return string(raw)
}

// TestSandboxRunsTheChart: the sandbox's default path installs the chart;
// its Deployments' pods are placed on the control-plane node by the
// stock scheduler and run there by kwok, their processes hold tokens of
// the pods' ServiceAccounts bound to the pods, and `kubectl logs deploy/...` shows the decisions.
func TestSandboxRunsTheChart(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is needed to read the logs as an operator does: ", err)
	}
	ctx := context.Background()
	sb, cs, _ := startSandbox(t, sandbox.Options{Install: true})

	for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		d, err := cs.AppsV1().Deployments("nodeforge").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the chart's Deployment %s: %v", name, err)
		}
		if d.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("Deployment %s is not the chart's: labels %v", name, d.Labels)
		}
		pods, err := cs.CoreV1().Pods("nodeforge").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Fatalf("Deployment %s has %d pods, want 1", name, len(pods.Items))
		}
		p := pods.Items[0]
		if p.Spec.NodeName != "sandbox-control-plane" || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s on %q, want Running on sandbox-control-plane", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
	}

	// Each process holds a token of its pod's ServiceAccount bound to the
	// pod, as the pod's projected token would be.
	for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		pod, err := sb.Pod(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.LoadFromFile(sb.PodKubeconfig(name))
		if err != nil {
			t.Fatal(err)
		}
		auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: auth.Token}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := review.Status
		if !st.Authenticated || st.User.Username != "system:serviceaccount:nodeforge:"+name || !slices.Equal(st.User.Extra["authentication.kubernetes.io/pod-name"], []string{pod}) {
			t.Errorf("the credential of %s is %+v, want ServiceAccount nodeforge/%s bound to pod %s", name, st, name, pod)
		}
	}

	workload(t, cs, "installed", 3)

	sched := kubectlLogs(t, sb, "nodeforge-scheduler")
	prov := kubectlLogs(t, sb, "nodeforge-provisioner")
	for _, c := range []struct{ deployment, log, want string }{
		{"nodeforge-scheduler", sched, `"Nominated pods to nodeclaim"`},
		{"nodeforge-provisioner", prov, `"Launched instance"`},
		{"nodeforge-provisioner", prov, `"Bound pods to node"`},
	} {
		if !strings.Contains(c.log, c.want) {
			t.Errorf("kubectl logs deploy/%s lacks %s:\n%s", c.deployment, c.want, tailLines(c.log, 30))
		}
	}
}

// TestLeaderFailoverAcrossChartReplicas installs the chart with the two
// replicas it asks for by default, kills the leading replica's process of
// each program, and checks that the other replica takes over and carries
// on: a new workload is nominated and launched for, which the new leaders'
// pod logs show.
func TestLeaderFailoverAcrossChartReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, _ := startSandbox(t, sandbox.Options{Install: true, SchedulerReplicas: 2, ProvisionerReplicas: 2})
	for _, name := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		d, err := cs.AppsV1().Deployments("nodeforge").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(d.Spec.Replicas, 1); got != 2 {
			t.Fatalf("Deployment %s has %d replicas, want 2", name, got)
		}
	}
	workload(t, cs, "before", 1)

	pods := map[string]string{} // component → pod name
	newLeaders := map[string]string{}
	for _, component := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
		old := leading(t, sb, component, 2, "")
		pod, err := sb.Pod(old)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Kill(old); err != nil {
			t.Fatal(err)
		}
		newLeaders[component] = leading(t, sb, component, 2, old)
		if pods[component], err = sb.Pod(newLeaders[component]); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: killed the process of pod %s (%s); %s (pod %s) leads", component, pod, old, newLeaders[component], pods[component])
	}

	workload(t, cs, "after", 2)
	for _, c := range []struct{ component, want string }{
		{"nodeforge-scheduler", `"Nominated pods to nodeclaim"`},
		{"nodeforge-provisioner", `"Launched instance"`},
	} {
		if log := podLog(t, cs, pods[c.component]); !strings.Contains(log, c.want) {
			t.Errorf("the log of pod %s, the new %s leader, lacks %s:\n%s", pods[c.component], c.component, c.want, tailLines(log, 30))
		}
	}
}

// update reads obj afresh, mutates it and updates it, again on a
// conflict: the provisioner writes the status of pools, classes and claims
// at any time, which changes their resourceVersion.
func update(t *testing.T, kube client.Client, obj client.Object, mutate func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := kube.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return kube.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", obj.GetName(), err)
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
