package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/crypto/ssh"
)

// Jump hosts (ProxyJump in the ssh configuration): the launcher logs in
// to each jump host, a stock sshd, with the same client stack as to the
// agents (known_hosts per hop, the hop's own User, Port, IdentityFile,
// the ssh-agent's keys), and opens a direct-tcpip channel from it to the
// next hop, as ssh -J does. Every host behind one jump host shares one
// connection to it (a thousand agents behind one bastion are one login
// there, not a thousand, which sshd's MaxStartups would refuse); the
// connection closes with the last stream through it.

// jumpDefaultPort is a jump host's port when nothing names one: it is a
// stock sshd, not an agent.
const jumpDefaultPort = 22

// route is the chain of jump hosts to dial, first first, to reach hc:
// its ProxyJump hosts, each with its own configuration, and before the
// first one that one's own ProxyJump chain (as ssh -J runs ssh for the
// first hop, which reads its configuration; the later hops' own
// ProxyJump is not read). depth bounds a chain of chains.
func (d *AgentDialer) route(hc hostConfig, depth int) ([]hostConfig, error) {
	if len(hc.Jumps) == 0 {
		return nil, nil
	}
	if depth >= maxJumps {
		return nil, fmt.Errorf("ssh config: ProxyJump chains more than %d jump hosts deep from %s (a loop? give the jump host \"ProxyJump none\")", maxJumps, hc.Alias)
	}
	var hops []hostConfig
	for i, j := range hc.Jumps {
		jc, err := d.sshCfg.resolve(j.Host, hostDefaults{User: j.User, Port: j.Port, DefUser: d.user, DefPort: jumpDefaultPort})
		if err != nil {
			return nil, err
		}
		if i == 0 {
			before, err := d.route(jc, depth+1)
			if err != nil {
				return nil, err
			}
			hops = append(hops, before...)
		}
		jc.Jumps = nil
		hops = append(hops, jc)
	}
	if len(hops) > maxJumps {
		return nil, fmt.Errorf("ssh config: %d jump hosts to reach %s, at most %d", len(hops), hc.Alias, maxJumps)
	}
	return hops, nil
}

// errJumpRefused marks a jump host that refused the TCP connection
// (refusedError).
var errJumpRefused = errors.New("refused")

type refusedError struct{ error }

func (e refusedError) Unwrap() error        { return e.error }
func (e refusedError) Is(target error) bool { return target == errJumpRefused }

// jumpError names the jump host a failure happened at.
type jumpError struct {
	Jump string // the jump host as configured, and its address
	Err  error
}

func (e *jumpError) Error() string { return "jump host " + e.Jump + ": " + e.Err.Error() }
func (e *jumpError) Unwrap() error { return e.Err }

// hopName is how errors name a jump host: its alias, and the address
// when that differs.
func hopName(h hostConfig) string {
	if h.Alias == h.HostName {
		return h.Addr()
	}
	return fmt.Sprintf("%s (%s)", h.Alias, h.Addr())
}

// jumpPool holds the open connections to jump hosts, one per chain.
type jumpPool struct {
	mu    sync.Mutex
	conns map[string]*jumpConn
}

// jumpConn is a logged-in connection to the last host of a chain.
type jumpConn struct {
	key    string
	name   string
	ready  chan struct{} // closed when client or err is set
	client *ssh.Client
	err    error
	done   chan struct{} // closed when the connection has ended
	refs   int           // guarded by jumpPool.mu
}

// chainKey identifies a chain of hops.
func chainKey(hops []hostConfig) string {
	var b strings.Builder
	for _, h := range hops {
		fmt.Fprintf(&b, "%s@%s>", h.User, h.Addr())
	}
	return b.String()
}

