package disruption

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/cluster/bufferroom"
	"github.com/nodeforge/nodeforge/simulator"
)

// state is the cluster as one decision sees it: read once, from the cache
// to decide, from the API server to check the decision.
type state struct {
	claims []*v1alpha1.NodeClaim
	nodes  map[string]*corev1.Node
	pools  map[string]*v1alpha1.NodePool
	// onNode: each node's unfinished pods, with the pods nominated to it
	// or to its claim (being bound there).
	onNode map[string][]*corev1.Pod
	pdbs   []policyv1.PodDisruptionBudget
	// buffers: the ready CapacityBuffers' chunks, whose room a decision
	// keeps (Consolidation.KeepBufferRoom).
	buffers []bufferroom.Chunks

	// pods and snapshot build the simulator's cluster (cluster).
	pods     []*corev1.Pod
	snapshot simulator.SnapshotOptions
	sim      *simulator.Cluster
}

func observe(ctx context.Context, r client.Reader) (*state, error) {
	var (
		claims v1alpha1.NodeClaimList
		pools  v1alpha1.NodePoolList
		nodes  corev1.NodeList
		pods   corev1.PodList
		pdbs   policyv1.PodDisruptionBudgetList
	)
	for _, l := range []client.ObjectList{&claims, &pools, &nodes, &pods, &pdbs} {
		if err := r.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	s := &state{nodes: map[string]*corev1.Node{}, pools: map[string]*v1alpha1.NodePool{}, onNode: map[string][]*corev1.Pod{}, pdbs: pdbs.Items}
	// A pod nominated to a claim counts on the claim's node; claims with
	// no node yet are left out (disruption waits for them: unsettled).
	s.snapshot = simulator.SnapshotOptions{LiftTaint: v1alpha1.TaintBinding, ClaimNodes: map[string]string{}}
	for i := range claims.Items {
		nc := &claims.Items[i]
		s.claims = append(s.claims, nc)
		if nc.Status.NodeName != "" {
			s.snapshot.ClaimNodes[nc.Name] = nc.Status.NodeName
		}
	}
	for i := range pools.Items {
		s.pools[pools.Items[i].Name] = &pools.Items[i]
	}
	for i := range nodes.Items {
		s.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	isNode := func(name string) bool { return s.nodes[name] != nil }
	for i := range pods.Items {
		p := &pods.Items[i]
		if node := s.snapshot.CountsOn(p, isNode); node != "" {
			s.onNode[node] = append(s.onNode[node], p)
			s.pods = append(s.pods, p)
		}
	}
	return s, nil
}

// unsettled says why the cluster is changing too much to consolidate:
// claims being provisioned (their pods' nodes are not known yet), nodes
// waiting for their replacement, or nodes being drained (their pods are
// about to take room elsewhere).
func (s *state) unsettled() string {
	for _, nc := range s.claims {
		switch {
		case !nc.DeletionTimestamp.IsZero() || nc.Status.Phase == v1alpha1.NodeClaimDisrupting:
			if len(s.onNode[nc.Status.NodeName]) > 0 && slices.ContainsFunc(s.onNode[nc.Status.NodeName], func(p *corev1.Pod) bool { return !cluster.OwnedByDaemonSet(p) }) {
				return fmt.Sprintf("node %s is being drained", nc.Status.NodeName)
			}
		case nc.Annotations[v1alpha1.AnnotationReplacement] != "":
			return fmt.Sprintf("node %s is waiting for its replacement %s", nc.Status.NodeName, nc.Annotations[v1alpha1.AnnotationReplacement])
		case nc.Status.Phase != v1alpha1.NodeClaimInitialized:
			return fmt.Sprintf("NodeClaim %s is %s", nc.Name, cmp.Or(string(nc.Status.Phase), "new"))
		}
	}
	return ""
}

// cluster is the simulator's cluster of every node, the taint that holds
// a node while its pods are bound lifted (as the bind gate lifts it), and
// every pod on it (simulator.Snapshot).
func (s *state) cluster() *simulator.Cluster {
	if s.sim == nil {
		nodes := make([]*corev1.Node, 0, len(s.nodes))
		for _, n := range s.nodes {
			nodes = append(nodes, n)
		}
		s.sim = simulator.NewCluster(simulator.Snapshot(nodes, s.pods, s.snapshot))
	}
	return s.sim
}

// budgetRoom is how many more of the pool's nodes may be disrupted at now
// for Underutilized.
func (s *state) budgetRoom(pool *v1alpha1.NodePool, now time.Time) int {
	total, disrupting := 0, 0
	for _, nc := range s.claims {
		if nc.Spec.NodePool != pool.Name || nc.Status.NodeName == "" {
			continue
		}
		total++
		if isDisrupting(nc) {
			disrupting++
		}
	}
	allowed, _ := budgetAllowed(pool, Underutilized, total, now)
	return allowed - disrupting
}

// pdbsRefuse says which PodDisruptionBudget would refuse evicting all of
// pods now, if one would: more of its pods among them than it allows.
func (s *state) pdbsRefuse(pods []*corev1.Pod) string {
	for i := range s.pdbs {
		pdb := &s.pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		var hit []*corev1.Pod
		for _, p := range pods {
			if p.Namespace == pdb.Namespace && sel.Matches(labels.Set(p.Labels)) {
				hit = append(hit, p)
			}
		}
		if len(hit) > int(pdb.Status.DisruptionsAllowed) {
			return fmt.Sprintf("PodDisruptionBudget %s allows %d disruptions now, and pod %s would be one more", klog.KObj(pdb), pdb.Status.DisruptionsAllowed, klog.KObj(hit[pdb.Status.DisruptionsAllowed]))
		}
	}
	return ""
}
