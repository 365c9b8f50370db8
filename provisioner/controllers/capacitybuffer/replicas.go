package capacitybuffer

import (
	"math"
	"math/big"

	"gopkg.in/inf.v0"
	corev1 "k8s.io/api/core/v1"

	bufferv1beta1 "github.com/nodeforge/nodeforge/apis/autoscaling/v1beta1"
)

// Count is the number of chunks a buffer keeps room for.
type Count struct {
	Replicas int32
	// Limited: the limits cut the number (LimitedByQuotas).
	Limited bool
	// Unbounded: neither replicas nor percentage is set and the limits
	// cap nothing a chunk requests; Replicas is then meaningless.
	Unbounded bool
}

// Replicas counts the chunks of spec, as the upstream buffer controller
// does: spec.replicas; a percentage of the workload's replicas (workload,
// its spec.replicas), rounded up and at least 1 when the percentage is
// above 0; the larger of the two when both are set. The limits then cap
// the count, resource by resource, at how many chunks of the requests
// chunk fit in them (rounded down); with neither replicas nor percentage,
// the count is as many as the limits allow. A limit on a resource a chunk
// does not request caps nothing.
//
// Worked example: replicas 2, percentage 30 of a 10-replica Deployment
// gives max(2, ceil(3)) = 3; limits {cpu: 5} with 2-cpu chunks cap it at
// floor(5/2) = 2, Limited.
func Replicas(spec *bufferv1beta1.CapacityBufferSpec, workload int32, chunk corev1.ResourceList) Count {
	var want int64 = -1 // not set
	if spec.Replicas != nil {
		want = int64(*spec.Replicas)
	}
	if p := spec.Percentage; p != nil {
		share := (int64(*p)*int64(workload) + 99) / 100
		if *p > 0 {
			share = max(share, 1)
		}
		want = max(want, share)
	}
	capped := int64(-1) // no limit applies
	if spec.Limits != nil {
		for name, limit := range *spec.Limits {
			req, ok := chunk[corev1.ResourceName(name)]
			if !ok || req.Sign() <= 0 {
				continue
			}
			n := quotient(limit.AsDec(), req.AsDec())
			if capped < 0 || n < capped {
				capped = n
			}
		}
	}
	switch {
	case want < 0 && capped < 0:
		return Count{Unbounded: true}
	case want < 0:
		return Count{Replicas: clamp(capped)}
	case capped >= 0 && capped < want:
		return Count{Replicas: clamp(capped), Limited: true}
	}
	return Count{Replicas: clamp(want)}
}

// quotient is floor(a/b) for b > 0, exactly (0.3 cpu / 100m is 3), at
// least 0 and at most MaxInt32.
func quotient(a, b *inf.Dec) int64 {
	q := new(inf.Dec).QuoRound(a, b, 0, inf.RoundDown)
	u := q.UnscaledBig()
	switch {
	case u.Sign() < 0:
		return 0
	case u.Cmp(big.NewInt(math.MaxInt32)) > 0:
		return math.MaxInt32
	}
	return u.Int64()
}

func clamp(n int64) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
}
