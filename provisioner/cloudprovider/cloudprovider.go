// Package cloudprovider is the narrow interface between the provisioner and
// a cloud: launch, terminate, look up and list instances, and describe the
// instance types on offer, and declare the node class kinds it launches
// from. The contract is in the doc comments; errors that callers act on are
// typed.
package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
)

// Instance is a machine the cloud runs for a NodeClaim.
type Instance struct {
	// ProviderID is what the instance's Node reports in spec.providerID.
	ProviderID   string
	InstanceType string
	Zone         string
	CapacityType string
	// Price in dollars per hour.
	Price       float64
	Capacity    corev1.ResourceList
	Allocatable corev1.ResourceList
	// Labels are the instance type's labels in the provider's catalog
	// (v1alpha1.InstanceType.Labels): what the provisioner sets on the
	// node when it adopts it, where the node's boot configuration did not.
	Labels map[string]string
	// ImageID is the machine image the instance runs, where the cloud
	// has one.
	ImageID string
	// NodeClaim and NodePool the instance was launched for, from its tags.
	NodeClaim string
	NodePool  string
	// NodeClaims, for an instance launched by one request for several
	// claims whose tags cannot name the one it serves (EC2's fleets of
	// several), are those claims; NodeClaim is then empty, and the
	// claim's status names the instance it took.
	NodeClaims []string
	Launched   time.Time
	// Stopping: the instance is stopping, stopped or shutting down; it
	// runs no pod any more.
	Stopping bool
	// Refused are the cheaper offers the cloud had no capacity for before
	// it launched this one; callers avoid them for a while.
	Refused []Offer `json:"-"`
}

// LaunchedFor says whether the instance was launched for the claim, alone
// or as one of NodeClaims.
func (in *Instance) LaunchedFor(claim string) bool {
	return in.NodeClaim == claim || slices.Contains(in.NodeClaims, claim)
}

// Offer is one launch option: an instance type in a zone with a capacity
// type, at a price. Create tries offers cheapest first.
type Offer = nodeshape.Offer

// Launch is what Create needs to know of the node to be.
type Launch struct {
	// NodeClaim names the claim; with ClaimUID it keys idempotency.
	NodeClaim string
	ClaimUID  string
	NodePool  string
	// Template is what the node registers with whichever offer is
	// launched: its labels (with Template.NodeLabels for the offer) and
	// taints (Template.RegistrationTaints, the binding startup taint
	// among them). It is the claim's, as the scheduler plugin nominated
	// it, not the pool's as it may be now.
	Template nodeshape.Template
	// NodeClass is the provider's node class object, by reference.
	NodeClass v1alpha1.NodeClassReference
	// Requests are the claim's pods' requests: a provider attaches what
	// they need and an instance has only on request (EFA interfaces).
	Requests corev1.ResourceList
	// Offers, cheapest first.
	Offers []Offer
}

// CloudProvider launches and terminates instances.
type CloudProvider interface {
	// Name of the provider, e.g. "simulated" or "aws".
	Name() string
	// Create launches one instance for the launch, trying its offers
	// cheapest first. It is idempotent: a second call for the same claim
	// UID returns the instance the first one launched, so a provisioner
	// that crashed after Create and retries launches nothing twice. When
	// every offer fails for lack of capacity it returns an
	// *InsufficientCapacityError naming them.
	Create(ctx context.Context, l Launch) (*Instance, error)
	// Delete terminates the instance. It returns ErrNotFound once the
	// instance is gone; callers keep calling until then.
	Delete(ctx context.Context, providerID string) error
	// Get returns the instance, or ErrNotFound.
	Get(ctx context.Context, providerID string) (*Instance, error)
	// List returns every instance the provider launched for this cluster,
	// so that instances without a claim can be garbage-collected.
	List(ctx context.Context) ([]*Instance, error)
	// InstanceTypes lists every instance type the pool's node class can
	// launch, with its offerings and the allocatable resources its nodes
	// will have under that class's kubelet settings. A nil pool asks for
	// every type the provider has, with default settings. A node class that
	// is not ready yields a *NodeClassNotReadyError.
	InstanceTypes(ctx context.Context, pool *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error)
	// NodeClasses declares the node class kinds the provider launches
	// from, at least one, each in the nodeforge.dev group. Generic code
	// reads, watches and judges node classes only through it, so it never
	// names a provider's kind: a NodePool whose nodeClassRef names a kind
	// not declared here is not Ready. The answer is fixed for the
	// provider's life and makes no cloud call.
	NodeClasses() []NodeClass
	// RegisteredNode tells the provider what the node of an instance it
	// launched reports once it has registered. A provider that estimates
	// part of an instance type's figures (the memory the hypervisor keeps)
	// corrects later offerings of the type with it; one that knows its
	// figures ignores it. It makes no cloud call and does not block.
	RegisteredNode(ctx context.Context, in *Instance, node *corev1.Node)
}

