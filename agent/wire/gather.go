package wire

import (
	"encoding/binary"
	"io"
	"sync"
)

// gather writes a stream's frames with group commit. A sender appends
// its frame to the batch being gathered; if no Write is under way it
// writes the batch itself (it leads), else it waits until the batch
// holding its frame is written, leading that batch itself if the
// Write before it has ended by then. Frames go out in the order their
// senders appended them, each whole, and each sender returns the result
// of the Write that carried its frame. A failed Write fails its batch
// and every later frame (the stream is broken mid-frame).
//
// A lone sender costs what one Write per frame did: its frame is copied
// into a pooled buffer and written. Senders that meet share one Write.
type gather struct {
	mu      sync.Mutex
	cond    sync.Cond // on mu (NewConn): wakes senders when a batch is written
	pend    *[]byte   // the batch being gathered (pooled); nil when empty
	writing bool      // a Write is under way
	next    uint64    // the number of the batch pend goes out in
	done    uint64    // batches written: batch b is done once done > b
	failed  uint64    // the first failed batch, when err != nil
	err     error
	held    int // Hold's depth: while above 0, frames wait in pend and their senders return at once
}

// holdMax is the most a held batch gathers before it is written all the
// same (a burst of whole starts of a large environment stays bounded).
const holdMax = pooledMax

// frame appends one frame (header, sub and p) to the batch and returns
// once the batch is written.
func (g *gather) frame(w io.Writer, k Kind, sub, p []byte) error {
	g.mu.Lock()
	if g.err != nil {
		err := g.err
		g.mu.Unlock()
		return err
	}
	n := len(sub) + len(p)
	if g.pend == nil {
		g.pend = getBuf(5 + n)
	}
	buf := append(*g.pend, byte(k), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(buf[len(buf)-4:], uint32(n))
	buf = append(buf, sub...)
	*g.pend = append(buf, p...)
	if g.held > 0 && len(*g.pend) < holdMax {
		g.mu.Unlock() // Release writes it, or a sender not held first
		return nil
	}
	b := g.next
	for g.done <= b && g.writing {
		g.cond.Wait()
	}
	if g.done <= b {
		g.lead(w)
	}
	err := g.result(b)
	g.mu.Unlock()
	return err
}

// lead writes the batch gathered so far; called with mu held and no
// Write under way, it returns with mu held.
func (g *gather) lead(w io.Writer) {
	bp, b := g.pend, g.next
	g.pend = nil
	g.next++
	g.writing = true
	g.mu.Unlock()
	_, err := w.Write(*bp)
	putBuf(bp)
	g.mu.Lock()
	g.finish(b, err)
}

// finish records batch b's result and wakes the senders waiting.
func (g *gather) finish(b uint64, err error) {
	if err != nil && g.err == nil {
		g.err, g.failed = err, b
	}
	if g.err != nil && g.pend != nil {
		putBuf(g.pend) // their senders return the error
		g.pend = nil
		g.next++
	}
	g.done = max(g.done, b+1)
	if g.err != nil {
		g.done = g.next
	}
	g.writing = false
	g.cond.Broadcast()
}

// result is what batch b's senders return: nil, or the failure of b or
// of a batch before it.
func (g *gather) result(b uint64) error {
	if g.err != nil && b >= g.failed {
		return g.err
	}
	return nil
}

// hold makes frames wait in the batch until release (Conn.Hold).
func (g *gather) hold() {
	g.mu.Lock()
	g.held++
	g.mu.Unlock()
}

// release ends one hold; at the last, it writes the frames gathered
// unless a Write under way takes them, and returns their result.
func (g *gather) release(w io.Writer) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held > 0 { // a Release without its Hold changes nothing
		g.held--
	}
	if g.held > 0 || g.pend == nil {
		return g.err
	}
	b := g.next
	for g.done <= b && g.writing {
		g.cond.Wait()
	}
	if g.done <= b {
		g.lead(w)
	}
	return g.result(b)
}

// alone runs write, which writes to w itself, once every frame gathered
// before it is written and with no other Write under way.
func (g *gather) alone(write func() error, w io.Writer) error {
	g.mu.Lock()
	for g.writing || g.pend != nil {
		if g.writing {
			g.cond.Wait()
		} else {
			g.lead(w) // the frames gathered before this one go first
		}
	}
	if g.err != nil {
		err := g.err
		g.mu.Unlock()
		return err
	}
	b := g.next
	g.next++
	g.writing = true
	g.mu.Unlock()
	err := write()
	g.mu.Lock()
	g.finish(b, err)
	g.mu.Unlock()
	return err
}
