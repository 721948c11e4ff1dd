package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// maxMessage bounds one PMI-1 line or PMI-2 command (PMI-2 allows 64 KiB).
const maxMessage = 64 << 10

// errConnDone is the cancellation cause of a connection that ended.
var errConnDone = errors.New("pmi: connection ended")

// conn is one rank's PMI connection. Its reader goroutine (serve) handles
// requests in order; requests that wait (barrier, kvs-fence, getnodeattr with
// wait=TRUE) run in goroutines owned by wg, so the reader keeps reading and
// sees EOF when the rank dies.
type conn struct {
	s    *Server
	nc   net.Conn
	br   *bufio.Reader
	rank int // the rank whose socketpair this is

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	wmu    sync.Mutex
}

func newConn(s *Server, nc net.Conn, rank int) *conn {
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, maxMessage), rank: rank}
	c.ctx, c.cancel = context.WithCancelCause(s.ctx)
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

// write sends one complete reply; replies from waiting goroutines and the
// reader never interleave.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("write to rank %d: %w", c.id(), err)
	}
	return nil
}

// async runs a waiting request; a failed reply closes the connection so the
// rank sees the failure.
func (c *conn) async(f func() error) {
	c.wg.Go(func() {
		if err := f(); err != nil {
			c.s.debugf("pmi conn rank %d: %v", c.id(), err)
			c.nc.Close()
		}
	})
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
