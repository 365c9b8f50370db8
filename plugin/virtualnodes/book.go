package virtualnodes

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// book is VirtualNodes' record of its claims and of the claim each pod is
// nominated to:
//   - the open claims, oldest first, which take new pods;
//   - the closed ones, whose nodes stay in the view with their pods until
//     each pod is seen bound on its real node (settling), its nomination
//     is cleared, or the claim is deleted;
//   - the last claim each kind of pod went to (hints);
//   - the claims the provisioner has closed, which count against their
//     pool's limits until they are gone (committed), and the names a
//     repack emptied (repacked).
//
// Its methods are the only code that changes these, and they keep the
// view's virtual nodes in step with the claims.
//
// Locking: the book takes its own lock, mu, in every method, so
// PreFilter can read a pod's nomination without waiting for a decision.
// A claim's own fields (its pods, node and options) are changed by the
// decision's trials and the choices applied here (take), which hold
// VirtualNodes.mu; every caller that changes the book holds
// VirtualNodes.mu too, so that a decision sees the book and the pools as
// one. The order is always VirtualNodes.mu, then book.mu; the book calls
// nothing that takes VirtualNodes.mu.
type book struct {
	mu     sync.Mutex
	lister *lister
	// plans are the DRA devices planned for the pods (simulator.Devices):
	// a pod that leaves its claim leaves its plan. Nil without DRA.
	plans interface{ Forget(types.UID) }
	// openGauge follows len(open): nodeforge_virtualnodes_claims_open,
	// summed over the plugin's profiles.
	openGauge interface{ Add(float64) }

	claims    map[string]*claim
	open      []*claim // oldest first
	nominated map[types.UID]*claim
	hints     map[string]*claim
	settling  map[*claim]struct{}
	// committed are the NodeClaims the provisioner has closed (launching,
	// launched, registered or going), as the informer last saw them.
	committed map[string]*v1alpha1.NodeClaim
	// committedUsage memoises poolUsage's sum over committed, per pool
	// name: limits are checked several times per scheduling cycle, and
	// committed changes far less often. Cleared when committed or the
	// pools change.
	committedUsage map[string]corev1.ResourceList
	// repacked are the claims a repack emptied and deleted, when: a pod
	// the scheduler retries with an object still naming one of them was
	// moved (follow), and keeps the claim it was moved to.
	repacked map[string]time.Time
	// left is, for a pod this plugin took off a claim to decide it again
	// (closeAt), that claim's name: an update of the pod still naming
	// it, written before, is not a move to follow.
	left map[types.UID]string
	// held counts the decisions under way that may yet be undone (a pod
	// group's, all or nothing): while one is, dirty writes nothing, so
	// that no claim of a group the plugin then gives up is created.
	held int
}

func newBook(v *lister, openGauge interface{ Add(float64) }) *book {
	return &book{
		lister:         v,
		openGauge:      openGauge,
		claims:         map[string]*claim{},
		nominated:      map[types.UID]*claim{},
		hints:          map[string]*claim{},
		settling:       map[*claim]struct{}{},
		committed:      map[string]*v1alpha1.NodeClaim{},
		committedUsage: map[string]corev1.ResourceList{},
		repacked:       map[string]time.Time{},
		left:           map[types.UID]string{},
	}
}

// restored are the claims the book holds, by name: after a rebuild, those
// it restored.
func (b *book) restored() []*claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Collect(maps.Values(b.claims))
	slices.SortFunc(out, func(a, c *claim) int { return cmp.Compare(a.name, c.name) })
	return out
}

// nominationOf returns the claim pod is nominated to, or nil.
func (b *book) nominationOf(uid types.UID) *nomination {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.nominated[uid]; c != nil {
		return &nomination{claim: c.name, node: c.nodeName}
	}
	return nil
}

// claim is the claim named name, or nil.
func (b *book) claim(name string) *claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.claims[name]
}

// count is how many claims the book holds, open or closed.
func (b *book) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.claims)
}

// nominatedTo is the claim pod is nominated to, or nil.
func (b *book) nominatedTo(uid types.UID) *claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nominated[uid]
}

// openClaims are the open claims, oldest first. The slice is the book's:
// read it, do not change it.
func (b *book) openClaims() []*claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// inFlight is the book as a decision for one pod reads it: the open
// claims, oldest first (the book's slice: read it, do not change it), and
// the claim the last pod like this one went to (hint), or nil.
type inFlight struct {
	open []*claim
	hint *claim
}

// inFlight returns the claims in flight for a decision on pod.
func (b *book) inFlight(pod *corev1.Pod) inFlight {
	b.mu.Lock()
	defer b.mu.Unlock()
	return inFlight{open: b.open, hint: b.hints[signature(pod)]}
}

