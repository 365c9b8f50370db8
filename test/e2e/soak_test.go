package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
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
	"github.com/nodeforge/nodeforge/internal/faultproxy"
	"github.com/nodeforge/nodeforge/internal/sandbox"
)

// soakBudget is the soak pool's one budget, for every reason.
const soakBudget = "25%"

// TestDisruptionSoakUnderAPIFaults runs a round of every disruption, on
// four pools of about two dozen nodes in all, while a proxy fails 5% of
// the provisioner's writes (429, 500, a dropped connection, a timeout
// after the write was applied; internal/faultproxy):
//   - repair: a soak node's kubelet dies;
//   - consolidation: the packing pool's workload shrinks from 10 pods to
//     3; the soak workload drops its one-pod-per-node anti-affinity and
//     rolls, emptying nodes;
//   - emptiness racing a pod: the steady pool's deployment is scaled to 0
//     as a bare pod is created for that pool;
//   - drift: the soak pool's template label changes (12 nodes, a budget
//     of 25%);
//   - expiry, all along: the expiring pool's nodes expire after 45s.
//
// Sampled every second throughout, and at the end:
//   - no claim stays Disrupting without being deleted (10s);
//   - no node keeps nodeforge.dev/disrupted while its claim is in no
//     command (Initialized, not deleted, no replacement) for 30s;
//   - the soak pool's budget is never exceeded;
//
// and at the end every pod of the deployments runs, the bare pod was
// never deleted, every instance has exactly one claim, and each reason
// was exercised. The faults injected and what held are logged, for
// docs/reliability.md.
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
		np.Spec.Template.Spec.ExpireAfter = "45s"
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

	watch := newSoakWatch(cs, kube)
	stop := watch.run(ctx)

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
		return watch.disruptions(string(v1alpha1.DisruptionReasonUnderutilized)) > 0, nil
	})
	// Drift: the soak pool's nodes are relabelled.
	update(t, kube, soakPool, func() { soakPool.Spec.Template.ObjectMeta.Labels["round"] = "2" })

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
		return watch.disruptions(string(v1alpha1.DisruptionReasonExpired)) > 0, nil
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
	r := sb.Faults.Report()
	t.Logf("soak: %d samples; disruptions by reason %v; %d claims and %d instances at the end", samples, watch.reasons(ctx, t), len(all.Items), instances)
	t.Logf("soak: provisioner requests through the proxy: %d writes, %d reads; faults injected: %d (%v); failed writes by resource: %s",
		r.Writes, r.Reads, r.Total(), r.Injected, sortedCounts(r.WritesFailed))
	for _, reason := range []v1alpha1.DisruptionReason{v1alpha1.DisruptionReasonUnhealthy, v1alpha1.DisruptionReasonUnderutilized, v1alpha1.DisruptionReasonDrifted, v1alpha1.DisruptionReasonExpired, v1alpha1.DisruptionReasonEmpty} {
		if watch.disruptions(string(reason)) == 0 {
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

// soakWatch samples the cluster for what must never be.
type soakWatch struct {
	cs   kubernetes.Interface
	kube client.Client

	mu      sync.Mutex
	bad     []string
	samples int
	// since: when a claim was first seen Disrupting and not deleted, and
	// when a node was first seen tainted under no command.
	disrupting map[string]time.Time
	tainted    map[string]time.Time
}

func newSoakWatch(cs kubernetes.Interface, kube client.Client) *soakWatch {
	return &soakWatch{cs: cs, kube: kube, disrupting: map[string]time.Time{}, tainted: map[string]time.Time{}}
}

// run samples every second until the returned stop is called, which
// returns how many samples were taken.
func (w *soakWatch) run(ctx context.Context) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.sample(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		w.sample(context.Background())
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.samples
	}
}

func (w *soakWatch) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(w.bad, msg) {
		w.bad = append(w.bad, msg)
	}
}

func (w *soakWatch) sample(ctx context.Context) {
	var claims v1alpha1.NodeClaimList
	var nodes corev1.NodeList
	if w.kube.List(ctx, &claims) != nil || w.kube.List(ctx, &nodes) != nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	byNode := map[string]*v1alpha1.NodeClaim{}
	total, disrupting := 0, 0
	seenDisrupting, seenTainted := map[string]bool{}, map[string]bool{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.Status.NodeName != "" {
			byNode[nc.Status.NodeName] = nc
		}
		if nc.Status.Phase == v1alpha1.NodeClaimDisrupting && nc.DeletionTimestamp.IsZero() {
			seenDisrupting[nc.Name] = true
			if _, ok := w.disrupting[nc.Name]; !ok {
				w.disrupting[nc.Name] = now
			}
			if now.Sub(w.disrupting[nc.Name]) > 10*time.Second {
				w.fail("nodeclaim %s has been Disrupting, not deleted, for more than 10s", nc.Name)
			}
		}
		if nc.Spec.NodePool != "soak" || nc.Status.NodeName == "" {
			continue
		}
		total++
		if nc.Status.Phase == v1alpha1.NodeClaimDisrupting || !nc.DeletionTimestamp.IsZero() || nc.Annotations[v1alpha1.AnnotationReplacement] != "" {
			disrupting++
		}
	}
	if allowed := int(math.Ceil(0.25 * float64(total))); disrupting > allowed {
		w.fail("pool soak had %d of %d nodes disrupting at %s, more than its budget %s (%d)", disrupting, total, now.Format(time.TimeOnly), soakBudget, allowed)
	}
	for _, n := range nodes.Items {
		nc := byNode[n.Name]
		if nc == nil || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted }) {
			continue
		}
		if nc.Status.Phase != v1alpha1.NodeClaimInitialized || !nc.DeletionTimestamp.IsZero() || nc.Annotations[v1alpha1.AnnotationReplacement] != "" {
			continue // in a command the API server shows
		}
		seenTainted[n.Name] = true
		if _, ok := w.tainted[n.Name]; !ok {
			w.tainted[n.Name] = now
		}
		if now.Sub(w.tainted[n.Name]) > 30*time.Second {
			w.fail("node %s has had %s for more than 30s while its claim %s is in no command", n.Name, v1alpha1.TaintDisrupted, nc.Name)
		}
	}
	for k := range w.disrupting {
		if !seenDisrupting[k] {
			delete(w.disrupting, k)
		}
	}
	for k := range w.tainted {
		if !seenTainted[k] {
			delete(w.tainted, k)
		}
	}
}

func (w *soakWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bad)
}

// disruptions counts the claims disrupted or being replaced for reason
// so far, from their Disrupting and Replacing Events.
func (w *soakWatch) disruptions(reason string) int {
	evs, err := w.cs.EventsV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if (e.Reason == "Disrupting" || e.Reason == "Replacing") && e.Action == reason {
			seen[e.Regarding.Name] = true
		}
	}
	return len(seen)
}

// reasons counts the claims disrupted or replaced, by reason, from the
// first Disrupting or Replacing Event of each.
func (w *soakWatch) reasons(ctx context.Context, t *testing.T) map[string]int {
	evs, err := w.cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		if (e.Reason == "Disrupting" || e.Reason == "Replacing") && e.Regarding.Kind == "NodeClaim" && !seen[e.Regarding.Name] {
			seen[e.Regarding.Name] = true
			out[e.Action]++
		}
	}
	return out
}
