package virtualnodes

import (
	fwk "k8s.io/kube-scheduler/framework"
)

// view is the cluster as the simulation framework sees it: every real node
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
type view struct {
	fwk.SharedLister // the live snapshot; its NodeInfos are extended below
	real             fwk.NodeInfoLister
	virtual          []fwk.NodeInfo
	byName           map[string]fwk.NodeInfo
	// lists memoises the combined lists for one scheduling decision: the
	// real snapshot does not change within a cycle, nor do the virtual
	// nodes until the pod is nominated, and PreFilter plugins each ask.
	lists map[string][]fwk.NodeInfo
}

// reset forgets the memoised lists; call it whenever a decision starts.
func (v *view) reset() { clear(v.lists) }

func (v *view) memo(key string, build func() []fwk.NodeInfo) []fwk.NodeInfo {
	if l, ok := v.lists[key]; ok {
		return l
	}
	if v.lists == nil {
		v.lists = map[string][]fwk.NodeInfo{}
	}
	l := build()
	v.lists[key] = l
	return l
}

var _ fwk.NodeInfoLister = &view{}

// NodeInfos returns the combined node lister.
func (v *view) NodeInfos() fwk.NodeInfoLister { return v }

func (v *view) realList(f func(fwk.NodeInfoLister) ([]fwk.NodeInfo, error)) []fwk.NodeInfo {
	if v.real == nil {
		return nil
	}
	l, err := f(v.real)
	if err != nil {
		return nil
	}
	return l
}

// List returns real then virtual nodes.
func (v *view) List() ([]fwk.NodeInfo, error) {
	return v.memo("all", func() []fwk.NodeInfo {
		real := v.realList(fwk.NodeInfoLister.List)
		out := make([]fwk.NodeInfo, 0, len(real)+len(v.virtual))
		return append(append(out, real...), v.virtual...)
	}), nil
}

func (v *view) filtered(real []fwk.NodeInfo, keep func(fwk.NodeInfo) bool) []fwk.NodeInfo {
	out := append([]fwk.NodeInfo(nil), real...)
	for _, n := range v.virtual {
		if keep(n) {
			out = append(out, n)
		}
	}
	return out
}

// HavePodsWithAffinityList returns the nodes with pods with inter-pod (anti-)affinity.
func (v *view) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	return v.memo("affinity", func() []fwk.NodeInfo {
		return v.filtered(v.realList(fwk.NodeInfoLister.HavePodsWithAffinityList), func(n fwk.NodeInfo) bool { return len(n.GetPodsWithAffinity()) > 0 })
	}), nil
}

// HavePodsWithRequiredAntiAffinityList returns the nodes with pods with required anti-affinity.
func (v *view) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return v.memo("antiAffinity", func() []fwk.NodeInfo {
		return v.filtered(v.realList(fwk.NodeInfoLister.HavePodsWithRequiredAntiAffinityList), func(n fwk.NodeInfo) bool { return len(n.GetPodsWithRequiredAntiAffinity()) > 0 })
	}), nil
}

// HavePodsWithRequiredNonHostScopedAntiAffinityList returns the nodes with
// pods whose required anti-affinity is wider than a host.
func (v *view) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return v.memo("nonHostAntiAffinity", func() []fwk.NodeInfo {
		return v.filtered(v.realList(fwk.NodeInfoLister.HavePodsWithRequiredNonHostScopedAntiAffinityList), func(n fwk.NodeInfo) bool {
			return len(n.GetPodsWithRequiredNonHostScopedAntiAffinity()) > 0
		})
	}), nil
}

// Get returns a virtual or real node by name.
func (v *view) Get(name string) (fwk.NodeInfo, error) {
	if n, ok := v.byName[name]; ok {
		return n, nil
	}
	return v.real.Get(name)
}