// signature groups pods that the same claim is likely to take, the key of
// the hints: pods of one owner, or with the same labels in one namespace.
func signature(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return string(o.UID)
		}
	}
	return pod.Namespace + "/" + labels.Set(pod.Labels).String()
}

// wasRepacked says whether a repack emptied the claim named name lately.
func (b *book) wasRepacked(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.repacked[name]
	return ok
}

// newName returns a name no claim has.
func (b *book) newName(pool string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if n := newClaimName(pool); b.claims[n] == nil {
			return n
		}
	}
}

// registerLocked adds a new open claim, and its node to the view.
func (b *book) registerLocked(c *claim) {
	b.claims[c.name] = c
	b.open = append(b.open, c)
	b.openGauge.Add(1)
	b.lister.virtual = append(b.lister.virtual, c.info)
	b.lister.byName[c.name] = c.info
}

// take nominates pod to the claim the decision chose (ch), at now: the
// claim takes the pod and keeps the options ch names; a claim made for the
// pod joins the book and the view with its daemonset pods; and the claim
// becomes the hint for the next pod like this one.
func (b *book) take(pod *corev1.Pod, ch choice, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := ch.claim
	if ch.resized {
		b.lister.changed() // its pods are counted under the new labels
	}
	if ch.isNew {
		c.created = now
	}
	c.add(pod, ch.opts, now)
	if ch.isNew {
		b.registerLocked(c)
		b.lister.joined(c.info, append(slices.Clone(c.dsPods), pod)...)
	} else {
		b.lister.added(c.info, pod)
	}
	b.hints[signature(pod)] = c
	b.nominated[pod.UID] = c
}

// hold keeps dirty from writing until release: the nominations made
// meanwhile may be undone (untake).
func (b *book) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held++
}

func (b *book) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held--
}

// untake undoes take for pod, nominated to c by a decision held since:
// the pod leaves c (and its devices plan), c gets back options (its
// options before the decision; nil for a claim the decision made), and a
// claim the decision made, left with no pod, is forgotten as if never
// made: it was never written.
func (b *book) untake(pod *corev1.Pod, c *claim, options []*option) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nominated[pod.UID] == c {
		delete(b.nominated, pod.UID)
	}
	c.remove(pod)
	b.forgetPlan(pod.UID)
	b.lister.changed()
	if options != nil {
		c.setOptions(options)
	}
	if len(c.pods) == 0 && c.written == nil {
		b.closeLocked(c)
		delete(b.claims, c.name)
	}
}

// close stops a claim taking nominations. Its node stays in the view, with
// the pods nominated to it, through launch and registration: until each pod
// is seen bound on its real node in the scheduler's snapshot (settle), its
// nomination is cleared, or the claim is deleted (drop). Pods counted
// nowhere would let topology spread and inter-pod (anti-)affinity place a
// pod the scheduler will refuse once they are bound.
func (b *book) close(c *claim) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeLocked(c)
}

func (b *book) closeLocked(c *claim) {
	if !c.open {
		return
	}
	c.open = false
	before := len(b.open)
	b.open = slices.DeleteFunc(b.open, func(o *claim) bool { return o == c })
	b.openGauge.Add(float64(len(b.open) - before))
	for sig, h := range b.hints {
		if h == c {
			delete(b.hints, sig)
		}
	}
	// A closed claim takes no pods: its options are not needed again.
	c.options = nil
	if len(c.pods) == 0 {
		b.dropLocked(c)
	}
}

// dropLocked takes a claim's node out of the view.
func (b *book) dropLocked(c *claim) {
	delete(b.settling, c)
	if c.info == nil {
		return
	}
	b.lister.changed()
	b.lister.virtual = slices.DeleteFunc(b.lister.virtual, func(n fwk.NodeInfo) bool { return n == fwk.NodeInfo(c.info) })
	if b.lister.byName[c.name] == fwk.NodeInfo(c.info) {
		delete(b.lister.byName, c.name)
	}
	c.lastNode, c.lastDS = c.info.Node(), c.dsPods
	c.info, c.dsPods = nil, nil
}

// closeAt closes c as the API server has it, with only the pods of
// written: the others leave it and their nominations, and are returned
// for the caller to send back to be decided again. A claim whose spec was
// never written keeps its pods: its create is what failed, and the
// caller handles that.
func (b *book) closeAt(c *claim, written map[types.UID]*corev1.Pod) []*corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	var late []*corev1.Pod
	if written != nil {
		for uid, pod := range c.pods {
			if _, ok := written[uid]; !ok && b.nominated[uid] == c {
				late = append(late, pod)
			}
		}
	}
	// Closed first: an open claim's pods are not on a node of the view
	// that unview would take them off.
	b.closeLocked(c)
	for _, pod := range late {
		b.unviewLocked(c, pod)
		b.left[pod.UID] = c.name
	}
	return late
}