// dialThrough opens a connection to addr from the last of hops, logging
// in along the chain (or reusing a connection to it). Closing the
// connection releases the chain.
func (p *jumpPool) dialThrough(ctx context.Context, d *AgentDialer, hops []hostConfig, addr string) (net.Conn, error) {
	jc, err := p.acquire(ctx, d, hops)
	if err != nil {
		return nil, err
	}
	c, err := jc.client.DialContext(ctx, "tcp", addr)
	if err != nil {
		p.release(jc)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// "connect failed (Connection refused)": the agent is not up
		// yet, or not on this port; retried.
		return nil, fmt.Errorf("%s: through jump host %s: %w", addr, jc.name, err)
	}
	return &releasingConn{Conn: c, release: func() { p.release(jc) }}, nil
}

// acquire returns the connection to the last of hops, opening it (and
// the chain before it) unless one is open or being opened, and takes a
// reference on it.
func (p *jumpPool) acquire(ctx context.Context, d *AgentDialer, hops []hostConfig) (*jumpConn, error) {
	key := chainKey(hops)
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[string]*jumpConn{}
	}
	if jc := p.conns[key]; jc != nil {
		jc.refs++
		p.mu.Unlock()
		select {
		case <-jc.ready:
		case <-ctx.Done():
			p.release(jc)
			return nil, ctx.Err()
		}
		if jc.err != nil {
			p.release(jc)
			return nil, jc.err
		}
		return jc, nil
	}
	last := hops[len(hops)-1]
	jc := &jumpConn{key: key, name: hopName(last), ready: make(chan struct{}), done: make(chan struct{}), refs: 1}
	p.conns[key] = jc
	p.mu.Unlock()
	jc.client, jc.err = p.login(ctx, d, hops)
	if jc.err != nil {
		p.forget(jc)
		close(jc.done)
	} else {
		go func() { // owned by jc: release waits for done after closing the client
			defer close(jc.done)
			_ = jc.client.Wait()
			p.forget(jc) // a lost connection is not handed out again
		}()
	}
	close(jc.ready)
	if jc.err != nil {
		p.release(jc)
		return nil, jc.err
	}
	return jc, nil
}

// login opens the SSH connection to the last of hops: over TCP for the
// first, else through the chain before it.
func (p *jumpPool) login(ctx context.Context, d *AgentDialer, hops []hostConfig) (*ssh.Client, error) {
	last := hops[len(hops)-1]
	dial := func(ctx context.Context) (net.Conn, error) {
		nd := net.Dialer{Timeout: last.ConnectTimeout}
		c, err := nd.DialContext(ctx, "tcp", last.Addr())
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, refusedError{fmt.Errorf("%s: connection refused (is its sshd running, and on this port? Port in the ssh config, or host:port in ProxyJump)", last.Addr())}
		}
		if err != nil {
			return nil, classify(last.Addr(), err)
		}
		return c, nil
	}
	if len(hops) > 1 {
		dial = func(ctx context.Context) (net.Conn, error) {
			return p.dialThrough(ctx, d, hops[:len(hops)-1], last.Addr())
		}
	}
	cc, chans, reqs, _, err := d.sshHandshake(ctx, last, dial, "jump host")
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var je *jumpError
		if errors.As(err, &je) {
			return nil, err // an earlier hop's
		}
		err = &jumpError{Jump: hopName(last), Err: err}
		if errors.Is(err, errJumpRefused) || errors.Is(err, ErrPermanent) {
			// A jump host is a stock sshd that is up or not: waiting
			// for it, as for an agent that starts late, helps nobody.
			return nil, Permanent(err)
		}
		return nil, err
	}
	return ssh.NewClient(cc, chans, reqs), nil
}

// forget removes jc from the pool, so the next dial opens a new one.
func (p *jumpPool) forget(jc *jumpConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[jc.key] == jc {
		delete(p.conns, jc.key)
	}
}

// release drops a reference on jc; the last one closes its connection.
func (p *jumpPool) release(jc *jumpConn) {
	p.mu.Lock()
	jc.refs--
	last := jc.refs == 0
	if last && p.conns[jc.key] == jc {
		delete(p.conns, jc.key)
	}
	p.mu.Unlock()
	if !last {
		return
	}
	if jc.client != nil {
		jc.client.Close() // closes the tunnel under it, releasing the chain before
	}
	<-jc.done
}

// releasingConn runs release once when it is closed.
type releasingConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *releasingConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
