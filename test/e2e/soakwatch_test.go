package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
)

// soakWatch checks what must never be at every watch event of nodes,
// pods and nodeclaims (and every half second, for what is a matter of
// time), so that a taint that flaps every few seconds, or a budget
// overshoot between a taint and the Disrupting write, cannot fall
// between two samples:
//   - no claim stays Disrupting without being deleted for more than 10s
//     while a provisioner could lead (leaderGrace after a restart);
//   - no node is tainted nodeforge.dev/disrupted three times inside one
//     retry period (--replacement-retry);
//   - the budgeted pool never has more nodes disrupting than its budget
//     allows, a node counting from its taint (its command's budget is
//     reserved before the taint and released after the taint is lifted)
//     until its claim is gone;
//   - no node keeps the taint for 30s while its claim is in no command
//     (the executor's sweep lifts such taints every 15s);
//   - no pod is evicted from a node whose claim is not being removed
//     (the API server marks an evicted pod DisruptionTarget, reason
//     EvictionByEvictionAPI), and none is bound to a node already
//     deleted.
type soakWatch struct {
	pool    string  // the budgeted pool
	budget  float64 // its budget, a share of its nodes
	retry   time.Duration
	started func() time.Time // when the current provisioner process started

	mu         sync.Mutex
	claims     map[string]*v1alpha1.NodeClaim
	nodes      map[string]*corev1.Node
	gone       map[string]bool        // nodes deleted
	disrupting map[string]time.Time   // claim → Disrupting, not deleted, since
	untended   map[string]time.Time   // node → tainted under no command since
	taintedAt  map[string][]time.Time // node → when its taint was put on
	taints     int                    // taints put on, in all
	sizes      []sizeAt               // the pool's size, lately
	peak       int                    // the most of the pool disrupting at once
	events     int
	bad        []string
}

func newSoakWatch(pool string, budget float64, retry time.Duration, started func() time.Time) *soakWatch {
	return &soakWatch{pool: pool, budget: budget, retry: retry, started: started,
		claims: map[string]*v1alpha1.NodeClaim{}, nodes: map[string]*corev1.Node{}, gone: map[string]bool{},
		disrupting: map[string]time.Time{}, untended: map[string]time.Time{}, taintedAt: map[string][]time.Time{}}
}

// run watches until the returned stop is called, which returns how many
// events were checked.
func (w *soakWatch) run(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface) (stop func() int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	core := informers.NewSharedInformerFactory(cs, 0)
	claims := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(v1alpha1.SchemeGroupVersion.WithResource("nodeclaims"))
	if _, err := core.Core().V1().Nodes().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.node(nil, o.(*corev1.Node)) },
		UpdateFunc: func(old, o any) { w.node(old.(*corev1.Node), o.(*corev1.Node)) },
		DeleteFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				w.nodeGone(n.Name)
			} else if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				if n, ok := d.Obj.(*corev1.Node); ok {
					w.nodeGone(n.Name)
				}
			}
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := core.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, o any) { w.pod(old.(*corev1.Pod), o.(*corev1.Pod)) },
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := claims.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.claim(o, false) },
		UpdateFunc: func(_, o any) { w.claim(o, false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			w.claim(o, true)
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	core.Start(ctx.Done())
	go claims.Informer().Run(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.mu.Lock()
				w.check(time.Now())
				w.mu.Unlock()
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		w.mu.Lock()
		defer w.mu.Unlock()
		w.check(time.Now())
		return w.events
	}, nil
}

func (w *soakWatch) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(w.bad, msg) {
		w.bad = append(w.bad, msg)
	}
}

func tainted(n *corev1.Node) bool {
	return n != nil && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDisrupted })
}

func (w *soakWatch) node(old, n *corev1.Node) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	w.nodes[n.Name] = n
	if tainted(n) && !tainted(old) {
		w.taints++
		at := append(w.taintedAt[n.Name], now)
		at = slices.DeleteFunc(at, func(t time.Time) bool { return now.Sub(t) > w.retry })
		w.taintedAt[n.Name] = at
		if len(at) > 2 {
			w.fail("node %s was tainted %s %d times within %s (--replacement-retry): the taint flaps", n.Name, v1alpha1.TaintDisrupted, len(at), w.retry)
		}
	}
	w.check(now)
}

func (w *soakWatch) nodeGone(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	delete(w.nodes, name)
	w.gone[name] = true
	w.check(time.Now())
}

