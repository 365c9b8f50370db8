package aws

import (
	"context"
	"sync"
	"time"
)

// EC2 throttles each API of an account by a token bucket (the EC2 API
// reference, "Request throttling": 100 Describe requests at once, then 20 a
// second; 50 mutating requests, then 5 a second). A burst of claims that
// each asked on their own would spend those tokens one instance at a time,
// while DescribeInstances and TerminateInstances take up to 1000 instances
// a request. So calls that arrive close together are answered by one
// request, each caller getting its own answer: a call is sent at once when
// no request of its kind is in flight, and otherwise joins the batch that
// goes when that request returns (or when it is full). A lone call waits
// for nothing; under load, and the longer EC2 takes to answer (a
// throttled request is retried with backoff), the larger the batches.

// batchCallTimeout bounds one batched request, retries included: it runs
// on behalf of every caller in it, so it cannot end with the first
// caller's context.
const batchCallTimeout = 2 * time.Minute

// batcher coalesces calls for keys into calls of do of at most max keys.
type batcher[K comparable, V any] struct {
	// window, when set, sends each batch that long after its first call
	// (or when full) instead, whatever is in flight: tests use it to make
	// batches of a known size.
	window time.Duration
	max    int
	// do answers every key of a batch.
	do func(ctx context.Context, keys []K) map[K]result[V]

	mu       sync.Mutex
	pending  *batch[K, V]
	inflight int
}

type result[V any] struct {
	v   V
	err error
}

type batch[K comparable, V any] struct {
	ctx     context.Context
	keys    []K
	seen    map[K]bool
	done    chan struct{}
	results map[K]result[V]
}

// call adds key to the pending batch (opening one if none is) and waits
// for its answer or the end of ctx.
func (b *batcher[K, V]) call(ctx context.Context, key K) (V, error) {
	b.mu.Lock()
	bt := b.pending
	if bt == nil {
		// The batch outlives the caller that opened it, but keeps its
		// logger.
		bt = &batch[K, V]{ctx: context.WithoutCancel(ctx), seen: map[K]bool{}, done: make(chan struct{})}
		b.pending = bt
		if b.window > 0 {
			time.AfterFunc(b.window, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				b.sendLocked(bt)
			})
		}
	}
	if !bt.seen[key] {
		bt.seen[key] = true
		bt.keys = append(bt.keys, key)
	}
	if len(bt.keys) >= b.max || b.window == 0 && b.inflight == 0 {
		b.sendLocked(bt)
	}
	b.mu.Unlock()
	select {
	case <-bt.done:
		r := bt.results[key]
		return r.v, r.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// sendLocked sends bt if it is still the pending batch; when it returns,
// the batch pending by then goes.
func (b *batcher[K, V]) sendLocked(bt *batch[K, V]) {
	if b.pending != bt {
		return // sent already
	}
	b.pending = nil
	b.inflight++
	go func() {
		ctx, cancel := context.WithTimeout(bt.ctx, batchCallTimeout)
		bt.results = b.do(ctx, bt.keys)
		cancel()
		close(bt.done)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.inflight--
		if next := b.pending; next != nil && b.window == 0 && b.inflight == 0 {
			b.sendLocked(next)
		}
	}()
}
