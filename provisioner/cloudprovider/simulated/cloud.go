package simulated

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Cloud is the simulated cloud. Its inventory lives in the cluster, one
// ConfigMap per instance in one namespace, as a real cloud's lives outside
// any one provisioner: it survives a restart, and every replica sees the
// same instances, so a standby that takes over neither launches a second
// instance for a claim nor mistakes the old leader's instances for
// orphans. Reads go to the API server, not a cache, as a cloud's API
// answers from its own state. Instances "boot" for the node class's
// registrationDelay and then register as Nodes that kwok runs (annotation
// kwok.x-k8s.io/node=fake), with the labels and taints of the launch, like
// a kubelet would; it plays the cloud controller manager too, lifting the
// uninitialised taint the node registers with (cloudControllerDelay).
type Cloud struct {
	*Catalog
	kube      client.Client
	api       client.Reader
	namespace string
	now       func() time.Time

	// mu serialises Create, so that one process never launches twice for a
	// claim; across replicas only the leader launches.
	mu sync.Mutex

	// dueMu guards due: when Run next reads the inventory for instances
	// to register, the earliest a launch or the last read asked for.
	// Zero: not before the idle reread (inventoryReread).
	dueMu sync.Mutex
	due   time.Time
}

// inventoryReread is how often Run reads the inventory when nothing it
// knows of is due: for instances recorded by another process (a test, a
// replica that led before).
const inventoryReread = 5 * time.Second

// wake asks Run to read the inventory at t, or sooner if already asked.
func (c *Cloud) wake(t time.Time) {
	c.dueMu.Lock()
	defer c.dueMu.Unlock()
	if c.due.IsZero() || t.Before(c.due) {
		c.due = t
	}
}

var _ cloudprovider.CloudProvider = &Cloud{}

// Labels of the inventory's ConfigMaps.
const (
	labelInstance   = "simulated.nodeforge.dev/instance"
	labelClaimUID   = "simulated.nodeforge.dev/claim-uid"
	labelRegistered = "simulated.nodeforge.dev/registered"
	// labelDevices is "pending" on an instance whose node has registered
	// without its extended resources yet (devicePluginDelay).
	labelDevices = "simulated.nodeforge.dev/devices"
	// labelCloudController is "pending" on an instance whose node has
	// registered with the uninitialised taint, until it is lifted.
	labelCloudController = "simulated.nodeforge.dev/cloud-controller"
	// labelFailed is "true" on an instance whose node a NodeFailure fault
	// has failed.
	labelFailed = "simulated.nodeforge.dev/failed"
	dataKey     = "instance.json"
)

// Record is one simulated machine as the inventory keeps it.
type Record struct {
	cloudprovider.Instance
	ClaimUID      string            `json:"claimUID"`
	NodeName      string            `json:"nodeName"`
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	Taints        []corev1.Taint    `json:"taints"`
	RegisterAt    time.Time         `json:"registerAt"`
	NeverRegister bool              `json:"neverRegister,omitempty"`
	// NodeClass is the SimulatedNodeClass it was launched with, whose
	// NodeFailure faults apply to it.
	NodeClass string `json:"nodeClass,omitempty"`
	// DevicesAt, when after RegisterAt, is when the node's extended
	// resources appear (the node class's devicePluginDelay).
	DevicesAt time.Time `json:"devicesAt,omitzero"`
	// CloudControllerDelay is how long after the node registers the cloud
	// controller manager lifts the uninitialised taint it registers with
	// (the node class's cloudControllerDelay); zero: no taint.
	CloudControllerDelay time.Duration `json:"cloudControllerDelay,omitempty"`
	// InitializedAt is when the taint is lifted, set when the node
	// registers.
	InitializedAt time.Time `json:"initializedAt,omitzero"`
	// ResourceSlices are its type's DRA drivers' slices, which the node
	// publishes with its devices (at DevicesAt when that is later).
	ResourceSlices []v1alpha1.ResourceSliceTemplate `json:"resourceSlices,omitempty"`
}

// defaultCloudControllerDelay is a node class's cloudControllerDelay
// when unset: long enough that the provisioner meets the taint on every
// node, short enough to cost the sandbox's tests little.
const defaultCloudControllerDelay = time.Second

