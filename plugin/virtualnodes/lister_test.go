package virtualnodes

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// brokenLister is a snapshot whose lists fail while err is set.
type brokenLister struct {
	fwk.NodeInfoLister
	err   error
	nodes []fwk.NodeInfo
}

func (b *brokenLister) List() ([]fwk.NodeInfo, error) { return b.nodes, b.err }
func (b *brokenLister) HavePodsWithAffinityList() ([]fwk.NodeInfo, error) {
	return b.nodes, b.err
}
func (b *brokenLister) HavePodsWithRequiredAntiAffinityList() ([]fwk.NodeInfo, error) {
	return b.nodes, b.err
}
func (b *brokenLister) HavePodsWithRequiredNonHostScopedAntiAffinityList() ([]fwk.NodeInfo, error) {
	return b.nodes, b.err
}

func nodeInfo(name string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// TestViewListsReturnTheSnapshotsErrorAndRememberNoFailure: a failed list
// of the real nodes is the caller's error, not a list of the virtual
// nodes alone (which would make every zone look empty to topology
// spread), and the next decision lists again.
func TestViewListsReturnTheSnapshotsErrorAndRememberNoFailure(t *testing.T) {
	boom := errors.New("snapshot unavailable")
	real := &brokenLister{err: boom, nodes: []fwk.NodeInfo{nodeInfo("real")}}
	v := &lister{real: real, virtual: []fwk.NodeInfo{nodeInfo("virtual")}}
	lists := map[string]func() ([]fwk.NodeInfo, error){
		"List":                                 v.List,
		"HavePodsWithAffinityList":             v.HavePodsWithAffinityList,
		"HavePodsWithRequiredAntiAffinityList": v.HavePodsWithRequiredAntiAffinityList,
		"HavePodsWithRequiredNonHostScopedAntiAffinityList": v.HavePodsWithRequiredNonHostScopedAntiAffinityList,
	}
	for name, list := range lists {
		if got, err := list(); !errors.Is(err, boom) || got != nil {
			t.Errorf("%s with the snapshot failing = %d nodes, %v; want no nodes and its error", name, len(got), err)
		}
	}
	real.err = nil
	if got, err := v.List(); err != nil || len(got) != 2 || got[0].Node().Name != "real" || got[1].Node().Name != "virtual" {
		t.Errorf("List once the snapshot answers = %d nodes, %v; want the real node then the virtual one", len(got), err)
	}
	for name, list := range lists {
		if got, err := list(); err != nil || len(got) == 0 || got[0].Node().Name != "real" {
			t.Errorf("%s once the snapshot answers = %d nodes, %v; want the real node first (the failure was remembered)", name, len(got), err)
		}
	}
}
