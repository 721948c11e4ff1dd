package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
)

// SSH connections to agents, shared by the agent and srun transports: the
// dial and handshake (connect), the gangway subsystem on one session
// channel (openSubsystem), and what a failed connection means (classify).

// handshakeTimeout bounds an SSH handshake with an agent, unless the
// host's ConnectTimeout is longer (handshakeBound).
const handshakeTimeout = 20 * time.Second

// handshakeBound is how long an SSH handshake with an agent may take,
// authentication included, given the host's ConnectTimeout (0: none):
// handshakeTimeout, or ConnectTimeout where the user asked for longer.
// OpenSSH bounds its connection and banner exchange by ConnectTimeout,
// and a user who raises it for a loaded cluster means the whole login
// (the agent's --login-grace-time bounds it on the other side).
func handshakeBound(connectTimeout time.Duration) time.Duration {
	return max(handshakeTimeout, connectTimeout)
}

// errNoSubsystem is a server's refusal of the subsystem request.
var errNoSubsystem = errors.New("subsystem request refused")

// openSubsystem opens a session channel on a new connection and starts
// the gangway subsystem on it, with keepalives. What the server may send
// unasked (global requests, channel opens, requests on the channel) is
// refused by one goroutine, as ssh.NewClient's handlers and
// ssh.DiscardRequests would in four: at a thousand hosts every goroutine
// per connection is a thousand stacks. It closes conn on failure; the
// error says whether opening the channel failed or the subsystem was
// refused (errNoSubsystem).
func openSubsystem(conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, ka keepalive) (*chanConn, error) {
	inc := make(chan (<-chan *ssh.Request), 1)
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		refuseIncoming(chans, reqs, inc)
	}()
	ch, in, err := conn.OpenChannel("session", nil)
	if err != nil {
		close(inc)
		conn.Close()
		<-refused
		return nil, fmt.Errorf("open session: %w", err)
	}
	inc <- in
	close(inc)
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil || !ok {
		err = errors.Join(errNoSubsystem, err)
		ch.Close()
		conn.Close()
		<-refused
		return nil, err
	}
	cc := &chanConn{Channel: ch, client: conn, refused: refused, silence: ka.Timeout, interval: ka.Interval}
	cc.stopKeepalive = keepaliveEvery(conn, ka, cc.silent)
	return cc, nil
}

// refuseIncoming answers everything the server sends unasked with a
// refusal until the connection ends: channel opens, global requests, and
// requests on the session channel, which arrives on inc once open (inc
// closes without one when opening failed).
func refuseIncoming(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, inc <-chan (<-chan *ssh.Request)) {
	var in <-chan *ssh.Request
	for chans != nil || reqs != nil || in != nil || inc != nil {
		select {
		case nc, ok := <-chans:
			if !ok {
				chans = nil
				continue
			}
			_ = nc.Reject(ssh.UnknownChannelType, fmt.Sprintf("unknown channel type: %v", nc.ChannelType()))
		case r, ok := <-reqs:
			if !ok {
				reqs = nil
				continue
			}
			_ = r.Reply(false, nil)
		case r, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		case c, ok := <-inc:
			inc = nil
			if ok {
				in = c
			}
		}
	}
}