// uninitializedTaint is the taint a kubelet run with an external cloud
// provider registers its node with.
var uninitializedTaint = corev1.Taint{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// NewCloud returns the simulated cloud serving catalog, keeping its
// inventory in namespace: written through kube, read through api (an
// uncached reader), and registering nodes through kube. NewClients makes
// both for a provisioner, so that its requests are told from the
// provisioner's own.
func NewCloud(catalog *Catalog, kube client.Client, api client.Reader, namespace string) *Cloud {
	return &Cloud{Catalog: catalog, kube: kube, api: api, namespace: namespace, now: time.Now}
}

// Inventory lists the simulated cloud's instances in namespace, by
// provider ID: tests use it to compare what runs with what was claimed.
func Inventory(ctx context.Context, api client.Reader, namespace string) (map[string]Record, error) {
	var list corev1.ConfigMapList
	if err := api.List(ctx, &list, client.InNamespace(namespace), client.HasLabels{labelInstance}); err != nil {
		return nil, fmt.Errorf("listing the simulated cloud's instances: %w", err)
	}
	out := make(map[string]Record, len(list.Items))
	for i := range list.Items {
		r, err := decode(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out[r.ProviderID] = r
	}
	return out, nil
}

func decode(cm *corev1.ConfigMap) (Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(cm.Data[dataKey]), &r); err != nil {
		return r, fmt.Errorf("parsing simulated instance %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return r, nil
}

// objectName is the ConfigMap of the instance with providerID
// simulated:///<zone>/<id>: its node's name.
func objectName(providerID string) (string, bool) {
	rest, ok := strings.CutPrefix(providerID, "simulated:///")
	if !ok {
		return "", false
	}
	_, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" {
		return "", false
	}
	return "sim-" + id, true
}

// Create launches an instance for the claim, or returns the one it already has.
func (c *Cloud) Create(ctx context.Context, l cloudprovider.Launch) (*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var existing corev1.ConfigMapList
	if err := c.api.List(ctx, &existing, client.InNamespace(c.namespace), client.MatchingLabels{labelClaimUID: l.ClaimUID}); err != nil {
		return nil, fmt.Errorf("looking up the claim's instance: %w", err)
	}
	if len(existing.Items) > 0 {
		r, err := decode(&existing.Items[0])
		if err != nil {
			return nil, err
		}
		return &r.Instance, nil
	}
	var class v1alpha1.SimulatedNodeClass
	if err := c.kube.Get(ctx, client.ObjectKey{Name: l.NodeClass.Name}, &class); err != nil {
		return nil, fmt.Errorf("getting SimulatedNodeClass %s: %w", l.NodeClass.Name, err)
	}
	var delay, devices time.Duration
	if class.Spec.RegistrationDelay != nil {
		delay = class.Spec.RegistrationDelay.Duration
	}
	if class.Spec.DevicePluginDelay != nil {
		devices = class.Spec.DevicePluginDelay.Duration
	}
	initialized := defaultCloudControllerDelay
	if class.Spec.CloudControllerDelay != nil {
		initialized = class.Spec.CloudControllerDelay.Duration
	}
	var refused []cloudprovider.Offer
	for _, o := range l.Offers {
		never := false
		failed := false
		for _, f := range class.Spec.Faults {
			if !faultMatches(f, o) {
				continue
			}
			switch f.Kind {
			case v1alpha1.FaultInsufficientCapacity:
				failed = true
			case v1alpha1.FaultLaunchFailure:
				return nil, fmt.Errorf("simulated launch failure for %s in %s (%s)", o.InstanceType.Name, o.Zone, o.CapacityType)
			case v1alpha1.FaultNeverRegister:
				never = true
			}
		}
		if failed {
			refused = append(refused, o)
			continue
		}
		id := "i-" + randomHex(8)
		r := Record{
			Instance: cloudprovider.Instance{
				ProviderID: "simulated:///" + o.Zone + "/" + id, InstanceType: o.InstanceType.Name, Zone: o.Zone, CapacityType: o.CapacityType,
				Price: o.Price, Capacity: o.InstanceType.Capacity, Allocatable: o.InstanceType.Allocatable,
				NodeClaim: l.NodeClaim, NodePool: l.NodePool, Launched: c.now(),
			},
			ClaimUID: l.ClaimUID, NodeName: "sim-" + id, Labels: l.Template.NodeLabels(&o.InstanceType, o.Zone, o.CapacityType), Annotations: l.Template.Annotations, Taints: l.Template.RegistrationTaints(),
			RegisterAt: c.now().Add(delay), NeverRegister: never, NodeClass: class.Name, ResourceSlices: c.Catalog.driverSlices(o.InstanceType),
		}
		if devices > 0 {
			r.DevicesAt = r.RegisterAt.Add(devices)
		}
		r.CloudControllerDelay = initialized
		r.Labels[corev1.LabelHostname] = r.NodeName
		raw, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: r.NodeName, Namespace: c.namespace, Labels: map[string]string{
				labelInstance: "true", labelClaimUID: l.ClaimUID, labelRegistered: "false",
			}},
			Data: map[string]string{dataKey: string(raw)},
		}
		if err := c.kube.Create(ctx, cm); err != nil {
			return nil, fmt.Errorf("recording instance: %w", err)
		}
		if !never {
			c.wake(r.RegisterAt)
		}
		out := r.Instance
		out.Refused = refused
		return &out, nil
	}
	return nil, &cloudprovider.InsufficientCapacityError{Offers: refused}
}

