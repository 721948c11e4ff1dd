package pmi

import (
	"errors"
	"fmt"
	"time"
)

// Limits bound what the server keeps for its job, whatever its ranks
// send. A zero field takes its default.
type Limits struct {
	// Keys is the most entries the job may hold on this host: keys put
	// and not yet fenced, keys the barriers made visible, node attributes
	// (PMI-2 info-putnodeattr) and names published in the server's own
	// table. A put beyond it is refused with an error reply; a barrier
	// whose job-wide result would pass it fails.
	Keys int
	// Bytes bounds the same entries by size: each costs its key, its
	// value and EntryOverhead.
	Bytes int64
	// WriteTimeout is how long a reply may wait for its rank to read. A
	// rank that leaves its replies unread longer (a socket buffer of
	// them) loses its PMI connection and is failed (Events.Fail).
	WriteTimeout time.Duration
}

// Default limits. An MPICH rank puts one business card per rank (about
// 450 bytes, ch4:ucx) and a key per node; Open MPI's PMI-1 path puts
// nine 673-byte values per rank; a barrier's job-wide puts travel in one
// frame of at most 16 MiB (wire.MaxJobControl). DefaultBytes is twice
// that, so several barriers of the largest exchange the wire can carry
// fit; DefaultKeys is 64 Ki ranks' worth of MPICH keys at four each.
const (
	DefaultKeys         = 1 << 18
	DefaultBytes        = 32 << 20
	DefaultWriteTimeout = 10 * time.Second
	// EntryOverhead is what an entry costs beyond its key and value
	// bytes: its map slot, string headers and allocation rounding.
	EntryOverhead = 64
)

// withDefaults fills the zero (or negative) fields.
func (l Limits) withDefaults() Limits {
	if l.Keys <= 0 {
		l.Keys = DefaultKeys
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	return l
}

// ErrLimit is the cause of a refusal at one of the Limits.
var ErrLimit = errors.New("pmi: limit reached")

// ErrStalled fails a rank that left its replies unread for
// Limits.WriteTimeout.
var ErrStalled = errors.New("pmi: the rank did not read its replies")

// usage is what some entries cost: a count and bytes (EntryOverhead
// included). A change of usage may be negative.
type usage struct {
	keys  int
	bytes int64
}

func (u usage) plus(v usage) usage { return usage{u.keys + v.keys, u.bytes + v.bytes} }

func (u usage) minus(v usage) usage { return usage{u.keys - v.keys, u.bytes - v.bytes} }

// entryCost is what one entry costs.
func entryCost(key, val string) usage {
	return usage{1, int64(len(key)+len(val)) + EntryOverhead}
}

// setCost is the change of m's usage when key is set to val.
func setCost(m map[string]string, key, val string) usage {
	if old, ok := m[key]; ok {
		return usage{0, int64(len(val) - len(old))}
	}
	return entryCost(key, val)
}

// mapCost is the usage of every entry of m.
func mapCost(m map[string]string) usage {
	var u usage
	for k, v := range m {
		u = u.plus(entryCost(k, v))
	}
	return u
}

// budget is a job's usage against its Limits.
type budget struct {
	lim  Limits
	used usage
}

// check reports whether the usage may change by d. A change that frees
// (no more keys, fewer bytes) always may.
func (b *budget) check(d usage) error {
	if d.keys <= 0 && d.bytes <= 0 {
		return nil
	}
	u := b.used.plus(d)
	switch {
	case u.keys > b.lim.Keys:
		return fmt.Errorf("%w: the job's PMI key-value space on this host holds at most %d keys", ErrLimit, b.lim.Keys)
	case u.bytes > b.lim.Bytes:
		return fmt.Errorf("%w: the job's PMI key-value space on this host holds at most %d bytes (%d per key besides its key and value)", ErrLimit, b.lim.Bytes, EntryOverhead)
	}
	return nil
}

// take changes the usage by d if check allows it.
func (b *budget) take(d usage) error {
	if err := b.check(d); err != nil {
		return err
	}
	b.used = b.used.plus(d)
	return nil
}

// give returns usage d.
func (b *budget) give(d usage) { b.used = b.used.minus(d) }
