package garbage

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/nodeforge/nodeforge/provisioner/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
)

// memoryCloud is an in-memory provider for this unit test; the simulated
// cloud and the sandbox cover the real path.
type memoryCloud struct {
	instances map[string]*cloudprovider.Instance
}

func (m *memoryCloud) Name() string { return "memory" }
func (m *memoryCloud) Create(context.Context, cloudprovider.Launch) (*cloudprovider.Instance, error) {
	return nil, nil
}
func (m *memoryCloud) Delete(_ context.Context, id string) error {
	if _, ok := m.instances[id]; !ok {
		return cloudprovider.ErrNotFound
	}
	delete(m.instances, id)
	return nil
}
func (m *memoryCloud) Get(_ context.Context, id string) (*cloudprovider.Instance, error) {
	return m.instances[id], nil
}
func (m *memoryCloud) List(context.Context) ([]*cloudprovider.Instance, error) {
	var out []*cloudprovider.Instance
	for _, in := range m.instances {
		out = append(out, in)
	}
	return out, nil
}
func (m *memoryCloud) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return nil, nil
}

func TestCollect(t *testing.T) {
	now := time.Now()
	cloud := &memoryCloud{instances: map[string]*cloudprovider.Instance{
		"sim:///a/owned":  {ProviderID: "sim:///a/owned", NodeClaim: "owned", Launched: now.Add(-time.Hour)},
		"sim:///a/orphan": {ProviderID: "sim:///a/orphan", NodeClaim: "gone", Launched: now.Add(-time.Hour)},
		"sim:///a/young":  {ProviderID: "sim:///a/young", NodeClaim: "launching", Launched: now.Add(-10 * time.Second)},
	}}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	claim := func(name, providerID string) *v1alpha1.NodeClaim {
		nc := &v1alpha1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
		nc.Status.ProviderID = providerID
		return nc
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		claim("owned", "sim:///a/owned"),
		claim("vanished", "sim:///a/vanished"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "orphan-node"}, Spec: corev1.NodeSpec{ProviderID: "sim:///a/orphan"}},
	).Build()
	g := New(kube, cloud)
	g.now = func() time.Time { return now }
	if err := g.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"sim:///a/owned": true, "sim:///a/orphan": false, "sim:///a/young": true} {
		if _, ok := cloud.instances[id]; ok != want {
			t.Errorf("instance %s exists=%v, want %v", id, ok, want)
		}
	}
	var nodes corev1.NodeList
	_ = kube.List(context.Background(), &nodes)
	if len(nodes.Items) != 0 {
		t.Errorf("the orphan's node was kept")
	}
	var nc v1alpha1.NodeClaim
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "vanished"}, &nc); err == nil {
		t.Errorf("the claim whose instance vanished was kept")
	}
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "owned"}, &nc); err != nil {
		t.Errorf("the owned claim was deleted: %v", err)
	}
}
