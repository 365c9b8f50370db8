package nodeclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/nodeshape"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// registrar adopts the node that registers for a launched claim, or gives
// the claim up when none does in time.
type registrar struct {
	base
	cloud cloudprovider.CloudProvider
	// ttl is Options.RegistrationTTL.
	ttl time.Duration
	// classes counts each node class's registration timeouts in a row.
	classes classRegistrations
}

// reconcile adopts the node once it registers, or gives up after the TTL.
func (r *registrar) reconcile(ctx context.Context, nc *v1alpha1.NodeClaim) (reconcile.Result, error) {
	node, err := r.nodeOf(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		launched := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionLaunched)
		if launched != nil && r.now().Sub(launched.LastTransitionTime.Time) > r.ttl {
			// A node that does not join is nearly always the node class's
			// doing (user data, role, security groups), not the offering's:
			// marking the offering unavailable would only have every type
			// launched and billed in turn. It counts against the class.
			// Where nodes of the class do join, the class is not at fault:
			// the trouble is the offering's (a zone's network, a type's
			// image), and it is marked unavailable so the next claim goes
			// elsewhere.
			why := fmt.Sprintf("no node registered within %s", r.ttl)
			r.registrationTimedOut(ctx, nc, why)
			joins, err := r.classJoins(ctx, nc.Spec.NodeClassRef)
			if err != nil {
				return reconcile.Result{}, err
			}
			if joins {
				return r.giveUp(ctx, nc, v1alpha1.ReasonRegistrationTimeout, v1alpha1.ActionRegister, why+", where other nodes of its class do", launchedOffer(nc))
			}
			return r.giveUp(ctx, nc, v1alpha1.ReasonRegistrationTimeout, v1alpha1.ActionRegister, why)
		}
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The providerID in the claim's status is only trusted once the cloud
	// says the instance was launched for this claim: whoever can write
	// nodeclaims/status must not be able to make the provisioner adopt,
	// bind pods to and later drain a node that is not ours.
	in, err := r.launchedFor(ctx, nc)
	if err != nil || in == nil {
		return reconcile.Result{RequeueAfter: 10 * time.Second}, err
	}
	// Adoption writes the claim's labels and annotations with the
	// provisioner's rights: only what its pool gives (outside.go).
	var pool v1alpha1.NodePool
	if err := r.kube.Get(ctx, client.ObjectKey{Name: nc.Spec.NodePool}, &pool); err != nil {
		return reconcile.Result{}, fmt.Errorf("getting nodepool %s: %w", nc.Spec.NodePool, err)
	}
	if err := nodeshape.WithinPool(nc, &pool); err != nil {
		return r.refuseOutsidePool(ctx, nc, v1alpha1.ConditionRegistered, v1alpha1.ActionRegister, err)
	}
	// Adopt the node: the finalizer keeps it until its instance is gone,
	// and the labels the claim stands for are there even when the node's
	// boot configuration did not set them all.
	adopted := adopt(node, nc, in.Labels)
	if !controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerTermination) {
		controllerutil.AddFinalizer(node, v1alpha1.FinalizerTermination)
		adopted = true
	}
	if adopted {
		if err := r.kube.Update(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}
	nc.Status.Phase = v1alpha1.NodeClaimRegistered
	nc.Status.NodeName = node.Name
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRegistered, Status: metav1.ConditionTrue, Reason: "Registered", Message: node.Name})
	if err := r.kube.Status().Update(ctx, nc); err != nil {
		return reconcile.Result{}, err
	}
	klog.FromContext(ctx).Info("Registered node", "node", klog.KObj(node), "providerID", nc.Status.ProviderID)
	r.cloud.RegisteredNode(ctx, in, node)
	r.classRegistered(ctx, nc)
	r.event(nc, corev1.EventTypeNormal, v1alpha1.ReasonRegistered, v1alpha1.ActionRegister, "node "+node.Name+" registered")
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	return reconcile.Result{Requeue: true}, nil
}