func faultMatches(f v1alpha1.SimulatedFault, o cloudprovider.Offer) bool {
	return (len(f.Zones) == 0 || slices.Contains(f.Zones, o.Zone)) &&
		(len(f.InstanceTypes) == 0 || slices.Contains(f.InstanceTypes, o.InstanceType.Name)) &&
		(len(f.CapacityTypes) == 0 || slices.Contains(f.CapacityTypes, v1alpha1.CapacityType(o.CapacityType)))
}

// Delete terminates an instance; ErrNotFound once it is gone.
func (c *Cloud) Delete(ctx context.Context, providerID string) error {
	name, ok := objectName(providerID)
	if !ok {
		return cloudprovider.ErrNotFound
	}
	err := c.kube.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace}})
	if apierrors.IsNotFound(err) {
		return cloudprovider.ErrNotFound
	}
	return err
}

// Get returns an instance or ErrNotFound.
func (c *Cloud) Get(ctx context.Context, providerID string) (*cloudprovider.Instance, error) {
	name, ok := objectName(providerID)
	if !ok {
		return nil, cloudprovider.ErrNotFound
	}
	var cm corev1.ConfigMap
	err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return nil, cloudprovider.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	r, err := decode(&cm)
	if err != nil {
		return nil, err
	}
	return &r.Instance, nil
}

// List returns every instance.
func (c *Cloud) List(ctx context.Context) ([]*cloudprovider.Instance, error) {
	inv, err := Inventory(ctx, c.api, c.namespace)
	if err != nil {
		return nil, err
	}
	out := make([]*cloudprovider.Instance, 0, len(inv))
	for _, r := range inv {
		out = append(out, &r.Instance)
	}
	return out, nil
}

// Run registers the nodes of booted instances until ctx ends, the way
// their kubelets would, and fails those a NodeFailure fault names. It
// runs in the leader only.
//
// It reads the inventory when an instance is due to register (a launch
// says when), and otherwise every inventoryReread: a kubelet makes no
// request of the provisioner's, and a read every tick would add a large
// share to the provisioner's API requests in a scale-up.
func (c *Cloud) Run(ctx context.Context) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var read time.Time
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			now := c.now()
			c.dueMu.Lock()
			due := (!c.due.IsZero() && !now.Before(c.due)) || now.Sub(read) >= inventoryReread
			if due {
				c.due = time.Time{}
			}
			c.dueMu.Unlock()
			if due {
				read = now
				next, err := c.register(ctx)
				if err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "Registering simulated nodes")
					next = now // read again on the next tick
				}
				if !next.IsZero() {
					c.wake(next)
				}
			}
			if tick%5 == 0 {
				if err := c.fail(ctx); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "Failing simulated nodes")
				}
			}
		}
	}
}