// unview takes a pod off a closed claim's node; the node leaves the view
// with its last pod.
func (b *book) unview(c *claim, pod *corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unviewLocked(c, pod)
}

func (b *book) unviewLocked(c *claim, pod *corev1.Pod) {
	if b.nominated[pod.UID] == c {
		delete(b.nominated, pod.UID)
	}
	if _, ok := c.pods[pod.UID]; !ok {
		return
	}
	delete(c.pods, pod.UID)
	delete(c.bound, pod.UID)
	b.forgetPlan(pod.UID)
	if c.info != nil {
		_ = c.info.RemovePod(klog.TODO(), pod) // by UID
		b.lister.changed()
	}
	if len(c.bound) == 0 {
		delete(b.settling, c)
	}
	if len(c.pods) == 0 {
		b.dropLocked(c)
	}
}

// settle takes off the closed claims' nodes the bound pods the scheduler's
// snapshot now shows on their real nodes, so each pod counts exactly once.
// It runs at the start of each decision, when the snapshot is this cycle's.
func (b *book) settle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lister.real == nil {
		return
	}
	for c := range b.settling {
		for uid, nodeName := range c.bound {
			ni, err := b.lister.real.Get(nodeName)
			if err != nil || ni.Node() == nil {
				continue
			}
			for _, pi := range ni.GetPods() {
				if pi.GetPod().UID == uid {
					b.unviewLocked(c, c.pods[uid])
					break
				}
			}
		}
	}
}

// forget drops a claim and returns the pods still nominated to it, for
// the caller to send back to be decided again.
func (b *book) forget(c *claim) []*corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeLocked(c)
	b.dropLocked(c)
	delete(b.claims, c.name)
	var pods []*corev1.Pod
	for uid, pod := range c.pods {
		b.forgetPlan(uid)
		if b.nominated[uid] == c {
			delete(b.nominated, uid)
			pods = append(pods, pod)
		}
	}
	return pods
}

// inFlightClaims are the claims whose node has not registered, with a
// node in the view.
func (b *book) inFlightClaims() []*claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*claim
	for _, c := range b.claims {
		if c.nodeName == "" && c.info != nil && c.info.Node() != nil {
			out = append(out, c)
		}
	}
	return out
}

// forgetPlan drops the devices planned for a pod that left its claim.
func (b *book) forgetPlan(uid types.UID) {
	if b.plans != nil {
		b.plans.Forget(uid)
	}
}

// follow moves pod from the claim it is nominated to onto the claim named
// to, where it counts from now on: whether it did. Only the provisioner
// moves a pod from one claim to another, and only between claims it has
// closed (a repack of their batch before launch): either claim this
// plugin still holds open is closed here, ahead of the informer's news.
// A nomination naming no known claim (the claim's node, a claim gone) is
// not a move.
func (b *book) follow(pod *corev1.Pod, to string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if from := b.nominated[pod.UID]; from != nil && from.name == to {
		delete(b.left, pod.UID) // the informer has caught up
	}
	from, dst, ok := b.moveLocked(pod, to)
	if !ok {
		return false
	}
	b.closeLocked(from)
	b.closeLocked(dst)
	b.unviewLocked(from, pod)
	b.nominated[pod.UID] = dst
	dst.pods[pod.UID] = pod
	if dst.info == nil && dst.lastNode != nil {
		// Its pods had all gone (moved first): its node comes back.
		dst.info = framework.NewNodeInfo()
		dst.info.SetNode(dst.lastNode)
		dst.dsPods = dst.lastDS
		for _, d := range dst.dsPods {
			dst.info.AddPod(d)
		}
		b.lister.virtual = append(b.lister.virtual, dst.info)
		b.lister.byName[dst.name] = dst.info
	}
	if dst.info != nil {
		dst.info.AddPod(pod)
		b.lister.changed()
	}
	klog.Background().V(4).Info("Followed a pod moved to another nodeclaim of its batch", "pod", klog.KObj(pod), "from", from.name, "to", dst.name)
	return true
}

// moves says whether follow would move pod onto the claim named to,
// without moving it.
func (b *book) moves(pod *corev1.Pod, to string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _, ok := b.moveLocked(pod, to)
	return ok
}