// launchedFor returns the cloud's instance for the claim's providerID if
// it was launched for this claim, by the claim name the instance carries
// (a tag on EC2; or one of the claims of a fleet launched for several, the
// one whose status names it), and nil otherwise. A mismatch is logged and recorded as
// an Event.
func (r *registrar) launchedFor(ctx context.Context, nc *v1alpha1.NodeClaim) (*cloudprovider.Instance, error) {
	in, err := r.cloud.Get(ctx, nc.Status.ProviderID)
	if errors.Is(err, cloudprovider.ErrNotFound) {
		return nil, nil // the garbage collector deletes claims whose instance is gone
	}
	if err != nil {
		return nil, fmt.Errorf("looking up instance %s: %w", nc.Status.ProviderID, err)
	}
	if !in.LaunchedFor(nc.Name) {
		klog.FromContext(ctx).Error(nil, "Not adopting node: its instance was not launched for this nodeclaim", "providerID", nc.Status.ProviderID, "instanceNodeClaim", in.NodeClaim)
		r.event(nc, corev1.EventTypeWarning, v1alpha1.ReasonProviderIDMismatch, v1alpha1.ActionRegister, fmt.Sprintf("instance %s was launched for nodeclaim %q, not this one; its node is not adopted", nc.Status.ProviderID, in.NodeClaim))
		return nil, nil
	}
	return in, nil
}

// adopt sets the labels of the node the claim stands for (nodeshape: its
// template's, its pool, instance type with the type's own labels
// (typeLabels, the instance attribute labels among them), zone and
// capacity type) and its
// template's annotations where the node lacks them, and says whether it
// changed anything. Labels and annotations the node has are left as they
// are: its kubelet's word on them stands. Annotations are set here, not
// at boot, because a kubelet cannot register its node with annotations
// of the provisioner's choosing.
func adopt(node *corev1.Node, nc *v1alpha1.NodeClaim, typeLabels map[string]string) bool {
	template := nodeshape.ForClaim(nc)
	want := template.NodeLabels(&v1alpha1.InstanceType{Name: nc.Status.InstanceType, Labels: typeLabels}, nc.Status.Zone, nc.Status.CapacityType)
	changed := false
	for k, v := range template.Annotations {
		if _, ok := node.Annotations[k]; ok {
			continue
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[k] = v
		changed = true
	}
	for k, v := range want {
		if _, ok := node.Labels[k]; ok || v == "" {
			continue
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[k] = v
		changed = true
	}
	return changed
}

// RegistrationTimeoutsInARow is how many registration timeouts of a
// class's claims in a row make its NodesRegistering condition False.
const RegistrationTimeoutsInARow = 3

// classRegistrations counts, per node class, the registration timeouts
// since a node of the class last registered, and the claims that timed
// out. It is in memory: after a restart the count starts again, and the
// condition stays as it was until the next timeout or registration.
type classRegistrations struct {
	mu     sync.Mutex
	failed map[v1alpha1.NodeClassReference][]string // claim names, oldest first
}

// timedOut counts claim's registration timeout against the class, and
// returns the claims of the class that timed out since a node of it last
// registered, oldest first.
func (cr *classRegistrations) timedOut(ref v1alpha1.NodeClassReference, claim string) []string {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.failed == nil {
		cr.failed = map[v1alpha1.NodeClassReference][]string{}
	}
	claims := cr.failed[ref]
	if !slices.Contains(claims, claim) { // a retried give-up counts once
		claims = append(claims, claim)
		cr.failed[ref] = claims
	}
	return claims
}

// registered ends the class's run of registration timeouts.
func (cr *classRegistrations) registered(ref v1alpha1.NodeClassReference) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	delete(cr.failed, ref)
}

// registrationTimedOut records a claim's registration timeout against its
// node class: a Warning Event on the class, and its NodesRegistering
// condition False from the RegistrationTimeoutsInARow-th in a row on.
func (r *registrar) registrationTimedOut(ctx context.Context, nc *v1alpha1.NodeClaim, why string) {
	ref := nc.Spec.NodeClassRef
	claims := r.classes.timedOut(ref, nc.Name)
	class, err := r.nodeClassObject(ctx, ref)
	if class == nil {
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reading the node class to record a registration timeout", "nodeClass", ref.Kind+"/"+ref.Name)
		}
		return
	}
	if r.recorder != nil {
		r.recorder.Eventf(class, nil, corev1.EventTypeWarning, v1alpha1.ReasonRegistrationTimeout, v1alpha1.ActionRegister,
			"nodeclaim %s (%s in %s, instance %s): %s; %d in a row for this class", nc.Name, nc.Status.InstanceType, nc.Status.Zone, nc.Status.ProviderID, why, len(claims))
	}
	if len(claims) < RegistrationTimeoutsInARow {
		return
	}
	last := claims[max(0, len(claims)-RegistrationTimeoutsInARow):]
	msg := fmt.Sprintf("%d nodeclaims in a row had no node register within %s (the last: %s); check the class's user data, role and security groups, and the instances' console output",
		len(claims), r.ttl, strings.Join(last, ", "))
	if err := r.setClassCondition(ctx, ref, metav1.Condition{Type: v1alpha1.ConditionNodesRegistering, Status: metav1.ConditionFalse, Reason: "RegistrationTimeouts", Message: msg}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording registration timeouts on the node class", "nodeClass", ref.Kind+"/"+ref.Name)
	}
}

