package ec2fake

import (
	"net/http"
	"strings"
	"time"
)

// EC2 throttles each account's requests per region with token buckets
// (EC2 API reference, "Request throttling"): each request takes a token
// from its API's bucket, a bucket refills at a fixed rate up to its size,
// and a request that finds its bucket empty is answered 503
// RequestLimitExceeded and does nothing. Each API has a bucket of its own
// ("each API is evaluated individually"); its size and refill rate are
// those of its category in the reference's table of request token limits:
//
//	category                                       size  refill/s
//	mutating (Create*, Delete*, Terminate*, ...)     50         5
//	non-mutating (Describe*, Get*)                  100        20
//	non-mutating, unfiltered and unpaginated         50        10
//	uncategorized                                    50         5
//
// TerminateInstances also spends resource tokens, one per instance
// terminated, from a bucket of 1000 refilled at 20 a second (the
// reference's resource token limits); a request that finds too few is
// throttled the same way. Accounts can have these raised by AWS support;
// the figures are the defaults every account starts with.
var (
	bucketMutating      = bucketSize{size: 50, refill: 5}
	bucketNonMutating   = bucketSize{size: 100, refill: 20}
	bucketUnfiltered    = bucketSize{size: 50, refill: 10}
	bucketUncategorized = bucketSize{size: 50, refill: 5}
	bucketTerminations  = bucketSize{size: 1000, refill: 20}
)

type bucketSize struct{ size, refill float64 }

// tokenBucket is one bucket, full when first used.
type tokenBucket struct {
	bucketSize
	tokens float64
	at     time.Time
}

// take spends n tokens if the bucket holds them after refilling to now.
func (b *tokenBucket) take(now time.Time, n float64) bool {
	if b.at.IsZero() {
		b.tokens, b.at = b.size, now
	}
	if now.After(b.at) {
		b.tokens = min(b.size, b.tokens+now.Sub(b.at).Seconds()*b.refill)
		b.at = now
	}
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// rateLimiter holds the buckets, by API (and by API called unfiltered),
// and counts the requests it throttled, by action.
type rateLimiter struct {
	on        bool
	buckets   map[string]*tokenBucket
	throttled map[string]int
}

// LimitRequestRates turns EC2's request rate limits on or off (they are
// off unless World.RequestRateLimits is set). Turning them on starts every
// bucket full.
func (s *Server) LimitRequestRates(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rates = rateLimiter{on: on, buckets: map[string]*tokenBucket{}, throttled: map[string]int{}}
}

// Throttled returns how many requests of each action the request rate
// limits refused (RequestLimitExceeded); the injected throttles of
// Throttle are not counted.
func (s *Server) Throttled() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.rates.throttled))
	for k, v := range s.rates.throttled {
		out[k] = v
	}
	return out
}

// rateLimited returns RequestLimitExceeded when the request finds its
// bucket empty (or, for TerminateInstances, too few resource tokens).
func (s *Server) rateLimited(action string, q query) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.rates.on {
		return nil
	}
	now := s.now()
	key, size := requestBucket(action, q)
	ok := s.rates.bucket(key, size).take(now, 1)
	if ok && action == "TerminateInstances" {
		// The request token is spent even when the resource tokens are
		// short, as both buckets are checked by one request.
		ok = s.rates.bucket("TerminateInstances/instances", bucketTerminations).take(now, float64(max(1, len(q.list("InstanceId")))))
	}
	if ok {
		return nil
	}
	s.rates.throttled[action]++
	return &apiError{Status: http.StatusServiceUnavailable, Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
}

func (r *rateLimiter) bucket(key string, size bucketSize) *tokenBucket {
	b := r.buckets[key]
	if b == nil {
		b = &tokenBucket{bucketSize: size}
		r.buckets[key] = b
	}
	return b
}

// requestBucket names the bucket a request draws from and its size.
func requestBucket(action string, q query) (string, bucketSize) {
	switch {
	case strings.HasPrefix(action, "Describe"), strings.HasPrefix(action, "Get"):
		if unfiltered(q) {
			return action + "/unfiltered", bucketUnfiltered
		}
		return action, bucketNonMutating
	case strings.HasPrefix(action, "Create"), strings.HasPrefix(action, "Delete"), strings.HasPrefix(action, "Terminate"),
		strings.HasPrefix(action, "Run"), strings.HasPrefix(action, "Modify"), strings.HasPrefix(action, "Start"), strings.HasPrefix(action, "Stop"):
		return action, bucketMutating
	}
	return action, bucketUncategorized
}

// unfiltered: a Describe with no filter, no IDs or names and no page
// size, which asks for everything in one answer.
func unfiltered(q query) bool {
	for k := range q {
		switch {
		case k == "Action", k == "Version", k == "DryRun":
		default:
			return false
		}
	}
	return true
}
