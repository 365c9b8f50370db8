package virtualnodes

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nodeforge/nodeforge/nodeshape"
)

// DRA devices on virtual nodes.
//
// A virtual node carries the ResourceSlices its instance type's DRA
// drivers will publish (the catalog's resourceSlices), so that the
// scheduler's own DynamicResources plugin allocates a pod's claims on it
// as on the node it becomes; the allocation is planned (simulator.Devices)
// and never written. Slices are listed only for a pod with ResourceClaims,
// and only where the pod can go: the open claims' nodes and, per pool, one
// new node for each set of devices the pool's types have.
//
// A claim that holds such a pod keeps only the instance types whose nodes
// publish the same devices as the one its pod was planned on, so that the
// plan holds on whichever type launches; a claim whose node has other
// devices is not tried for the pod, which gets a claim of its own.

// needsDevices says whether pod has claims DynamicResources allocates.
func needsDevices(pod *corev1.Pod) bool {
	return len(pod.Spec.ResourceClaims) > 0
}

// sameDevices keeps the options whose nodes publish the devices key does.
func sameDevices(opts []*option, key string) []*option {
	var out []*option
	for _, o := range opts {
		if o.devices == key {
			out = append(out, o)
		}
	}
	return out
}

// newNodeNames draws, for a pod with claims, the name of each new node a
// pool could launch for it, one per set of devices its types publish: a
// slice names its node, and DynamicResources lists the slices once, in
// PreFilter, before any node is tried. The types without devices keep the
// name newClaim would draw (key "").
func (d *decider) newNodeNames(pools []*pool) map[*pool]map[string]string {
	out := map[*pool]map[string]string{}
	for _, pl := range pools {
		names := map[string]string{}
		for _, g := range pl.groups {
			for _, o := range g.options {
				if _, ok := names[o.devices]; !ok {
					names[o.devices] = d.book.newName(pl.np.Name)
				}
			}
		}
		out[pl] = names
	}
	return out
}

// describeClaims names a pod's ResourceClaims and their requests, for the
// Event that says no type's devices satisfy them: "claim default/x-gpu-q2
// (request gpu: 1 of gpu.nvidia.com)".
func (d *decider) describeClaims(pod *corev1.Pod) string {
	var out []string
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, _, err := resourceclaim.Name(pod, pc)
		if err != nil || name == nil {
			out = append(out, "claim "+pc.Name+" (not created yet)")
			continue
		}
		desc := "claim " + pod.Namespace + "/" + *name
		if d.claims != nil {
			if c, err := d.claims(pod.Namespace, *name); err == nil {
				var reqs []string
				for _, r := range c.Spec.Devices.Requests {
					if r.Exactly != nil {
						n := r.Exactly.Count
						if r.Exactly.AllocationMode == resourcev1.DeviceAllocationModeAll {
							reqs = append(reqs, fmt.Sprintf("request %s: all of %s", r.Name, r.Exactly.DeviceClassName))
							continue
						}
						reqs = append(reqs, fmt.Sprintf("request %s: %d of %s", r.Name, max(n, 1), r.Exactly.DeviceClassName))
					} else {
						reqs = append(reqs, "request "+r.Name+": one of its subrequests")
					}
				}
				desc += " (" + strings.Join(reqs, ", ") + ")"
			}
		}
		out = append(out, desc)
	}
	return strings.Join(out, ", ")
}

// replan runs, for pod restored on claim c, DynamicResources' PreFilter
// and Filter on c's node with its slices listed, and plans what it
// chose; it says why not when the node does not take the pod.
func (d *decider) replan(ctx context.Context, c *claim, pod *corev1.Pod, plan func(context.Context, fwk.CycleState, *corev1.Pod, string) *fwk.Status) string {
	if len(c.options) == 0 || c.info == nil {
		return "the claim has no instance type left"
	}
	d.view.reset()
	defer d.view.reset()
	d.view.slices = nodeshape.ResourceSlices(c.name, largest(c.options).it.ResourceSlices)
	defer func() { d.view.slices = nil }()
	// Judged as it was when nominated: without itself on the node.
	info := c.info.Snapshot()
	if err := info.RemovePod(klog.FromContext(ctx), pod); err != nil {
		return err.Error()
	}
	state := framework.NewCycleState()
	if _, s, _ := d.fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() && !s.IsSkip() {
		return s.Message()
	}
	if s := d.fw.RunFilterPlugins(ctx, state, pod, info); !s.IsSuccess() {
		return s.Message()
	}
	if s := plan(ctx, state, pod, c.name); !s.IsSuccess() {
		return s.Message()
	}
	return ""
}

// virtualSlices are the slices of the nodes a pod with claims can be
// nominated to: each open claim's node, as its largest open option, and
// each new node of newNodeNames.
func virtualSlices(claims inFlight, names map[*pool]map[string]string) []*resourcev1.ResourceSlice {
	var out []*resourcev1.ResourceSlice
	for _, c := range claims.open {
		if len(c.options) == 0 {
			continue
		}
		out = append(out, nodeshape.ResourceSlices(c.name, largest(c.options).it.ResourceSlices)...)
	}
	for pl, byKey := range names {
		done := map[string]bool{}
		for _, g := range pl.groups {
			for _, o := range g.options {
				if o.devices == "" || done[o.devices] {
					continue
				}
				done[o.devices] = true
				out = append(out, nodeshape.ResourceSlices(byKey[o.devices], o.it.ResourceSlices)...)
			}
		}
	}
	return out
}
