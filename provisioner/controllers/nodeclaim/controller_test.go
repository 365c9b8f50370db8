package nodeclaim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeforge/nodeforge/test/testobj"
)

// TestRefusalIsConfirmedBeforeItCounts: the gate's refusal of a pod sends
// it back only once it has lasted refusalConfirm; an acceptance between
// starts the count again; a pod gone mid-confirmation is not kept forever.
func TestRefusalIsConfirmedBeforeItCounts(t *testing.T) {
	var r refusals
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if r.confirmed("pod", at(0)) || r.confirmed("pod", at(refusalConfirm/2)) {
		t.Fatal("a refusal counted before it lasted refusalConfirm")
	}
	r.forget("pod") // accepted
	if r.confirmed("pod", at(refusalConfirm+time.Second)) {
		t.Fatal("a refusal counted from before an acceptance")
	}
	if !r.confirmed("pod", at(2*refusalConfirm+time.Second)) {
		t.Fatal("a refusal that lasted refusalConfirm did not count")
	}
	if r.confirmed("pod", at(2*refusalConfirm+2*time.Second)) {
		t.Fatal("a confirmed refusal was not counted afresh")
	}
	r.confirmed("gone", at(0))
	r.confirmed("other", at(20*refusalConfirm))
	if _, ok := r.first["gone"]; ok {
		t.Error("the refusal of a pod never seen again was kept")
	}
}

// TestBindOrderIsTheQueuesAndStable: pods are bound higher priority first,
// then older first, and pods alike in both by namespace and name, whatever
// order the cache lists them in (which of two pods wanting one host port
// is bound must not be left to chance).
func TestBindOrderIsTheQueuesAndStable(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	pod := func(ns, name string, prio int32, age time.Duration) corev1.Pod {
		return *testobj.Pod(name).Namespace(ns).Created(t0.Add(-age)).Priority(prio).Obj()
	}
	want := []corev1.Pod{
		pod("b", "urgent", 1000, 0),
		pod("b", "old", 0, time.Minute),
		pod("a", "z", 0, 0),
		pod("b", "port-1", 0, 0),
		pod("b", "port-2", 0, 0),
	}
	names := func(ps []corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		return out
	}
	for range 50 {
		got := slices.Clone(want)
		rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		slices.SortFunc(got, bindOrder)
		if !slices.Equal(names(got), names(want)) {
			t.Fatalf("bind order %v; want %v", names(got), names(want))
		}
	}
}
