package transport

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/hostfile"
)

// TestEvery: ticks repeat until one returns false; stop ends them, waits
// for a tick under way (which sees quit close), and may be called twice.
func TestEvery(t *testing.T) {
	var n atomic.Int32
	done := make(chan struct{})
	stop := every(time.Millisecond, func(<-chan struct{}) bool {
		if n.Add(1) == 3 {
			close(done)
			return false
		}
		return true
	})
	<-done
	stop()
	stop()
	if got := n.Load(); got != 3 {
		t.Errorf("%d ticks after one returned false at the third", got)
	}

	started := make(chan struct{})
	var sawQuit atomic.Bool
	stop = every(time.Millisecond, func(quit <-chan struct{}) bool {
		close(started)
		<-quit
		sawQuit.Store(true)
		return true
	})
	<-started
	stop()
	if !sawQuit.Load() {
		t.Error("stop returned before the tick under way ended")
	}

	stop = every(time.Hour, func(<-chan struct{}) bool { t.Error("ticked"); return true })
	stop()
	stop()
}

// TestKeepaliveFor: ssh's ServerAliveInterval and ServerAliveCountMax
// set a host's keepalive timing, with ssh's count of 3 when only the
// interval is given; unset or 0, the launcher's own timing.
func TestKeepaliveFor(t *testing.T) {
	def := keepalive{KeepaliveInterval, KeepaliveTimeout}
	for _, tc := range []struct {
		interval time.Duration
		count    int
		want     keepalive
	}{
		{0, 0, def},
		{0, 9, def},
		{10 * time.Second, 0, keepalive{10 * time.Second, 30 * time.Second}},
		{10 * time.Second, 9, keepalive{10 * time.Second, 90 * time.Second}},
		{time.Second, 1, keepalive{time.Second, time.Second}},
		{time.Minute, 3, keepalive{time.Minute, 3 * time.Minute}},
		{time.Hour, 1000, keepalive{time.Hour, time.Hour}}, // at most an hour of silence
	} {
		if got := keepaliveFor(hostConfig{ServerAliveInterval: tc.interval, ServerAliveCountMax: tc.count}); got != tc.want {
			t.Errorf("ServerAliveInterval %v, ServerAliveCountMax %d: %+v, want %+v", tc.interval, tc.count, got, tc.want)
		}
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