func (w *soakWatch) pod(old, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if old.Spec.NodeName == "" && p.Spec.NodeName != "" && w.gone[p.Spec.NodeName] {
		w.fail("pod %s/%s was bound to node %s after the node was deleted", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if evicted(p) && !evicted(old) && p.Spec.NodeName != "" {
		if nc := w.claimOf(p.Spec.NodeName); nc == nil || !isRemoved(nc) {
			w.fail("pod %s/%s was evicted from node %s, whose claim is not being removed: a pod deleted outside a drain", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
}

// evicted: the API server marked the pod for eviction.
func evicted(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI"
	})
}

// isRemoved: the claim is Disrupting or being deleted: its node drains.
func isRemoved(nc *v1alpha1.NodeClaim) bool {
	return nc.Status.Phase == v1alpha1.NodeClaimDisrupting || !nc.DeletionTimestamp.IsZero()
}

// inCommand: the claim is in a disruption the API server shows.
func inCommand(nc *v1alpha1.NodeClaim) bool {
	return isRemoved(nc) || nc.Annotations[v1alpha1.AnnotationReplacement] != ""
}

func (w *soakWatch) claimOf(node string) *v1alpha1.NodeClaim {
	for _, nc := range w.claims {
		if nc.Status.NodeName == node {
			return nc
		}
	}
	return nil
}

func (w *soakWatch) claim(o any, deleted bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var nc v1alpha1.NodeClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nc); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if deleted {
		delete(w.claims, nc.Name)
	} else {
		w.claims[nc.Name] = &nc
	}
	w.check(time.Now())
}

// check runs the checks that hold at every moment. Callers hold w.mu.
func (w *soakWatch) check(now time.Time) {
	seen := map[string]bool{}
	total, disrupting := 0, 0
	for _, nc := range w.claims {
		if nc.Status.Phase == v1alpha1.NodeClaimDisrupting && nc.DeletionTimestamp.IsZero() {
			seen[nc.Name] = true
			if _, ok := w.disrupting[nc.Name]; !ok {
				w.disrupting[nc.Name] = now
			}
			// A claim left Disrupting by a provisioner that lost its
			// lease waits for a successor: the clock starts once one
			// can lead (the lease's expiry and a cache sync after the
			// restart, leaderGrace).
			since := w.disrupting[nc.Name]
			if lead := w.started().Add(leaderGrace); lead.After(since) {
				since = lead
			}
			if now.Sub(since) > 10*time.Second {
				w.fail("nodeclaim %s has been Disrupting, not deleted, for more than 10s while a provisioner could lead", nc.Name)
			}
		}
		if nc.Status.NodeName == "" {
			continue
		}
		n := w.nodes[nc.Status.NodeName]
		if tainted(n) && !inCommand(nc) {
			seen["node/"+n.Name] = true
			if _, ok := w.untended[n.Name]; !ok {
				w.untended[n.Name] = now
			}
			if now.Sub(w.untended[n.Name]) > 30*time.Second {
				w.fail("node %s has had %s for more than 30s while its claim %s is in no command", n.Name, v1alpha1.TaintDisrupted, nc.Name)
			}
		}
		if nc.Spec.NodePool != w.pool {
			continue
		}
		total++
		// A taint the current provisioner did not put on (its
		// predecessor's, before it lost its lease) is no command's until
		// the sweep lifts it.
		stale := tainted(n) && !inCommand(nc) && w.lastTaint(n.Name).Before(w.started())
		if inCommand(nc) || (tainted(n) && !stale) {
			disrupting++
		}
	}
	for k := range w.untended {
		if !seen["node/"+k] {
			delete(w.untended, k)
		}
	}
	for k := range w.disrupting {
		if !seen[k] {
			delete(w.disrupting, k)
		}
	}
	// The provisioner decides by its cache, which may be a moment behind
	// the watch: the pool's size it may have seen is the largest of the
	// last few seconds.
	w.sizes = append(slices.DeleteFunc(w.sizes, func(s sizeAt) bool { return now.Sub(s.at) > 5*time.Second }), sizeAt{now, total})
	size := 0
	for _, s := range w.sizes {
		size = max(size, s.n)
	}
	w.peak = max(w.peak, disrupting)
	if allowed := int(math.Ceil(w.budget * float64(size))); disrupting > allowed {
		w.fail("pool %s had %d of %d nodes disrupting or tainted at %s, more than its budget allows (%d)", w.pool, disrupting, total, now.Format(time.TimeOnly), allowed)
	}
}

// leaderGrace is how long after a provisioner starts again its
// predecessor's claims may wait for it: the lease's duration in the e2e
// sandboxes (8s, quickTimers) and the cache sync after it.
const leaderGrace = 15 * time.Second

// sizeAt is the budgeted pool's size at a moment.
type sizeAt struct {
	at time.Time
	n  int
}

// lastTaint is when the node's taint was last put on, as the watch saw.
func (w *soakWatch) lastTaint(node string) time.Time {
	if at := w.taintedAt[node]; len(at) > 0 {
		return at[len(at)-1]
	}
	return time.Time{}
}

func (w *soakWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.bad)
}

// stats: taints put on in all, and the most of the pool disrupting at
// once.
func (w *soakWatch) stats() (taints, peak int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.taints, w.peak
}
