package virtualnodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

var _ fwk.PodGroupPostFilterPlugin = &VirtualNodes{}

// taken is a nomination a group's decision made, to undo if the group
// cannot have enough of them.
type taken struct {
	pod *corev1.Pod
	c   *claim
	// options are c's options before the decision's first nomination to
	// it; nil for a claim the decision made.
	options []*option
	isNew   bool
}

// PodGroupPostFilter nominates the pods of a PodGroup whose group cycle
// failed to virtual nodes, as PostFilter does a single pod: kube-scheduler
// runs it, not PostFilter, for the pods of a PodGroup (GenericWorkload).
// Each pod is decided in the group's order on the claims of the pods
// before it, every pool limit counting them all. A gang (policy gang)
// gets nominations for all the pods that can have a node only when they
// are at least its minCount; otherwise none of its pods is nominated,
// nothing is launched, and each pod gets a GroupNotLaunchable Event
// saying why. A group of policy basic is its pods, each nominated or not
// on its own. The scheduler's group cycle binds the pods once their
// nodes are ready (the provisioner hands them to it), so a gang starts
// whole or not at all.
func (p *VirtualNodes) PodGroupPostFilter(ctx context.Context, _ fwk.PodGroupCycleState, pg fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	start := time.Now()
	group := pg.GetPodGroup()
	if group == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, "VirtualNodes does not provision for composite pod groups yet")
	}
	ref := klog.KObj(group)
	unlock, st, _ := p.lockSynced(ctx, ref)
	if unlock == nil {
		return nil, st
	}
	defer unlock()
	minCount := 0
	if g := group.Spec.SchedulingPolicy.Gang; g != nil {
		minCount = int(g.MinCount)
	}
	pods := pg.GetUnscheduledPods()
	// No claim of the group is written before the group is decided.
	p.book.hold()
	defer p.book.release()
	d := p.decideConstrained(ctx, group, pods, max(minCount, 1))
	logger := klog.FromContext(ctx)
	placed := len(d.out.NominatingInfos)
	if placed < minCount {
		p.undo(d)
		msg := gangMessage(group, minCount, placed, len(pods), d.refused)
		logger.Info("Pod group cannot have enough nodes; nominating none of its pods", "podGroup", ref, "minCount", minCount, "placeable", placed, "pods", len(pods))
		for _, pod := range pods {
			p.event(pod, corev1.EventTypeWarning, v1alpha1.ReasonGroupNotLaunchable, v1alpha1.ActionProvisioning, msg)
			p.refused[pod.UID] = pod
			p.metrics.observe(resultRefused, refusalGangIncomplete, time.Since(start))
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	p.count(d, time.Since(start))
	logger.V(2).Info("Nominated the pods of a pod group", "podGroup", ref, "nominated", placed, "refused", len(d.refused), "minCount", minCount)
	if placed == 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no NodePool can launch a node for any pod of pod group "+ref.String())
	}
	return d.out, fwk.NewStatus(fwk.Success, fmt.Sprintf("nominated %d pods of pod group %s to nodeclaims; their nodes are launched for them, and the group is scheduled once they are ready", placed, ref))
}

// decideConstrained decides the group's pods; under a topology
// constraint, all in the one domain of its key where the most of them
// (at least want) can have a node, the cheapest of those.
func (p *VirtualNodes) decideConstrained(ctx context.Context, group *schedulingv1beta1.PodGroup, pods []*corev1.Pod, want int) groupDecision {
	c := group.Spec.SchedulingConstraints
	if c == nil || len(c.Topology) == 0 {
		return p.decideGroup(ctx, pods, "", "")
	}
	key := c.Topology[0].Key
	if domain := p.chooseDomain(ctx, pods, key, want); domain != "" {
		return p.decideGroup(ctx, pods, key, domain)
	}
	d := groupDecision{out: &fwk.PodGroupPostFilterResult{}, refused: map[*corev1.Pod]string{}}
	for _, pod := range pods {
		d.refused[pod] = fmt.Sprintf("no %s domain a pool can launch in holds %d of the group's pods together", key, want)
	}
	return d
}

