package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/nodeforge/nodeforge/apis/v1alpha1"
	"github.com/nodeforge/nodeforge/provisioner/cloudprovider"
	"github.com/nodeforge/nodeforge/provisioner/cluster"
	"github.com/nodeforge/nodeforge/test/testobj"
)

// staticSource offers the same types every time, as fresh copies: the
// controller marks unavailable offerings on what it is given.
type staticSource []v1alpha1.InstanceType

func (s staticSource) Name() string { return "static" }

func (s staticSource) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	out := make([]v1alpha1.InstanceType, len(s))
	for i := range s {
		s[i].DeepCopyInto(&out[i])
	}
	return out, nil
}

// writes counts the writes that reached the (fake) API server, by verb
// and object name.
type writes struct {
	mu sync.Mutex
	n  map[string]int // "update default.m5" → 1
	// after, if set, runs after each write that succeeded.
	after func()
	// refuse, if set, says which writes fail instead, and how.
	refuse func(verb string, obj client.Object) error
}

func (w *writes) count(verb string, obj client.Object, err error) error {
	if err == nil {
		w.mu.Lock()
		w.n[verb+" "+obj.GetName()]++
		w.mu.Unlock()
		if w.after != nil {
			w.after()
		}
	}
	return err
}

func (w *writes) reset() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.n
	w.n = map[string]int{}
	return got
}

// newKube is a fake API server holding objs, and the writes made to it.
func newKube(t *testing.T, objs ...client.Object) (client.Client, *writes) {
	t.Helper()
	w := &writes{n: map[string]int{}}
	kube := interceptor.NewClient(testobj.Client(objs...), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return w.count("create", obj, c.Create(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if w.refuse != nil {
				if err := w.refuse("update", obj); err != nil {
					return err
				}
			}
			return w.count("update", obj, c.Update(ctx, obj, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return w.count("delete", obj, c.Delete(ctx, obj, opts...))
		},
	})
	return kube, w
}

func nodePool(name string, reqs ...v1alpha1.NodeSelectorRequirementWithMinValues) *v1alpha1.NodePool {
	return &v1alpha1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.NodePoolSpec{Template: v1alpha1.NodeClaimTemplate{Spec: v1alpha1.NodeClaimTemplateSpec{Requirements: reqs}}},
	}
}

func reconcileAll(t *testing.T, c *Controller, pools ...*v1alpha1.NodePool) {
	t.Helper()
	for _, p := range pools {
		if _, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)}); err != nil {
			t.Fatalf("reconciling nodepool %s: %v", p.Name, err)
		}
	}
}

// simpleType is a small type offered in two zones, spot and on-demand.
func simpleType(name, arch string) v1alpha1.InstanceType {
	it := testobj.InstanceType(name).Capacity("cpu", "2", "memory", "8Gi", "pods", "29").Arch(arch)
	for _, z := range []string{"zone-a", "zone-b"} {
		it.Offering(z, v1alpha1.CapacityTypeOnDemand, "0.096").Offering(z, v1alpha1.CapacityTypeSpot, "0.0384")
	}
	return it.Obj()
}

