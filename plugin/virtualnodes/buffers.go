package virtualnodes

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/simulator"
)

// A CapacityBuffer (autoscaling.x-k8s.io/v1beta1) keeps room for chunks
// of a pod's shape. The provisioner resolves its status (the PodTemplate
// and the number of chunks, ReadyForProvisioning); VirtualNodes, with
// Args.CapacityBuffers, keeps the room: every bufferTick, and when a
// buffer changes, the chunks (nodeshape.BufferPods: pods of the lowest
// priority that are never created) that are not nominated to a claim are
// placed, with the profile's own plugins, on the nodes there and the
// claims in flight, every pod there counted. A chunk that fits has room.
// The chunks that do not fit are decided as pending pods, one after
// another, and nominated to claims (new ones where no claim in flight has
// room), which carry v1alpha1.AnnotationCapacityBuffer and are launched
// with no pod. Once a claim's node registers, its chunks leave it: the
// node's room is theirs as long as no real pod takes it. A real pod may
// take it at once, as the scheduler places it on the node; the next look
// finds a chunk without room and launches for it.

// bufferTick is how often the buffers' room is looked at, events aside:
// a real pod taking a buffer's room on a node is no buffer event.
const bufferTick = 2 * time.Second

// buffers keeps the room of CapacityBuffers.
type buffers struct {
	p     *VirtualNodes
	c     client.Client
	sched *simulator.Scheduler
	nodes corelisters.NodeLister
	pods  corelisters.PodLister
	kick  chan struct{}
}

// watchBuffers follows CapacityBuffers and PodTemplates, and returns the
// keeper to run once the plugin has synced.
func (p *VirtualNodes) watchBuffers(ctx context.Context, cache ctrlcache.Cache, c client.Client, nodes corelisters.NodeLister, pods corelisters.PodLister) (*buffers, error) {
	b := &buffers{p: p, c: c, sched: p.requestSched, nodes: nodes, pods: pods, kick: make(chan struct{}, 1)}
	kick := func(any) {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	for _, obj := range []client.Object{&bufferv1beta1.CapacityBuffer{}, &corev1.PodTemplate{}} {
		inf, err := cache.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("%s: watching %T (is the CapacityBuffer CRD installed?): %w", Name, obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick}); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// run keeps the buffers' room until ctx ends.
func (b *buffers) run(ctx context.Context) {
	t := time.NewTicker(bufferTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		if err := b.keep(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Keeping the room of CapacityBuffers; will retry")
		}
	}
}

// keep keeps the room of every buffer VirtualNodes serves, and forgets
// the chunks of buffers gone or shrunk.
func (b *buffers) keep(ctx context.Context) error {
	var list bufferv1beta1.CapacityBufferList
	if err := b.c.List(ctx, &list); err != nil {
		return err
	}
	want := map[types.NamespacedName][]*corev1.Pod{}
	for i := range list.Items {
		buf := &list.Items[i]
		if !served(buf) {
			continue
		}
		var tpl corev1.PodTemplate
		if err := b.c.Get(ctx, types.NamespacedName{Namespace: buf.Namespace, Name: buf.Status.PodTemplateRef.Name}, &tpl); err != nil {
			klog.FromContext(ctx).V(2).Info("Reading a CapacityBuffer's PodTemplate; its room is looked at again later", "capacityBuffer", klog.KObj(buf), "err", err)
			want[types.NamespacedName{Namespace: buf.Namespace, Name: buf.Name}] = nil // its chunks kept as they are
			continue
		}
		want[types.NamespacedName{Namespace: buf.Namespace, Name: buf.Name}] = nodeshape.BufferPods(buf, &tpl)
	}
	b.p.forgetBuffers(want)
	if len(want) == 0 {
		return nil
	}
	// One view for every buffer: room one buffer's chunk takes is not
	// another's.
	view, err := b.view()
	if err != nil {
		return err
	}
	for _, key := range slices.SortedFunc(maps.Keys(want), func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) }) {
		if want[key] != nil {
			b.keepOne(klog.NewContext(ctx, klog.FromContext(ctx).WithValues("capacityBuffer", key)), view, key, want[key])
		}
	}
	return nil
}