// count tells the pods a group's decision refused that no pool can have
// them, and counts each pod's result.
func (p *VirtualNodes) count(d groupDecision, took time.Duration) {
	for pod, why := range d.refused {
		p.event(pod, corev1.EventTypeWarning, v1alpha1.ReasonNoInstanceType, v1alpha1.ActionProvisioning, "no NodePool can launch a node for this pod: "+why)
		p.refused[pod.UID] = pod
		p.metrics.observe(resultRefused, refusalNone, took)
	}
	for _, t := range d.made {
		r := resultExisting
		if t.isNew {
			r = resultNew
		}
		p.metrics.observe(r, refusalNone, took)
	}
}

// groupDecision is what deciding a group's pods made: the nominations,
// what undoes them, and the pods refused, with why.
type groupDecision struct {
	out     *fwk.PodGroupPostFilterResult
	made    []taken
	refused map[*corev1.Pod]string
}

// undo takes back the nominations d made, last first.
func (p *VirtualNodes) undo(d groupDecision) {
	for i := len(d.made) - 1; i >= 0; i-- {
		p.book.untake(d.made[i].pod, d.made[i].c, d.made[i].options)
	}
}

// cost is the price of the claims d made, each at its cheapest option.
func (d groupDecision) cost() float64 {
	seen := map[*claim]bool{}
	sum := 0.0
	for _, t := range d.made {
		if t.isNew && !seen[t.c] && len(t.c.options) > 0 {
			seen[t.c] = true
			sum += t.c.options[0].price
		}
	}
	return sum
}

