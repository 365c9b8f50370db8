package simulator

import (
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"
)

// Devices is the DRA manager of a simulation with nodes that do not exist
// yet. Over the manager of the cluster as it is (base), it lists beside
// the cluster's ResourceSlices those the virtual nodes' DRA drivers will
// publish (the slices function's), and it keeps the allocations planned
// for pods nominated to virtual nodes: a device one pod plans to use is
// taken for the next, and a claim pods share is planned once, on one
// node, as the scheduler allocates it.
//
// A plan reaches neither the API server nor the base manager: the
// DynamicResources plugin's Reserve, run through Plan, signals its
// allocation here, and the plan lasts until Forget, or until the claim is
// allocated for real (the base manager's claim then wins).
type Devices struct {
	base   fwk.SharedDRAManager
	slices func() []*resourcev1.ResourceSlice

	mu sync.RWMutex
	// planned claims by key (UID, or namespace/name for the claim
	// DynamicResources makes for an extended resource), each with the
	// pods whose plans use it.
	planned map[string]*plan
	// byPod are the keys of planned each pod's plans use: Forget runs
	// for every pod that leaves a claim, with or without devices.
	byPod map[types.UID]sets.Set[string]
	// staged are the allocations Reserve signalled during Plan, kept once
	// it returns.
	staged []*resourcev1.ResourceClaim
	// reserve is the DynamicResources plugin of the framework built from
	// Registry.
	reserve fwk.ReservePlugin
}

type plan struct {
	claim *resourcev1.ResourceClaim
	pods  sets.Set[types.UID]
}

// NewDevices returns a DRA manager over base whose virtual slices are
// slices' (called when the DynamicResources plugin lists slices, once per
// pod that has claims to allocate).
func NewDevices(base fwk.SharedDRAManager, slices func() []*resourcev1.ResourceSlice) *Devices {
	return &Devices{base: base, slices: slices, planned: map[string]*plan{}, byPod: map[types.UID]sets.Set[string]{}}
}

var _ fwk.SharedDRAManager = &Devices{}

func (d *Devices) ResourceClaims() fwk.ResourceClaimTracker { return (*claimTracker)(d) }
func (d *Devices) ResourceSlices() fwk.ResourceSliceLister  { return (*sliceLister)(d) }
func (d *Devices) DeviceClasses() fwk.DeviceClassLister     { return d.base.DeviceClasses() }
func (d *Devices) DeviceClassResolver() fwk.DeviceClassResolver {
	return d.base.DeviceClassResolver()
}

// Registry returns a copy of registry whose DynamicResources plugin is
// the one Plan reserves with: build the simulation's framework from it.
func (d *Devices) Registry(registry frameworkruntime.Registry) frameworkruntime.Registry {
	registry = maps.Clone(registry)
	build := registry[dynamicresources.Name]
	if build == nil {
		return registry
	}
	registry[dynamicresources.Name] = func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		pl, err := build(ctx, args, h)
		if r, ok := pl.(fwk.ReservePlugin); ok && err == nil {
			d.mu.Lock()
			d.reserve = r
			d.mu.Unlock()
		}
		return pl, err
	}
	return registry
}

// Plan keeps as pod's plan the allocations the DynamicResources plugin's
// Filter chose for it on node, state being the cycle state of the pod's
// PreFilter and Filter: it runs that plugin's Reserve (and no other
// plugin's), whose signal this manager keeps instead of the base one.
// Plans are made one at a time.
func (d *Devices) Plan(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, node string) *fwk.Status {
	d.mu.Lock()
	d.staged = d.staged[:0]
	reserve := d.reserve
	d.mu.Unlock()
	if reserve == nil {
		return nil
	}
	s := reserve.Reserve(ctx, state, pod, node)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !s.IsSuccess() {
		d.staged = d.staged[:0]
		return s
	}
	for _, c := range d.staged {
		k := claimKey(c)
		p := d.planned[k]
		if p == nil {
			p = &plan{pods: sets.New[types.UID]()}
			d.planned[k] = p
		}
		c = c.DeepCopy()
		if !containsConsumer(c.Status.ReservedFor, pod.UID) {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
		}
		p.claim = c
		p.pods.Insert(pod.UID)
		d.usedBy(pod.UID, k)
	}
	d.staged = d.staged[:0]
	// A claim planned for another pod that this one shares (Reserve
	// signals nothing for a claim already allocated): its plan lasts
	// while either pod keeps it.
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		c, err := d.base.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil {
			continue
		}
		if p := d.planned[claimKey(c)]; p != nil && !p.pods.Has(pod.UID) {
			p.pods.Insert(pod.UID)
			d.usedBy(pod.UID, claimKey(c))
			p.claim = p.claim.DeepCopy()
			if !containsConsumer(p.claim.Status.ReservedFor, pod.UID) {
				p.claim.Status.ReservedFor = append(p.claim.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
			}
		}
	}
	return nil
}

// Forget drops the pod's plans; a claim no other pod plans with is free
// again.
func (d *Devices) Forget(pod types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := d.byPod[pod]
	delete(d.byPod, pod)
	for k := range keys {
		p := d.planned[k]
		if p == nil || !p.pods.Has(pod) {
			continue
		}
		p.pods.Delete(pod)
		if p.pods.Len() == 0 {
			delete(d.planned, k)
			continue
		}
		p.claim = p.claim.DeepCopy()
		p.claim.Status.ReservedFor = slicesDeleteConsumer(p.claim.Status.ReservedFor, pod)
	}
}

// usedBy records that pod's plans use the plan under key.
func (d *Devices) usedBy(pod types.UID, key string) {
	if d.byPod[pod] == nil {
		d.byPod[pod] = sets.New[string]()
	}
	d.byPod[pod].Insert(key)
}

