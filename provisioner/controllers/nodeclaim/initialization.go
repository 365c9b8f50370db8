package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/internal/crashpoint"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/provisioner/metrics"
	"github.com/nodeforge/nodeforge/simulator"
)

// refusalConfirm is how long the bind gate must keep refusing a pod
// before its nomination is cleared: the gate's informers may lag the
// cluster by a moment (a pod its affinity needs, bound elsewhere just
// now), and a cleared nomination costs a new node.
const refusalConfirm = 2 * time.Second

// gateRefresh is how long a binding pass judges pods on one reading of the
// cluster (simulator.GateSession) before reading it again.
const gateRefresh = 500 * time.Millisecond

// refusals remembers when the gate first refused each pod, across workers.
type refusals struct {
	mu    sync.Mutex
	first map[types.UID]time.Time
}

// confirmed records a refusal of pod at now and says whether the pod has
// been refused for refusalConfirm. Entries far older than that belong to
// pods that went away mid-confirmation; they are dropped.
func (r *refusals) confirmed(pod types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = map[types.UID]time.Time{}
	}
	maps.DeleteFunc(r.first, func(_ types.UID, t time.Time) bool { return now.Sub(t) > 10*refusalConfirm })
	first, ok := r.first[pod]
	if !ok {
		r.first[pod] = now
		return false
	}
	if now.Sub(first) < refusalConfirm {
		return false
	}
	delete(r.first, pod)
	return true
}

// forget drops the pod's refusal: the gate accepted it.
func (r *refusals) forget(pod types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.first, pod)
}

// initializer binds a registered claim's nominated pods to its node once
// the node is ready for them, each as the bind gate accepts it, and lifts
// the binding taint: the claim is then Initialized.
type initializer struct {
	base
	pods kubernetes.Interface // the Binding API, and the node's pods as the API server has them
	gate Gate
	// ttl is Options.InitializationTTL.
	ttl      time.Duration
	refusals refusals
}

// reconcile binds the nominated pods once the node is Ready, clears the
// nomination of those that no longer fit, and lifts the binding taint.
func (i *initializer) reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := i.nodeOf(ctx, nc)
	if err != nil || node == nil {
		return reconcile.Result{RequeueAfter: time.Second}, err
	}
	if waiting := notReadyForPods(node, nc); waiting != "" {
		return i.waitForNode(ctx, nc, node, waiting)
	}
	pods, err := i.nominatedPods(ctx, nc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if waiting, err := i.slicesPending(ctx, nc, node, pods); err != nil || waiting != "" {
		if err != nil {
			return reconcile.Result{}, err
		}
		return i.waitForNode(ctx, nc, node, waiting)
	}
	pass, err := i.newBindPass(ctx, node, len(pods))
	if err != nil {
		return reconcile.Result{}, err
	}
	for j := range pods {
		if res, err := i.bind(ctx, pass, &pods[j]); err != nil || !res.IsZero() {
			return res, err
		}
	}
	if pass.unconfirmed > 0 {
		// The node stays held for binding until each refusal is
		// confirmed or withdrawn.
		klog.FromContext(ctx).Info("Bound pods to node; looking again at the pods it refuses", "pods", pass.bound, "handedOff", pass.handedOff, "refused", pass.unconfirmed, "node", node.Name)
		return reconcile.Result{RequeueAfter: refusalConfirm / 4}, nil
	}
	if len(pass.stuck) > 0 {
		if res, err := i.sendBackStuck(ctx, nc, node, pass.stuck); err != nil || !res.IsZero() {
			return res, err
		}
	}
	return i.initialized(ctx, nc, node, pass)
}

// waitForNode waits for what the node still lacks before pods may be
// bound to it, and gives the claim up at the initialization deadline.
func (i *initializer) waitForNode(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, waiting string) (reconcile.Result, error) {
	registered := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionRegistered)
	if registered != nil && i.now().Sub(registered.LastTransitionTime.Time) > i.ttl {
		return i.giveUp(ctx, nc, v1alpha1.ReasonInitializationTimeout, v1alpha1.ActionInitialize, fmt.Sprintf("node %s not ready for pods within %s of registering: %s", node.Name, i.ttl, waiting), launchedOffer(nc))
	}
	klog.FromContext(ctx).V(2).Info("Waiting for the node before binding", "node", node.Name, "waitingFor", waiting)
	return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
}

// bindPass is one binding pass over a claim's nominated pods: the pods
// that count on the node, the bind gate's reading of the cluster, and
// what became of each pod.
type bindPass struct {
	node *corev1.Node
	// onNode are the pods counted on the node, those placed by this pass
	// among them; already, the UIDs of those there before it.
	onNode  []*corev1.Pod
	already map[types.UID]bool
	// The gate reads the cluster once for many of the node's pods, not
	// once for each: each pod bound or handed off counts on the node for
	// the ones after it. It reads it again every gateRefresh, so that
	// what the scheduler and the other workers bind elsewhere meanwhile
	// is seen about as soon as the gate's informers see it.
	gate     *simulator.GateSession
	gateRead time.Time

	bound, handedOff, unconfirmed int
	stuck                         []stuckPod
}