// connect dials addr (through dial when not nil, else over TCP within
// timeout when not 0) and runs the SSH client handshake with the config
// that config makes for the connection. A peer that accepts and never
// answers must not hold the launcher: the whole handshake,
// authentication included, has handshakeBound(timeout), and the connection is
// closed if ctx ends first. Errors: a failed TCP dial as classify words
// it, dial's as it returns them, ctx's, or the handshake's as "ADDR: ssh
// handshake failed: ..." (a *handshakeError, wrapping what the config's
// callbacks returned).
func connect(ctx context.Context, addr string, timeout time.Duration, dial func(context.Context) (net.Conn, error), config func(net.Conn) *ssh.ClientConfig) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, net.Addr, error) {
	var c net.Conn
	var err error
	if dial != nil {
		c, err = dial(ctx)
	} else {
		nd := net.Dialer{Timeout: timeout}
		if c, err = nd.DialContext(ctx, "tcp", addr); err != nil {
			err = classify(addr, err)
		}
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	// A tunnelled connection (an SSH channel) has no deadlines: a timer
	// closes it instead.
	var timer *time.Timer
	bound := handshakeBound(timeout)
	if c.SetDeadline(time.Now().Add(bound)) != nil {
		timer = time.AfterFunc(bound, func() { c.Close() })
	}
	cc, chans, reqs, err := ssh.NewClientConn(c, addr, config(c))
	_ = c.SetDeadline(time.Time{})
	if timer != nil && !timer.Stop() && err == nil {
		err = fmt.Errorf("no answer within %v", bound)
		cc.Close()
		cc = nil
	}
	if !stop() {
		if cc != nil {
			cc.Close()
		}
		c.Close()
		return nil, nil, nil, nil, ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, nil, &handshakeError{addr: addr, err: err}
	}
	return cc, chans, reqs, c.RemoteAddr(), nil
}

// handshakeError is a failed SSH handshake with addr: "ADDR: ssh
// handshake failed: WHY", WHY as wire.HandshakeWhy words it (as a relay
// words its own logins' failures). It unwraps to
// x/crypto/ssh's error, and through it to what the config's callbacks
// returned.
type handshakeError struct {
	addr string
	err  error
}

func (e *handshakeError) Error() string {
	return e.addr + ": ssh handshake failed: " + wire.HandshakeWhy(e.err)
}

func (e *handshakeError) Unwrap() error { return e.err }

// classify words a failed TCP connection to addr for a user: the address
// always, what it means, and whether retrying can help (a name that does
// not resolve cannot: it fails at once; nothing listening, no route and a
// failed lookup are ErrUnreachable).
func classify(addr string, err error) error {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return dialError(addr, wire.DialNoSuchHost, dns.Name, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return dialError(addr, wire.DialRefused, "", err)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return dialError(addr, wire.DialNoRoute, "", err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return dialError(addr, wire.DialTimeout, "", err)
	case errors.As(err, &dns):
		return dialError(addr, wire.DialDNS, dns.Name, errors.New(dns.Err))
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	return fmt.Errorf("%s: %w", addr, err)
}

// dialError words a failed dial of addr by why (wire.Linked.Dial's
// values): the launcher's own dials and its relays' are worded alike.
func dialError(addr, why, name string, err error) error {
	switch why {
	case wire.DialNoSuchHost:
		return Permanent(&noSuchHostError{Addr: addr, Name: name})
	case wire.DialRefused:
		return Unreachable(fmt.Errorf("%s: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)", addr))
	case wire.DialNoRoute:
		return Unreachable(fmt.Errorf("%s: no route to host (host down, or a firewall drops the port)", addr))
	case wire.DialTimeout:
		return noAnswerError{fmt.Errorf("%s: no answer (host down, or a firewall drops the port)", addr)}
	case wire.DialDNS:
		return Unreachable(fmt.Errorf("%s: cannot resolve %q: %v", addr, name, err))
	}
	return fmt.Errorf("%s: %w", addr, err)
}

// noSuchHostError is a host name that does not resolve (NXDOMAIN).
type noSuchHostError struct{ Addr, Name string }

func (e *noSuchHostError) Error() string {
	return fmt.Sprintf("%s: no such host (%q does not resolve)", e.Addr, e.Name)
}

// chanConn closes the SSH client with the channel, and says so when it
// was the keepalives that ended it.
type chanConn struct {
	ssh.Channel
	client        ssh.Conn
	stopKeepalive func()
	refused       <-chan struct{} // closed when refuseIncoming has returned; nil: none runs
	wasSilent     atomic.Bool
	silence       time.Duration // the keepalives' bound
	interval      time.Duration // the keepalives' interval
}

// errSilent is why a session ends when its agent stopped answering
// keepalives.
var errSilent = errors.New("no answer to SSH keepalives")

// SilentError is a read's error once the keepalives ended the session;
// it is errSilent, with how long the agent was silent.
type SilentError struct{ After time.Duration }

func (e SilentError) Error() string {
	return fmt.Sprintf("%v for %v (host hung, stopped or cut off)", errSilent, e.After)
}

func (e SilentError) Unwrap() error { return errSilent }

func (c *chanConn) silent() { c.wasSilent.Store(true) }

// stallBound is past what the keepalives can take to find the host
// silent (wire.StallBound).
func (c *chanConn) stallBound() time.Duration {
	return wire.StallBound(StallTimeout, c.interval, c.silence)
}

func (c *chanConn) Read(b []byte) (int, error) {
	n, err := c.Channel.Read(b)
	if err != nil && c.wasSilent.Load() {
		err = SilentError{After: c.silence}
	}
	return n, err
}

func (c *chanConn) Close() error {
	c.Channel.Close()
	err := c.client.Close()
	c.stopKeepalive()
	if c.refused != nil {
		<-c.refused // the connection has ended, so its channels have closed
	}
	return err
}
