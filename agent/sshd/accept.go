package sshd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
)

// acceptLoop accepts connections on l until ctx ends (nil) or l is closed
// otherwise (an error), admitting each through st and serving the
// admitted ones with serve, in goroutines that wg owns. Accept errors
// (out of file descriptors, say) never end it: it backs off, from 5 ms
// doubling to 1 s, and tries again. When it returns, the connections
// still in their handshake are closed: they must not hold up the end.
// Both the agent's server and an agent started by srun accept this way.
func acceptLoop(ctx context.Context, l net.Listener, log *zap.Logger, st *startups, wg *sync.WaitGroup, serve func(*startupConn)) error {
	defer st.closeAll()
	var bo acceptBackoff
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			d, first := bo.fail()
			if first {
				log.Warn("accept failed; retrying with backoff", zap.Error(err))
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			continue
		}
		if n, took := bo.ok(); n > 0 {
			log.Debug("accepting again", zap.Int("failures", n), zap.Duration("took", took))
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		src := sourceOf(c.RemoteAddr())
		sc, evicted, why := st.admit(c, src)
		if sc == nil {
			c.Close()
			st.refused(log, src, why)
			continue
		}
		if evicted != nil {
			st.evicted(log, evicted, why)
		}
		wg.Go(func() { serve(sc) })
	}
}

// handshake runs the server side of c's SSH handshake within c's startup
// deadlines. The connection still counts as a startup, under the login
// grace deadline, until established is called: a connection the agent
// then refuses keeps its slot while it is told why.
func handshake(c *startupConn, cfg *ssh.ServerConfig) (*ssh.ServerConn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.s.done(c)
		c.Close()
		return nil, nil, nil, err
	}
	return sc, chans, reqs, nil
}

// established ends c's startup: it no longer counts, and has no deadline.
func (c *startupConn) established() {
	c.s.done(c)
	_ = c.SetDeadline(time.Time{})
}

// acceptBackoff spaces out accept retries: an episode starts at the
// first failure and ends at the next success.
type acceptBackoff struct {
	delay time.Duration
	n     int
	since time.Time
}

const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// fail counts a failure and returns how long to wait, and whether it
// starts an episode (the only failure worth a log line).
func (b *acceptBackoff) fail() (time.Duration, bool) {
	b.n++
	if b.n == 1 {
		b.delay, b.since = minAcceptBackoff, time.Now()
		return b.delay, true
	}
	b.delay = min(2*b.delay, maxAcceptBackoff)
	return b.delay, false
}

// ok ends an episode, returning its failures and length.
func (b *acceptBackoff) ok() (int, time.Duration) {
	n := b.n
	if n == 0 {
		return 0, 0
	}
	b.n = 0
	return n, time.Since(b.since)
}

// sourceOf is the address a connection came from, without its port.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