// served: a buffer of the active-capacity strategy whose status the
// provisioner has resolved and found ready.
func served(buf *bufferv1beta1.CapacityBuffer) bool {
	s := buf.Spec.ProvisioningStrategy
	return (s == nil || *s == bufferv1beta1.StrategyActiveCapacity) && buf.DeletionTimestamp.IsZero() &&
		buf.Status.PodTemplateRef != nil && buf.Status.Replicas != nil &&
		meta.IsStatusConditionTrue(buf.Status.Conditions, bufferv1beta1.ConditionReadyForProvisioning)
}

// keepOne places the chunks not nominated to a claim in view, where they
// stay, and nominates those that have no room there to claims.
func (b *buffers) keepOne(ctx context.Context, view *simulator.View, key types.NamespacedName, chunks []*corev1.Pod) {
	var roomless []*corev1.Pod
	for _, pod := range b.p.unnominated(chunks) {
		if _, st := b.sched.Place(ctx, view, pod); !st.IsSuccess() {
			roomless = append(roomless, pod)
		}
	}
	if len(roomless) == 0 {
		return
	}
	names, refused := b.p.decideBuffer(ctx, key, roomless)
	klog.FromContext(ctx).Info("Launching room for a CapacityBuffer's chunks", "chunks", len(chunks), "withoutRoom", len(roomless), "nodeClaims", names, "refused", refused)
}

// view is the nodes there and the claims in flight, with their pods.
func (b *buffers) view() (*simulator.View, error) {
	nodes, err := b.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	all, err := b.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	view := simulator.NewCluster(nodes, all).Without()
	b.p.addInFlight(view)
	return view, nil
}

// unnominated are the chunks the book holds on no claim.
func (p *VirtualNodes) unnominated(chunks []*corev1.Pod) []*corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(chunks), func(pod *corev1.Pod) bool { return p.book.nominatedTo(pod.UID) != nil })
}

// forgetBuffers takes off their claims the chunks that no buffer in want
// has any more (a buffer deleted, shrunk or no longer ready).
func (p *VirtualNodes) forgetBuffers(want map[types.NamespacedName][]*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, held := range p.bufferPods {
		if w, ok := want[key]; ok && w == nil {
			continue // not read now: left as it is
		}
		keep := map[types.UID]bool{}
		for _, pod := range want[key] {
			keep[pod.UID] = true
		}
		var left []*corev1.Pod
		for _, pod := range held {
			if keep[pod.UID] {
				left = append(left, pod)
				continue
			}
			p.book.podGone(pod, true)
		}
		if len(left) == 0 {
			delete(p.bufferPods, key)
		} else {
			p.bufferPods[key] = left
		}
	}
}

// decideBuffer nominates chunks to claims, each on its own as a pending
// pod is: the claims they went to, and how many had none.
func (p *VirtualNodes) decideBuffer(ctx context.Context, key types.NamespacedName, chunks []*corev1.Pod) ([]string, int) {
	unlock, _, _ := p.lockSynced(ctx, klog.KRef(key.Namespace, key.Name))
	if unlock == nil {
		return nil, len(chunks)
	}
	defer unlock()
	d := p.decideGroup(ctx, chunks, "", "")
	var names []string
	for _, t := range d.made {
		if t.isNew {
			t.c.buffer = key.String()
		}
		t.c.dirty = true
		if !slices.Contains(names, t.c.name) {
			names = append(names, t.c.name)
		}
		held := slices.DeleteFunc(p.bufferPods[key], func(pod *corev1.Pod) bool { return pod.UID == t.pod.UID })
		p.bufferPods[key] = append(held, t.pod)
	}
	for _, why := range d.refused {
		klog.FromContext(ctx).Info("A CapacityBuffer's chunk can have no node", "reason", why)
		break
	}
	slices.Sort(names)
	return names, len(d.refused)
}
