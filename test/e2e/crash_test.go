package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// crashCase is one crash: a component killed from outside when a claim
// reaches a phase, or killing itself at a crash point; during a scale-up
// of 8 pods, or while the node they run on is drained.
type crashCase struct {
	name      string
	component string
	// point is the crash point the component dies at; empty: it is
	// SIGKILLed from outside once a claim is in phase (no phase: at once,
	// which for a drain is as the claims are deleted).
	point string
	phase v1alpha1.NodeClaimPhase
	// drain: once the 8 pods run, their claim is deleted, and the crash
	// falls in the drain and termination that follow.
	drain bool
	// provisionerArgs widen the window a kill from outside must fall in.
	provisionerArgs []string
	// replicas of the component run; with more than one, the component
	// means whichever replica leads, and it is killed for good.
	replicas int
}

// TestCrashes kills one component at a time, at a named step or from
// outside, then starts it again with the same command line, and checks
// that the work finishes as if nothing had happened: every pod Running,
// none replaced unless it was on the node being drained, each claim with
// exactly one instance, no instance without a claim, a drained claim gone
// with its instance. The node class delays registration by 3s, so there is
// a window with claims launched and nodes not yet registered.
func TestCrashes(t *testing.T) {
	t.Parallel()
	widerBatch := []string{"--batch-idle-duration=5s", "--batch-max-duration=10s"}
	for _, tc := range []crashCase{
		{name: "provisioner SIGKILLed while a claim is Launched", component: "nodeforge-provisioner", phase: v1alpha1.NodeClaimLaunched},
		{name: "scheduler SIGKILLed while a claim is Nominating", component: "nodeforge-scheduler", phase: v1alpha1.NodeClaimNominating, provisionerArgs: widerBatch},
		{name: "leading scheduler of two SIGKILLed while a claim is Nominating", component: "nodeforge-scheduler", phase: v1alpha1.NodeClaimNominating, provisionerArgs: widerBatch, replicas: 2},
		{name: "leading provisioner of two SIGKILLed while a claim is Launched", component: "nodeforge-provisioner", phase: v1alpha1.NodeClaimLaunched, replicas: 2},
		{name: "kube-apiserver SIGKILLed while a claim is Nominating", component: "kube-apiserver", phase: v1alpha1.NodeClaimNominating, provisionerArgs: widerBatch},
		{name: "kube-apiserver SIGKILLed while a claim is Launched", component: "kube-apiserver", phase: v1alpha1.NodeClaimLaunched},
		{name: "kube-apiserver SIGKILLed as a drain starts", component: "kube-apiserver", drain: true},
		{name: "provisioner after Create, before the status write", component: "nodeforge-provisioner", point: crashpoint.AfterCreate},
		{name: "provisioner after the launch status write", component: "nodeforge-provisioner", point: crashpoint.AfterLaunchStatus},
		{name: "provisioner mid-bind", component: "nodeforge-provisioner", point: crashpoint.MidBind},
		{name: "scheduler right after creating a claim", component: "nodeforge-scheduler", point: crashpoint.SchedulerAfterClaimCreate},
		{name: "provisioner mid-drain", component: "nodeforge-provisioner", point: crashpoint.MidDrain, drain: true},
		{name: "provisioner after terminating, before deleting the node", component: "nodeforge-provisioner", point: crashpoint.AfterTerminate, drain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crash(t, tc)
		})
	}
	for _, point := range []string{crashpoint.AfterTaint, crashpoint.AfterDisrupting, crashpoint.AfterDelete} {
		t.Run("provisioner at "+point, func(t *testing.T) {
			t.Parallel()
			crashInDisruption(t, point)
		})
	}
}

