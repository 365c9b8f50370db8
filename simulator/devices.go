package simulator

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
	// plans are the simulation's: its own for the plugin, the view's
	// being placed on for a Scheduler (use).
	plans *DevicePlans
	// staged are the allocations Reserve signalled during Plan, kept once
	// it returns.
	staged []*resourcev1.ResourceClaim
	// reserve is the DynamicResources plugin of the framework built from
	// Registry.
	reserve fwk.ReservePlugin
}

// DevicePlans are the devices one simulation plans and frees: the
// allocations planned for the pods it places, and the allocated claims it
// reads as not allocated because every pod that holds them is moved.
type DevicePlans struct {
	// planned claims by key (UID, or namespace/name for the claim
	// DynamicResources makes for an extended resource), each with the
	// pods whose plans use it.
	planned map[string]*plan
	// byPod are the keys of planned each pod's plans use: Forget runs
	// for every pod that leaves a claim, with or without devices.
	byPod map[types.UID]sets.Set[string]
	// released are allocated claims, by UID, as they were when released:
	// read unallocated, with nobody reserving them, their devices free.
	released map[types.UID]*resourcev1.ResourceClaim
}

func newDevicePlans() *DevicePlans {
	return &DevicePlans{planned: map[string]*plan{}, byPod: map[types.UID]sets.Set[string]{}}
}

type plan struct {
	claim *resourcev1.ResourceClaim
	pods  sets.Set[types.UID]
}

// NewDevices returns a DRA manager over base whose virtual slices are
// slices' (called when the DynamicResources plugin lists slices, once per
// pod that has claims to allocate).
func NewDevices(base fwk.SharedDRAManager, slices func() []*resourcev1.ResourceSlice) *Devices {
	if slices == nil {
		slices = func() []*resourcev1.ResourceSlice { return nil }
	}
	return &Devices{base: base, slices: slices, plans: newDevicePlans()}
}

// use makes p the plans the manager reads and Plan adds to.
func (d *Devices) use(p *DevicePlans) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.plans = p
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
		p := d.plans.planned[k]
		if p == nil {
			p = &plan{pods: sets.New[types.UID]()}
			d.plans.planned[k] = p
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
		if p := d.plans.planned[claimKey(c)]; p != nil && !p.pods.Has(pod.UID) {
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
	d.plans.forget(pod)
}

// forget drops the pod's plans (Devices.Forget).
func (p *DevicePlans) forget(pod types.UID) {
	keys := p.byPod[pod]
	delete(p.byPod, pod)
	for k := range keys {
		pl := p.planned[k]
		if pl == nil || !pl.pods.Has(pod) {
			continue
		}
		pl.pods.Delete(pod)
		if pl.pods.Len() == 0 {
			delete(p.planned, k)
			continue
		}
		pl.claim = pl.claim.DeepCopy()
		pl.claim.Status.ReservedFor = slicesDeleteConsumer(pl.claim.Status.ReservedFor, pod)
	}
}

// usedBy records that pod's plans use the plan under key.
func (d *Devices) usedBy(pod types.UID, key string) {
	if d.plans.byPod[pod] == nil {
		d.plans.byPod[pod] = sets.New[string]()
	}
	d.plans.byPod[pod].Insert(key)
}

// release frees in plans the devices of the allocated claims that only
// pods hold, as they will be once pods are evicted: the claim controller
// deallocates a claim nobody reserves, and a pod made anew from a claim
// template gets a new claim. A claim another pod keeps stays allocated
// where it is, so a pod sharing it can go only where its devices are.
func (d *Devices) release(plans *DevicePlans, pods []*corev1.Pod) {
	moving := sets.New[types.UID]()
	for _, p := range pods {
		moving.Insert(p.UID)
	}
	for _, p := range pods {
		for i := range p.Spec.ResourceClaims {
			name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
			if err != nil || name == nil {
				continue
			}
			c, err := d.base.ResourceClaims().Get(p.Namespace, *name)
			if err != nil || c.Status.Allocation == nil || plans.released[c.UID] != nil {
				continue
			}
			if slices.ContainsFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return !moving.Has(r.UID) }) {
				continue
			}
			if plans.released == nil {
				plans.released = map[types.UID]*resourcev1.ResourceClaim{}
			}
			plans.released[c.UID] = c
		}
	}
}

