package aws

import "slices"

// launchCount is what one of EC2's describe calls last counted of a thing
// launches use up (a subnet's free addresses, a reservation's available
// instances), and the launches since. Calls and launches are numbered
// from one sequence, kept by the owner under its lock: a call begun at
// seq counted every launch numbered up to seq (each had returned before
// it began), and only later launches are taken off its count. A refusal
// from EC2 stands for a count of zero until a call begun after it says
// otherwise. Callers hold the owner's lock.
type launchCount struct {
	known bool // a count (or a refusal) was recorded
	value int  // the count, as of seq
	seq   uint64
	// launches are the numbers of launches not yet in a count.
	launches []uint64
}

// observe records value, counted by a call begun at seq. It records
// nothing, and reports false, when a refusal came after the call began:
// the refusal is newer.
func (c *launchCount) observe(value int, seq uint64) bool {
	if c.known && c.seq > seq {
		return false
	}
	c.known, c.value, c.seq = true, value, seq
	c.launches = slices.DeleteFunc(c.launches, func(n uint64) bool { return n <= seq })
	return true
}

// refused records EC2's answer, numbered seq, that there is no room.
func (c *launchCount) refused(seq uint64) {
	c.known, c.value, c.seq, c.launches = true, 0, seq, nil
}

// launched records a launch numbered seq.
func (c *launchCount) launched(seq uint64) { c.launches = append(c.launches, seq) }

// since is how many launches the count does not include.
func (c *launchCount) since() int {
	n := 0
	for _, l := range c.launches {
		if l > c.seq {
			n++
		}
	}
	return n
}

// entry returns (*m)[id], made on first use.
func entry[T any](m *map[string]*T, id string) *T {
	if *m == nil {
		*m = map[string]*T{}
	}
	e, ok := (*m)[id]
	if !ok {
		e = new(T)
		(*m)[id] = e
	}
	return e
}