func crash(t *testing.T, tc crashCase) {
	ctx := context.Background()
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	opts := sandbox.Options{Dir: dir, ProvisionerArgs: tc.provisionerArgs}
	if tc.component == "kube-apiserver" {
		opts.Timers = productionLeaderElection
	}
	if tc.component == "nodeforge-scheduler" {
		opts.SchedulerReplicas = tc.replicas
	} else {
		opts.ProvisionerReplicas = tc.replicas
	}
	if tc.point != "" {
		env := []string{"NODEFORGE_CRASH_POINT=" + tc.point, "NODEFORGE_CRASH_MARKER=" + marker}
		if tc.component == "nodeforge-scheduler" {
			opts.SchedulerEnv = env
		} else {
			opts.ProvisionerEnv = env
		}
	}
	sb, cs, kube := startSandbox(t, opts)
	class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	update(t, kube, class, func() { class.Spec.RegistrationDelay = &metav1.Duration{Duration: 3 * time.Second} })

	labels := map[string]string{"app": "crash"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](8), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{v1alpha1.LabelCapacityType: "spot"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "8 crash pods created", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
		return err == nil && len(pods.Items) == 8, err
	})
	if tc.drain {
		poll(t, "8 crash pods Running", func() (bool, error) {
			n, err := runningPods(ctx, cs, "app=crash")
			return n == 8, err
		})
	}
	before, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
	if err != nil {
		t.Fatal(err)
	}
	// drained are the nodes being drained: their pods may be replaced.
	drained := map[string]bool{}
	var gone []v1alpha1.NodeClaim
	if tc.drain {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			t.Fatal(err)
		}
		for _, nc := range claims.Items {
			drained[nc.Status.NodeName] = true
			gone = append(gone, nc)
			if err := kube.Delete(ctx, &nc); err != nil {
				t.Fatal(err)
			}
		}
	}

	if tc.point != "" {
		poll(t, tc.component+" crashed at "+tc.point, func() (bool, error) {
			_, err := os.Stat(marker)
			return err == nil, nil
		})
	} else if tc.phase != "" {
		claimInPhase(t, kube, tc.phase)
	}
	victim := tc.component
	if tc.replicas > 1 {
		// Failover: the leader is gone for good; a standby must take over.
		victim = leading(t, sb, tc.component, tc.replicas, "")
		if err := sb.Kill(victim); err != nil {
			t.Fatal(err)
		}
		successor := leading(t, sb, tc.component, tc.replicas, victim)
		t.Logf("%s took over from %s", successor, victim)
	} else if err := sb.KillAndRestart(ctx, victim); err != nil {
		t.Fatal(err)
	}

	poll(t, "8 crash pods Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app=crash")
		return n == 8, err
	})
	after, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash"})
	if err != nil {
		t.Fatal(err)
	}
	still := map[string]bool{}
	for _, p := range after.Items {
		still[string(p.UID)] = true
		// A pod left on a node that is gone looks Running to the API
		// (no kubelet reports otherwise): it was never drained.
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			if err := kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &corev1.Node{}); err != nil {
				t.Errorf("pod %s is Running on node %s, which is gone (%v): its node was removed without draining it", p.Name, p.Spec.NodeName, err)
			}
		}
	}
	replaced := 0
	for _, p := range before.Items {
		if still[string(p.UID)] {
			continue
		}
		replaced++
		if !drained[p.Spec.NodeName] {
			t.Errorf("pod %s (node %q) was deleted, and its node was not being drained", p.Name, p.Spec.NodeName)
		}
	}
	for _, nc := range gone {
		poll(t, "drained nodeclaim "+nc.Name+" gone", func() (bool, error) {
			err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &v1alpha1.NodeClaim{})
			return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
		})
		poll(t, "node "+nc.Status.NodeName+" of the drained claim gone", func() (bool, error) {
			err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &corev1.Node{})
			return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
		})
	}
	// A claim written by a scheduler killed before its pods' nominations
	// were has no pods: it is deleted unlaunched after its batch window.
	var claims v1alpha1.NodeClaimList
	poll(t, "every nodeclaim launched or gone", func() (bool, error) {
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		for _, nc := range claims.Items {
			if nc.Status.ProviderID == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if tc.component == "nodeforge-scheduler" {
		// A second claim for a pod already nominated would launch a node
		// that ends up running none of them.
		for _, nc := range claims.Items {
			if nc.Status.NodeName == "" {
				continue
			}
			pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=crash", FieldSelector: "spec.nodeName=" + nc.Status.NodeName})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) == 0 {
				t.Errorf("nodeclaim %s launched node %s, which runs none of the pods", nc.Name, nc.Status.NodeName)
			}
		}
	}
	instances := oneInstancePerClaim(t, ctx, kube, claims.Items)
	t.Logf("%s (%s): %d claims, %d instances, 8 pods Running, %d replaced (drained)", tc.name, victim, len(claims.Items), instances, replaced)
}

// leading names the replica of component, other than except, that
// acquired its lease, by the line client-go's leader election logs when it
// does (both components elect leaders with it).
func leading(t *testing.T, sb *sandbox.Sandbox, component string, replicas int, except string) string {
	t.Helper()
	var leader string
	poll(t, "a "+component+" replica other than "+except+" leading", func() (bool, error) {
		for i := 1; i <= replicas; i++ {
			name := component
			if i > 1 {
				name = fmt.Sprintf("%s-%d", component, i)
			}
			if name == except {
				continue
			}
			raw, err := os.ReadFile(sb.Log(name))
			if err != nil {
				return false, err
			}
			if strings.Contains(strings.ToLower(string(raw)), "successfully acquired lease") {
				leader = name
				return true, nil
			}
		}
		return false, nil
	})
	return leader
}

// TestCrashInGarbageCollection force-deletes a running pod's claim while
// the provisioner is down, so its instance becomes an orphan, and has the
// provisioner crash right after garbage collection terminated that
// instance, before it deleted its Node. Started again, the provisioner
// must still remove the Node (whose instance is now in no list), and the
// workload must end Running on a claimed node with one instance per claim
// and no instance without a claim.
func TestCrashInGarbageCollection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	sb, cs, kube := startSandbox(t, sandbox.Options{Dir: dir,
		ProvisionerArgs: []string{"--garbage-collection-interval=1s", "--garbage-collection-grace=5s"},
		ProvisionerEnv:  []string{"NODEFORGE_CRASH_POINT=" + crashpoint.AfterCollectTerminate, "NODEFORGE_CRASH_MARKER=" + marker}})
	claims := onePodOnItsNode(t, cs, kube, "gc")
	orphan := claims.Items[0]

	// The provisioner is down while someone removes the claim's finalizer
	// and deletes it: its instance and Node are left without a claim.
	if err := sb.Kill("nodeforge-provisioner"); err != nil {
		t.Fatal(err)
	}
	// Read afresh: the provisioner may have written the claim (its status
	// after binding) since the list, up to its kill.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&orphan), &orphan); err != nil {
			return err
		}
		orphan.Finalizers = nil
		return kube.Update(ctx, &orphan)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, &orphan); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
		t.Fatal(err)
	}
	poll(t, "the provisioner crashed after terminating the orphan", func() (bool, error) {
		_, err := os.Stat(marker)
		return err == nil, nil
	})
	inventory, err := simulated.Inventory(ctx, kube, "nodeforge")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inventory[orphan.Status.ProviderID]; ok {
		t.Fatalf("the orphan instance %s is still there at the crash point", orphan.Status.ProviderID)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: orphan.Status.NodeName}, &corev1.Node{}); err != nil {
		t.Fatalf("node %s should still be there when the provisioner crashed: %v", orphan.Status.NodeName, err)
	}
	if err := sb.KillAndRestart(ctx, "nodeforge-provisioner"); err != nil {
		t.Fatal(err)
	}

	poll(t, "node "+orphan.Status.NodeName+", whose instance is gone, deleted", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Name: orphan.Status.NodeName}, &corev1.Node{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	poll(t, "the gc pod Running on a claimed node", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=gc"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning {
			return false, err
		}
		return pods.Items[0].Spec.NodeName != orphan.Status.NodeName, nil
	})
	poll(t, "one instance per nodeclaim, none without one", func() (bool, error) {
		if err := kube.List(ctx, &claims); err != nil {
			return false, err
		}
		inventory, err := simulated.Inventory(ctx, kube, "nodeforge")
		if err != nil {
			return false, err
		}
		perClaim := map[string]int{}
		for _, in := range inventory {
			perClaim[in.NodeClaim]++
		}
		for _, nc := range claims.Items {
			if perClaim[nc.Name] != 1 {
				return false, nil
			}
			delete(perClaim, nc.Name)
		}
		return len(perClaim) == 0, nil
	})
}

