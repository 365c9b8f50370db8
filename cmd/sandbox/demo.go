package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/manifests"
)

// stepTimeout bounds each step of the demo; a step that does not reach its
// expected state by then fails the demo.
const stepTimeout = 2 * time.Minute

// decisions are the log messages the demo shows as they happen.
var decisions = []string{"Nominated pods to nodeclaim", "Found provisionable pods", "Launched instance", "Registered node",
	"Bound pods to node", "Disrupting nodes", "Terminated instance", "No virtual node for pod"}

// demo is the classic walk-through in a fresh sandbox: NodePool apps,
// Deployment inflate scaled 0 → 1 → 6 → 0, nodes launched for it and
// removed after consolidateAfter. It returns an error if any step does not
// reach its expected state in time.
func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	keep := fs.Bool("keep", false, "leave the sandbox running after the walk-through, until SIGINT")
	cloud := fs.String("cloud-provider", "simulated", "simulated, or aws: launch through the AWS SDK into a fake EC2 region on loopback")
	consolidateAfter := fs.Duration("consolidate-after", 30*time.Second, "the apps pool's consolidateAfter: how long its nodes stay once they run nothing (the walk-through waits it out at the end)")
	gates := featureGatesFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	featureGates, err := gates()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if *consolidateAfter < time.Second || *consolidateAfter%time.Second != 0 {
		return fmt.Errorf("demo: --consolidate-after=%s: must be whole seconds, at least 1s", *consolidateAfter)
	}
	b, err := binaries(ctx, "current")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodeforge-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	step("Starting the sandbox in %s", dir)
	// NODEFORGE_* variables reach the programs as with up (the
	// provisioner's flags: NODEFORGE_DISRUPTION_BUDGET_RETRY=2s, say).
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: dir, Binaries: b, Progress: os.Stdout, CloudProvider: *cloud, AWSRegistrationDelay: 2 * time.Second, Install: true,
		SchedulerEnv: programEnv(), ProvisionerEnv: programEnv(), FeatureGates: featureGates})
	if err != nil {
		return err
	}
	defer sb.Stop()
	cs, err := kubernetes.NewForConfig(sb.Config)
	if err != nil {
		return err
	}
	kube, err := sb.Client()
	if err != nil {
		return err
	}
	// The decisions, read as an operator reads them: the logs of the
	// chart's Deployments through the API server (kwok serves them).
	logs := newLogFollower(ctx, cs, "nodeforge-scheduler", "nodeforge-provisioner")
	fmt.Printf("try: kubectl --kubeconfig %s get nodeclaims,nodes\n", sb.Kubeconfig)
	fmt.Printf("     kubectl --kubeconfig %s -n nodeforge logs deploy/nodeforge-provisioner\n", sb.Kubeconfig)

	if err := applyAppsPool(ctx, sb, *cloud, *consolidateAfter); err != nil {
		return err
	}
	if err := createInflate(ctx, cs); err != nil {
		return err
	}
	w := walk{cs: cs, kube: kube, logs: logs, consolidateAfter: *consolidateAfter, launched: map[string]bool{}}
	for _, replicas := range []int32{1, 6, 0} {
		if err := w.scaleTo(ctx, replicas); err != nil {
			return err
		}
	}
	if err := w.summary(ctx); err != nil {
		return err
	}
	if *keep {
		fmt.Printf("The sandbox keeps running: kubectl --kubeconfig %s ... ; Ctrl-C stops it.\n", sb.Kubeconfig)
		<-ctx.Done()
	}
	step("Done: every step reached its expected state")
	return nil
}

