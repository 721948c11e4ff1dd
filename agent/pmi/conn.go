package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/gangway-hpc/gangway/internal/fdio"
)

// maxMessage bounds one PMI-1 line or PMI-2 command (PMI-2 allows 64 KiB).
const maxMessage = 64 << 10

// errConnDone is the cancellation cause of a connection that ended.
var errConnDone = errors.New("pmi: connection ended")

// conn is one rank's PMI connection. Its reader goroutine (serve) handles
// requests in order, one at a time: a request answered later (a barrier,
// getnodeattr with wait=TRUE, the name service) holds up the rank's next
// request until its reply is written (later, awaitReply). The reader
// still reads that next request, so it sees EOF when the rank dies, but
// no further: a rank that never reads its replies cannot make the server
// queue work for it. Requests that wait run in goroutines owned by wg, at
// most one at a time; a barrier needs none: the rank is registered with
// it, and whoever completes it writes the reply (writeNow). Every write
// has a deadline (Limits.WriteTimeout); a rank that lets it pass is
// dropped (Server.fail).
type conn struct {
	s    *Server
	nc   net.Conn
	br   *bufio.Reader
	rank int // the rank whose socketpair this is

	ctx     context.Context
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
	wmu     sync.Mutex
	raw     syscall.RawConn // nc's descriptor, for writes that must not wait; nil if none
	replied chan struct{}   // the reader's: closed once the pending reply is written; nil when none is pending
	aborted bool            // the reader's: the rank sent abort (reported once)
}

func newConn(s *Server, nc net.Conn, rank int) *conn {
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, maxMessage), rank: rank}
	c.ctx, c.cancel = context.WithCancelCause(s.ctx)
	c.raw = fdio.RawConn(nc)
	return c
}

// serve sniffs the protocol and runs the request loop until EOF, an I/O error
// or server shutdown.
func (c *conn) serve() {
	defer c.s.connDone(c)
	defer c.wg.Wait()
	defer c.cancel(errConnDone)
	defer c.nc.Close()

	head, err := c.br.Peek(4)
	if err != nil {
		c.s.debugf("pmi conn rank %d: %v", c.id(), err)
		return
	}
	v2 := true
	if s := string(head); s == "cmd=" || s == "mcmd" {
		v2, err = c.servePMI1()
	}
	if v2 && err == nil {
		err = c.servePMI2()
	}
	if err != nil && !errors.Is(err, io.EOF) && c.s.ctx.Err() == nil {
		c.s.debugf("pmi conn rank %d: %v", c.id(), err)
	}
}

// later marks the request being handled as answered later: the reader
// handles no further request until the returned done has been called
// (once the reply is written or abandoned). done may be called more than
// once.
func (c *conn) later() (done func()) {
	ch := make(chan struct{})
	c.replied = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// awaitReply waits until the reply to the reader's previous request, if
// it is pending, has been written.
func (c *conn) awaitReply() error {
	if c.replied == nil {
		return nil
	}
	select {
	case <-c.replied:
		c.replied = nil
		return nil
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
}

// write sends one complete reply; replies from waiting goroutines and the
// reader never interleave.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

// writeLocked writes b within the write timeout; wmu is held. A rank that
// lets the timeout pass is dropped and failed.
//
// The timeout runs only while the socket is full (fdio.WriteWithin):
// set before the write, it also counted the agent's own wait for a CPU,
// and at 10,000 agents and their ranks starting on two cores a rank's
// first reply (response_to_init, into an empty socket) failed as "not
// read for 10s". The deadline is cleared once the write is done
// (WriteWithin clears it): a deadline left behind fails every later
// write on the descriptor once it passes, the raw writes of writeNow
// too, so the barrier_out that ends a barrier more than the write
// timeout after the rank's previous reply (a first barrier over
// thousands of hosts, MPI_Finalize's after hours of training) closed
// the rank's connection instead ("i/o timeout", seen as end of file).
func (c *conn) writeLocked(b []byte) error {
	timeout := c.s.job.Limits.WriteTimeout
	err := fdio.WriteWithin(c.nc, c.raw, b, timeout)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: its reply waited %v for the rank to read (a socket buffer of replies left unread); its PMI connection was closed", ErrStalled, timeout)
		c.s.fail(c, err)
	}
	if err != nil {
		return fmt.Errorf("write to rank %d: %w", c.id(), err)
	}
	return nil
}

// writeNow sends one complete reply from a goroutine that must not wait
// for the rank (the one completing a barrier: the agent's session loop, or
// another rank's reader). It writes what the socket takes at once and hands
// the rest, in order, to a goroutine the server owns. A write that fails
// closes the connection, as a failed reply does elsewhere.
func (c *conn) writeNow(b []byte) {
	if !c.wmu.TryLock() {
		c.writeLater(b, false)
		return
	}
	n, err := c.tryWrite(b)
	switch {
	case err != nil:
		c.wmu.Unlock()
		c.s.debugf("pmi conn rank %d: write: %v", c.id(), err)
		c.nc.Close()
	case n == len(b):
		c.wmu.Unlock()
	default:
		c.writeLater(b[n:], true) // wmu goes with it: nothing may come between
	}
}

// tryWrite writes what the socket takes without waiting.
func (c *conn) tryWrite(b []byte) (int, error) {
	if c.raw == nil {
		return 0, nil
	}
	return fdio.TryWrite(c.raw, b)
}

// writeLater writes b in a goroutine of the server's; locked says the
// caller holds wmu and hands it over.
func (c *conn) writeLater(b []byte, locked bool) {
	started := c.s.goIfOpen(func() {
		if !locked {
			c.wmu.Lock()
		}
		err := c.writeLocked(b)
		c.wmu.Unlock()
		if err != nil {
			c.s.debugf("pmi conn rank %d: %v", c.id(), err)
			c.nc.Close()
		}
	})
	if !started && locked {
		c.wmu.Unlock()
	}
}

// async runs a waiting request whose reply the reader's next request
// waits for (later); a failed reply closes the connection so the rank
// sees the failure.
func (c *conn) async(f func() error) {
	done := c.later()
	c.wg.Go(func() {
		defer done()
		if err := f(); err != nil {
			c.s.debugf("pmi conn rank %d: %v", c.id(), err)
			c.nc.Close()
		}
	})
}

// abort reports the rank's abort (PMI-1 abort, PMI-2 abort) through
// Events.Abort, once: with exitcode, or def when it carries none. The
// rank then waits to be killed.
func (c *conn) abort(exitcode string, def int, msg string) {
	code, err := strconv.Atoi(exitcode)
	if err != nil {
		code = def
	}
	if c.s.ev.Abort != nil && !c.aborted {
		c.s.ev.Abort(c.id(), code, msg)
	}
	c.aborted = true
}

// id is the connection's rank.
func (c *conn) id() int { return c.rank }

// confirm checks a rank's claim to be rank (PMI-1 initack, PMI-2
// fullinit's pmirank): a connection serves the rank whose socketpair it
// is, and a client may only name that one.
func (c *conn) confirm(rank int) error {
	if rank != c.rank {
		return fmt.Errorf("connection of rank %d claims rank %d", c.rank, rank)
	}
	return nil
}