// register registers the nodes of the instances due, and returns when
// the next instance not yet registered is due (zero: none known).
// One read of the inventory serves both: each read is an API request.
func (c *Cloud) register(ctx context.Context) (time.Time, error) {
	all, err := c.labelled(ctx, labelInstance, "true")
	if err != nil {
		return time.Time{}, err
	}
	var next time.Time
	var devices, uninitialized []entry
	for _, e := range all {
		cm, in := e.cm, e.in
		if cm.Labels[labelDevices] == "pending" {
			devices = append(devices, e)
		}
		if cm.Labels[labelCloudController] == "pending" {
			uninitialized = append(uninitialized, e)
		}
		if cm.Labels[labelRegistered] != "false" || in.NeverRegister {
			continue
		}
		if c.now().Before(in.RegisterAt) {
			next = earliest(next, in.RegisterAt)
			continue
		}
		// The template's annotations are on the node from the start, as
		// if its boot configuration set them; the provisioner would set
		// them on adoption otherwise.
		annotations := maps.Clone(in.Annotations)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations["kwok.x-k8s.io/node"] = "fake"
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: in.NodeName, Labels: in.Labels, Annotations: annotations},
			Spec:       corev1.NodeSpec{ProviderID: in.ProviderID, Taints: in.Taints},
			Status:     corev1.NodeStatus{Capacity: in.Capacity, Allocatable: in.Allocatable},
		}
		late := c.now().Before(in.DevicesAt)
		if late {
			node.Status.Capacity, node.Status.Allocatable = withoutExtended(in.Capacity), withoutExtended(in.Allocatable)
		}
		// The cloud controller manager initialises the node a while after
		// it registers, however late that is.
		tainted := in.CloudControllerDelay > 0
		if tainted {
			node.Spec.Taints = append(slices.Clone(in.Taints), uninitializedTaint)
			in.InitializedAt = c.now().Add(in.CloudControllerDelay)
			raw, err := json.Marshal(in)
			if err != nil {
				return time.Time{}, err
			}
			cm.Data[dataKey] = string(raw)
		}
		if err := c.kube.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			klog.FromContext(ctx).Error(err, "Registering simulated node", "node", in.NodeName, "providerID", in.ProviderID)
			next = earliest(next, c.now()) // the next tick tries again
			continue
		}
		if !late {
			if err := c.publishSlices(ctx, node, in); err != nil {
				klog.FromContext(ctx).Error(err, "Publishing simulated node's ResourceSlices", "node", in.NodeName, "providerID", in.ProviderID)
				next = earliest(next, c.now())
				continue
			}
		}
		cm.Labels[labelRegistered] = "true"
		if late {
			cm.Labels[labelDevices] = "pending"
		}
		if tainted {
			cm.Labels[labelCloudController] = "pending"
		}
		// A conflict or NotFound means the instance changed or was
		// terminated meanwhile; the next tick sees it as it is now
		// (soon: before its devices are due, so that they are added).
		if err := c.kube.Update(ctx, cm); apierrors.IsConflict(err) {
			next = earliest(next, c.now())
			continue
		} else if err != nil && !apierrors.IsNotFound(err) {
			return time.Time{}, err
		}
		if late {
			next = earliest(next, in.DevicesAt)
		}
		if tainted {
			next = earliest(next, in.InitializedAt)
		}
		klog.FromContext(ctx).V(2).Info("Simulated node registered", "node", in.NodeName, "providerID", in.ProviderID, "nodeClaim", in.NodeClaim, "devicesPending", late, "uninitialized", tainted)
	}
	due, err := c.registerDevices(ctx, devices)
	if err != nil {
		return earliest(next, due), err
	}
	initialized, err := c.initializeNodes(ctx, uninitialized)
	return earliest(next, earliest(due, initialized)), err
}