// Planned is how many claims are planned, for tests and logs.
func (d *Devices) Planned() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.plans.planned)
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
// in the place of its unallocated or released self.
type claimTracker Devices

// simulated is what the simulation reads of c, nil when it reads c as
// it is: its plan, if c is not allocated for real or is released; else,
// released, c without its allocation and consumers.
func (t *claimTracker) simulated(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	if c == nil {
		return nil
	}
	released := t.plans.released[c.UID] != nil
	if c.Status.Allocation != nil && !released {
		return nil
	}
	if p := t.plans.planned[claimKey(c)]; p != nil {
		return p.claim
	}
	if released {
		c = c.DeepCopy()
		c.Status.Allocation, c.Status.ReservedFor = nil, nil
		return c
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
	if len(t.plans.planned) == 0 && len(t.plans.released) == 0 {
		return claims, nil
	}
	out := make([]*resourcev1.ResourceClaim, len(claims))
	for i, c := range claims {
		out[i] = c
		if p := t.simulated(c); p != nil {
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
	if p := t.simulated(c); p != nil {
		return p, nil
	}
	return c, nil
}

// devicesOf calls the callbacks for the devices of an allocation, as
// kube-scheduler counts an allocated claim's devices: admin access is no
// allocation, a device with a share ID is shared and its consumed
// capacity counted.
func devicesOf(a *resourcev1.AllocationResult, dedicated func(structured.DeviceID), shared func(structured.SharedDeviceID), consumed func(structured.DeviceConsumedCapacity)) {
	for _, r := range a.Devices.Results {
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

// plannedDevices calls the callbacks for the devices of every plan whose
// claim is not allocated for real (or is released).
func (t *claimTracker) plannedDevices(dedicated func(structured.DeviceID), shared func(structured.SharedDeviceID), consumed func(structured.DeviceConsumedCapacity)) {
	for _, p := range t.plans.planned {
		if p.claim.UID != "" {
			real, err := t.base.ResourceClaims().Get(p.claim.Namespace, p.claim.Name)
			if err == nil && (real.UID != p.claim.UID || real.Status.Allocation != nil && t.plans.released[real.UID] == nil) {
				continue // allocated for real, or another claim of that name now
			}
		}
		devicesOf(p.claim.Status.Allocation, dedicated, shared, consumed)
	}
}

// releasedDevices calls the callbacks for the devices of the released
// claims that are still allocated as they were when released.
func (t *claimTracker) releasedDevices(dedicated func(structured.DeviceID), shared func(structured.SharedDeviceID), consumed func(structured.DeviceConsumedCapacity)) {
	for _, c := range t.plans.released {
		real, err := t.base.ResourceClaims().Get(c.Namespace, c.Name)
		if err != nil || real.UID != c.UID || real.Status.Allocation == nil {
			continue // its devices are free already
		}
		devicesOf(real.Status.Allocation, dedicated, shared, consumed)
	}
}

func (t *claimTracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	ids, err := t.base.ResourceClaims().ListAllAllocatedDevices()
	if err != nil {
		return nil, err
	}
	ids = ids.Clone()
	t.mu.RLock()
	defer t.mu.RUnlock()
	t.releasedDevices(func(id structured.DeviceID) { ids.Delete(id) }, func(structured.SharedDeviceID) {}, func(structured.DeviceConsumedCapacity) {})
	t.plannedDevices(func(id structured.DeviceID) { ids.Insert(id) }, func(structured.SharedDeviceID) {}, func(structured.DeviceConsumedCapacity) {})
	return ids, nil
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
	t.mu.RLock()
	defer t.mu.RUnlock()
	t.releasedDevices(func(id structured.DeviceID) { out.AllocatedDevices.Delete(id) },
		func(id structured.SharedDeviceID) { out.AllocatedSharedDeviceIDs.Delete(id) },
		func(c structured.DeviceConsumedCapacity) { out.AggregatedCapacity.Remove(c) })
	t.plannedDevices(func(id structured.DeviceID) { out.AllocatedDevices.Insert(id) },
		func(id structured.SharedDeviceID) { out.AllocatedSharedDeviceIDs.Insert(id) },
		func(c structured.DeviceConsumedCapacity) { out.AggregatedCapacity.Insert(c) })
	return out, nil
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
