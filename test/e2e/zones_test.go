package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/sandbox"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
)

// repairPolicies tolerate a node not Ready for d.
func repairPolicies(d time.Duration) *v1alpha1.Repair {
	return &v1alpha1.Repair{Policies: []v1alpha1.RepairPolicy{
		{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionUnknown), TolerationDuration: metav1.Duration{Duration: d}},
		{ConditionType: string(corev1.NodeReady), ConditionStatus: string(corev1.ConditionFalse), TolerationDuration: metav1.Duration{Duration: d}},
	}}
}

// zonalPool is a pool of one zone whose pods select it by label team=name,
// launched with node class class, repaired after tolerate not Ready,
// never consolidated, one node disrupted at a time.
func zonalPool(t *testing.T, kube client.Client, name, zone, class string, tolerate time.Duration) {
	t.Helper()
	poolFromDefault(t, kube, name, func(np *v1alpha1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(name)}
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, v1alpha1.NodeSelectorRequirementWithMinValues{
			Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}})
		np.Spec.Template.Spec.NodeClassRef.Name = class
		np.Spec.Repair = repairPolicies(tolerate)
		np.Spec.Disruption.ConsolidateAfter = v1alpha1.Never
		np.Spec.Disruption.Budgets = []v1alpha1.Budget{{Nodes: "1"}}
	})
}

// setFaults sets the faults of the SimulatedNodeClass class (none: clears
// them).
func setFaults(t *testing.T, kube client.Client, class string, faults ...v1alpha1.SimulatedFault) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c v1alpha1.SimulatedNodeClass
		if err := kube.Get(ctx, client.ObjectKey{Name: class}, &c); err != nil {
			return err
		}
		c.Spec.Faults = faults
		return kube.Update(ctx, &c)
	}); err != nil {
		t.Fatal(err)
	}
}

// leaseTaken tells whether the simulated cloud (or the test) has failed
// the node: its lease held by simulated.FailedHolder.
func leaseTaken(ctx context.Context, cs kubernetes.Interface, node string) (bool, error) {
	l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ptr.Deref(l.Spec.HolderIdentity, "") == simulated.FailedHolder, nil
}

// notReady tells whether the node's Ready condition is anything but True.
func notReady(ctx context.Context, cs kubernetes.Interface, node string) (bool, error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue, nil
		}
	}
	return true, nil
}

// repairEvent is when a claim was repaired and the rule that allowed it.
type repairEvent struct {
	claim string
	at    time.Time
	note  string
}

// repairsOf lists the repair of each claim that was repaired, oldest
// first: its first Event with action Unhealthy (Replacing when a
// replacement is launched first, then Disrupting; Disrupting alone when
// none is needed); and every RepairHeld note.
func repairsOf(ctx context.Context, cs kubernetes.Interface, claims []v1alpha1.NodeClaim) ([]repairEvent, []string, error) {
	var out []repairEvent
	var held []string
	for _, nc := range claims {
		evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=" + nc.Name})
		if err != nil {
			return nil, nil, err
		}
		var first *repairEvent
		for _, e := range evs.Items {
			switch {
			case e.Reason == v1alpha1.ReasonRepairHeld:
				held = append(held, e.Note)
			case (e.Reason == v1alpha1.ReasonReplacing || e.Reason == v1alpha1.ReasonDisrupting) && e.Action == string(v1alpha1.DisruptionReasonUnhealthy):
				if first == nil || e.EventTime.Time.Before(first.at) {
					first = &repairEvent{claim: nc.Name, at: e.EventTime.Time, note: e.Note}
				}
			}
		}
		if first != nil {
			out = append(out, *first)
		}
	}
	slices.SortFunc(out, func(a, b repairEvent) int { return a.at.Compare(b.at) })
	return out, held, nil
}

