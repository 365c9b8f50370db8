package awsfake

import "sync"

// Log is the record of the requests a fake received, in order, failed ones
// included, so that tests can count calls and retries and read what the
// client sent. R is the fake's own Request type; each is logged under the
// action it names. A Log is safe for concurrent use; the zero Log is empty.
type Log[R any] struct {
	mu      sync.Mutex
	actions []string
	all     []R
}

// Add records r, a request of action.
func (l *Log[R]) Add(action string, r R) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.actions = append(l.actions, action)
	l.all = append(l.all, r)
}

// All returns a copy of every request recorded, in order; nil when there
// are none.
func (l *Log[R]) All() []R {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.all) == 0 {
		return nil
	}
	return append([]R(nil), l.all...)
}

// Count returns how many requests of action were recorded. "" is an
// action like any other: the requests that named none.
func (l *Log[R]) Count(action string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.actions {
		if a == action {
			n++
		}
	}
	return n
}

// Len returns how many requests were recorded, of every action.
func (l *Log[R]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// Fault is the error an injected fault answers a call with, before the call
// does anything: the HTTP status and the error code (none for IMDS, which
// answers with a bare status).
type Fault struct {
	Status int
	Code   string
}

// Faults are the faults pending for a fake's calls, by key: an action, or
// for IMDS a path. Each fails the next n calls of its key. Faults are safe
// for concurrent use; the zero Faults holds none.
type Faults struct {
	mu      sync.Mutex
	pending map[string]*pending
}

type pending struct {
	Fault
	n int
}

// FailNext makes the next n calls of key fail with f, replacing any fault
// pending for key; n <= 0 clears it.
func (fs *Faults) FailNext(key string, n int, f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if n <= 0 {
		delete(fs.pending, key)
		return
	}
	if fs.pending == nil {
		fs.pending = map[string]*pending{}
	}
	fs.pending[key] = &pending{Fault: f, n: n}
}

// Clear removes every pending fault.
func (fs *Faults) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	clear(fs.pending)
}

// Take uses up one call of the first of keys with a fault pending, and
// returns that fault. A fake that lets a fault stand for any action passes
// the call's action and then "", so that a fault for the action is used
// first.
func (fs *Faults) Take(keys ...string) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, key := range keys {
		if p := fs.pending[key]; p != nil {
			p.n--
			if p.n == 0 {
				delete(fs.pending, key)
			}
			return p.Fault, true
		}
	}
	return Fault{}, false
}

// Inject is Take for the fakes whose injected faults say only that: it
// returns the pending fault as an Error with the message "injected fault",
// or nil when there is none.
func (fs *Faults) Inject(keys ...string) *Error {
	f, ok := fs.Take(keys...)
	if !ok {
		return nil
	}
	return &Error{Status: f.Status, Code: f.Code, Message: "injected fault"}
}
