package simulated

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Cloud is the simulated cloud. Its inventory is a JSON file, as a real
// cloud's lives outside the cluster: it survives a provisioner restart.
// Instances "boot" for the node class's registrationDelay and then register
// as Nodes that kwok runs (annotation kwok.x-k8s.io/node=fake), with the
// labels and taints of the launch, like a kubelet would.
type Cloud struct {
	*Catalog
	kube      client.Client
	statePath string
	now       func() time.Time

	mu        sync.Mutex
	instances map[string]*instance // by provider ID
}

var _ cloudprovider.CloudProvider = &Cloud{}

// instance is one simulated machine, as stored in the state file.
type instance struct {
	cloudprovider.Instance
	ClaimUID      string            `json:"claimUID"`
	NodeName      string            `json:"nodeName"`
	Labels        map[string]string `json:"labels"`
	Taints        []corev1.Taint    `json:"taints"`
	RegisterAt    time.Time         `json:"registerAt"`
	NeverRegister bool              `json:"neverRegister,omitempty"`
	Registered    bool              `json:"registered,omitempty"`
}

// NewCloud returns the simulated cloud serving catalog, keeping its
// inventory in statePath and registering nodes through kube.
func NewCloud(catalog *Catalog, kube client.Client, statePath string) (*Cloud, error) {
	c := &Cloud{Catalog: catalog, kube: kube, statePath: statePath, now: time.Now, instances: map[string]*instance{}}
	raw, err := os.ReadFile(statePath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading simulated cloud state: %w", err)
	default:
		if err := json.Unmarshal(raw, &c.instances); err != nil {
			return nil, fmt.Errorf("parsing simulated cloud state %s: %w", statePath, err)
		}
	}
	return c, nil
}

// save writes the inventory atomically. Callers hold c.mu.
func (c *Cloud) save() error {
	raw, err := json.MarshalIndent(c.instances, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.statePath + ".tmp"
	if err := os.MkdirAll(filepath.Dir(c.statePath), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.statePath)
}

// Create launches an instance for the claim, or returns the one it already has.
func (c *Cloud) Create(ctx context.Context, l cloudprovider.Launch) (*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.instances {
		if in.ClaimUID == l.ClaimUID {
			out := in.Instance
			return &out, nil
		}
	}
	var class v1alpha1.SimulatedNodeClass
	if err := c.kube.Get(ctx, client.ObjectKey{Name: l.NodeClass.Name}, &class); err != nil {
		return nil, fmt.Errorf("getting SimulatedNodeClass %s: %w", l.NodeClass.Name, err)
	}
	var delay time.Duration
	if class.Spec.RegistrationDelay != nil {
		delay = class.Spec.RegistrationDelay.Duration
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
		in := &instance{
			Instance: cloudprovider.Instance{
				ProviderID: "simulated:///" + o.Zone + "/" + id, InstanceType: o.InstanceType.Name, Zone: o.Zone, CapacityType: o.CapacityType,
				Price: o.Price, Capacity: o.InstanceType.Capacity, Allocatable: o.InstanceType.Allocatable,
				NodeClaim: l.NodeClaim, NodePool: l.NodePool, Launched: c.now(),
			},
			ClaimUID: l.ClaimUID, NodeName: "sim-" + id, Labels: maps.Clone(l.Labels), Taints: slices.Clone(l.Taints),
			RegisterAt: c.now().Add(delay), NeverRegister: never,
		}
		in.Labels[corev1.LabelInstanceTypeStable] = o.InstanceType.Name
		in.Labels[corev1.LabelTopologyZone] = o.Zone
		in.Labels[v1alpha1.LabelCapacityType] = o.CapacityType
		in.Labels[corev1.LabelHostname] = in.NodeName
		maps.Copy(in.Labels, o.InstanceType.Labels)
		c.instances[in.ProviderID] = in
		if err := c.save(); err != nil {
			delete(c.instances, in.ProviderID)
			return nil, fmt.Errorf("recording instance: %w", err)
		}
		out := in.Instance
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
func (c *Cloud) Delete(_ context.Context, providerID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.instances[providerID]; !ok {
		return cloudprovider.ErrNotFound
	}
	delete(c.instances, providerID)
	return c.save()
}

// Get returns an instance or ErrNotFound.
func (c *Cloud) Get(_ context.Context, providerID string) (*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[providerID]
	if !ok {
		return nil, cloudprovider.ErrNotFound
	}
	out := in.Instance
	return &out, nil
}

// List returns every instance.
func (c *Cloud) List(context.Context) ([]*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cloudprovider.Instance, 0, len(c.instances))
	for _, in := range c.instances {
		i := in.Instance
		out = append(out, &i)
	}
	return out, nil
}

// Run registers the nodes of booted instances until ctx ends, the way
// their kubelets would. It runs in the leader only.
func (c *Cloud) Run(ctx context.Context) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			c.register(ctx)
		}
	}
}

func (c *Cloud) register(ctx context.Context) {
	c.mu.Lock()
	var due []*instance
	for _, in := range c.instances {
		if !in.Registered && !in.NeverRegister && !c.now().Before(in.RegisterAt) {
			due = append(due, in)
		}
	}
	c.mu.Unlock()
	for _, in := range due {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: in.NodeName, Labels: in.Labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
			Spec:       corev1.NodeSpec{ProviderID: in.ProviderID, Taints: in.Taints},
			Status:     corev1.NodeStatus{Capacity: in.Capacity, Allocatable: in.Allocatable},
		}
		err := c.kube.Create(ctx, node)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			klog.FromContext(ctx).Error(err, "Registering simulated node", "node", in.NodeName, "providerID", in.ProviderID)
			continue
		}
		c.mu.Lock()
		if cur, ok := c.instances[in.ProviderID]; ok {
			cur.Registered = true
			_ = c.save()
		}
		c.mu.Unlock()
		klog.FromContext(ctx).V(2).Info("Simulated node registered", "node", in.NodeName, "providerID", in.ProviderID, "nodeClaim", in.NodeClaim)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