// applyAppsPool applies NodePool apps of examples/apps.yaml, with
// consolidateAfter, from the cloud provider's default node class.
func applyAppsPool(ctx context.Context, sb *sandbox.Sandbox, cloud string, consolidateAfter time.Duration) error {
	step("NodePool apps: label intent=apps, consolidationPolicy WhenEmpty, consolidateAfter %s", consolidateAfter)
	raw, err := manifests.FS.ReadFile("examples/apps.yaml")
	if err != nil {
		return err
	}
	if !strings.Contains(string(raw), "consolidateAfter: 30s\n") {
		return errors.New("examples/apps.yaml no longer says consolidateAfter: 30s; the demo sets it from --consolidate-after")
	}
	raw = []byte(strings.Replace(string(raw), "consolidateAfter: 30s\n", "consolidateAfter: "+consolidateAfter.String()+"\n", 1))
	if cloud == "aws" {
		// The same pool, launching from the default EC2NodeClass.
		raw = []byte(strings.ReplaceAll(string(raw), "kind: SimulatedNodeClass", "kind: EC2NodeClass"))
	}
	return sandbox.Apply(ctx, sb.Config, raw)
}

// createInflate creates Deployment inflate with no replicas: pods that
// only an apps node can run.
func createInflate(ctx context.Context, cs kubernetes.Interface) error {
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
	step("Deployment inflate: pause, 1 cpu and 1.5Gi each, nodeSelector intent=apps, schedulerName nodeforge-scheduler, 0 replicas")
	_, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	return err
}

// walk is the walk-through's scaling of inflate, and what it saw there
// for the summary.
type walk struct {
	cs               kubernetes.Interface
	kube             client.Client
	logs             *logFollower
	consolidateAfter time.Duration

	launched       map[string]bool // every claim seen
	peakPrice      float64         // of the fleet, per hour
	scaleUpSeconds float64         // until 6 pods ran
}

// scaleTo scales inflate to replicas and waits until that many pods run
// and, at 0, until the empty apps nodes are gone; then shows the fleet.
func (w *walk) scaleTo(ctx context.Context, replicas int32) error {
	cs, logs := w.cs, w.logs
	step("Scaling inflate to %d", replicas)
	start := time.Now()
	if err := scale(ctx, cs, replicas); err != nil {
		return err
	}
	err := until(ctx, fmt.Sprintf("%d inflate pods Running", replicas), logs, func() (bool, error) {
		return runningPods(ctx, cs, int(replicas))
	})
	if err != nil {
		return err
	}
	fmt.Printf("%d pods Running after %.1fs\n", replicas, time.Since(start).Seconds())
	if replicas == 6 {
		w.scaleUpSeconds = time.Since(start).Seconds()
	}
	if replicas == 0 {
		step("Waiting for the empty apps nodes to go after consolidateAfter (%s)", w.consolidateAfter)
		if err := until(ctx, "no apps node left", logs, func() (bool, error) {
			n, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "nodeforge.dev/nodepool=apps"})
			return err == nil && len(n.Items) == 0, err
		}); err != nil {
			return err
		}
		fmt.Printf("apps nodes removed %.1fs after scaling to 0\n", time.Since(start).Seconds())
	}
	price, err := showFleet(ctx, cs, w.kube, w.launched)
	if err != nil {
		return err
	}
	w.peakPrice = max(w.peakPrice, price)
	logs.flush()
	return nil
}

// summary prints how many nodes were launched and removed, how long the
// scale-up took and the fleet's price at its peak.
func (w *walk) summary(ctx context.Context) error {
	var left v1alpha1.NodeClaimList
	if err := w.kube.List(ctx, &left); err != nil {
		return err
	}
	removed := 0
	for name := range w.launched {
		if !slices.ContainsFunc(left.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Name == name }) {
			removed++
		}
	}
	step("Summary")
	fmt.Printf("nodes launched: %d, removed: %d; scale-up 1→6: all pods Running in %.1fs; fleet at peak $%.4f/h\n",
		len(w.launched), removed, w.scaleUpSeconds, w.peakPrice)
	return nil
}