// newBindPass reads the pods on the node for a pass over nominated more.
func (i *initializer) newBindPass(ctx context.Context, node *corev1.Node, nominated int) (*bindPass, error) {
	// The pods on the node as the API server has them now, not as a
	// cache does: a pod this controller bound on an earlier pass may not
	// have reached the cache yet, and the gate must count it (or two pods
	// wanting one host port can both be bound). Those bound by the pass
	// are added as they are bound.
	live, err := i.pods.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	}
	pass := &bindPass{node: node, onNode: make([]*corev1.Pod, 0, len(live.Items)+nominated), already: make(map[types.UID]bool, len(live.Items))}
	for j := range live.Items {
		p := &live.Items[j]
		pass.already[p.UID] = true
		if !podutil.IsPodTerminal(p) {
			pass.onNode = append(pass.onNode, p)
		}
	}
	// Pods handed to the scheduler on an earlier pass are nominated to
	// the node itself: they count there as they will once bound.
	var handed corev1.PodList
	if err := i.kube.List(ctx, &handed, client.MatchingFields{indexNominated: node.Name}); err != nil {
		return nil, err
	}
	for j := range handed.Items {
		if p := &handed.Items[j]; !pass.already[p.UID] {
			pass.already[p.UID] = true
			pass.onNode = append(pass.onNode, p)
		}
	}
	return pass, nil
}

// session is the gate's reading of the cluster for the pass, read again
// once it is gateRefresh old.
func (b *bindPass) session(gate Gate) (*simulator.GateSession, error) {
	if b.gate == nil || time.Since(b.gateRead) > gateRefresh {
		var err error
		if b.gate, err = gate.Session(b.node, b.onNode); err != nil {
			return nil, err
		}
		b.gateRead = time.Now()
	}
	return b.gate, nil
}

// placed counts p on the node, for the gate's verdicts on the pods after it.
func (b *bindPass) placed(ctx context.Context, p *corev1.Pod) {
	b.onNode = append(b.onNode, p)
	if err := b.gate.Placed(p); err != nil {
		klog.FromContext(ctx).Error(err, "Counting a placed pod in the bind gate", "pod", klog.KObj(p), "node", b.node.Name)
		b.gate = nil
	}
}

// bind binds p to the node if the bind gate accepts it there, hands it to
// the scheduler if only its binding cycle can bind it, and otherwise
// counts it refused or stuck in the pass. A result or an error ends the
// pass.
func (i *initializer) bind(ctx context.Context, pass *bindPass, p *corev1.Pod) (reconcile.Result, error) {
	logger := klog.FromContext(ctx)
	node := pass.node
	if pass.already[p.UID] {
		return reconcile.Result{}, nil // bound or handed off on an earlier pass; the cache has not seen it yet
	}
	gate, err := pass.session(i.gate)
	if err != nil {
		logger.V(2).Info("Bind gate cannot judge yet; retrying", "node", node.Name, "err", err)
		return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
	}
	// The scheduler's own verdict, with the pods already there and the
	// ones just bound: what it would refuse is not bound.
	s, handOff := gate.Check(ctx, p)
	if s.Code() == fwk.Error {
		// This pod's own trouble: the others are bound all the same.
		logger.V(2).Info("Bind gate cannot judge the pod yet; binding the others, this one on the next pass", "pod", klog.KObj(p), "node", node.Name, "reason", s.AsError().Error())
		pass.stuck = append(pass.stuck, stuckPod{p, fmt.Sprintf("the bind gate could not judge it: %v", s.AsError())})
		return reconcile.Result{}, nil
	}
	if !s.IsSuccess() {
		return reconcile.Result{}, i.refused(ctx, pass, p, s)
	}
	i.refusals.forget(p.UID)
	if handOff != "" {
		return reconcile.Result{}, i.handOff(ctx, pass, p, handOff)
	}
	return reconcile.Result{}, i.bindPod(ctx, pass, p)
}