// decideGroup decides each of pods in order, on the claims of the pods
// before it; with key set, each pod only on nodes whose label key is
// domain (the group's topology constraint).
func (p *VirtualNodes) decideGroup(ctx context.Context, pods []*corev1.Pod, key, domain string) groupDecision {
	d := groupDecision{out: &fwk.PodGroupPostFilterResult{NominatingInfos: map[types.NamespacedName]*fwk.NominatingInfo{}}, refused: map[*corev1.Pod]string{}}
	before := map[*claim]bool{}
	if key != "" {
		pods = slices.Clone(pods)
		for i, pod := range pods {
			pod = pod.DeepCopy()
			if pod.Spec.NodeSelector == nil {
				pod.Spec.NodeSelector = map[string]string{}
			}
			pod.Spec.NodeSelector[key] = domain
			pods[i] = pod
		}
	}
	// A pod nominated already counts on its claim.
	with := together(slices.DeleteFunc(slices.Clone(pods), func(pod *corev1.Pod) bool { return p.book.nominatedTo(pod.UID) != nil }))
	for _, pod := range pods {
		name, t, why := p.decideInGroup(ctx, pod, with[pod], before)
		if name == "" {
			d.refused[pod] = why
			continue
		}
		d.out.NominatingInfos[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = &fwk.NominatingInfo{NominatedNodeName: name, NominatingMode: fwk.ModeOverride}
		if t != nil {
			d.made = append(d.made, *t)
		}
	}
	return d
}

// chooseDomain is the value of key (a topology constraint's) in which
// the most of pods, at least want, can have a node, the cheapest of
// those; "" when none. Each domain is decided and undone: a domain is
// one a pool's nodes are labelled with (its zones, its template's
// labels).
func (p *VirtualNodes) chooseDomain(ctx context.Context, pods []*corev1.Pod, key string, want int) string {
	best, bestPlaced, bestCost := "", 0, 0.0
	for _, v := range p.domains(key) {
		d := p.decideGroup(ctx, pods, key, v)
		placed, cost := len(d.out.NominatingInfos), d.cost()
		p.undo(d)
		klog.FromContext(ctx).V(4).Info("Tried a pod group's topology domain", "key", key, "domain", v, "placed", placed, "cost", cost)
		if placed >= want && (placed > bestPlaced || placed == bestPlaced && cost < bestCost) {
			best, bestPlaced, bestCost = v, placed, cost
		}
	}
	return best
}

// domains are the values of key the pools' nodes carry, sorted.
func (p *VirtualNodes) domains(key string) []string {
	set := map[string]bool{}
	for _, pl := range p.ordered {
		for _, g := range pl.groups {
			if v, ok := g.placeholder.Node().Labels[key]; ok {
				set[v] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// decideInGroup decides one pod of a group: the node it is nominated to
// ("" and why not when it cannot have one) and, when the decision made a
// nomination, what undoes it. A pod nominated already keeps its claim, as
// PostFilter keeps it. whole, when not nil, is the pod with the pods of
// the group that share its claims (together): the pod goes where whole
// fits if anywhere. before records the claims the group's decision has
// nominated to already.
func (p *VirtualNodes) decideInGroup(ctx context.Context, pod, whole *corev1.Pod, before map[*claim]bool) (string, *taken, string) {
	if c := p.book.nominatedTo(pod.UID); c != nil {
		r := p.decider.retried(ctx, pod, c)
		if r != retryAfresh {
			res, _, _, _ := p.applyRetried(pod, c, r)
			if res == nil || res.NominatingInfo == nil {
				return "", nil, "bound to a node since the group's cycle began"
			}
			return res.NominatingInfo.NominatedNodeName, nil, ""
		}
		p.book.unview(c, pod)
	}
	p.book.settle()
	fl := p.book.inFlight(pod)
	if isVirtualPod(pod) {
		// A request's pods and a buffer's chunks go only to claims of
		// their own, made by this decision: room on the claims in flight
		// was counted before (fitsNow, buffers.keepOne), and a claim
		// written with all of them at once is never closed before some
		// are.
		fl = inFlight{open: slices.DeleteFunc(slices.Clone(fl.open), func(c *claim) bool { return !before[c] })}
	}
	var ch choice
	if whole != nil {
		ch = p.decider.place(ctx, whole, fl, p.ordered)
	}
	if ch.claim == nil {
		ch = p.decider.place(ctx, pod, fl, p.ordered)
	}
	if ch.claim == nil {
		return "", nil, strings.Join(ch.reasons, "; ")
	}
	t := &taken{pod: pod, c: ch.claim, isNew: ch.isNew}
	if !ch.isNew && !before[ch.claim] {
		t.options = ch.claim.options
	}
	before[ch.claim] = true
	p.book.take(pod, ch, p.now())
	if p.devices != nil && needsDevices(pod) {
		if s := p.devices.Plan(ctx, ch.state, pod, ch.claim.name); !s.IsSuccess() {
			klog.FromContext(ctx).Error(s.AsError(), "Planning the pod's devices on its virtual node", "pod", klog.KObj(pod), "nodeClaim", ch.claim.name)
		}
	}
	delete(p.refused, pod.UID)
	return ch.claim.name, t, ""
}

// gangMessage says why a gang gets no node: how many of its pods can
// have one against its minCount, and the first pod's reason.
func gangMessage(group *schedulingv1beta1.PodGroup, minCount, placed, pods int, refused map[*corev1.Pod]string) string {
	msg := fmt.Sprintf("pod group %s is a gang of minCount %d and only %d of its %d pods can have a node, so none is nominated and nothing is launched", klog.KObj(group), minCount, placed, pods)
	for pod, why := range refused {
		return msg + fmt.Sprintf("; pod %s: %s", klog.KObj(pod), why)
	}
	return msg
}

// together maps the first of pods to use a ResourceClaim that later pods
// of pods use too (their PodGroup's claim, or a claim they name) to that
// pod with those pods' containers added. A claim is allocated once, on
// one node, and the pods that share it run where its devices are: the
// node chosen for the first must hold the others, or the claim planned
// there would leave them none when a larger type would hold them all.
// Each later pod is added once, to the first pod it shares a claim with.
func together(pods []*corev1.Pod) map[*corev1.Pod]*corev1.Pod {
	claimsOf := make([]map[string]bool, len(pods))
	for i, pod := range pods {
		claimsOf[i] = map[string]bool{}
		for j := range pod.Spec.ResourceClaims {
			if name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[j]); err == nil && name != nil {
				claimsOf[i][*name] = true
			}
		}
	}
	out := map[*corev1.Pod]*corev1.Pod{}
	added := make([]bool, len(pods))
	for i, first := range pods {
		if added[i] || len(claimsOf[i]) == 0 {
			continue
		}
		var whole *corev1.Pod
		for j := i + 1; j < len(pods); j++ {
			if added[j] || pods[j].Namespace != first.Namespace || !sharesAny(claimsOf[i], claimsOf[j]) {
				continue
			}
			if whole == nil {
				whole = first.DeepCopy()
			}
			whole.Spec.Containers = append(whole.Spec.Containers, pods[j].Spec.Containers...)
			added[j] = true
		}
		if whole != nil {
			out[first] = whole
		}
	}
	return out
}

func sharesAny(a, b map[string]bool) bool {
	for k := range a {
		if b[k] {
			return true
		}
	}
	return false
}