// claimInPhase waits until some nodeclaim is in phase.
func claimInPhase(t *testing.T, kube client.Client, phase v1alpha1.NodeClaimPhase) {
	t.Helper()
	poll(t, "a nodeclaim in phase "+string(phase), func() (bool, error) {
		var claims v1alpha1.NodeClaimList
		if err := kube.List(context.Background(), &claims); err != nil {
			return false, err
		}
		return slices.ContainsFunc(claims.Items, func(nc v1alpha1.NodeClaim) bool { return nc.Status.Phase == phase }), nil
	})
}

// TestProgramsComeBackAfterAnAPIServerOutage: with the API server away
// longer than the lease's renew deadline, both programs lose their lease
// and exit, as kube-scheduler and Karpenter do; the sandbox starts them
// again, as a kubelet would, and once the API server is back a pod that
// needs a new node gets one. Before the sandbox restarted them, a program
// that lost its lease this way stayed dead (seen in TestCrashes'
// kube-apiserver cases on a busy machine).
func TestProgramsComeBackAfterAnAPIServerOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sb, cs, _ := startSandbox(t, sandbox.Options{})
	// Only a leader loses its lease; a program still waiting to acquire
	// one waits on through an outage.
	leading(t, sb, "nodeforge-scheduler", 1, "")
	leading(t, sb, "nodeforge-provisioner", 1, "")
	if err := sb.Kill("kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	// The quick timers' renew deadline is 6s: both leases lapse.
	poll(t, "both programs exited on losing their lease", func() (bool, error) {
		return sb.Restarts("nodeforge-scheduler") > 0 && sb.Restarts("nodeforge-provisioner") > 0, nil
	})
	if err := sb.KillAndRestart(ctx, "kube-apiserver"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after-outage", Namespace: "default"}, Spec: corev1.PodSpec{
		SchedulerName: "nodeforge-scheduler",
		Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
	}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the pod Running on a new node", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
}