// Planned is how many claims are planned, for tests and logs.
func (d *Devices) Planned() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.planned)
}

func claimKey(c *resourcev1.ResourceClaim) string {
	if c.UID != "" {
		return string(c.UID)
	}
	return c.Namespace + "/" + c.Name
}

func containsConsumer(refs []resourcev1.ResourceClaimConsumerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func slicesDeleteConsumer(refs []resourcev1.ResourceClaimConsumerReference, uid types.UID) []resourcev1.ResourceClaimConsumerReference {
	out := refs[:0:0]
	for _, r := range refs {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	return out
}

// sliceLister lists the cluster's slices and the virtual nodes'.
type sliceLister Devices

func (l *sliceLister) ListWithDeviceTaintRules() ([]*resourcev1.ResourceSlice, error) {
	real, err := l.base.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, err
	}
	virtual := l.slices()
	if len(virtual) == 0 {
		return real, nil
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(real)+len(virtual))
	return append(append(out, real...), virtual...), nil
}

// claimTracker answers with the base manager's claims, a planned claim
// in the place of its unallocated self.
type claimTracker Devices

// plannedFor is the plan of c, when c is not allocated for real.
func (t *claimTracker) plannedFor(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	if c == nil || c.Status.Allocation != nil {
		return nil
	}
	if p := t.planned[claimKey(c)]; p != nil {
		return p.claim
	}
	return nil
}

func (t *claimTracker) List() ([]*resourcev1.ResourceClaim, error) {
	claims, err := t.base.ResourceClaims().List()
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if len(t.planned) == 0 {
		return claims, nil
	}
	out := make([]*resourcev1.ResourceClaim, len(claims))
	for i, c := range claims {
		out[i] = c
		if p := t.plannedFor(c); p != nil {
			out[i] = p
		}
	}
	return out, nil
}

func (t *claimTracker) Get(namespace, name string) (*resourcev1.ResourceClaim, error) {
	c, err := t.base.ResourceClaims().Get(namespace, name)
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p := t.plannedFor(c); p != nil {
		return p, nil
	}
	return c, nil
}

// plannedDevices calls the callbacks for the devices of every plan whose
// claim is not allocated for real, as kube-scheduler counts an allocated
// claim's devices: admin access is no allocation, a device with a share
// ID is shared and its consumed capacity counted.
func (t *claimTracker) plannedDevices(dedicated func(structured.DeviceID), shared func(structured.SharedDeviceID), consumed func(structured.DeviceConsumedCapacity)) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.planned {
		if p.claim.UID != "" {
			real, err := t.base.ResourceClaims().Get(p.claim.Namespace, p.claim.Name)
			if err == nil && (real.UID != p.claim.UID || real.Status.Allocation != nil) {
				continue // allocated for real, or another claim of that name now
			}
		}
		for _, r := range p.claim.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				shared(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					consumed(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			dedicated(id)
		}
	}
	return nil
}

func (t *claimTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	ids, err := t.base.ResourceClaims().ListAllAllocatedDevices()
	if err != nil {
		return nil, err
	}
	ids = ids.Clone()
	err = t.plannedDevices(func(id structured.DeviceID) { ids.Insert(id) }, func(structured.SharedDeviceID) {}, func(structured.DeviceConsumedCapacity) {})
	return ids, err
}

func (t *claimTracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	s, err := t.base.ResourceClaims().GatherAllocatedState()
	if err != nil {
		return nil, err
	}
	out := &structured.AllocatedState{
		AllocatedDevices:         s.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: s.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       s.AggregatedCapacity.Clone(),
	}
	if out.AllocatedDevices == nil {
		out.AllocatedDevices = sets.New[structured.DeviceID]()
	}
	if out.AllocatedSharedDeviceIDs == nil {
		out.AllocatedSharedDeviceIDs = sets.New[structured.SharedDeviceID]()
	}
	if out.AggregatedCapacity == nil {
		out.AggregatedCapacity = structured.NewConsumedCapacityCollection()
	}
	err = t.plannedDevices(func(id structured.DeviceID) { out.AllocatedDevices.Insert(id) },
		func(id structured.SharedDeviceID) { out.AllocatedSharedDeviceIDs.Insert(id) },
		func(c structured.DeviceConsumedCapacity) { out.AggregatedCapacity.Insert(c) })
	return out, err
}

// SignalClaimPendingAllocation stages the allocation Reserve makes, for
// Plan to keep; it never reaches the base manager, whose pending
// allocations are the scheduler's own binding cycles'.
func (t *claimTracker) SignalClaimPendingAllocation(_ types.UID, claim *resourcev1.ResourceClaim) error {
	if claim == nil || claim.Status.Allocation == nil {
		return fmt.Errorf("a pending allocation without an allocation")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.staged = append(t.staged, claim)
	return nil
}

// GetPendingAllocation is the base manager's: a planned claim reads as
// allocated, not as being allocated.
func (t *claimTracker) GetPendingAllocation(uid types.UID) *resourcev1.AllocationResult {
	return t.base.ResourceClaims().GetPendingAllocation(uid)
}

func (t *claimTracker) MaybeRemoveClaimPendingAllocation(types.UID, bool) bool { return false }

// AssumeClaimAfterAPICall and AssumedClaimRestore belong to a binding
// cycle, which a simulation never runs.
func (t *claimTracker) AssumeClaimAfterAPICall(*resourcev1.ResourceClaim) error {
	return fmt.Errorf("a simulation writes no ResourceClaim")
}
func (t *claimTracker) AssumedClaimRestore(string, string) {}
