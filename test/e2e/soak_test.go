package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/internal/sandbox/faultproxy"
)

// soakBudget is the soak pool's one budget, for every reason.
const soakBudget = "25%"

// soakRetry is --replacement-retry as the e2e sandboxes run it
// (quickProvisionerArgs): the first backoff of a called-off disruption.
const soakRetry = 5 * time.Second

// TestDisruptionSoakUnderAPIFaults runs a round of every disruption, on
// four pools of about two dozen nodes in all, while a proxy fails 5% of
// the provisioner's writes (429, 500, a dropped connection, a timeout
// after the write was applied; internal/sandbox/faultproxy):
//   - repair: a soak node's kubelet dies;
//   - consolidation: the packing pool's workload shrinks from 10 pods to
//     3; the soak workload drops its one-pod-per-node anti-affinity and
//     rolls, emptying nodes;
//   - emptiness racing a pod: the steady pool's deployment is scaled to 0
//     as a bare pod is created for that pool;
//   - drift: the soak pool's template label changes (12 nodes, a budget
//     of 25%);
//   - expiry, all along: the expiring pool's first claims expire after
//     45s (shortened on the claims: a pool may not say less than 1h).
//
// Each undo path is forced once per run by the proxy's rules
// (faultproxy.Rule), beside the 5% share: a failed taint (the command is
// called off), a failed Disrupting write (undone), a failed delete
// (carried on by the next reconcile), and a lost lease mid-command (the
// provisioner exits and its successor finishes or undoes what it left);
// each rule must have failed every write it was given. A give-up racing
// an interruption needs the AWS sandbox's queue and is forced in
// disruption's unit tests (TestGivingUpAReplacementDoesNotEraseAnInterruption).
//
// Checked at every watch event throughout (soakWatch): no claim stuck
// Disrupting; no taint flapping; the soak pool's budget never exceeded,
// a node counting from its taint; no pod evicted outside a drain, none
// bound to a deleted node; no taint left under no command for 30s. At
// the end every pod of the deployments runs, the bare pod was never
// deleted, every instance has exactly one claim and every claim one
// instance, and each reason was exercised. The faults injected and what
// held are logged, for docs/reliability.md.
func TestDisruptionSoakUnderAPIFaults(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	faults := faultproxy.Config{WriteShare: 0.05, Seed: 31, Hold: 2 * time.Second}
	t.Logf("faults injected: %s, between the provisioner and the API server", faults)
	sb, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated", ProvisionerFaults: &faults})

	repair := &v1alpha1.Repair{Policies: []v1alpha1.RepairPolicy{
		{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionUnknown), TolerationDuration: metav1.Duration{Duration: 5 * time.Second}},
	}}
	soakPool := poolFromDefault(t, kube, "soak", func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": "soak", "round": "1"}
		np.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c7.large", "c7.xlarge"}},
			{Key: v1alpha1.LabelCapacityType, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
		}
		np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Minute}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmptyOrUnderutilized, ConsolidateAfter: "5s",
			Budgets: []v1alpha1.Budget{{Nodes: soakBudget}}}
		np.Spec.Repair = repair
	})
	poolFromDefault(t, kube, "expiring", func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": "expiring"}
		np.Spec.Template.Spec.ExpireAfter = "1h" // its claims are shortened to 45s below
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: "5s", Budgets: []v1alpha1.Budget{{Nodes: "1"}}}
	})
	poolFromDefault(t, kube, "steady", func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": "steady"}
		np.Spec.Disruption = v1alpha1.Disruption{ConsolidationPolicy: v1alpha1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: "3s", Budgets: []v1alpha1.Budget{{Nodes: "100%"}}}
	})
	consolidatingPool(t, kube, "packing", "5s")
	spread := func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "soak"}}}}}}
	}
	for _, d := range []*appsv1.Deployment{deployment("soak", "soak", 12, spread), deployment("expiring", "expiring", 2), deployment("steady", "steady", 2), deployment("packing", "packing", 10)} {
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pollFor(t, 3*time.Minute, "26 pods Running on their pools' nodes", func() (bool, error) {
		for app, n := range map[string]int{"soak": 12, "expiring": 2, "steady": 2, "packing": 10} {
			if got, err := runningPods(ctx, cs, "app="+app); err != nil || got != n {
				return false, err
			}
		}
		return true, nil
	})

	// The provisioner's process start, as the watch needs it: a taint put
	// on before it started is its predecessor's.
	var startMu sync.Mutex
	started := time.Now()
	go func() {
		seen := sb.Restarts("nodeforge-provisioner")
		for ctx.Err() == nil {
			if n := sb.Restarts("nodeforge-provisioner"); n != seen {
				seen = n
				startMu.Lock()
				started = time.Now()
				startMu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Expiry, all along: the expiring pool's claims expire after 45s
	// (the pool may not say less than 1h; its claims may).
	expiring, err := poolClaims(ctx, kube, "expiring")
	if err != nil {
		t.Fatal(err)
	}
	for i := range expiring {
		shortenClaim(t, kube, &expiring[i], "45s", 0)
	}
	watch := newSoakWatch("soak", 0.25, soakRetry, func() time.Time {
		startMu.Lock()
		defer startMu.Unlock()
		return started
	})
	stop, err := watch.run(ctx, sb.Config, cs)
	if err != nil {
		t.Fatal(err)
	}

	// Repair: one soak node's kubelet dies.
	claims, err := poolClaims(ctx, kube, "soak")
	if err != nil || len(claims) == 0 {
		t.Fatalf("no claims of pool soak (%v)", err)
	}
	dead := claims[0]
	if _, err := cs.CoreV1().Nodes().Patch(ctx, dead.Status.NodeName, types.MergePatchType, []byte(`{"metadata":{"annotations":{"kwok.x-k8s.io/node":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.KillAndRestart(ctx, "kwok"); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 2*time.Minute, "the dead node repaired", func() (bool, error) {
		err := kube.Get(ctx, client.ObjectKeyFromObject(&dead), &v1alpha1.NodeClaim{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
	// Consolidation: the packing pool's workload shrinks from 10 pods to
	// 3, leaving its nodes underused; the soak workload may share nodes
	// now, and rolls, leaving its old nodes empty.
	scaleTo(t, cs, "packing", 3)
	dep, err := cs.AppsV1().Deployments("default").Get(ctx, "soak", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Affinity = nil
	if _, err := cs.AppsV1().Deployments("default").Update(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Emptiness racing a bare pod: the steady pool's deployment goes as a
	// pod with no controller arrives for the same pool.
	scaleTo(t, cs, "steady", 0)
	barePod(t, cs, "soak-bare", "steady", nil)
	bare, err := cs.CoreV1().Pods("default").Get(ctx, "soak-bare", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pollFor(t, 2*time.Minute, "the packing pool consolidated", func() (bool, error) {
		return disruptions(cs, string(v1alpha1.DisruptionReasonUnderutilized)) > 0, nil
	})
	// The undo paths, forced on three soak nodes as drift begins, and on
	// the provisioner's lease once it is under way. Each write is tried
	// six times (the executor's writeBackoff), so six failures in a row
	// exhaust it: the command is undone, or carried on by the next
	// reconcile.
	claims, err = poolClaims(ctx, kube, "soak")
	if err != nil {
		t.Fatal(err)
	}
	// Claims in no command, whose nodes no command has tainted either
	// (a command pausing after its taint has written it already).
	var free []v1alpha1.NodeClaim
	for _, nc := range claims {
		var n corev1.Node
		if err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &n); err != nil || tainted(&n) {
			continue
		}
		if nc.Name != dead.Name && nc.Status.Phase == v1alpha1.NodeClaimInitialized && nc.DeletionTimestamp.IsZero() && nc.Annotations[v1alpha1.AnnotationReplacement] == "" {
			free = append(free, nc)
		}
	}
	if len(free) < 3 {
		t.Fatalf("%d soak claims in no command, want 3 to force the undo paths on", len(free))
	}
	undos := []struct {
		path string
		rule faultproxy.Rule
	}{
		{"a failed taint calls the command off", faultproxy.Rule{Resource: "nodes", Verb: "update", Name: free[0].Status.NodeName,
			// The provisioner writes nodes as protobuf, where the taint's
			// key is the plain string.
			Body: faultproxy.Contains(v1alpha1.TaintDisrupted), Fail: 6, Fault: faultproxy.InternalError}},
		{"a failed Disrupting write is undone", faultproxy.Rule{Resource: "nodeclaims/status", Verb: "update", Name: free[1].Name,
			Body: faultproxy.Contains(`"phase":"Disrupting"`), Fail: 6, Fault: faultproxy.InternalError}},
		{"a failed delete is carried on", faultproxy.Rule{Resource: "nodeclaims", Verb: "delete", Name: free[2].Name, Fail: 6, Fault: faultproxy.InternalError}},
	}
	ids := make([]faultproxy.RuleID, len(undos))
	for i, u := range undos {
		ids[i] = sb.Faults.AddRule(u.rule)
		t.Logf("undo path %q forced by: %s", u.path, u.rule)
	}
	restarts := sb.Restarts("nodeforge-provisioner")

	// Drift: the soak pool's nodes are relabelled.
	update(t, kube, soakPool, func() { soakPool.Spec.Template.ObjectMeta.Labels["round"] = "2" })
	// A lost lease mid-command: the provisioner's renewals fail for
	// longer than its renew deadline (6s, quickTimers) once drift's
	// commands are under way; it exits and is started again.
	pollFor(t, time.Minute, "a soak node tainted by drift", func() (bool, error) {
		for _, nc := range free {
			var n corev1.Node
			if err := kube.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, &n); err == nil && tainted(&n) {
				return true, nil
			}
		}
		return false, nil
	})
	// Every renewal fails until it has exited (client-go tries each
	// renewal twice, every second, until the renew deadline); then its
	// successor may take the lease.
	lease := sb.Faults.AddRule(faultproxy.Rule{Resource: "leases", Verb: "update", Name: "nodeforge-provisioner", Fail: 1000, Fault: faultproxy.InternalError})
	for deadline := time.Now().Add(time.Minute); sb.Restarts("nodeforge-provisioner") == restarts; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the provisioner did not restart after losing its lease: %+v", sb.Faults.RuleCount(lease))
		}
	}
	lost := sb.Faults.RemoveRule(lease)

	pollFor(t, 4*time.Minute, "every soak node drifted, the dead one repaired, and every pod Running", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, "soak")
		if err != nil {
			return false, err
		}
		for _, nc := range claims {
			if nc.Name == dead.Name || nc.Spec.Labels["round"] != "2" {
				return false, nil
			}
			if nc.Status.Phase != v1alpha1.NodeClaimInitialized || !nc.DeletionTimestamp.IsZero() || nc.Annotations[v1alpha1.AnnotationReplacement] != "" {
				return false, nil
			}
		}
		for app, n := range map[string]int{"soak": 12, "expiring": 2, "packing": 3} {
			if got, err := runningPods(ctx, cs, "app="+app); err != nil || got != n {
				return false, err
			}
		}
		return disruptions(cs, string(v1alpha1.DisruptionReasonExpired)) > 0, nil
	})
	// The expiring pool's workload goes; its nodes follow, empty.
	scaleTo(t, cs, "expiring", 0)
	pollFor(t, 2*time.Minute, "the expiring pool emptied and every claim settled", func() (bool, error) {
		claims, err := poolClaims(ctx, kube, "expiring")
		if err != nil || len(claims) > 0 {
			return false, err
		}
		var all v1alpha1.NodeClaimList
		if err := kube.List(ctx, &all); err != nil {
			return false, err
		}
		for _, nc := range all.Items {
			if nc.Status.ProviderID == "" || !nc.DeletionTimestamp.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	samples := stop()

	var p corev1.Pod
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: bare.Name}, &p); err != nil || p.UID != bare.UID {
		t.Errorf("the bare pod was deleted (%v): emptiness took its node as it arrived", err)
	} else if p.Status.Phase != corev1.PodRunning {
		t.Errorf("the bare pod is %s, not Running", p.Status.Phase)
	}
	var all v1alpha1.NodeClaimList
	if err := kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	instances := oneInstancePerClaim(t, ctx, kube, all.Items)
	for _, v := range watch.violations() {
		t.Error(v)
	}
	for i, u := range undos {
		c := sb.Faults.RemoveRule(ids[i])
		t.Logf("undo path %q: %d of its writes failed", u.path, c.Failed)
		if c.Failed < u.rule.Fail {
			t.Errorf("undo path %q was not reached: %d of %d failures injected (%s)", u.path, c.Failed, u.rule.Fail, u.rule)
		}
	}
	t.Logf("undo path \"a lost lease mid-command\": %d lease renewals failed, %d provisioner restarts", lost.Failed, sb.Restarts("nodeforge-provisioner")-restarts)
	taints, peak := watch.stats()
	t.Logf("soak: %d taints put on; at most %d soak nodes disrupting at once", taints, peak)
	r := sb.Faults.Report()
	t.Logf("soak: %d watch events checked; disruptions by reason %v; %d claims and %d instances at the end", samples, disruptionReasons(ctx, t, cs), len(all.Items), instances)
	t.Logf("soak: provisioner requests through the proxy: %d writes, %d reads; faults injected: %d (%v); failed writes by resource: %s",
		r.Writes, r.Reads, r.Total(), r.Injected, sortedCounts(r.WritesFailed))
	for _, reason := range []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonUnhealthy, v1alpha1.DisruptionReasonUnderutilized, v1alpha1.DisruptionReasonDrifted, v1alpha1.DisruptionReasonExpired, v1alpha1.DisruptionReasonEmpty} {
		if disruptions(cs, string(reason)) == 0 {
			t.Errorf("no claim was disrupted for %s: the soak did not run that round", reason)
		}
	}
	if !t.Failed() {
		t.Logf("soak: held: 0 claims stuck Disrupting, 0 taints left under no command, budget %s never exceeded, 0 pods lost, 0 orphaned instances", soakBudget)
	}
	if r.Total() == 0 {
		t.Error("the proxy injected no fault: the soak proved nothing")
	}
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// disruptions counts the claims disrupted or being replaced for reason
// so far, from their Disrupting and Replacing Events.
func disruptions(cs kubernetes.Interface, reason string) int {
	evs, err := cs.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if (e.Reason == v1alpha1.ReasonDisrupting || e.Reason == v1alpha1.ReasonReplacing) && e.Action == reason {
			seen[e.Regarding.Name] = true
		}
	}
	return len(seen)
}

// reasons counts the claims disrupted or replaced, by reason, from the
// first Disrupting or Replacing Event of each.
func disruptionReasons(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]int {
	evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if (e.Reason == v1alpha1.ReasonDisrupting || e.Reason == v1alpha1.ReasonReplacing) && e.Regarding.Kind == "NodeClaim" && !seen[e.Regarding.Name] {
			seen[e.Regarding.Name] = true
			out[e.Action]++
		}
	}
	return out
}