// crashInDisruption (in TestCrashes) kills the provisioner at a step of
// a disruption command (an empty node's), starts it again, and checks
// that the command is finished or undone:
//   - after the taint: the restarted provisioner lifts the taint of a node
//     no command holds (the node was annotated do-not-disrupt while the
//     provisioner was down, so no new command takes it), then, once the
//     annotation goes, disrupts it;
//   - after the Disrupting write: the claim is deleted, not left
//     Disrupting (tainted, paid for and counted against its budget);
//   - after the delete: the node is drained and its instance terminated.
//
// Each ends with every claim gone and no instance left.
func crashInDisruption(t *testing.T, point string) {
	ctx := context.Background()
	dir := t.TempDir()
	marker := filepath.Join(dir, "crashed")
	sb, cs, kube := startSandbox(t, sandbox.Options{Dir: dir,
		ProvisionerEnv: []string{"NODEFORGE_CRASH_POINT=" + point, "NODEFORGE_CRASH_MARKER=" + marker}})
	claims := onePodOnItsNode(t, cs, kube, "empty")
	nc := claims.Items[0]
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	update(t, kube, pool, func() { pool.Spec.Disruption.ConsolidateAfter = "1s" })
	if _, err := cs.AppsV1().Deployments("default").UpdateScale(ctx, "empty", &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "default"}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the provisioner crashed at "+point, func() (bool, error) {
		_, err := os.Stat(marker)
		return err == nil, nil
	})
	tainted := func() (bool, error) {
		var n corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &n); err != nil {
			return false, err
		}
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }), nil
	}
	if point == crashpoint.AfterTaint {
		if ok, err := tainted(); err != nil || !ok {
			t.Fatalf("node %s not tainted at the crash (%v)", nc.Status.NodeName, err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nc.Status.NodeName}}
		update(t, kube, node, func() { metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1alpha1.AnnotationDoNotDisrupt, "true") })
		poll(t, "the taint no command holds lifted", func() (bool, error) {
			ok, err := tainted()
			return !ok, err
		})
		if err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &v1alpha1.NodeClaim{}); err != nil {
			t.Fatalf("the claim of a node held by do-not-disrupt is gone: %v", err)
		}
		update(t, kube, node, func() { delete(node.Annotations, v1alpha1.AnnotationDoNotDisrupt) })
	}
	poll(t, "the empty node's claim gone", func() (bool, error) {
		var got v1alpha1.NodeClaim
		err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &got)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	oneInstancePerClaim(t, ctx, kube, claims.Items)
	t.Logf("%s: restarts %d, claims left %d", point, sb.Restarts("nodeforge-provisioner"), len(claims.Items))
}

// onePodOnItsNode runs Deployment default/app, one pod of 1 cpu through
// nodeforge-scheduler, and returns the one claim it launched.
func onePodOnItsNode(t *testing.T, cs kubernetes.Interface, kube client.Client, app string) v1alpha1.NodeClaimList {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": app}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler",
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
		}},
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the "+app+" pod Running", func() (bool, error) {
		n, err := runningPods(ctx, cs, "app="+app)
		return n == 1, err
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil || len(claims.Items) != 1 {
		t.Fatalf("%d nodeclaims (err %v), want 1", len(claims.Items), err)
	}
	return claims
}
