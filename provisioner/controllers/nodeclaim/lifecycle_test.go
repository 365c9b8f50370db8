package nodeclaim

import (
	"testing"
	"time"
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
