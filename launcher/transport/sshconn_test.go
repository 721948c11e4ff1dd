package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/hostfile"
)

// TestClassifyRealErrors dials a port nobody listens on and a name that
// never resolves, and checks what the user reads and whether it is retried.
func TestClassifyRealErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var d net.Dialer
	_, err = d.DialContext(t.Context(), "tcp", addr)
	got := classify(addr, err)
	if !strings.HasPrefix(got.Error(), addr+": connection refused (is the agent running, and on this port?") || errors.Is(got, ErrPermanent) || !errors.Is(got, ErrUnreachable) {
		t.Errorf("refused: %v (permanent %v, unreachable %v)", got, errors.Is(got, ErrPermanent), errors.Is(got, ErrUnreachable))
	}
	got = classify("h:1", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH})
	if got.Error() != "h:1: no route to host (host down, or a firewall drops the port)" || !errors.Is(got, ErrUnreachable) {
		t.Errorf("no route: %v (unreachable %v)", got, errors.Is(got, ErrUnreachable))
	}
	got = classify("h:1", &net.DNSError{Err: "server misbehaving", Name: "h", IsTemporary: true})
	if got.Error() != `h:1: cannot resolve "h": server misbehaving` || !errors.Is(got, ErrUnreachable) || errors.Is(got, ErrPermanent) {
		t.Errorf("lookup failed: %v (unreachable %v)", got, errors.Is(got, ErrUnreachable))
	}
	_, err = d.DialContext(t.Context(), "tcp", "gw-no-such.invalid:22122")
	got = classify("gw-no-such.invalid:22122", err)
	if got.Error() != `gw-no-such.invalid:22122: no such host ("gw-no-such.invalid" does not resolve)` || !errors.Is(got, ErrPermanent) {
		t.Errorf("no such host: %v (permanent %v)", got, errors.Is(got, ErrPermanent))
	}
	got = classify("h:1", context.DeadlineExceeded)
	if !strings.HasPrefix(got.Error(), "h:1: no answer") || errors.Is(got, ErrPermanent) || errors.Is(got, ErrUnreachable) {
		t.Errorf("timeout: %v", got)
	}
}

// TestHandshakeErrorWording: a peer that accepts and hangs up, and a
// server that refuses the client's key, are each one "ADDR: ssh handshake
// failed: WHY" with no "ssh:" or "handshake failed" said twice, and the
// error still unwraps to x/crypto/ssh's and the callback's.
func TestHandshakeErrorWording(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	addr := l.Addr().String()
	why := errors.New("host key refused by the test")
	cfg := func(net.Conn) *ssh.ClientConfig {
		return &ssh.ClientConfig{User: "u", HostKeyCallback: func(string, net.Addr, ssh.PublicKey) error { return why }}
	}
	_, _, _, _, err = connect(t.Context(), addr, 0, nil, cfg)
	if err == nil || !strings.HasPrefix(err.Error(), addr+": ssh handshake failed: the agent closed the connection during the login (") || strings.Count(err.Error(), "handshake") != 1 || strings.Contains(err.Error(), "ssh: ") {
		t.Errorf("peer hung up: %v", err)
	}
	// The peer closes at once: the client's read sees the end (io.EOF),
	// or a reset when its own version line reached a socket already
	// closed (an idle machine is quick enough for that).
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("peer hung up: %v does not unwrap to io.EOF or ECONNRESET", err)
	}
	for _, e := range []error{
		&handshakeError{addr: "h:1", err: fmt.Errorf("ssh: handshake failed: %w", why)},
		&handshakeError{addr: "h:1", err: fmt.Errorf("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain")},
	} {
		if strings.Count(e.Error(), "handshake") != 1 || strings.Contains(e.Error(), "ssh: ") || !strings.HasPrefix(e.Error(), "h:1: ssh handshake failed: ") {
			t.Errorf("%q", e.Error())
		}
	}
	if e := (&handshakeError{addr: "h:1", err: fmt.Errorf("ssh: handshake failed: %w", why)}); !errors.Is(e, why) || e.Error() != "h:1: ssh handshake failed: host key refused by the test" {
		t.Errorf("%q (is %v)", e.Error(), errors.Is(e, why))
	}
}

// deadlineConn records the first deadline set on it and fails every read
// and write, so a handshake over it ends at once.
type deadlineConn struct {
	net.Conn
	first time.Time
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	if c.first.IsZero() {
		c.first = t
	}
	return nil
}
func (c *deadlineConn) Read([]byte) (int, error)  { return 0, io.ErrClosedPipe }
func (c *deadlineConn) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
func (c *deadlineConn) Close() error              { return nil }
func (c *deadlineConn) RemoteAddr() net.Addr      { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestHandshakeFollowsConnectTimeout: a host's ConnectTimeout longer
// than the launcher's own 20 s handshake bound lengthens it, for the
// launcher's login and for a relay's (the link's timeout); a shorter one
// bounds the TCP connection alone.
func TestHandshakeFollowsConnectTimeout(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config")
	text := "Host slow\n    HostName 127.0.0.1\n    ConnectTimeout 90\n\nHost quick\n    HostName 127.0.0.1\n    ConnectTimeout 3\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := NewAgentDialer(Options{Kind: Agent, SSHConfig: cfg, Port: 22122, KnownHosts: filepath.Join(t.TempDir(), "known_hosts")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want time.Duration
	}{{"slow", 90 * time.Second}, {"quick", handshakeTimeout}, {"plain", handshakeTimeout}} {
		c, err := d.child(t.Context(), hostfile.Host{Name: tc.host})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.handshake(); got != tc.want {
			t.Errorf("%s: a relay's login bounded by %v, want %v", tc.host, got, tc.want)
		}
		hc, err := d.target(hostfile.Host{Name: tc.host})
		if err != nil {
			t.Fatal(err)
		}
		conn := &deadlineConn{}
		t0 := time.Now()
		_, _, _, _, err = connect(t.Context(), "127.0.0.1:22122", hc.ConnectTimeout, func(context.Context) (net.Conn, error) { return conn, nil },
			func(net.Conn) *ssh.ClientConfig {
				return &ssh.ClientConfig{HostKeyCallback: ssh.InsecureIgnoreHostKey()}
			})
		if err == nil {
			t.Fatalf("%s: a handshake over a dead connection succeeded", tc.host)
		}
		if got := conn.first.Sub(t0); got < tc.want || got > tc.want+time.Minute {
			t.Errorf("%s: the launcher's login bounded by %v, want %v", tc.host, got, tc.want)
		}
	}
}