// classJoins says whether a node of the class is registered now: then its
// configuration joins nodes, and a timeout is the offering's.
func (r *registrar) classJoins(ctx context.Context, ref v1alpha1.NodeClassReference) (bool, error) {
	var claims v1alpha1.NodeClaimList
	if err := r.kube.List(ctx, &claims); err != nil {
		return false, fmt.Errorf("listing nodeclaims: %w", err)
	}
	return slices.ContainsFunc(claims.Items, func(nc v1alpha1.NodeClaim) bool {
		return nc.Spec.NodeClassRef == ref && nc.Status.NodeName != "" && nc.DeletionTimestamp == nil
	}), nil
}

// classRegistered ends the class's run of registration timeouts, and sets
// its NodesRegistering condition True again where it was False.
func (r *registrar) classRegistered(ctx context.Context, nc *v1alpha1.NodeClaim) {
	ref := nc.Spec.NodeClassRef
	r.classes.registered(ref)
	class, err := r.nodeClassObject(ctx, ref)
	if class == nil || err != nil {
		return
	}
	if conds, err := classConditions(class); err != nil || !meta.IsStatusConditionFalse(conds, v1alpha1.ConditionNodesRegistering) {
		return
	}
	if err := r.setClassCondition(ctx, ref, metav1.Condition{Type: v1alpha1.ConditionNodesRegistering, Status: metav1.ConditionTrue, Reason: "Registered", Message: "node " + nc.Status.NodeName + " registered"}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording a registration on the node class", "nodeClass", ref.Kind+"/"+ref.Name)
	}
}

// nodeClassObject reads the node class ref names, as the provider
// declares its kind; nil when the provider serves no such kind or it is
// gone.
func (r *registrar) nodeClassObject(ctx context.Context, ref v1alpha1.NodeClassReference) (client.Object, error) {
	decl, ok := cloudprovider.ClassOf(r.cloud.NodeClasses(), ref)
	if !ok {
		return nil, nil
	}
	obj := decl.New()
	if err := r.kube.Get(ctx, client.ObjectKey{Name: ref.Name}, obj); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return obj, nil
}

// classStatus is the part of every node class's status this file reads
// and writes: EC2NodeClass and SimulatedNodeClass both have conditions.
type classStatus struct {
	Status struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
	} `json:"status"`
}

func classConditions(obj client.Object) ([]metav1.Condition, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	var st classStatus
	err = runtime.DefaultUnstructuredConverter.FromUnstructured(u, &st)
	return st.Status.Conditions, err
}

// setClassCondition sets one condition of the node class's status, read
// afresh, retrying on conflicts with the class's own controller.
func (r *registrar) setClassCondition(ctx context.Context, ref v1alpha1.NodeClassReference, cond metav1.Condition) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.nodeClassObject(ctx, ref)
		if obj == nil {
			return err
		}
		cond.ObservedGeneration = obj.GetGeneration()
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		var st classStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &st); err != nil {
			return err
		}
		if !meta.SetStatusCondition(&st.Status.Conditions, cond) {
			return nil
		}
		conds, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		status, _ := u["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		status["conditions"] = conds["status"].(map[string]any)["conditions"]
		u["status"] = status
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, obj); err != nil {
			return err
		}
		return r.kube.Status().Update(ctx, obj)
	})
}
