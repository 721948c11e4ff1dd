package transport

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// StallTimeout is how long a write to an agent may make no progress
// before the launcher cuts the agent off. An agent reads its session all
// the time (even while it drops caches or spawns ranks, what the launcher
// sends meanwhile fits in the transport's buffers), so a write that
// stalls this long means an agent that stopped reading: stuck, or hostile
// (an SSH channel with its window never opened). Without the bound, one
// such agent blocks the job loop in a send, and with it --timeout and
// signals, for ever.
const StallTimeout = 10 * time.Second

// stallChunk is the most one write hands the transport at a time: each
// chunk accepted restarts StallTimeout, so a slow link is never taken for
// a stalled agent.
const stallChunk = 64 << 10

// errStalled is why a session ends when its agent stopped reading.
var errStalled = errors.New("stopped reading what the launcher sends")

// StalledError is a session's error once a stalled write ended it.
type StalledError struct{ After time.Duration }

func (e StalledError) Error() string {
	return fmt.Sprintf("%v: a write made no progress for %v (agent stuck or hostile)", errStalled, e.After)
}

func (e StalledError) Unwrap() error { return errStalled }

// stallGuard closes its connection when a write makes no progress for
// after, which ends that write (and the session's reads) with a
// StalledError instead of blocking the writer.
type stallGuard struct {
	io.ReadWriteCloser
	after   time.Duration
	stalled atomic.Bool
}

// Guard is rwc cut off when a write to it makes no progress for
// StallTimeout, or, when longer, for the stream's stall bound: for an SSH
// session, what its keepalives take at most to find the host silent and
// one interval more (a host allowed to stall that long before it is lost
// may not read for that long either, and a dead link must be reported as
// the silence it is, not as a stalled write). Every session's stream
// goes through one, once: a session of the agent tree (a link) is
// returned as it is, since what it writes goes out on a guarded stream
// (its own, or its relay's).
func Guard(rwc io.ReadWriteCloser) io.ReadWriteCloser {
	if l, ok := rwc.(*link); ok {
		return l
	}
	after := StallTimeout
	if b, ok := rwc.(stallBounder); ok {
		after = max(after, b.stallBound())
	}
	return newStallGuard(rwc, after)
}

// stallBounder is a stream that knows its host's keepalive bound.
type stallBounder interface{ stallBound() time.Duration }

func newStallGuard(rwc io.ReadWriteCloser, after time.Duration) *stallGuard {
	return &stallGuard{ReadWriteCloser: rwc, after: after}
}

func (g *stallGuard) Write(p []byte) (int, error) {
	t := time.AfterFunc(g.after, func() {
		g.stalled.Store(true)
		g.ReadWriteCloser.Close()
	})
	defer t.Stop()
	n := 0
	for n < len(p) {
		m, err := g.ReadWriteCloser.Write(p[n:min(len(p), n+stallChunk)])
		n += m
		if err != nil {
			return n, g.why(err)
		}
		t.Reset(g.after)
	}
	return n, nil
}

func (g *stallGuard) Read(p []byte) (int, error) {
	n, err := g.ReadWriteCloser.Read(p)
	if err != nil {
		err = g.why(err)
	}
	return n, err
}

func (g *stallGuard) why(err error) error {
	if g.stalled.Load() {
		return StalledError{After: g.after}
	}
	return err
}