func catalogNames(t *testing.T, kube client.Client) []string {
	t.Helper()
	var list v1alpha1.InstanceTypeCatalogList
	if err := kube.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

func TestReconcilePublishesOneObjectPerFamily(t *testing.T) {
	pool := nodePool("default")
	kube, _ := newKube(t, pool)
	source := staticSource{simpleType("m5.large", "amd64"), simpleType("m5.xlarge", "amd64"), simpleType("c7g.large", "arm64"), simpleType("t2", "amd64")}
	c := NewController(kube, source, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	reconcileAll(t, c, pool)

	if diff := cmp.Diff([]string{"default.c7g", "default.m5", "default.t2"}, catalogNames(t, kube)); diff != "" {
		t.Errorf("catalog objects (-want,+got):\n%s", diff)
	}
	var m5 v1alpha1.InstanceTypeCatalog
	if err := kube.Get(context.Background(), client.ObjectKey{Name: "default.m5"}, &m5); err != nil {
		t.Fatal(err)
	}
	if m5.Spec.NodePool != "default" || m5.Labels[v1alpha1.LabelNodePool] != "default" || !metav1.IsControlledBy(&m5, pool) {
		t.Errorf("default.m5 has nodePool %q, label %q, owners %v; want the pool in all three", m5.Spec.NodePool, m5.Labels[v1alpha1.LabelNodePool], m5.OwnerReferences)
	}
	if m5.Spec.InstanceTypeCount != 2 || len(m5.Spec.InstanceTypes) != 2 || m5.Spec.Provider != "static" {
		t.Errorf("default.m5 counts %d of %d types from %q; want 2 of 2 from static", m5.Spec.InstanceTypeCount, len(m5.Spec.InstanceTypes), m5.Spec.Provider)
	}
	got, err := cluster.InstanceTypesOf(context.Background(), kube, "default")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range got {
		names = append(names, it.Name)
	}
	if diff := cmp.Diff([]string{"c7g.large", "m5.large", "m5.xlarge", "t2"}, names); diff != "" {
		t.Errorf("cluster.InstanceTypesOf(default) (-want,+got):\n%s", diff)
	}
}

// TestReadersNeverSeeAPartCatalog checks, after every single write, what a
// reader merging the objects (v1alpha1.ByPool) sees of the pool: nothing
// while the catalog is first written, then, as the pool gains a family and
// trades two for another, always every type the catalog keeps and no
// type that is neither coming nor going.
func TestReadersNeverSeeAPartCatalog(t *testing.T) {
	ctx := context.Background()
	pool := nodePool("default", v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large", "c5.large"}})
	kube, w := newKube(t, pool)
	var seen [][]string // what the reader saw after each write
	w.after = func() {
		var list v1alpha1.InstanceTypeCatalogList
		if err := kube.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		if cat := v1alpha1.ByPool(list.Items)["default"]; cat != nil {
			for _, it := range cat.Spec.InstanceTypes {
				names = append(names, it.Name)
			}
		}
		seen = append(seen, names)
	}
	source := staticSource{simpleType("c5.large", "amd64"), simpleType("m5.large", "amd64"), simpleType("r5.large", "amd64"), simpleType("t3.large", "amd64")}
	c := NewController(kube, source, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	check := func(step string, before, after []string) {
		t.Helper()
		for i, names := range seen {
			if before == nil {
				// First published: nothing, then the whole catalog.
				if names != nil && !slices.Equal(names, after) {
					t.Errorf("%s: after write %d of %d a reader saw %v, part of %v", step, i+1, len(seen), names, after)
				}
				continue
			}
			for _, n := range before {
				if slices.Contains(after, n) && !slices.Contains(names, n) {
					t.Errorf("%s: after write %d of %d a reader saw %v, without %s, which the catalog keeps", step, i+1, len(seen), names, n)
				}
			}
			for _, n := range names {
				if !slices.Contains(before, n) && !slices.Contains(after, n) {
					t.Errorf("%s: after write %d of %d a reader saw %v, with %s, which is neither in %v nor in %v", step, i+1, len(seen), names, n, before, after)
				}
			}
			if names == nil {
				t.Errorf("%s: after write %d of %d a reader saw no catalog", step, i+1, len(seen))
			}
		}
		if got := seen[len(seen)-1]; !slices.Equal(got, after) {
			t.Errorf("%s: in the end a reader sees %v, want %v", step, got, after)
		}
		seen = nil
	}
	setTypes := func(names ...string) {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			t.Fatal(err)
		}
		pool.Spec.Template.Spec.Requirements[0].Values = names
		if err := kube.Update(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}

	reconcileAll(t, c, pool)
	check("first publication", nil, []string{"c5.large", "m5.large"})
	setTypes("c5.large", "m5.large", "r5.large")
	reconcileAll(t, c, pool)
	check("a family more", []string{"c5.large", "m5.large"}, []string{"c5.large", "m5.large", "r5.large"})
	setTypes("m5.large", "t3.large")
	reconcileAll(t, c, pool)
	check("two families fewer, one more", []string{"c5.large", "m5.large", "r5.large"}, []string{"m5.large", "t3.large"})
}

// TestNoFamilyIsDeletedWhileAnotherWaitsForItsUpdate: when the pool loses
// a family, the others' count must drop before the family goes (else the
// catalog looks unfinished to readers); an update refused by a conflict
// holds the deletion back to the next reconcile.
func TestNoFamilyIsDeletedWhileAnotherWaitsForItsUpdate(t *testing.T) {
	ctx := context.Background()
	pool := nodePool("default", v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.large", "c5.large"}})
	kube, w := newKube(t, pool)
	c := NewController(kube, staticSource{simpleType("c5.large", "amd64"), simpleType("m5.large", "amd64")}, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	reconcileAll(t, c, pool)
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Template.Spec.Requirements[0].Values = []string{"m5.large"}
	if err := kube.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	w.refuse = func(verb string, obj client.Object) error {
		if _, ok := obj.(*v1alpha1.InstanceTypeCatalog); ok {
			return apierrors.NewConflict(schema.GroupResource{Group: v1alpha1.Group, Resource: "instancetypecatalogs"}, obj.GetName(), errors.New("changed"))
		}
		return nil
	}
	w.reset()
	res, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	//lint:ignore SA1019 Requeue is the controller's rate-limited requeue; RequeueAfter is a fixed delay
	if err != nil || !res.Requeue {
		t.Fatalf("a reconcile whose update conflicts: %+v, %v; want a requeue", res, err)
	}
	if got := w.reset(); len(got) != 0 {
		t.Errorf("writes while default.m5 could not be updated: %v, want none", got)
	}
	w.refuse = nil
	reconcileAll(t, c, pool)
	if diff := cmp.Diff(map[string]int{"update default.m5": 1, "delete default.c5": 1}, w.reset()); diff != "" {
		t.Errorf("writes once the update goes through (-want,+got):\n%s", diff)
	}
}

func TestReconcileWithNothingChangedWritesNothing(t *testing.T) {
	pool := nodePool("default")
	kube, w := newKube(t, pool)
	c := NewController(kube, staticSource{simpleType("m5.large", "amd64"), simpleType("c7g.large", "arm64")}, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	reconcileAll(t, c, pool)
	w.reset()
	reconcileAll(t, c, pool)
	if got := w.reset(); len(got) != 0 {
		t.Errorf("a second reconcile wrote %v, want nothing", got)
	}
}

func TestReconcileDeletesTheObjectsOfFamiliesThePoolNoLongerHas(t *testing.T) {
	pool := nodePool("default")
	ctx := context.Background()
	// Two objects the controller must leave alone (labelled for the pool
	// but not controlled by it), and the unsplit catalog an earlier
	// version wrote (named after the pool, no spec.nodePool).
	handWritten := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "by-hand", Labels: map[string]string{v1alpha1.LabelNodePool: "default"}},
		Spec: v1alpha1.InstanceTypeCatalogSpec{NodePool: "default"}}
	unsplit := &v1alpha1.InstanceTypeCatalog{ObjectMeta: metav1.ObjectMeta{Name: "default",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, v1alpha1.SchemeGroupVersion.WithKind("NodePool"))}}}
	kube, w := newKube(t, pool, handWritten, unsplit)
	c := NewController(kube, staticSource{simpleType("m5.large", "amd64"), simpleType("c7g.large", "arm64")}, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	reconcileAll(t, c, pool)
	if diff := cmp.Diff([]string{"by-hand", "default.c7g", "default.m5"}, catalogNames(t, kube)); diff != "" {
		t.Errorf("catalog objects after the first publish (-want,+got):\n%s", diff)
	}

	// The pool now takes amd64 only: c7g goes.
	if err := kube.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatal(err)
	}
	pool.Spec.Template.Spec.Requirements = []v1alpha1.NodeSelectorRequirementWithMinValues{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}}
	if err := kube.Update(ctx, pool); err != nil {
		t.Fatal(err)
	}
	w.reset()
	reconcileAll(t, c, pool)
	if diff := cmp.Diff([]string{"by-hand", "default.m5"}, catalogNames(t, kube)); diff != "" {
		t.Errorf("catalog objects once the pool is amd64 only (-want,+got):\n%s", diff)
	}
	// m5's object now counts one object, not two; c7g's goes last.
	if diff := cmp.Diff(map[string]int{"update default.m5": 1, "delete default.c7g": 1}, w.reset()); diff != "" {
		t.Errorf("writes (-want,+got):\n%s", diff)
	}
}

// TestOneMarkWritesOneObjectPerPoolOfferingTheType: three pools, two of
// which offer m5.large; marking one of its offerings unavailable rewrites
// their m5 objects, once each, and nothing else.
func TestOneMarkWritesOneObjectPerPoolOfferingTheType(t *testing.T) {
	all, amd, arm := nodePool("all"), nodePool("amd", v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}),
		nodePool("arm", v1alpha1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}})
	kube, w := newKube(t, all, amd, arm)
	var source staticSource
	for _, f := range []string{"m5", "c5", "r5"} {
		for _, s := range []string{"large", "xlarge", "2xlarge"} {
			source = append(source, simpleType(f+"."+s, "amd64"))
		}
	}
	source = append(source, simpleType("c7g.large", "arm64"), simpleType("m7g.large", "arm64"))
	unavailable := cloudprovider.NewUnavailableOfferings(time.Minute)
	c := NewController(kube, source, unavailable, nil)
	reconcileAll(t, c, all, amd, arm)
	if got := len(w.reset()); got != 5+3+2 {
		t.Fatalf("the first publish wrote %d objects, want 10 (5 families of all, 3 of amd, 2 of arm)", got)
	}

	unavailable.Mark(cloudprovider.Offer{InstanceType: source[0], Zone: "zone-b", CapacityType: v1alpha1.CapacityTypeSpot})
	reconcileAll(t, c, all, amd, arm) // what the mark queues
	if diff := cmp.Diff(map[string]int{"update all.m5": 1, "update amd.m5": 1}, w.reset()); diff != "" {
		t.Errorf("writes after one mark (-want,+got):\n%s", diff)
	}
	types, err := cluster.InstanceTypesOf(context.Background(), kube, "amd")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range types {
		for _, o := range it.Offerings {
			if want := !(it.Name == source[0].Name && o.Zone == "zone-b" && o.CapacityType == v1alpha1.CapacityTypeSpot); o.Available != want {
				t.Errorf("%s in %s (%s) published available=%v, want %v", it.Name, o.Zone, o.CapacityType, o.Available, want)
			}
		}
	}
}

