package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider/simulated"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
)

// TestCloudFaults injects faults through the SimulatedNodeClass and checks
// the provisioner works around them: capacity errors on the cheapest
// options, and a node that never registers.
func TestCloudFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	_, kubeconfig := upSandbox(t, dir, "NODEFORGE_REGISTRATION_TTL=5s")
	cs := clientFor(t, kubeconfig)
	kube := nodeforgeClient(t, kubeconfig)
	setFaults := func(faults ...v1alpha1.SimulatedFault) {
		t.Helper()
		class := &v1alpha1.SimulatedNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		update(t, kube, class, func() { class.Spec.Faults = faults })
	}
	// runPod creates a pod that only a new node can hold and returns the
	// node it ends up Running on.
	runPod := func(name string, selector map[string]string) *corev1.Node {
		t.Helper()
		sel := map[string]string{v1alpha1.LabelCapacityType: "spot"}
		for k, v := range selector {
			sel[k] = v
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: sel,
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var node *corev1.Node
		poll(t, "pod "+name+" Running", func() (bool, error) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, err
			}
			node, err = cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			return err == nil, err
		})
		return node
	}

	t.Run("capacity errors on the cheapest options: the next option launches and they are published unavailable", func(t *testing.T) {
		cheapest := []string{"c7g.large", "c7g.xlarge"}
		setFaults(v1alpha1.SimulatedFault{Kind: v1alpha1.FaultInsufficientCapacity, InstanceTypes: cheapest})
		defer setFaults()
		node := runPod("ice", nil)
		got := node.Labels[corev1.LabelInstanceTypeStable]
		if slices.Contains(cheapest, got) {
			t.Fatalf("launched %s, which has no capacity", got)
		}
		// The story as kubectl describe tells it, one Event on the pod: the
		// scheduler's FailedScheduling names the claim it was nominated
		// to; the claim's own Events say it launched and bound its pods.
		var claims v1alpha1.NodeClaimList
		if err := kube.List(ctx, &claims); err != nil {
			t.Fatal(err)
		}
		claim := ""
		for _, nc := range claims.Items {
			if nc.Status.NodeName == node.Name {
				claim = nc.Name
			}
		}
		if claim == "" {
			t.Fatalf("no nodeclaim has node %s", node.Name)
		}
		poll(t, "pod ice's FailedScheduling Event naming nodeclaim "+claim, func() (bool, error) {
			notes, err := podEventNotes(ctx, cs, "default", "ice", "FailedScheduling")
			return slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "nominated to nodeclaim "+claim) }), err
		})
		for _, want := range []string{v1alpha1.ReasonLaunched, v1alpha1.ReasonInitialized} {
			poll(t, "event "+want+" on nodeclaim "+claim, func() (bool, error) {
				evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=NodeClaim,regarding.name=" + claim + ",reason=" + want})
				return err == nil && len(evs.Items) > 0, err
			})
		}
		// Not an Event a pod for each step the claim takes.
		if reasons, err := podEventReasons(ctx, cs, "default", "ice"); err != nil || slices.ContainsFunc(reasons, func(r string) bool {
			return slices.Contains([]string{"Nominated", v1alpha1.ReasonLaunched, "Scheduled"}, r)
		}) {
			t.Errorf("pod ice's Events: %v (err %v), want none of Nominated, Launched, Scheduled: the claim's Events tell them once", reasons, err)
		}
		zone := node.Labels[corev1.LabelTopologyZone]
		poll(t, "c7g.large published unavailable in "+zone, func() (bool, error) {
			types, err := cluster.InstanceTypesOf(ctx, kube, "default")
			if err != nil {
				return false, err
			}
			for _, it := range types {
				for _, o := range it.Offerings {
					if it.Name == "c7g.large" && o.Zone == zone && o.CapacityType == "spot" {
						return !o.Available, nil
					}
				}
			}
			return false, nil
		})
	})

	t.Run("a node that never registers: claim removed and instance terminated after the TTL, the pod Running elsewhere", func(t *testing.T) {
		// m7.large is cheapest in zone-b (spot); its nodes there never join.
		setFaults(v1alpha1.SimulatedFault{Kind: v1alpha1.FaultNeverRegister, Zones: []string{"zone-b"}})
		defer setFaults()
		node := runPod("ttl", map[string]string{corev1.LabelInstanceTypeStable: "m7.large"})
		if z := node.Labels[corev1.LabelTopologyZone]; z == "zone-b" {
			t.Fatalf("pod runs in zone-b, where nodes never register")
		}
		evs, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		timedOut := ""
		for _, e := range evs.Items {
			if e.Reason == v1alpha1.ReasonRegistrationTimeout {
				timedOut = e.Regarding.Name
			}
		}
		if timedOut == "" {
			t.Fatal("no RegistrationTimeout event on a nodeclaim")
		}
		if reasons, err := podEventReasons(ctx, cs, "default", "ttl"); err != nil || !slices.Contains(reasons, v1alpha1.ReasonRegistrationTimeout) {
			t.Errorf("pod ttl has events %v (err %v), want one RegistrationTimeout", reasons, err)
		}
		var nc v1alpha1.NodeClaim
		if err := kube.Get(ctx, client.ObjectKey{Name: timedOut}, &nc); err == nil {
			t.Errorf("nodeclaim %s still exists after its registration timed out", timedOut)
		}
		inventory, err := simulated.Inventory(ctx, kube, "nodeforge")
		if err != nil {
			t.Fatal(err)
		}
		for providerID, in := range inventory {
			if in.NeverRegister {
				t.Errorf("instance %s, whose node never registered, was not terminated", providerID)
			}
		}
	})
}

