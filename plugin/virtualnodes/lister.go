package virtualnodes

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// lister is the cluster as the simulation framework sees it: every real node
// of the scheduler's current snapshot, plus the virtual nodes (open claims
// with their nominated pods) and one empty placeholder node per place a new
// node could be launched. It implements the scheduler's SharedLister, so the
// PreFilter plugins (topology spread, inter-pod affinity) count virtual
// nodes and nominated pods exactly as they count real ones.
//
// Placeholders stand for "a new, empty node could appear here": they make
// each zone a pool can launch in a topology domain with zero matching pods,
// and each new node a hostname domain with zero, which is what the
// scheduler will see once the nodes are real.
type lister struct {
	fwk.SharedLister // the live snapshot; its NodeInfos are extended below
	real             fwk.NodeInfoLister
	// groups are the cluster's PodGroups (simulator.PodGroups), read in
	// place of the snapshot's, which has none before the scheduler's
	// first cycle, when a restart's claims are planned again; nil while
	// GenericWorkload is off.
	groups  fwk.PodGroupLister
	virtual []fwk.NodeInfo
	byName  map[string]fwk.NodeInfo
	// slices are the ResourceSlices of the virtual nodes a pod with
	// ResourceClaims can go to, for the decision on that pod
	// (virtualSlices); nil otherwise.
	slices []*resourcev1.ResourceSlice
	// lists memoises the combined lists for one scheduling decision: the
	// real snapshot does not change within a cycle, nor do the virtual
	// nodes until the pod is nominated, and PreFilter plugins each ask.
	lists map[string][]fwk.NodeInfo
	// printed memoises print for one decision, as lists (nil: not yet).
	printed *realPrint
	// InterPodAffinity's PreFilter states saved per pod class, and the
	// nominations since (affinitycache.go); version moves on every other
	// change to the virtual nodes.
	affinity  map[string]*affinityEntry
	additions []addition
	version   uint64
	// PodTopologySpread's, the same way (spreadcache.go).
	spread map[string]*spreadEntry
}

// PodGroups are the cluster's PodGroups, or the snapshot's without them.
func (v *lister) PodGroups() fwk.PodGroupLister {
	if v.groups != nil {
		return v.groups
	}
	return v.SharedLister.PodGroups()
}

// reset forgets the memoised lists and print; call it whenever a decision
// starts.
func (v *lister) reset() {
	clear(v.lists)
	v.printed = nil
}

// memo returns the list under key, building it the first time. A failed
// build is not remembered: the next caller tries again.
func (v *lister) memo(key string, build func() ([]fwk.NodeInfo, error)) ([]fwk.NodeInfo, error) {
	if l, ok := v.lists[key]; ok {
		return l, nil
	}
	l, err := build()
	if err != nil {
		return nil, err
	}
	if v.lists == nil {
		v.lists = map[string][]fwk.NodeInfo{}
	}
	v.lists[key] = l
	return l, nil
}

var _ fwk.NodeInfoLister = &lister{}

// NodeInfos returns the combined node lister.
func (v *lister) NodeInfos() fwk.NodeInfoLister { return v }

// realList lists the real nodes of the snapshot. Its error goes back to
// the plugin that asked: a list without the real nodes would make every
// zone look empty to topology spread and affinity, and so a wrong
// decision, not a smaller one.
func (v *lister) realList(name string, f func(fwk.NodeInfoLister) ([]fwk.NodeInfo, error)) ([]fwk.NodeInfo, error) {
	if v.real == nil {
		return nil, nil
	}
	l, err := f(v.real)
	if err != nil {
		return nil, fmt.Errorf("listing the snapshot's real nodes (%s): %w", name, err)
	}
	return l, nil
}

// List returns real then virtual nodes.
func (v *lister) List() ([]fwk.NodeInfo, error) {
	return v.memo("all", func() ([]fwk.NodeInfo, error) {
		real, err := v.realList("all", fwk.NodeInfoLister.List)
		if err != nil {
			return nil, err
		}
		out := make([]fwk.NodeInfo, 0, len(real)+len(v.virtual))
		return append(append(out, real...), v.virtual...), nil
	})
}

// filtered is the real nodes listed by f, then the virtual nodes keep
// accepts.
func (v *lister) filtered(key string, f func(fwk.NodeInfoLister) ([]fwk.NodeInfo, error), keep func(fwk.NodeInfo) bool) ([]fwk.NodeInfo, error) {
	return v.memo(key, func() ([]fwk.NodeInfo, error) {
		real, err := v.realList(key, f)
		if err != nil {
			return nil, err
		}
		out := append([]fwk.NodeInfo(nil), real...)
		for _, n := range v.virtual {
			if keep(n) {
				out = append(out, n)
			}
		}
		return out, nil
	})
}

// HavePodsWithAffinityList returns the nodes with pods with inter-pod (anti-)affinity.
func (v *lister) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	return v.filtered("affinity", fwk.NodeInfoLister.HavePodsWithAffinityList, func(n fwk.NodeInfo) bool { return len(n.GetPodsWithAffinity()) > 0 })
}

// HavePodsWithRequiredAntiAffinityList returns the nodes with pods with required anti-affinity.
func (v *lister) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return v.filtered("antiAffinity", fwk.NodeInfoLister.HavePodsWithRequiredAntiAffinityList, func(n fwk.NodeInfo) bool { return len(n.GetPodsWithRequiredAntiAffinity()) > 0 })
}

// HavePodsWithRequiredNonHostScopedAntiAffinityList returns the nodes with
// pods whose required anti-affinity is wider than a host.
func (v *lister) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return v.filtered("nonHostAntiAffinity", fwk.NodeInfoLister.HavePodsWithRequiredNonHostScopedAntiAffinityList, func(n fwk.NodeInfo) bool {
		return len(n.GetPodsWithRequiredNonHostScopedAntiAffinity()) > 0
	})
}

// Get returns a virtual or real node by name.
func (v *lister) Get(name string) (fwk.NodeInfo, error) {
	if n, ok := v.byName[name]; ok {
		return n, nil
	}
	return v.real.Get(name)
}