// moveLocked is moves, with the two claims.
func (b *book) moveLocked(pod *corev1.Pod, to string) (from, dst *claim, ok bool) {
	from, dst = b.nominated[pod.UID], b.claims[to]
	if from == nil || dst == nil || from == dst || from.nodeName == to || b.left[pod.UID] == to {
		// The last: an update of the pod written before this plugin
		// took it off that claim (closeAt), not a move.
		return nil, nil, false
	}
	return from, dst, true
}

// forgetLeft forgets the claim a pod was taken off (closeAt).
func (b *book) forgetLeft(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.left, uid)
}

// podGone takes a pod that was bound or deleted off its claim: whether
// the pod was nominated to one. A pod bound from a closed claim keeps
// counting on the claim's node until the scheduler's snapshot shows it on
// the node it was bound to (settle).
func (b *book) podGone(pod *corev1.Pod, deleted bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.left, pod.UID)
	c := b.nominated[pod.UID]
	if c == nil {
		return false
	}
	switch {
	case c.open:
		delete(b.nominated, pod.UID)
		c.remove(pod)
		b.forgetPlan(pod.UID)
		b.lister.changed()
	case deleted || c.info == nil:
		b.unviewLocked(c, pod)
	default:
		if c.bound == nil {
			c.bound = map[types.UID]string{}
		}
		c.bound[pod.UID] = pod.Spec.NodeName
		b.settling[c] = struct{}{}
	}
	return true
}

// reset closes and forgets every claim, to rebuild from the API server.
func (b *book) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.claims {
		b.closeLocked(c)
		b.dropLocked(c)
	}
	clear(b.claims)
	clear(b.nominated)
	clear(b.hints)
	clear(b.left)
}

// restore records a claim rebuilt from the API server with its pods:
// open, its node in the view.
func (b *book) restore(c *claim) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid := range c.pods {
		b.nominated[uid] = c
	}
	b.registerLocked(c)
	b.lister.changed()
}

// restoreClosed records a claim closed to nominations whose node this
// plugin cannot build (its pool or types gone), for its pods: they keep
// their nomination and wait for its node.
func (b *book) restoreClosed(name, nodeName string, pods []*corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &claim{name: name, nodeName: nodeName, pods: map[types.UID]*corev1.Pod{}}
	for _, pod := range pods {
		c.pods[pod.UID] = pod
		b.nominated[pod.UID] = c
	}
	b.claims[name] = c
}

// nominations is how many pods are nominated to the book's claims.
func (b *book) nominations() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.nominated)
}

// committedChanged records a claim the provisioner has closed: it counts
// against its pool's limits from now on, and a claim held here is closed
// to nominations, its pods waiting for its node once it has one. It
// returns the pods nominated to the claim when this change named its node
// for the first time, and nil otherwise.
func (b *book) committedChanged(nc *v1alpha1.NodeClaim) []*corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.committed[nc.Name] = nc
	delete(b.committedUsage, nc.Spec.NodePool)
	c := b.claims[nc.Name]
	if c != nil && c.open {
		b.closeLocked(c)
	}
	if c == nil || nc.Status.NodeName == "" || c.nodeName == nc.Status.NodeName {
		return nil
	}
	c.nodeName = nc.Status.NodeName
	var pods []*corev1.Pod
	for uid, pod := range c.pods {
		if b.nominated[uid] == c {
			pods = append(pods, pod)
		}
	}
	return pods
}

// deleted records that a claim is gone from the API server; repacked
// says a repack emptied it. It returns the claim if the book holds it
// (the caller forgets it).
func (b *book) deleted(name string, repacked bool, now time.Time) *claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	if nc, ok := b.committed[name]; ok {
		delete(b.committed, name)
		delete(b.committedUsage, nc.Spec.NodePool)
	}
	if repacked {
		for n, at := range b.repacked {
			if now.Sub(at) > repackedMemory {
				delete(b.repacked, n)
			}
		}
		b.repacked[name] = now
	}
	return b.claims[name]
}

// poolsChanged forgets the usage memoised per pool: options' capacities
// may have changed.
func (b *book) poolsChanged() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.committedUsage)
}

// dirty returns the open claims changed since they were last written,
// each with the object to write, and marks them clean; nothing while a
// decision is held.
func (b *book) dirty() []write {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held > 0 {
		return nil
	}
	var writes []write
	for _, cl := range b.open {
		if cl.dirty {
			writes = append(writes, write{cl: cl, obj: cl.object(), create: cl.written == nil, pods: maps.Clone(cl.pods)})
			cl.dirty = false
		}
	}
	return writes
}

// write is one claim's write to the API server: its object, created when
// it has never been written.
type write struct {
	cl     *claim
	obj    *v1alpha1.NodeClaim
	create bool
	// pods are the claim's pods obj counts.
	pods map[types.UID]*corev1.Pod
}