// scale sets the Deployment's replicas. The deployment controller writes
// the Deployment too (status, revision annotation), so a read-modify-write
// can meet a newer version: read again and retry, as kubectl scale does.
func scale(ctx context.Context, cs kubernetes.Interface, replicas int32) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := cs.AppsV1().Deployments("default").GetScale(ctx, "inflate", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = replicas
		_, err = cs.AppsV1().Deployments("default").UpdateScale(ctx, "inflate", s, metav1.UpdateOptions{})
		return err
	})
}

func runningPods(ctx context.Context, cs kubernetes.Interface, want int) (bool, error) {
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=inflate"})
	if err != nil {
		return false, err
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running++
		}
	}
	return running == want && len(pods.Items) == want, nil
}

// showFleet prints the claims, nodes and pods, notes every claim seen in
// launched, and returns the fleet's price per hour.
func showFleet(ctx context.Context, cs kubernetes.Interface, kube client.Client, launched map[string]bool) (float64, error) {
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		return 0, err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODECLAIM\tPOOL\tTYPE\tZONE\tCAPACITY\tPRICE/H\tNODE\tPHASE")
	total := 0.0
	for _, nc := range claims.Items {
		launched[nc.Name] = true
		p, _ := strconv.ParseFloat(nc.Status.Price, 64)
		total += p
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", nc.Name, nc.Spec.NodePool, nc.Status.InstanceType, nc.Status.Zone, nc.Status.CapacityType, nc.Status.Price, nc.Status.NodeName, nc.Status.Phase)
	}
	w.Flush()
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=inflate"})
	if err != nil {
		return 0, err
	}
	w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tPHASE\tNODE")
	for _, p := range pods.Items {
		fmt.Fprintf(w, "%s\t%s\t%s\n", p.Name, p.Status.Phase, p.Spec.NodeName)
	}
	w.Flush()
	return total, nil
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

// until waits for cond, printing decision log lines as they come.
func until(ctx context.Context, what string, logs *logFollower, cond func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, stepTimeout, true, func(context.Context) (bool, error) {
		logs.print()
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not reached within %s (last error: %v)", what, stepTimeout, last)
	}
	return nil
}

// logFollower prints the decision lines of the Deployments' logs, as
// `kubectl logs deploy/<name>` shows them: the log of the Deployment's
// running pod, through the API server.
type logFollower struct {
	ctx         context.Context
	cs          kubernetes.Interface
	deployments []string
	seen        map[string]int // lines printed, by pod
	last        time.Time
}

func newLogFollower(ctx context.Context, cs kubernetes.Interface, deployments ...string) *logFollower {
	return &logFollower{ctx: ctx, cs: cs, deployments: deployments, seen: map[string]int{}}
}

// flush prints what is new now.
func (l *logFollower) flush() {
	l.last = time.Time{}
	l.print()
}

// print prints what is new, at most once a second.
func (l *logFollower) print() {
	if time.Since(l.last) < time.Second {
		return
	}
	l.last = time.Now()
	for _, d := range l.deployments {
		pods, err := l.cs.CoreV1().Pods("nodeforge").List(l.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + d})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			raw, err := l.cs.CoreV1().Pods("nodeforge").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(l.ctx)
			if err != nil {
				continue
			}
			lines := strings.SplitAfter(string(raw), "\n")
			if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
				lines = lines[:n-1] // a partial line is read again next time
			}
			for _, line := range lines[min(l.seen[p.Name], len(lines)):] {
				for _, dec := range decisions {
					if strings.Contains(line, `"`+dec+`"`) {
						fmt.Print("  log: " + trimLog(line))
						break
					}
				}
			}
			l.seen[p.Name] = len(lines)
		}
	}
}

// trimLog drops controller-runtime's bookkeeping keys from a log line.
func trimLog(line string) string {
	for _, k := range []string{"controller", "controllerGroup", "controllerKind", "namespace", "name", "reconcileID"} {
		if i := strings.Index(line, " "+k+`="`); i >= 0 {
			if j := strings.Index(line[i+len(k)+3:], `"`); j >= 0 {
				line = line[:i] + line[i+len(k)+3+j+1:]
			}
		}
	}
	return line
}
