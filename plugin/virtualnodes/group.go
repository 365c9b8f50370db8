package virtualnodes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"
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
	key := klog.KObj(group)
	unlock, st, _ := p.lockSynced(ctx, key)
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
	out := &fwk.PodGroupPostFilterResult{NominatingInfos: map[types.NamespacedName]*fwk.NominatingInfo{}}
	var made []taken
	before := map[*claim]bool{}
	refused := map[*corev1.Pod]string{}
	for _, pod := range pods {
		name, t, why := p.decideInGroup(ctx, pod, before)
		if name == "" {
			refused[pod] = why
			continue
		}
		out.NominatingInfos[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = &fwk.NominatingInfo{NominatedNodeName: name, NominatingMode: fwk.ModeOverride}
		if t != nil {
			made = append(made, *t)
		}
	}
	logger := klog.FromContext(ctx)
	placed := len(out.NominatingInfos)
	if placed < minCount {
		for i := len(made) - 1; i >= 0; i-- {
			p.book.untake(made[i].pod, made[i].c, made[i].options)
		}
		msg := gangMessage(group, minCount, placed, len(pods), refused)
		logger.Info("Pod group cannot have enough nodes; nominating none of its pods", "podGroup", key, "minCount", minCount, "placeable", placed, "pods", len(pods))
		for _, pod := range pods {
			p.event(pod, corev1.EventTypeWarning, v1alpha1.ReasonGroupNotLaunchable, v1alpha1.ActionProvisioning, msg)
			p.refused[pod.UID] = pod
			p.metrics.observe(resultRefused, refusalGangIncomplete, time.Since(start))
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, msg)
	}
	for pod, why := range refused {
		p.event(pod, corev1.EventTypeWarning, v1alpha1.ReasonNoInstanceType, v1alpha1.ActionProvisioning, "no NodePool can launch a node for this pod: "+why)
		p.refused[pod.UID] = pod
		p.metrics.observe(resultRefused, refusalNone, time.Since(start))
	}
	for _, t := range made {
		r := resultExisting
		if t.isNew {
			r = resultNew
		}
		p.metrics.observe(r, refusalNone, time.Since(start))
	}
	logger.V(2).Info("Nominated the pods of a pod group", "podGroup", key, "nominated", placed, "refused", len(refused), "minCount", minCount)
	if placed == 0 {
		return nil, fwk.NewStatus(fwk.Unschedulable, "no NodePool can launch a node for any pod of pod group "+key.String())
	}
	return out, fwk.NewStatus(fwk.Success, fmt.Sprintf("nominated %d pods of pod group %s to nodeclaims; their nodes are launched for them, and the group is scheduled once they are ready", placed, key))
}

// decideInGroup decides one pod of a group: the node it is nominated to
// ("" and why not when it cannot have one) and, when the decision made a
// nomination, what undoes it. A pod nominated already keeps its claim, as
// PostFilter keeps it. before records the claims the group's decision has
// nominated to already.
func (p *VirtualNodes) decideInGroup(ctx context.Context, pod *corev1.Pod, before map[*claim]bool) (string, *taken, string) {
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
	ch := p.decider.place(ctx, pod, p.book.inFlight(pod), p.ordered)
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
