package e2e

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// gangGates are what gang scheduling needs on (issue #47).
var gangGates = map[string]bool{"GenericWorkload": true, "TopologyAwareWorkloadScheduling": true}

// gang is a PodGroup of the gang policy (minCount 2) whose pods must share
// a node (the TopologyAwareWorkloadScheduling field), and its two pods,
// which tolerate the control-plane node's taint and so fit there.
func gang(name, scheduler string) (*schedulingv1beta1.PodGroup, []*corev1.Pod) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: schedulingv1beta1.PodGroupSpec{
		SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}},
		SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: "kubernetes.io/hostname"}}},
	}}
	var pods []*corev1.Pod
	for _, n := range []string{"0", "1"} {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + n, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: scheduler, TerminationGracePeriodSeconds: ptr.To[int64](0),
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)},
			Tolerations:     []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
		}})
	}
	return pg, pods
}

// TestGangSchedulingGates: with GenericWorkload and
// TopologyAwareWorkloadScheduling on, the sandbox's API server serves the
// Workload API (scheduling.k8s.io/v1beta1 workloads and podgroups) and
// keeps what the topology gate adds: a gang PodGroup keeps its topology
// constraint and a pod its scheduling group. With the gates off (the
// default) it serves no PodGroup and drops a pod's scheduling group.
// "programs" runs the chart with the gates: each scheduler schedules a
// gang in a group cycle as its own identity and records it in the
// PodGroup's status, and neither program turns a gate off.
func TestGangSchedulingGates(t *testing.T) {
	t.Parallel()
	t.Run("on", func(t *testing.T) {
		t.Parallel()
		sb, cs, _ := startSandbox(t, sandbox.Options{ControlPlaneOnly: true, FeatureGates: gangGates})
		ctx := context.Background()
		apiserver := cmdline(t, sb, "kube-apiserver")
		for _, want := range []string{"--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"} {
			if !slices.Contains(apiserver, want) {
				t.Errorf("kube-apiserver runs without %s: %v", want, apiserver)
			}
		}
		list, err := cs.Discovery().ServerResourcesForGroupVersion("scheduling.k8s.io/v1beta1")
		if err != nil {
			t.Fatal(err)
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		for _, r := range []string{"workloads", "podgroups", "podgroups/status"} {
			if !served[r] {
				t.Errorf("scheduling.k8s.io/v1beta1 does not serve %s: %v", r, served)
			}
		}
		pg, pods := gang("gang", "nodeforge-scheduler")
		got, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating a gang PodGroup: %v", err)
		}
		if got.Spec.SchedulingConstraints == nil || len(got.Spec.SchedulingConstraints.Topology) != 1 {
			t.Errorf("the PodGroup lost its topology constraint (TopologyAwareWorkloadScheduling off on the API server?): %+v", got.Spec)
		}
		defaultServiceAccount(t, cs)
		p, err := cs.CoreV1().Pods("default").Create(ctx, pods[0], metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sg := p.Spec.SchedulingGroup; sg == nil || ptr.Deref(sg.PodGroupName, "") != "gang" {
			t.Errorf("the pod lost its scheduling group: %v", sg)
		}
	})

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		_, cs, _ := startSandbox(t, sandbox.Options{ControlPlaneOnly: true})
		ctx := context.Background()
		if _, err := cs.Discovery().ServerResourcesForGroupVersion("scheduling.k8s.io/v1beta1"); !apierrors.IsNotFound(err) {
			t.Errorf("without the gates, discovery of scheduling.k8s.io/v1beta1 = %v, want NotFound", err)
		}
		pg, pods := gang("gang", "nodeforge-scheduler")
		if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("without the gates, creating a PodGroup = %v, want NotFound (the API is not served)", err)
		}
		defaultServiceAccount(t, cs)
		p, err := cs.CoreV1().Pods("default").Create(ctx, pods[0], metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.SchedulingGroup != nil {
			t.Errorf("without the gates, the API server kept the pod's scheduling group %v", *p.Spec.SchedulingGroup)
		}
	})

	t.Run("programs", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		sb, cs, _ := startSandbox(t, sandbox.Options{CloudProvider: "simulated", Install: true, FeatureGates: gangGates})
		started := time.Since(start)
		ctx := context.Background()
		const flag = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "nodeforge-scheduler", "nodeforge-provisioner"} {
			if args := cmdline(t, sb, name); !slices.Contains(args, flag) {
				t.Errorf("%s runs without %s: %v", name, flag, args)
			}
		}
		for _, scheduler := range []string{"default-scheduler", "nodeforge-scheduler"} {
			pg, pods := gang(scheduler, scheduler)
			if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating PodGroup %s: %v", pg.Name, err)
			}
			for _, p := range pods {
				if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, scheduler := range []string{"default-scheduler", "nodeforge-scheduler"} {
			poll(t, scheduler+"'s gang Running and its PodGroup scheduled", func() (bool, error) {
				return gangScheduled(ctx, cs, scheduler)
			})
		}
		for _, program := range []string{"nodeforge-scheduler", "nodeforge-provisioner"} {
			if logs := kubectlLogs(t, sb, program); strings.Contains(logs, "Turning a feature off") {
				t.Errorf("%s turned a feature off:\n%s", program, logs)
			}
		}
		t.Logf("sandbox with the gates up in %s; both gangs scheduled %s later", started.Round(100*time.Millisecond), (time.Since(start) - started).Round(100*time.Millisecond))
	})
}

// cmdline is the command line of a running component of sb.
func cmdline(t *testing.T, sb *sandbox.Sandbox, component string) []string {
	t.Helper()
	pid, ok := sb.PIDs()[component]
	if !ok {
		t.Fatalf("no component %s runs in the sandbox", component)
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// defaultServiceAccount makes the default namespace's ServiceAccount,
// which pods need and which a control plane alone (no
// kube-controller-manager) does not make.
func defaultServiceAccount(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	_, err := cs.CoreV1().ServiceAccounts("default").Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// gangScheduled: the two pods of the gang named scheduler run on the
// control-plane node, and its PodGroup says it was scheduled.
func gangScheduled(ctx context.Context, cs kubernetes.Interface, name string) (bool, error) {
	for _, n := range []string{"0", "1"} {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name+"-"+n, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return false, err
		}
	}
	pg, err := cs.SchedulingV1beta1().PodGroups("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return meta.IsStatusConditionTrue(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled), nil
}