// refused counts a pod the gate refuses, and clears its nomination once
// the refusal is confirmed (refusalConfirm).
func (i *initializer) refused(ctx context.Context, pass *bindPass, p *corev1.Pod, s *fwk.Status) error {
	logger := klog.FromContext(ctx)
	if !i.refusals.confirmed(p.UID, i.now()) {
		// The pods after it are bound meanwhile: one pod the node has no
		// room for must not hold the others back, and every refusal of a
		// pass is confirmed together, not one after another.
		logger.V(2).Info("Bind gate refuses the pod; looking again before sending it back", "pod", klog.KObj(p), "node", pass.node.Name, "plugin", s.Plugin(), "reason", s.Message())
		pass.unconfirmed++
		return nil
	}
	logger.Info("The scheduler would not accept the pod on the node; clearing its nomination", "pod", klog.KObj(p), "node", pass.node.Name, "plugin", s.Plugin(), "reason", s.Message())
	i.recordPod(p, corev1.EventTypeWarning, v1alpha1.ReasonNominationCleared, v1alpha1.ActionBind, fmt.Sprintf("node %s refused by scheduler plugin %s: %s; the pod will be scheduled again", pass.node.Name, s.Plugin(), s.Message()))
	p.Status.NominatedNodeName = ""
	if err := i.kube.Status().Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// handOff nominates p to the node itself, for the scheduler to bind.
// What only the scheduler's binding cycle does (provisioning its volumes,
// allocating its devices, a Permit plugin) must not be skipped: the
// nomination holds room for the pod there, and the scheduler binds it
// once the binding taint is lifted (initialized).
func (i *initializer) handOff(ctx context.Context, pass *bindPass, p *corev1.Pod, why string) error {
	node := pass.node
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"nominatedNodeName":%q}}`, node.Name))
	if err := i.kube.Status().Patch(ctx, p, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("handing pod %s/%s to the scheduler: %w", p.Namespace, p.Name, err)
	}
	klog.FromContext(ctx).Info("Handing the pod to the scheduler to bind: only its binding cycle does what the pod needs", "pod", klog.KObj(p), "node", node.Name, "why", why)
	i.recordPod(p, corev1.EventTypeNormal, v1alpha1.ReasonHandedOff, v1alpha1.ActionBind, fmt.Sprintf("node %s is ready; nominated to it for the scheduler to bind, as only its binding cycle does what the pod needs: %s", node.Name, why))
	pass.placed(ctx, p)
	pass.handedOff++
	return nil
}

// bindPod binds p to the node through the Binding API. A binding the API
// server refuses leaves the pod stuck, for the next pass.
func (i *initializer) bindPod(ctx context.Context, pass *bindPass, p *corev1.Pod) error {
	node := pass.node
	err := i.pods.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node.Name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			// No answer: the binding may have been made. The next
			// pass reads the node's pods live and counts it.
			return fmt.Errorf("binding pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		klog.FromContext(ctx).Info("Binding the pod was refused; binding the others, this one on the next pass", "pod", klog.KObj(p), "node", node.Name, "reason", err.Error())
		pass.stuck = append(pass.stuck, stuckPod{p, fmt.Sprintf("binding it was refused: %v", err)})
		return nil
	}
	if err == nil {
		crashpoint.Hit(crashpoint.MidBind)
		pass.placed(ctx, p)
		pass.bound++
		// No Event on the pod: the binding itself sets its node and its
		// PodScheduled condition (True, with the time), and the claim's
		// Initialized Event counts the pods bound to its node. A
		// "Scheduled" Event on each pod, as kube-scheduler writes, would
		// be a second request a pod on the path the API server is
		// busiest on.
		metrics.PodTimeToBound.Observe(i.now().Sub(p.CreationTimestamp.Time).Seconds())
	}
	return nil
}

// sendBackStuck waits for the pods a pass could not bind until the
// claim's initialization deadline, and then clears their nominations.
// The pods bound stay bound; the rest are tried again until then, and
// then sent back to the scheduler, each with an Event saying why, so that
// one pod's trouble never keeps the node from its other pods for good.
func (i *initializer) sendBackStuck(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, stuck []stuckPod) (reconcile.Result, error) {
	registered := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionRegistered)
	if registered == nil || i.now().Sub(registered.LastTransitionTime.Time) <= i.ttl {
		return reconcile.Result{RequeueAfter: 500 * time.Millisecond}, nil
	}
	for _, sp := range stuck {
		klog.FromContext(ctx).Info("Sending the pod back to the scheduler: it could not be bound within the initialization deadline", "pod", klog.KObj(sp.pod), "node", node.Name, "why", sp.why, "initializationTTL", i.ttl)
		i.recordPod(sp.pod, corev1.EventTypeWarning, v1alpha1.ReasonNominationCleared, v1alpha1.ActionBind, fmt.Sprintf("node %s: %s, for longer than the initialization deadline %s; the pod will be scheduled again", node.Name, sp.why, i.ttl))
		sp.pod.Status.NominatedNodeName = ""
		if err := i.kube.Status().Update(ctx, sp.pod); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// initialized lifts the binding taint off the node and marks the claim
// Initialized, counting the pods the pass bound and handed off.
func (i *initializer) initialized(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, pass *bindPass) (reconcile.Result, error) {
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintBinding })
	if len(taints) != len(node.Spec.Taints) {
		node.Spec.Taints = taints
		if err := i.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimInitialized
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInitialized, Status: metav1.ConditionTrue, Reason: "Initialized", Message: fmt.Sprintf("%d pods bound, %d handed to the scheduler", pass.bound, pass.handedOff)})
	if err := i.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).Info("Bound pods to node", "pods", pass.bound, "handedOff", pass.handedOff, "node", node.Name)
	i.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonInitialized, v1alpha1.ActionBind, fmt.Sprintf("bound %d pods to node %s, handed %d to the scheduler", pass.bound, node.Name, pass.handedOff))
	return reconcile.Result{}, nil
}

// stuckPod is a nominated pod a binding pass could not bind, and why.
type stuckPod struct {
	pod *corev1.Pod
	why string
}

// notReadyForPods says what the node still lacks before pods may be bound
// to it, or "" when nothing: Ready; none of the taints others lift once
// the node is up (the not-ready taint, the cloud provider's uninitialised
// taint, the claim's startup taints: the scheduler refuses every pod
// while one is there, and a pod bound before would be evicted by a
// NoExecute one or refused by the kubelet); and every extended resource
// the claim's pods request in allocatable (a device plugin registers them
// after the node is Ready; binding before would find a GPU pod no room
// and launch a second node).
func notReadyForPods(node *corev1.Node, nc *v1alpha1.NodeClaim) string {
	if !ready(node) {
		return "condition Ready"
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		switch t.Key {
		case corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable:
			// The API server taints every new node not-ready; the node
			// lifecycle controller lifts it once the node is Ready.
			return fmt.Sprintf("taint %s:%s to be lifted by the node lifecycle controller", t.Key, t.Effect)
		case cloudproviderapi.TaintExternalCloudProvider:
			// A kubelet run with an external cloud provider (EKS)
			// registers with it; the cloud controller manager lifts it
			// once it has set the node's addresses and provider ID.
			return fmt.Sprintf("taint %s:%s to be lifted by the cloud controller manager", t.Key, t.Effect)
		}
	}
	for _, st := range nc.Spec.StartupTaints {
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == st.Key && t.Effect == st.Effect }) {
			return fmt.Sprintf("startup taint %s:%s to be removed", st.Key, st.Effect)
		}
	}
	// Only what the pods request is waited for, not all the instance type
	// promises (status.allocatable): some resources appear only where the
	// cluster runs their agent (vpc.amazonaws.com/pod-eni only with pod
	// security groups enabled), and waiting for one no pod asked for would
	// hold the pods until the initialization deadline and then give the
	// node up. The gate judges the pods on what the node has.
	for _, name := range slices.Sorted(maps.Keys(nc.Spec.Resources.Requests)) {
		requested := nc.Spec.Resources.Requests[name]
		if !v1helper.IsExtendedResourceName(name) || requested.IsZero() {
			continue
		}
		if has, ok := node.Status.Allocatable[name]; !ok || has.Cmp(requested) < 0 {
			return fmt.Sprintf("%s %s in allocatable (the pods request them)", requested.String(), name)
		}
	}
	return ""
}

// slicesPending names the DRA drivers of the node's instance type whose
// ResourceSlices the node has not published yet, when one of pods has
// ResourceClaims ("" otherwise): such a pod, handed to the scheduler
// before its devices are published, fails its scheduling cycle, and
// would be given another claim. As with extended resources, only what
// the pods need is waited for. A replacement always waits: the pods it
// is for are evicted once it is initialized, and come to it through the
// scheduler with their claims.
func (i *initializer) slicesPending(ctx context.Context, nc *v1alpha1.NodeClaim, node *corev1.Node, pods []corev1.Pod) (string, error) {
	_, replacing := nc.Annotations[v1alpha1.AnnotationReplaces]
	if !replacing && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 }) {
		return "", nil
	}
	catalog, err := cluster.InstanceTypesOf(ctx, i.kube, nc.Spec.NodePool)
	if err != nil {
		return "", err
	}
	k := slices.IndexFunc(catalog, func(it v1alpha1.InstanceType) bool { return it.Name == nc.Status.InstanceType })
	if k < 0 || len(catalog[k].ResourceSlices) == 0 {
		return "", nil
	}
	var published resourcev1.ResourceSliceList
	if err := i.kube.List(ctx, &published, client.MatchingFields{cluster.IndexSliceNode: node.Name}); err != nil {
		return "", err
	}
	var missing []string
	for _, t := range catalog[k].ResourceSlices {
		if _, ok := nodeshape.PublishedDevices(published.Items, t.Driver); !ok {
			missing = append(missing, t.Driver)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	return "ResourceSlices of DRA driver " + strings.Join(missing, ", ") + " (pods have ResourceClaims)", nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