// initializeNodes lifts the uninitialised taint from the nodes registered
// with it once their cloudControllerDelay has passed, as the cloud
// controller manager does once it has initialised a node, and returns
// when the next one is due (zero: none).
func (c *Cloud) initializeNodes(ctx context.Context, pending []entry) (time.Time, error) {
	var next time.Time
	for _, e := range pending {
		cm, in := e.cm, e.in
		if c.now().Before(in.InitializedAt) {
			next = earliest(next, in.InitializedAt)
			continue
		}
		var node corev1.Node
		if err := c.getNode(ctx, in.NodeName, &node); err != nil {
			if !apierrors.IsNotFound(err) {
				return time.Time{}, err
			}
		} else if taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isUninitialized); len(taints) != len(node.Spec.Taints) {
			// An update, not a patch of the list: the provisioner changes
			// the node's taints too (the binding taint), and a conflict
			// is read again on the next round rather than overwritten.
			node.Spec.Taints = taints
			if err := c.kube.Update(ctx, &node); err != nil {
				if apierrors.IsConflict(err) {
					next = earliest(next, c.now())
					continue
				}
				if !apierrors.IsNotFound(err) {
					return time.Time{}, err
				}
			}
		}
		cm.Labels[labelCloudController] = "initialized"
		if err := c.kube.Update(ctx, cm); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return time.Time{}, err
		}
		klog.FromContext(ctx).V(2).Info("Simulated cloud controller manager initialised the node", "node", in.NodeName, "providerID", in.ProviderID, "nodeClaim", in.NodeClaim)
	}
	return next, nil
}

// getNode reads a node from the cache and, when the cache has not seen
// it, from the API server: only the API server says a node is gone. The
// cache lags behind a node this process has just created, most of all
// while its watches start again after the API server restarts, and a node
// taken for gone would keep its uninitialised taint, or lack its devices,
// for good.
func (c *Cloud) getNode(ctx context.Context, name string, node *corev1.Node) error {
	err := c.kube.Get(ctx, client.ObjectKey{Name: name}, node)
	if apierrors.IsNotFound(err) {
		return c.api.Get(ctx, client.ObjectKey{Name: name}, node)
	}
	return err
}

// isUninitialized says whether t is the uninitialised taint.
func isUninitialized(t corev1.Taint) bool {
	return t.Key == cloudproviderapi.TaintExternalCloudProvider
}

// earliest of a and b, where zero is never.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// registerDevices adds the extended resources of nodes registered without
// them once their device plugin's delay has passed, as the kubelet does
// when a device plugin registers.
func (c *Cloud) registerDevices(ctx context.Context, pending []entry) (time.Time, error) {
	var next time.Time
	for _, e := range pending {
		cm, in := e.cm, e.in
		if c.now().Before(in.DevicesAt) {
			next = earliest(next, in.DevicesAt)
			continue
		}
		var node corev1.Node
		if err := c.getNode(ctx, in.NodeName, &node); err != nil {
			if !apierrors.IsNotFound(err) {
				return time.Time{}, err
			}
		} else {
			for name, q := range in.Capacity {
				if v1helper.IsExtendedResourceName(name) {
					node.Status.Capacity[name] = q
				}
			}
			for name, q := range in.Allocatable {
				if v1helper.IsExtendedResourceName(name) {
					node.Status.Allocatable[name] = q
				}
			}
			if err := c.kube.Status().Update(ctx, &node); err != nil {
				if apierrors.IsConflict(err) {
					next = earliest(next, c.now()) // the next round reads it again
					continue
				}
				return time.Time{}, err
			}
			if err := c.publishSlices(ctx, &node, in); err != nil {
				return time.Time{}, err
			}
		}
		cm.Labels[labelDevices] = "registered"
		if err := c.kube.Update(ctx, cm); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return time.Time{}, err
		}
		klog.FromContext(ctx).V(2).Info("Simulated device plugin registered", "node", in.NodeName, "providerID", in.ProviderID)
	}
	return next, nil
}

// entry is an instance's ConfigMap and the record it holds.
type entry struct {
	cm *corev1.ConfigMap
	in Record
}

// labelled reads the inventory's instances labelled key=value.
func (c *Cloud) labelled(ctx context.Context, key, value string) ([]entry, error) {
	var list corev1.ConfigMapList
	if err := c.api.List(ctx, &list, client.InNamespace(c.namespace), client.MatchingLabels{key: value}); err != nil {
		return nil, err
	}
	out := make([]entry, 0, len(list.Items))
	for i := range list.Items {
		in, err := decode(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, entry{cm: &list.Items[i], in: in})
	}
	return out, nil
}

// withoutExtended is a node's resources before its device plugins register.
func withoutExtended(l corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range l {
		if !v1helper.IsExtendedResourceName(name) {
			out[name] = q
		}
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
