// Package fake is an in-memory cloud provider for tests of the controllers
// above the cloud: it keeps the CloudProvider contract (idempotent Create
// per claim UID, offers tried cheapest first, typed capacity errors,
// ErrNotFound once an instance is gone) and lets a test take capacity away
// per instance type and slow calls down. The simulated cloud and the AWS
// provider against the EC2 fake cover the real paths.
package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// Cloud is the in-memory provider. The zero value is not usable; call New.
type Cloud struct {
	// CreateDelay is how long each Create takes, so tests can overlap
	// launches the way a slow cloud does.
	CreateDelay time.Duration

	mu          sync.Mutex
	instances   map[string]*cloudprovider.Instance // by providerID
	byClaim     map[string]string                  // claim UID → providerID
	noCapacity  map[string]bool                    // instance type names
	loseAnswers int
	failAll     error
	types       []v1alpha1.InstanceType
	next        int
	creates     int
	attempts    int
	// notReady: node classes a test said are not ready, by name, with why.
	notReady map[string]string
}

var _ cloudprovider.CloudProvider = &Cloud{}

// New returns a cloud that offers types.
func New(types ...v1alpha1.InstanceType) *Cloud {
	return &Cloud{instances: map[string]*cloudprovider.Instance{}, byClaim: map[string]string{}, noCapacity: map[string]bool{}, types: types, notReady: map[string]string{}}
}

// Name is "fake".
func (c *Cloud) Name() string { return "fake" }

// SetCapacity says whether instance type name has capacity.
func (c *Cloud) SetCapacity(name string, has bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noCapacity[name] = !has
}

// LoseAnswers makes the next n Creates that launch an instance return an
// error instead of it, as when the cloud's answer is lost on the way back.
func (c *Cloud) LoseAnswers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loseAnswers = n
}

// FailLaunches makes every Create launch nothing and return err (nil
// restores launching), as a cloud whose launches keep failing.
func (c *Cloud) FailLaunches(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failAll = err
}

// Add puts an instance in the inventory, as if launched earlier.
func (c *Cloud) Add(in *cloudprovider.Instance) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances[in.ProviderID] = in
}

// Creates counts the Create calls that launched an instance.
func (c *Cloud) Creates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creates
}

// Attempts is how many Create calls reached the cloud: every call but
// those answered with the claim's instance already launched, failed ones
// included.
func (c *Cloud) Attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts
}

// Create launches the cheapest offer that has capacity, or returns the
// instance already launched for the claim.
func (c *Cloud) Create(ctx context.Context, l cloudprovider.Launch) (*cloudprovider.Instance, error) {
	if c.CreateDelay > 0 {
		select {
		case <-time.After(c.CreateDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.byClaim[l.ClaimUID]; ok {
		if in, ok := c.instances[id]; ok {
			return in, nil
		}
	}
	c.attempts++
	if c.failAll != nil {
		return nil, c.failAll
	}
	var refused []cloudprovider.Offer
	for _, o := range l.Offers {
		if c.noCapacity[o.InstanceType.Name] {
			refused = append(refused, o)
			continue
		}
		c.next++
		in := &cloudprovider.Instance{
			ProviderID: fmt.Sprintf("fake:///%s/i-%06d", o.Zone, c.next), InstanceType: o.InstanceType.Name,
			Zone: o.Zone, CapacityType: o.CapacityType, Price: o.Price,
			Capacity: o.InstanceType.Capacity.DeepCopy(), Allocatable: o.InstanceType.Allocatable.DeepCopy(),
			NodeClaim: l.NodeClaim, NodePool: l.NodePool, Launched: time.Now(),
		}
		c.instances[in.ProviderID] = in
		c.byClaim[l.ClaimUID] = in.ProviderID
		c.creates++
		if c.loseAnswers > 0 {
			c.loseAnswers--
			return nil, fmt.Errorf("fake: the answer to launching %s for %s was lost", in.ProviderID, l.NodeClaim)
		}
		out := *in
		out.Refused = refused
		return &out, nil
	}
	return nil, &cloudprovider.InsufficientCapacityError{Offers: refused}
}

// Delete terminates an instance.
func (c *Cloud) Delete(_ context.Context, providerID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.instances[providerID]; !ok {
		return cloudprovider.ErrNotFound
	}
	delete(c.instances, providerID)
	return nil
}

// Get returns an instance or ErrNotFound.
func (c *Cloud) Get(_ context.Context, providerID string) (*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.instances[providerID]
	if !ok {
		return nil, cloudprovider.ErrNotFound
	}
	out := *in
	return &out, nil
}

// List returns every running instance.
func (c *Cloud) List(context.Context) ([]*cloudprovider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cloudprovider.Instance, 0, len(c.instances))
	for _, in := range c.instances {
		cp := *in
		out = append(out, &cp)
	}
	return out, nil
}

// InstanceTypes returns the types New was given, for any pool.
func (c *Cloud) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return c.types, nil
}

// SetNodeClassReady says whether the node class called name is ready, and
// when it is not, why; a class is ready unless a test says otherwise.
func (c *Cloud) SetNodeClassReady(name string, ready bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ready {
		delete(c.notReady, name)
	} else {
		c.notReady[name] = why
	}
}

// RegisteredNode is nothing to the fake: its types say exactly what its
// nodes report.
func (c *Cloud) RegisteredNode(context.Context, *cloudprovider.Instance, *corev1.Node) {}

// NodeClasses declares SimulatedNodeClass, the class tests' pools refer
// to: ready once it exists unless SetNodeClassReady says otherwise, and
// hashed by its spec.
func (c *Cloud) NodeClasses() []cloudprovider.NodeClass {
	return []cloudprovider.NodeClass{{
		Kind: "SimulatedNodeClass",
		New:  func() client.Object { return &v1alpha1.SimulatedNodeClass{} },
		Ready: func(o client.Object) (bool, string, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if why, ok := c.notReady[o.GetName()]; ok {
				return false, "FakeNotReady", why
			}
			return true, "Exists", ""
		},
		Hash: func(o client.Object) (string, error) {
			return cloudprovider.SpecHash(o.(*v1alpha1.SimulatedNodeClass).Spec)
		},
	}}
}