func TestObjectNames(t *testing.T) {
	long := ""
	for len(long) < 250 {
		long += "pool."
	}
	long = long[:249] + "x"
	for _, tc := range []struct {
		name, pool, family string
		part               int
		want               string // "" to check validity only
	}{
		{name: "a family is appended after a dot", pool: "default", family: "m5", part: 1, want: "default.m5"},
		{name: "a family with a dash keeps it", pool: "default", family: "u-6tb1", part: 1, want: "default.u-6tb1"},
		{name: "parts after the first are numbered", pool: "default", family: "m5", part: 2, want: "default.m5.2"},
		{name: "a pool with dots keeps them", pool: "team.gpu", family: "p5", part: 1, want: "team.gpu.p5"},
		{name: "a family that is no DNS label is spelled valid and hashed", pool: "default", family: "Standard_D2s_v3", part: 1},
		{name: "a family of symbols only is hashed", pool: "default", family: "__", part: 1},
		{name: "a name past 253 characters is shortened with a hash", pool: long, family: "m5", part: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := objectName(tc.pool, tc.family, tc.part)
			if tc.want != "" && got != tc.want {
				t.Errorf("objectName(%q, %q, %d) = %q, want %q", tc.pool, tc.family, tc.part, got, tc.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("objectName(%q, %q, %d) = %q is not a valid object name: %v", tc.pool, tc.family, tc.part, got, errs)
			}
			if again := objectName(tc.pool, tc.family, tc.part); again != got {
				t.Errorf("objectName is not deterministic: %q then %q", got, again)
			}
		})
	}
	// Spellings that differ only in what the name cannot hold stay apart.
	if a, b := objectName("default", "Standard_D2s_v3", 1), objectName("default", "standard-d2s-v3", 1); a == b {
		t.Errorf("two families share the object name %q", a)
	}
	if a, b := objectName(long, "m5", 1), objectName(long[:248]+"y", "m5", 1); a == b {
		t.Errorf("two long pools share the object name %q", a)
	}
}