// NodeClass declares one kind of node class a provider launches from: how
// to read an object of the kind, whether instances can be launched from
// it, and what of it, when changed, makes the nodes launched from it
// drifted.
type NodeClass struct {
	// Kind as a nodeClassRef names it, such as "EC2NodeClass"; its group is
	// v1alpha1.Group.
	Kind string
	// New returns an empty object of the kind, to Get into or to watch.
	New func() client.Object
	// Ready reads an object New returned, filled by a Get: whether
	// instances can be launched from it now and, when not, a CamelCase
	// reason and a message for people saying why. It reads only the
	// object, never the cloud.
	Ready func(class client.Object) (ready bool, reason, message string)
	// Hash of what in the object, when changed, makes the nodes launched
	// from it drifted (SpecHash of its spec, typically). A node whose
	// recorded hash differs from its class's was launched from settings
	// the class no longer has.
	Hash func(class client.Object) (string, error)
	// Drifted, if set, says why the claim's instance is no longer what
	// the class would launch now beyond its spec (an image the class no
	// longer resolves to), or "". It reads only the objects.
	Drifted func(class client.Object, nc *v1alpha1.NodeClaim) string
	// DriftInputs, set with Drifted, hashes what of the class Drifted
	// reads beyond what Hash covers (its resolved images), so that the
	// claims of a class are looked at again when it changes.
	DriftInputs func(class client.Object) (string, error)
}

// ServedKinds lists the kinds of classes, for messages: "EC2NodeClass" or
// "SimulatedNodeClass, EC2NodeClass".
func ServedKinds(classes []NodeClass) string {
	kinds := make([]string, len(classes))
	for i, c := range classes {
		kinds[i] = c.Kind
	}
	return strings.Join(kinds, ", ")
}

// SpecHash hashes spec through its JSON encoding, which is stable:
// encoding/json writes struct fields in declaration order and map keys
// sorted, so equal specs hash equal whatever order their maps were built
// in, and any change to a field that is encoded changes the hash. A field
// the API gains later changes no hash while it is omitted (omitempty); one
// encoded even when empty changes every hash once, on upgrade.
func SpecHash(spec any) (string, error) {
	sum, err := nodeshape.Hash(spec)
	if err != nil {
		return "", fmt.Errorf("hashing node class spec: %w", err)
	}
	return sum, nil
}

// ErrNotFound says an instance does not exist (any more).
var ErrNotFound = errors.New("instance not found")

// InsufficientCapacityError says the cloud had no capacity for any of the
// offers tried. The offers should be avoided for a while.
type InsufficientCapacityError struct {
	Offers []Offer
}

func (e *InsufficientCapacityError) Error() string {
	return fmt.Sprintf("insufficient capacity for all %d offers tried", len(e.Offers))
}

// IsInsufficientCapacity reports whether err is an InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var ice *InsufficientCapacityError
	return errors.As(err, &ice)
}

// NodeClassNotReadyError says the node class a pool or claim refers to is
// missing or has not resolved what a launch needs (subnets, images...).
type NodeClassNotReadyError struct {
	NodeClass string
	Reason    string
}

func (e *NodeClassNotReadyError) Error() string {
	return fmt.Sprintf("node class %s is not ready: %s", e.NodeClass, e.Reason)
}

// AccessDeniedError says the cloud refused a call for lack of permission
// or valid credentials. Retrying does not help until an operator fixes the
// policy, so callers surface it instead of retrying at once.
type AccessDeniedError struct {
	// Op is the cloud call refused, such as CreateFleet.
	Op  string
	Err error
}

func (e *AccessDeniedError) Error() string {
	return fmt.Sprintf("access denied to %s: %v", e.Op, e.Err)
}

func (e *AccessDeniedError) Unwrap() error { return e.Err }

// IsAccessDenied reports whether err is an AccessDeniedError.
func IsAccessDenied(err error) bool {
	var ad *AccessDeniedError
	return errors.As(err, &ad)
}
