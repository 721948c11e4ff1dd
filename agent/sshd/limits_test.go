package sshd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

// failingListener fails its Accepts while fail is above zero, as a
// listener out of file descriptors does.
type failingListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsBackOff: accept errors (too many open files) do not end
// Serve: it backs off, logs once per episode, and serves the next
// connection.
func TestAcceptErrorsBackOff(t *testing.T) {
	t.Parallel()
	keys, err := sshtest.GenKeys(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &failingListener{Listener: tl}
	l.fail.Store(8)
	srv := &sshd.Server{Log: log, HostKey: keys.HostSigner, AuthorizedKeys: keys.AuthorizedKeys}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	h := &agenttest.Host{Addr: "127.0.0.1", Port: tl.Addr().(*net.TCPAddr).Port, HostPub: keys.HostSigner.PublicKey()}
	login := func() {
		t.Helper()
		t0 := time.Now()
		cl, err := dialAgent(h, keys.ClientSigner)
		if err != nil {
			t.Fatalf("login after accept errors: %v", err)
		}
		cl.Close()
		t.Logf("login took %v", time.Since(t0).Round(time.Millisecond))
	}
	login()
	// A second episode: it begins after the Accept already waiting
	// returns (the next login), and the login after that waits it out.
	l.fail.Store(5)
	login()
	login()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if n := logs.FilterMessage("accept failed; retrying with backoff").Len(); n != 2 {
		t.Errorf("%d accept-failure log lines for 2 episodes of 8 and 5 failures, want 2", n)
	}
}

// banner reports whether the agent greets a fresh connection (it was
// admitted) or closes it without a word (refused before the handshake).
func banner(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(agenttest.Deadline))
	b := make([]byte, 64)
	n, err := c.Read(b)
	switch {
	case n > 0 && strings.HasPrefix(string(b[:n]), "SSH-2.0-"):
		return true
	case n == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return false
	}
	t.Fatalf("read %q, %v: want a banner or EOF", b[:n], err)
	return false
}

func dialFrom(t *testing.T, src, dst string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: agenttest.Deadline}
	c, err := d.Dial("tcp", dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// admitted dials from src until the agent greets the connection: a slot
// freed by a finished handshake frees a moment after the client sees it
// finish.
func admitted(t *testing.T, src, dst string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(agenttest.Deadline)
	for {
		c := dialFrom(t, src, dst)
		if banner(t, c) {
			return c
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection from %s admitted within %v", src, agenttest.Deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// speak sends c's SSH version line (after reading the agent's banner,
// unless read is set: it was) and waits for the agent's next message,
// which proves the line was read: the connection is then in its
// handshake, and stalls there.
func speak(t *testing.T, c net.Conn, read bool) {
	t.Helper()
	if _, err := c.Write([]byte("SSH-2.0-stalling\r\n")); err != nil {
		t.Fatal(err)
	}
	if !read && !banner(t, c) {
		t.Fatal("a connection that spoke was refused")
	}
	_ = c.SetReadDeadline(time.Now().Add(agenttest.Deadline))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("no key exchange after the version line: %v", err)
	}
}

// hungUp reports whether the agent closes c (after whatever it sent)
// within the deadline.
func hungUp(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(agenttest.Deadline))
	_, err := io.Copy(io.Discard, c)
	return err == nil || errors.Is(err, syscall.ECONNRESET)
}

// TestMaxStartups: at the caps on unauthenticated connections (hard caps
// here, 4 in all and 2 per source), a new connection closes the oldest
// one whose client has sent nothing (from its own source, for
// the per-source cap), so idle sockets keep no one out, a login
// included; when only connections that spoke are left, it is closed at
// once, before the banner. A hang-up frees its slot.
func TestMaxStartups(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) {
		s.MaxStartups, s.MaxStartupsPerSource = sshd.StartupCap{Start: 4, Rate: 100, Full: 4}, sshd.StartupCap{Start: 2, Rate: 100, Full: 2}
		// Connections hold their slots throughout.
		s.VersionTimeout, s.LoginGraceTime = 2*agenttest.Deadline, 2*agenttest.Deadline
	}))
	h := c.Hosts[0]
	base := strings.TrimSuffix(h.Addr, ".1")
	src := func(i int) string { return fmt.Sprintf("%s.%d", base, 100+i) }

	a1, a2 := dialFrom(t, src(1), h.HostPort()), dialFrom(t, src(1), h.HostPort())
	speak(t, a1, false)
	speak(t, a2, false)
	if banner(t, dialFrom(t, src(1), h.HostPort())) {
		t.Fatal("third connection from a source whose two connections spoke admitted, per-source cap 2")
	}
	// Silent ones from another source: the third closes the first.
	s1, s2 := dialFrom(t, src(2), h.HostPort()), dialFrom(t, src(2), h.HostPort())
	if !banner(t, s1) || !banner(t, s2) {
		t.Fatal("first two connections from a second source refused")
	}
	s3 := dialFrom(t, src(2), h.HostPort())
	if !banner(t, s3) || !hungUp(t, s1) {
		t.Fatal("a third silent connection from one source did not take the first one's place")
	}
	// At the total cap (2 that spoke, 2 silent), a login takes s2's place.
	cl, err := dialAgent(h, c.Keys.ClientSigner)
	if err != nil {
		t.Fatalf("login at the total cap with silent connections: %v", err)
	}
	cl.Close()
	if !hungUp(t, s2) {
		t.Fatal("the login did not close the oldest silent connection")
	}
	// Fill the total cap with connections that spoke: s3 goes too (for
	// b1, when the agent still counted the login's slot, else for b2).
	b1 := admitted(t, src(3), h.HostPort())
	speak(t, b1, true)
	b2 := admitted(t, src(4), h.HostPort())
	if !hungUp(t, s3) {
		t.Fatal("the last silent connection kept its place")
	}
	speak(t, b2, true)
	if banner(t, dialFrom(t, src(5), h.HostPort())) {
		t.Fatal("a fifth connection admitted with four that spoke, total cap 4")
	}
	// A hang-up ends that startup: its slot frees.
	a1.Close()
	admitted(t, src(5), h.HostPort())
}

