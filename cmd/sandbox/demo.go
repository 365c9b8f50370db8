package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeforge/nodeforge/test/sandbox"
)

// stepTimeout bounds each step of the demo; a step that does not reach its
// expected state by then fails the demo.
const stepTimeout = 2 * time.Minute

// demo starts a sandbox in a temporary directory and walks through it:
// the control plane and Nodeforge's components, the default NodePool, a
// simulated node run by kwok, and a Deployment scheduled by
// nodeforge-scheduler scaled up and back to zero. It stops the sandbox and
// returns nil only if every step reached its expected state.
func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	keep := fs.Bool("keep", false, "leave the sandbox running after the walk-through, until SIGINT")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := binaries(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodeforge-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("Starting the sandbox in %s", dir)
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: b, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer sb.Stop()
	cs, err := kubernetes.NewForConfig(sb.Config)
	if err != nil {
		return err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return err
	}
	fmt.Printf("Kubernetes %s; try: kubectl --kubeconfig %s get nodepools\n", v.GitVersion, sb.Kubeconfig)

	step("Adding a node by hand, run by kwok (with the provisioner, Nodeforge launches these itself)")
	node := sandbox.KwokNode("demo-node", map[string]string{"intent": "apps"}, "8", "32Gi")
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := until(ctx, "node demo-node Ready", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "demo-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	printNodes(ctx, cs)

	labels := map[string]string{"app": "inflate"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "inflate", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName:                 "nodeforge-scheduler",
			NodeSelector:                  map[string]string{"intent": "apps"},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1.5Gi")},
			}}},
		}},
	}}
	step("Creating Deployment inflate (schedulerName nodeforge-scheduler, nodeSelector intent=apps, 1 cpu and 1.5Gi each) with 0 replicas")
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, replicas := range []int32{1, 6, 0} {
		step("Scaling inflate to %d", replicas)
		start := time.Now()
		scale, err := cs.AppsV1().Deployments("default").GetScale(ctx, "inflate", metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = replicas
		if _, err := cs.AppsV1().Deployments("default").UpdateScale(ctx, "inflate", scale, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if err := until(ctx, fmt.Sprintf("%d inflate pods Running", replicas), func() (bool, error) {
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=inflate"})
			if err != nil {
				return false, err
			}
			running := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			return running == int(replicas) && len(pods.Items) == int(replicas), nil
		}); err != nil {
			return err
		}
		fmt.Printf("%d pods Running after %.1fs\n", replicas, time.Since(start).Seconds())
		printPods(ctx, cs)
	}
	step("Done: every step reached its expected state")
	if *keep {
		fmt.Printf("The sandbox keeps running: kubectl --kubeconfig %s ... ; Ctrl-C stops it.\n", sb.Kubeconfig)
		<-ctx.Done()
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func until(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, stepTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not reached within %s (last error: %v)", what, stepTimeout, last)
	}
	return nil
}

func printNodes(ctx context.Context, cs kubernetes.Interface) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Println("listing nodes:", err)
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tREADY\tCPU\tMEMORY\tLABELS")
	for _, n := range nodes.Items {
		ready := "False"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = string(c.Status)
			}
		}
		var ls []string
		for k, v := range n.Labels {
			ls = append(ls, k+"="+v)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Name, ready, n.Status.Allocatable.Cpu(), n.Status.Allocatable.Memory(), strings.Join(ls, ","))
	}
	w.Flush()
}

func printPods(ctx context.Context, cs kubernetes.Interface) {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=inflate"})
	if err != nil {
		fmt.Println("listing pods:", err)
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tPHASE\tNODE")
	for _, p := range pods.Items {
		fmt.Fprintf(w, "%s\t%s\t%s\n", p.Name, p.Status.Phase, p.Spec.NodeName)
	}
	w.Flush()
}
