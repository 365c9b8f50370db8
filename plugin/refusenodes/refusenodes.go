// Package refusenodes is a small out-of-tree Filter plugin of Nodeforge's
// own: it refuses every node whose labels match a selector given in its
// arguments. It is there to prove that a profile's custom Filter plugins
// count wherever Nodeforge decides fit (nominating onto virtual nodes as
// well as on real ones), and it serves operators who want a secondary
// scheduler to keep off some nodes without touching every pod.
//
//	pluginConfig:
//	- name: RefuseNodes
//	  args:
//	    nodeSelector:
//	      matchLabels: {topology.kubernetes.io/zone: zone-a}
package refusenodes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Name is the plugin's name in a KubeSchedulerConfiguration.
const Name = "RefuseNodes"

// Args are the plugin's arguments.
type Args struct {
	// NodeSelector picks the nodes to refuse. Required: a plugin enabled
	// with no selector would refuse nothing, which is surely not meant.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
}

// Plugin refuses the nodes its selector matches.
type Plugin struct {
	selector labels.Selector
}

var _ fwk.FilterPlugin = &Plugin{}

// New builds the plugin from its arguments.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args := &Args{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, args); err != nil {
			return nil, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	if args.NodeSelector == nil {
		return nil, fmt.Errorf("%s args: nodeSelector is required", Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(args.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("%s args: nodeSelector: %w", Name, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("%s args: nodeSelector selects every node; give it labels or expressions", Name)
	}
	return &Plugin{selector: sel}, nil
}

// Name returns the plugin's name.
func (p *Plugin) Name() string { return Name }

// Filter refuses a node the selector matches. No pod can change that, so
// the refusal is UnschedulableAndUnresolvable: preemption does not try.
func (p *Plugin) Filter(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if node := ni.Node(); node != nil && p.selector.Matches(labels.Set(node.Labels)) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node(s) refused by %s (%s)", Name, p.selector))
	}
	return nil
}