// TestPoolLimits fills a pool capped at 4 cpu: what fits under the cap runs,
// the rest stays Pending with an Event that says the limit is reached, and
// no claim ever takes the pool past it.
func TestPoolLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, kubeconfig := upSandbox(t, t.TempDir())
	cs := clientFor(t, kubeconfig)
	kube := nodeforgeClient(t, kubeconfig)
	pool := &v1alpha1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Spec: v1alpha1.NodePoolSpec{
		Template: v1alpha1.NodeClaimTemplate{
			ObjectMeta: v1alpha1.NodeClaimTemplateObjectMeta{Labels: map[string]v1alpha1.LabelValue{"team": "capped"}},
			Spec:       v1alpha1.NodeClaimTemplateSpec{NodeClassRef: v1alpha1.NodeClassReference{Group: v1alpha1.Group, Kind: "SimulatedNodeClass", Name: "default"}},
		},
		Limits:     v1alpha1.Limits{corev1.ResourceCPU: resource.MustParse("4")},
		Disruption: v1alpha1.Disruption{ConsolidateAfter: "Never"},
	}}
	if err := kube.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var names []string
	for range 6 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "capped-", Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: "nodeforge-scheduler", NodeSelector: map[string]string{"team": "capped"},
			Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
		}}
		created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, created.Name)
	}
	var running, refused int
	poll(t, "every pod Running or refused for the limit", func() (bool, error) {
		running, refused = 0, 0
		evs, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, name := range names {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
				continue
			}
			if slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == name && e.Reason == v1alpha1.ReasonNoInstanceType && strings.Contains(e.Note, "pool capped: limits reached")
			}) {
				refused++
			}
		}
		return running+refused == len(names) && running > 0, nil
	})
	var claims v1alpha1.NodeClaimList
	if err := kube.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	total := resource.Quantity{}
	for _, nc := range claims.Items {
		if nc.Spec.NodePool == "capped" {
			total.Add(nc.Status.Capacity[corev1.ResourceCPU])
		}
	}
	if total.Cmp(resource.MustParse("4")) > 0 {
		t.Errorf("pool capped at 4 cpu launched %s cpu", total.String())
	}
	if refused == 0 {
		t.Errorf("all %d pods ran under a 4-cpu cap", running)
	}
	t.Logf("%d pods Running, %d refused at the limit, %s cpu launched", running, refused, total.String())
}

// podEventNotes are the notes of the Events of reason on the pod.
func podEventNotes(ctx context.Context, cs kubernetes.Interface, namespace, name, reason string) ([]string, error) {
	return podEventField(ctx, cs, namespace, name, ",reason="+reason, func(e eventsv1.Event) string { return e.Note })
}

// podEventReasons lists the reasons of the events regarding a pod.
func podEventReasons(ctx context.Context, cs kubernetes.Interface, namespace, name string) ([]string, error) {
	return podEventField(ctx, cs, namespace, name, "", func(e eventsv1.Event) string { return e.Reason })
}

// podEventField is field of each Event regarding the pod that the field
// selector more (",reason=…", or "") also selects.
func podEventField(ctx context.Context, cs kubernetes.Interface, namespace, name, more string, field func(eventsv1.Event) string) ([]string, error) {
	evs, err := cs.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.kind=Pod,regarding.name=" + name + more})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(evs.Items))
	for _, e := range evs.Items {
		out = append(out, field(e))
	}
	return out, nil
}