// TestZoneOutageIsRepairedAtTheSecondaryRate: 3 of the 4 nodes of zone-a
// fail at once (a NodeFailure fault of their SimulatedNodeClass naming
// the zone). With the zone larger than --large-cluster-size-threshold
// (3 here) and more than --unhealthy-zone-threshold of it not Ready, the
// zone is in PartialDisruption, and its nodes are repaired one at a time
// at --secondary-node-repair-rate (0.1/s: 10s apart), though the normal
// rate would allow one a second: the Events of the repairs say so, and
// their measured spacing is at least 10s. Every pod ends up Running on a
// replacement.
func TestZoneOutageIsRepairedAtTheSecondaryRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secondary = 0.1
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated", ProvisionerArgs: []string{
		"--node-repair-rate=1", fmt.Sprintf("--secondary-node-repair-rate=%g", secondary),
		"--large-cluster-size-threshold=3", "--unhealthy-zone-threshold=0.3",
	}})
	failingClass := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "failing"}}
	failingClass.Spec.RegistrationDelay = &metav1.Duration{Duration: 35 * time.Second}
	if err := kube.Create(ctx, failingClass); err != nil {
		t.Fatal(err)
	}
	pools := []string{"zone-fail-1", "zone-fail-2", "zone-fail-3", "zone-ok"}
	for _, p := range pools {
		class := "failing"
		if p == "zone-ok" {
			class = "default"
		}
		zonalPool(t, kube, p, "zone-a", class, 10*time.Second)
		d := deployment(p, p, 1)
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var failing []v1alpha1.NodeClaim
	poll(t, "one node Running its pod in each of the 4 pools", func() (bool, error) {
		failing = nil
		for _, p := range pools {
			n, err := runningPods(ctx, cs, "app="+p)
			if err != nil || n != 1 {
				return false, err
			}
			claims, err := poolClaims(ctx, kube, p)
			if err != nil || len(claims) != 1 || claims[0].Status.Phase != v1alpha1.NodeClaimInitialized {
				return false, err
			}
			if p != "zone-ok" {
				failing = append(failing, claims[0])
			}
		}
		return true, nil
	})

	setFaults(t, kube, "failing", v1alpha1.SimulatedFault{Kind: v1alpha1.FaultNodeFailure, Zones: []string{"zone-a"}})
	poll(t, "the simulated cloud failing the 3 nodes of class failing", func() (bool, error) {
		for _, nc := range failing {
			if ok, err := leaseTaken(ctx, cs, nc.Status.NodeName); !ok {
				return false, err
			}
		}
		return true, nil
	})
	// kwok must not run or delete the failed nodes' pods (a dead kubelet
	// does neither): the simulated cloud marks them for the sandbox's
	// kwok stages to leave alone.
	poll(t, "the pods of the 3 failed nodes marked "+simulated.PodOfFailedNode, func() (bool, error) {
		for _, nc := range failing {
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nc.Status.NodeName})
			if err != nil || len(pods.Items) == 0 {
				return false, err
			}
			for _, p := range pods.Items {
				if p.Annotations[simulated.PodOfFailedNode] != "true" {
					return false, nil
				}
			}
		}
		return true, nil
	})
	// The outage ends for new machines: replacements of class failing
	// come up, 35s after launch (the class's registration delay). The
	// failed nodes stay failed, each until its replacement is up (a
	// repair drains at once, its drain deadline now): the zone stays in
	// PartialDisruption while the three are repaired, 10s apart.
	setFaults(t, kube, "failing")
	failed := time.Now()

	pollFor(t, 6*time.Minute, "the 3 failed claims gone and their pods Running elsewhere", func() (bool, error) {
		for _, nc := range failing {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &v1alpha1.NodeClaim{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		for _, p := range pools {
			if n, err := runningPods(ctx, cs, "app="+p); err != nil || n != 1 {
				return false, err
			}
		}
		return true, nil
	})
	t.Logf("3 failed nodes repaired %s after they failed", time.Since(failed).Round(time.Second))

	repairs, held, err := repairsOf(ctx, cs, failing)
	if err != nil {
		t.Fatal(err)
	}
	if len(repairs) != 3 {
		t.Fatalf("want one repair Event on each of the 3 failed claims, got %d: %+v", len(repairs), repairs)
	}
	partial := 0
	for i, r := range repairs {
		t.Logf("repair of %s at +%s: %s", r.claim, r.at.Sub(repairs[0].at).Round(100*time.Millisecond), r.note)
		if !strings.Contains(r.note, "zone zone-a is in PartialDisruption") || !strings.Contains(r.note, fmt.Sprintf("repairing at %g/s", secondary)) {
			continue
		}
		partial++
		if i == 0 || !strings.Contains(repairs[i-1].note, "PartialDisruption") {
			continue
		}
		// A token each 10s: the Events are written a moment after the
		// token is taken, so allow them a second of skew.
		if gap := r.at.Sub(repairs[i-1].at); gap < time.Duration(float64(time.Second)/secondary)-time.Second {
			t.Errorf("repairs %s and %s in a PartialDisruption zone only %s apart; the secondary rate %g/s allows one each %s",
				repairs[i-1].claim, r.claim, gap, secondary, time.Duration(float64(time.Second)/secondary))
		}
	}
	if partial < 2 {
		t.Errorf("want at least 2 repairs decided by the PartialDisruption rule (so that their spacing is measured), got %d", partial)
	}
	if !slices.ContainsFunc(held, func(n string) bool { return strings.Contains(n, "the zone's last repair was too recent") }) {
		t.Errorf("no RepairHeld Event says the zone's token bucket held a repair back; got %q", held)
	}
}

// TestEveryZoneDownRepairsNothing: every node of every zone fails (the
// NodeFailure fault of the pools' node class names nothing, so it names
// every instance; the sandbox's control-plane node, in no zone, is
// failed by hand the same way). Every zone is then in FullDisruption,
// which the node lifecycle controller reads as the control plane's or
// the network's fault: nothing is repaired though the nodes are past
// their toleration, and each claim's RepairHeld Event says why.
func TestEveryZoneDownRepairsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, cs, kube := startSandbox(t, sandbox.Options{CloudProvider: "simulated"})
	if err := kube.Create(ctx, &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	pools := map[string]string{"down-a": "zone-a", "down-b": "zone-b"}
	for p, zone := range pools {
		zonalPool(t, kube, p, zone, "doomed", 10*time.Second)
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, deployment(p, p, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var claims []v1alpha1.NodeClaim
	poll(t, "one node Running its pod in each zone", func() (bool, error) {
		claims = nil
		for p := range pools {
			n, err := runningPods(ctx, cs, "app="+p)
			if err != nil || n != 1 {
				return false, err
			}
			cl, err := poolClaims(ctx, kube, p)
			if err != nil || len(cl) != 1 || cl[0].Status.Phase != v1alpha1.NodeClaimInitialized {
				return false, err
			}
			claims = append(claims, cl[0])
		}
		return true, nil
	})
	// The control-plane node dies first: its lease taken as the simulated
	// cloud takes its own nodes'. Only once it is not Ready do the pools'
	// nodes fail, so that they all turn Unknown within the toleration of
	// each other: had the control-plane node's zone still been Normal when
	// a pool node's toleration ran out, that node's zone alone would have
	// been down, and repairing it would be right.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "sandbox-control-plane", metav1.GetOptions{})
		if err != nil {
			return err
		}
		// The taking is the lease's last renewal, as the simulated cloud
		// writes it (see simulated.FailedHolder): a write that left the
		// renew time as it was would keep the node lifecycle controller
		// from ever marking the node.
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(simulated.FailedHolder), ptr.To[int32](10*365*24*3600)
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, err = cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 3*time.Minute, "the control-plane node not Ready", func() (bool, error) {
		return notReady(ctx, cs, "sandbox-control-plane")
	})
	setFaults(t, kube, "doomed", v1alpha1.SimulatedFault{Kind: v1alpha1.FaultNodeFailure})
	nodes := []string{"sandbox-control-plane"}
	for _, nc := range claims {
		nodes = append(nodes, nc.Status.NodeName)
	}
	pollFor(t, 3*time.Minute, "every node not Ready", func() (bool, error) {
		for _, n := range nodes {
			if ok, err := notReady(ctx, cs, n); !ok {
				return false, err
			}
		}
		return true, nil
	})
	// Past the toleration (10s, which also covers the nodes turning
	// Unknown a few seconds apart), for several repair rounds (1s each):
	// nothing may be repaired.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, nc := range claims {
			var got v1alpha1.NodeClaim
			if err := kube.Get(ctx, client.ObjectKeyFromObject(&nc), &got); err != nil {
				t.Fatalf("claim %s of a node in a cluster whose every zone is down: %v", nc.Name, err)
			}
			if !got.DeletionTimestamp.IsZero() || got.Annotations[v1alpha1.AnnotationReplacement] != "" {
				t.Fatalf("claim %s is being repaired though every zone is in FullDisruption (deleting: %v, replacement: %q)",
					nc.Name, !got.DeletionTimestamp.IsZero(), got.Annotations[v1alpha1.AnnotationReplacement])
			}
		}
		time.Sleep(time.Second)
	}
	repairs, held, err := repairsOf(ctx, cs, claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(repairs) > 0 {
		t.Errorf("repairs while every zone is down: %+v", repairs)
	}
	for _, nc := range claims {
		_, notes, err := claimEvents(ctx, cs, nc.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "every zone is in FullDisruption") }) {
			t.Errorf("claim %s has no Event saying every zone is in FullDisruption; notes %q (all held: %q)", nc.Name, notes, held)
		}
	}
}