func TestFamily(t *testing.T) {
	for name, want := range map[string]string{"m5.large": "m5", "c7g.xlarge": "c7g", "u-6tb1.metal": "u-6tb1", "c7i-flex.large": "c7i-flex", "t2": "t2"} {
		if got := family(name); got != want {
			t.Errorf("family(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestAFamilyTooLargeForOneObjectIsSplitIntoStableParts: a family of 3,000
// types with long labels is well over partBytes; it is cut into numbered
// parts under the bound that together hold every type once; marking an
// offering unavailable changes one part and moves no type, and the cut is
// the same however many offerings are unavailable.
func TestAFamilyTooLargeForOneObjectIsSplitIntoStableParts(t *testing.T) {
	var types []v1alpha1.InstanceType
	for i := range 3000 {
		it := simpleType(fmt.Sprintf("big.size%04d", i), "amd64")
		for j := range 8 {
			it.Labels[fmt.Sprintf("example.com/a-rather-long-label-key-%d", j)] = fmt.Sprintf("a-rather-long-label-value-%d", i)
		}
		types = append(types, it)
	}
	pool := nodePool("default")
	objs := objectsFor(pool, "static", types)
	if len(objs) < 2 {
		t.Fatalf("%d objects for a family far over %d bytes, want it split", len(objs), partBytes)
	}
	partition := func(objs []v1alpha1.InstanceTypeCatalog) map[string][]string {
		out := map[string][]string{}
		for _, o := range objs {
			for _, it := range o.Spec.InstanceTypes {
				out[o.Name] = append(out[o.Name], it.Name)
			}
		}
		return out
	}
	seen := map[string]bool{}
	for i, o := range objs {
		if want := objectName("default", "big", i+1); o.Name != want {
			t.Errorf("part %d is named %q, want %q", i+1, o.Name, want)
		}
		size := 0
		for _, it := range o.Spec.InstanceTypes {
			size += encodedSize(it) + 1
			if seen[it.Name] {
				t.Errorf("%s is in two parts", it.Name)
			}
			seen[it.Name] = true
		}
		if size > partBytes {
			t.Errorf("part %s holds %d bytes of types, over %d", o.Name, size, partBytes)
		}
	}
	if len(seen) != len(types) {
		t.Errorf("the parts hold %d types, want %d", len(seen), len(types))
	}

	marked := slices.Clone(types)
	marked[1500] = *types[1500].DeepCopy()
	marked[1500].Offerings[0].Available = false
	after := objectsFor(pool, "static", marked)
	if diff := cmp.Diff(partition(objs), partition(after)); diff != "" {
		t.Errorf("marking an offering moved types between parts (-before,+after):\n%s", diff)
	}
	// The cut is the same whatever is available: with every offering
	// unavailable each type is 4 bytes longer, which would move every
	// boundary if parts were cut on sizes as they are.
	none := slices.Clone(types)
	for i := range none {
		none[i] = *types[i].DeepCopy()
		for j := range none[i].Offerings {
			none[i].Offerings[j].Available = false
		}
	}
	if diff := cmp.Diff(partition(objs), partition(objectsFor(pool, "static", none))); diff != "" {
		t.Errorf("parts differ once every offering is unavailable (-available,+unavailable):\n%s", diff)
	}
	changed := 0
	for i := range objs {
		if !slices.EqualFunc(objs[i].Spec.InstanceTypes, after[i].Spec.InstanceTypes, func(a, b v1alpha1.InstanceType) bool {
			return a.Name == b.Name && slices.Equal(a.Offerings, b.Offerings)
		}) {
			changed++
		}
	}
	if changed != 1 {
		t.Errorf("marking one offering changed %d parts, want 1", changed)
	}
}

// changingSource offers what its types say now.
type changingSource struct{ types *[]v1alpha1.InstanceType }

func (s changingSource) Name() string { return "changing" }
func (s changingSource) InstanceTypes(context.Context, *v1alpha1.NodePool) ([]v1alpha1.InstanceType, error) {
	return *s.types, nil
}

// TestTheCatalogIsPublishedAgainWhenTheProviderChangesItsMind: a provider's
// offerings change with nothing the controller watches changing (a spot
// price, the memory a registered node reported), so every reconcile comes
// back after Republish, and the next one writes what changed.
func TestTheCatalogIsPublishedAgainWhenTheProviderChangesItsMind(t *testing.T) {
	pool := nodePool("default")
	kube, w := newKube(t, pool)
	types := []v1alpha1.InstanceType{simpleType("m5.large", "amd64")}
	c := NewController(kube, changingSource{&types}, cloudprovider.NewUnavailableOfferings(time.Minute), nil)
	res, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != Republish {
		t.Errorf("RequeueAfter = %s, want Republish (%s)", res.RequeueAfter, Republish)
	}
	w.reset()
	types[0].Capacity[corev1.ResourceMemory] = resource.MustParse("7726Mi") // as a registered node reported
	reconcileAll(t, c, pool)
	if got := w.reset(); len(got) != 1 {
		t.Errorf("the republish wrote %v, want the one object of the type whose memory changed", got)
	}
}
