package transport

import (
	"io"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// Keepalive timing: an agent that stops answering (host hung, agent
// stopped, network cut without a reset) is declared lost after
// KeepaliveTimeout without a reply to a keepalive sent every
// KeepaliveInterval. Tests shorten them. A host's ssh configuration
// changes them as ssh's ServerAliveInterval and ServerAliveCountMax do
// (keepaliveFor).
var (
	KeepaliveInterval = 5 * time.Second
	KeepaliveTimeout  = 15 * time.Second
)

// keepalive is one host's keepalive timing.
type keepalive struct {
	Interval, Timeout time.Duration
}

// defaultKeepalive is the launcher's own timing.
func defaultKeepalive() keepalive { return keepalive{KeepaliveInterval, KeepaliveTimeout} }

// keepaliveFor is the timing of a host whose configuration gives
// ServerAliveInterval (seconds; 0 or unset: the launcher's own 5 s) and
// ServerAliveCountMax (unanswered keepalives before the host is lost;
// ssh's default 3): a cluster whose nodes stall under load past 15 s
// without being lost says so there, as it would for ssh.
func keepaliveFor(h hostConfig) keepalive {
	if h.ServerAliveInterval <= 0 {
		return defaultKeepalive()
	}
	n := h.ServerAliveCountMax
	if n <= 0 {
		n = 3
	}
	return keepalive{h.ServerAliveInterval, min(h.ServerAliveInterval*time.Duration(n), maxKeepalive)}
}

// maxKeepalive is the longest a host may stay silent before it is lost,
// whatever its configuration says (a link carries at most this).
const maxKeepalive = wire.MaxKeepalive * time.Millisecond

// heartbeatInterval is how often the launcher tells each agent it is
// alive (Heartbeat); an agent that hears nothing for its
// --launcher-timeout (30 s by default) stops the job's ranks, which
// covers a stopped launcher and a silent network partition.
const heartbeatInterval = 5 * time.Second

// Heartbeat sends a Ping on c every heartbeatInterval until stopped or
// the connection fails: the protocol's own sign of life, whatever the
// transport under it. A host behind a relay of the agent tree (rwc its
// stream, Relayed) gets its pings from its relay instead, at the same
// interval: the launcher then sends k pings per interval, not N.
func Heartbeat(c *wire.Conn, rwc io.ReadWriteCloser) (stop func()) {
	if Relayed(rwc) {
		return func() {}
	}
	return every(heartbeatInterval, func(<-chan struct{}) bool { return c.Send(wire.KindPing, nil) == nil })
}

// Keepalive closes c when it stops answering keepalive requests, after
// calling silent (which may be nil); the returned function stops it and
// waits for its goroutines.
func Keepalive(c ssh.Conn, silent func()) (stop func()) {
	return keepaliveEvery(c, defaultKeepalive(), silent)
}

// keepaliveEvery is Keepalive with k's timing.
func keepaliveEvery(c ssh.Conn, k keepalive, silent func()) (stop func()) {
	return every(k.Interval, func(quit <-chan struct{}) bool {
		reply := make(chan error, 1)
		var req sync.WaitGroup
		req.Go(func() {
			_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		})
		select {
		case err := <-reply:
			return err == nil
		case <-time.After(k.Timeout):
			if silent != nil {
				silent()
			}
			c.Close() // unblocks the request; the job sees the session end
		case <-quit:
			c.Close()
		}
		req.Wait()
		return false
	})
}

// every calls tick every interval until tick returns false or the
// returned stop is called; tick sees quit close at stop. Ticks never
// overlap: the next is scheduled when one returns. No goroutine waits
// between ticks (each runs in its own, from a timer), since the launcher
// keeps two of these per host. stop waits for a tick under way and may
// be called more than once.
func every(interval time.Duration, tick func(quit <-chan struct{}) bool) (stop func()) {
	quit := make(chan struct{})
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
		running sync.WaitGroup // the scheduled or running tick
	)
	var run func()
	run = func() {
		defer running.Done()
		if !tick(quit) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			running.Add(1)
			t.Reset(interval)
		}
	}
	mu.Lock()
	running.Add(1)
	t = time.AfterFunc(interval, run)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			if t.Stop() {
				running.Done() // it will not run
			}
			mu.Unlock()
			close(quit)
			running.Wait()
		})
	}
}
