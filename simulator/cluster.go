package simulator

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Cluster is the nodes and bound pods the simulator places pods among,
// built once and then looked at through Views: "the cluster without these
// nodes, with this new one" is a View, not a copy, so that a disruption
// decision can weigh hundreds of what-ifs over a large cluster.
type Cluster struct {
	infos map[string]*framework.NodeInfo
	order []string // node names, sorted: a view lists nodes in one order
	pvcs  map[string]int
}

// NewCluster builds the cluster of nodes with pods counted on them. Pods
// bound to a node not among nodes, and finished pods, are left out, as the
// scheduler's cache leaves them.
func NewCluster(nodes []*corev1.Node, pods []*corev1.Pod) *Cluster {
	return newCluster(nodes, pods, nil)
}

// newCluster is NewCluster taking each pod's PodInfo from infoOf when it
// has one (nil: made anew).
func newCluster(nodes []*corev1.Node, pods []*corev1.Pod, infoOf func(*corev1.Pod) *framework.PodInfo) *Cluster {
	c := &Cluster{infos: make(map[string]*framework.NodeInfo, len(nodes)), pvcs: map[string]int{}}
	images := map[string]sets.Set[string]{}
	for _, n := range nodes {
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				if images[name] == nil {
					images[name] = sets.New[string]()
				}
				images[name].Insert(n.Name)
			}
		}
	}
	for _, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		ni.ImageStates = imageStates(n, images)
		c.infos[n.Name] = ni
		c.order = append(c.order, n.Name)
	}
	slices.Sort(c.order)
	for _, p := range pods {
		ni := c.infos[p.Spec.NodeName]
		if ni == nil || podutil.IsPodTerminal(p) {
			continue
		}
		var pi *framework.PodInfo
		if infoOf != nil {
			pi = infoOf(p)
		}
		if pi != nil {
			ni.AddPodInfo(pi)
		} else {
			ni.AddPod(p)
		}
		for key := range framework.PodPVCKeys(p) {
			c.pvcs[key]++
		}
	}
	return c
}

// imageStates is what ImageLocality reads of a node: each image it holds,
// with its size and on how many nodes it is.
func imageStates(n *corev1.Node, images map[string]sets.Set[string]) map[string]*fwk.ImageStateSummary {
	out := map[string]*fwk.ImageStateSummary{}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			out[name] = &fwk.ImageStateSummary{Size: img.SizeBytes, NumNodes: images[name].Len()}
		}
	}
	return out
}

// Node returns the named node's info as the cluster has it, or nil.
func (c *Cluster) Node(name string) fwk.NodeInfo {
	if ni, ok := c.infos[name]; ok {
		return ni
	}
	return nil
}

// Without returns a view of the cluster without the named nodes and the
// pods on them.
func (c *Cluster) Without(names ...string) *View {
	v := &View{base: c, removed: sets.New(names...), changed: map[string]*framework.NodeInfo{}, pvcs: maps.Clone(c.pvcs)}
	for _, name := range names {
		if ni := c.infos[name]; ni != nil {
			for _, pi := range ni.Pods {
				for key := range framework.PodPVCKeys(pi.GetPod()) {
					v.pvcs[key]--
				}
			}
		}
	}
	return v
}

// Draining returns a view of the cluster in which the named nodes hold
// none of their pods and carry taint: what the scheduler lists while those
// nodes are drained. They still count, e.g. as domains of a topology
// spread constraint (whose nodeTaintsPolicy is Ignore by default), so a
// pod that must go to a draining node's zone has nowhere to go until the
// node is gone. IsDraining tells a placement on one of them.
func (c *Cluster) Draining(taint corev1.Taint, names ...string) *View {
	v := c.Without(names...)
	v.draining = sets.New[string]()
	for _, name := range names {
		ni := c.infos[name]
		if ni == nil {
			continue
		}
		node := ni.Node().DeepCopy()
		node.Spec.Taints = append(node.Spec.Taints, taint)
		drained := framework.NewNodeInfo()
		drained.SetNode(node)
		v.changed[name] = drained
		v.removed.Delete(name)
		v.draining.Insert(name)
	}
	return v
}

// IsDraining tells whether the named node is one the view drains.
func (v *View) IsDraining(name string) bool { return v.draining.Has(name) }

// evicted are the pods of the cluster's nodes the view removes or drains.
func (v *View) evicted() []*corev1.Pod {
	var out []*corev1.Pod
	for name := range v.removed.Union(v.draining) {
		if ni := v.base.infos[name]; ni != nil {
			for _, pi := range ni.Pods {
				out = append(out, pi.GetPod())
			}
		}
	}
	return out
}

// View is a what-if on a Cluster: some nodes gone, some added, pods
// placed. The Cluster under it is never written; a node a view changes is
// copied first. A View is what the scheduling framework lists while it
// places a pod (fwk.SharedLister).
type View struct {
	base    *Cluster
	removed sets.Set[string]
	added   []string // names of nodes the view adds, in order
	changed map[string]*framework.NodeInfo
	pvcs    map[string]int
	// draining are nodes kept with no pods and a taint (Draining).
	draining sets.Set[string]
	// plans are the DRA devices the placements on the view plan and free
	// (Scheduler.setView), nil until the first.
	plans *DevicePlans
	// slices are the ResourceSlices of the nodes the view adds.
	slices []*resourcev1.ResourceSlice

	lists *viewLists // nil when a change made them stale
}