// TestMaxSessions: a connection may hold MaxSessions open sessions; more
// are refused with a reason, and a closed session frees its place.
func TestMaxSessions(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) { s.MaxSessions = 3 }))
	cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var open []*ssh.Session
	for range 3 {
		s, err := cl.NewSession()
		if err != nil {
			t.Fatalf("session %d of 3: %v", len(open)+1, err)
		}
		open = append(open, s)
	}
	_, err = cl.NewSession()
	var oe *ssh.OpenChannelError
	if !errors.As(err, &oe) || oe.Reason != ssh.ResourceShortage || !strings.Contains(oe.Message, "too many sessions") {
		t.Fatalf("fourth session: %v, want a resource-shortage refusal", err)
	}
	t.Logf("fourth session: %v", err)
	open[0].Close()
	deadline := time.Now().Add(agenttest.Deadline)
	for {
		s, err := cl.NewSession()
		if err == nil {
			out, err := s.Output("echo still-serving")
			if err != nil || string(out) != "still-serving\n" {
				t.Fatalf("command in the freed session: %q %v", out, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session after closing one: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEnvRequestsCapped: a session takes 128 env requests, as sshd does,
// and refuses more; the command still runs with the ones it took.
func TestEnvRequestsCapped(t *testing.T) {
	t.Parallel()
	c := agenttest.StartLocal(t, 1, agenttest.WithServer(func(_ int, s *sshd.Server) { s.AcceptEnv = []string{"V*"} }))
	cl, err := dialAgent(c.Hosts[0], c.Keys.ClientSigner)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 128 {
		if err := s.Setenv(fmt.Sprintf("V%d", i), "x"); err != nil {
			t.Fatalf("env request %d: %v", i+1, err)
		}
	}
	if err := s.Setenv("V128", "x"); err == nil {
		t.Fatal("env request 129 accepted")
	}
	out, err := s.Output(`echo "$V127|$V128"`)
	if err != nil || string(out) != "x|\n" {
		t.Fatalf("command: %q %v, want V127 set and V128 not", out, err)
	}
}