type viewLists struct {
	all, affinity, antiAffinity, nonHostAnti []fwk.NodeInfo
}

// Add adds a node, with no pods, to the view: a node that does not exist
// yet (a replacement the simulator is asked about), with the
// ResourceSlices its DRA drivers will publish (nodeshape.ResourceSlices),
// on which a Scheduler allocates devices as on a real node's.
func (v *View) Add(node *corev1.Node, slices ...*resourcev1.ResourceSlice) {
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	v.changed[node.Name] = ni
	v.added = append(v.added, node.Name)
	v.lists = nil
	v.slices = append(v.slices, slices...)
}

// Bind counts pod on the named node of the view.
func (v *View) Bind(pod *corev1.Pod, node string) error {
	ni, err := v.writable(node)
	if err != nil {
		return err
	}
	p := pod.DeepCopy()
	p.Spec.NodeName = node
	ni.AddPod(p)
	for key := range framework.PodPVCKeys(p) {
		v.pvcs[key]++
	}
	v.lists = nil
	return nil
}

// Unbind takes pod off the named node of the view: a pod a what-if moves
// elsewhere. The DRA devices planned for it there are free again.
func (v *View) Unbind(pod *corev1.Pod, node string) error {
	ni, err := v.writable(node)
	if err != nil {
		return err
	}
	p := pod.DeepCopy()
	p.Spec.NodeName = node
	if err := ni.RemovePod(klog.TODO(), p); err != nil {
		return err
	}
	for key := range framework.PodPVCKeys(p) {
		v.pvcs[key]--
	}
	if v.plans != nil {
		// Its devices are free for the next pod placed (the view is read
		// by one placement at a time).
		v.plans.forget(pod.UID)
	}
	v.lists = nil
	return nil
}

// writable returns the view's own copy of a node's info.
func (v *View) writable(name string) (*framework.NodeInfo, error) {
	if ni, ok := v.changed[name]; ok {
		return ni, nil
	}
	ni, ok := v.base.infos[name]
	if !ok || v.removed.Has(name) {
		return nil, fmt.Errorf("node %q is not in the view", name)
	}
	cp := ni.SnapshotConcrete()
	v.changed[name] = cp
	return cp, nil
}

func (v *View) info(name string) *framework.NodeInfo {
	if ni, ok := v.changed[name]; ok {
		return ni
	}
	if v.removed.Has(name) {
		return nil
	}
	return v.base.infos[name]
}

func (v *View) build() *viewLists {
	if v.lists != nil {
		return v.lists
	}
	l := &viewLists{all: make([]fwk.NodeInfo, 0, len(v.base.order)+len(v.added))}
	add := func(ni *framework.NodeInfo) {
		l.all = append(l.all, ni)
		if len(ni.PodsWithAffinity) > 0 {
			l.affinity = append(l.affinity, ni)
		}
		if len(ni.PodsWithRequiredAntiAffinity) > 0 {
			l.antiAffinity = append(l.antiAffinity, ni)
		}
		if len(ni.PodsWithRequiredNonHostScopedAntiAffinity) > 0 {
			l.nonHostAnti = append(l.nonHostAnti, ni)
		}
	}
	for _, name := range v.base.order {
		if ni := v.info(name); ni != nil {
			add(ni)
		}
	}
	for _, name := range v.added {
		add(v.changed[name])
	}
	v.lists = l
	return l
}

var (
	_ fwk.SharedLister      = &View{}
	_ fwk.NodeInfoLister    = viewNodes{}
	_ fwk.StorageInfoLister = viewNodes{}
)

// empty answers the framework's pod group listers: the simulator does not
// simulate gang scheduling (pods in a PodGroup are placed one at a time).
// The PodGroups themselves a Scheduler and a Gate read from the cluster
// (Shared.PodGroups), for the plugins that look a pod's group up.
var empty = cache.NewEmptySnapshot()

// NodeInfos lists the view's nodes.
func (v *View) NodeInfos() fwk.NodeInfoLister { return viewNodes{v} }

// StorageInfos says which PVCs the view's pods use.
func (v *View) StorageInfos() fwk.StorageInfoLister { return viewNodes{v} }

// PodGroupStates is empty; see empty.
func (v *View) PodGroupStates() fwk.PodGroupStateLister { return empty.PodGroupStates() }

// PodGroups is empty; see empty.
func (v *View) PodGroups() fwk.PodGroupLister { return empty.PodGroups() }

// CompositePodGroupStates is empty; see empty.
func (v *View) CompositePodGroupStates() fwk.CompositePodGroupStateLister {
	return empty.CompositePodGroupStates()
}

// CompositePodGroups is empty; see empty.
func (v *View) CompositePodGroups() fwk.CompositePodGroupLister { return empty.CompositePodGroups() }

type viewNodes struct{ v *View }

func (l viewNodes) List() ([]fwk.NodeInfo, error) { return l.v.build().all, nil }
func (l viewNodes) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	return l.v.build().affinity, nil
}
func (l viewNodes) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return l.v.build().antiAffinity, nil
}
func (l viewNodes) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return l.v.build().nonHostAnti, nil
}
func (l viewNodes) Get(name string) (fwk.NodeInfo, error) {
	if ni := l.v.info(name); ni != nil && ni.Node() != nil {
		return ni, nil
	}
	return nil, fmt.Errorf("nodeinfo not found for node name %q", name)
}
func (l viewNodes) IsPVCUsedByPods(key string) bool { return l.v.pvcs[key] > 0 }
