package sshd_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest"
	"github.com/gangway-hpc/gangway/agent/sshd"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// srunAgent is one agent in srun mode, served in this process on
// 127.0.0.1 with an ephemeral port and host key.
type srunAgent struct {
	ready    wire.SrunReady
	hostKey  ssh.PublicKey
	launcher ssh.Signer
	done     chan error
}

func startSrun(t *testing.T, ctx context.Context, wait time.Duration) *srunAgent {
	t.Helper()
	return startSrunLimited(t, ctx, wait, sshd.StartupLimits{})
}

// startSrunLimited is startSrun with caps on unauthenticated connections.
func startSrunLimited(t *testing.T, ctx context.Context, wait time.Duration, lim sshd.StartupLimits) *srunAgent {
	t.Helper()
	launcher, err := sshd.NewEphemeralHostKey() // any ed25519 signer will do
	if err != nil {
		t.Fatal(err)
	}
	key, err := sshd.ParseLauncherKey(string(ssh.MarshalAuthorizedKey(launcher.PublicKey())))
	if err != nil {
		t.Fatal(err)
	}
	hk, err := sshd.NewEphemeralHostKey()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := sshd.SrunReadyLine("cn1", l, hk, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{Name: "cn1", Version: "test", Log: zaptest.NewLogger(t)}
	s := &srunAgent{ready: r, hostKey: hk.PublicKey(), launcher: launcher, done: make(chan error, 1)}
	go func() {
		s.done <- sshd.ServeSrun(ctx, sshd.SrunOptions{Log: a.Log, Session: a.ServeSession, Listener: l, HostKey: hk, Launcher: key, Wait: wait, SignalGrace: 200 * time.Millisecond, StartupLimits: lim})
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("ServeSrun still running 30s after the test")
		}
	})
	return s
}

// dial logs in with signer, checking the host key the readiness line gave.
func (s *srunAgent) dial(signer ssh.Signer) (*ssh.Client, error) {
	return ssh.Dial("tcp", s.ready.Addr, &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(s.hostKey), Timeout: 10 * time.Second,
	})
}

// subsystem opens a session channel and asks for the gangway subsystem.
func subsystem(t *testing.T, c *ssh.Client) (ssh.Channel, bool) {
	t.Helper()
	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil {
		t.Fatal(err)
	}
	return ch, ok
}

func (s *srunAgent) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("ServeSrun did not return within 30s")
		return nil
	}
}

// TestSrunOneSession: the readiness line names the listener and the host
// key; only the launcher's key logs in; exec is refused; the first
// gangway subsystem gets the session and a second one is refused; when
// the launcher closes the session the agent returns nil and stops
// listening.
func TestSrunOneSession(t *testing.T) {
	t.Parallel()
	s := startSrun(t, t.Context(), time.Minute)
	if !strings.HasPrefix(s.ready.Addr, "127.0.0.1:") || s.ready.Node != "cn1" || !strings.HasPrefix(s.ready.HostKey, "ssh-ed25519 ") {
		t.Fatalf("readiness line %q", s.ready)
	}
	if _, err := wire.ParseSrunReady(s.ready.String()); err != nil {
		t.Fatal(err)
	}
	other, _ := sshd.NewEphemeralHostKey()
	if c, err := s.dial(other); err == nil {
		c.Close()
		t.Fatal("a key other than the launcher's logged in")
	}
	// A bare TCP connection (a peer's preflight probe) claims nothing.
	if c, err := net.Dial("tcp", s.ready.Addr); err == nil {
		c.Close()
	}

	c, err := s.dial(s.launcher)
	if err != nil {
		t.Fatalf("launcher key refused: %v", err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Run("true"); err == nil {
		t.Error("exec accepted by an agent in srun mode")
	}
	ch, ok := subsystem(t, c)
	if !ok {
		t.Fatal("gangway subsystem refused")
	}
	if _, ok := subsystem(t, c); ok {
		t.Error("a second gangway session accepted")
	}
	conn := wire.NewConn(ch)
	if err := conn.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "j1", Host: "cn1"}); err != nil {
		t.Fatal(err)
	}
	m, err := conn.Recv()
	if err != nil || m.Kind != wire.KindFacts {
		t.Fatalf("after hello: %v %v", m.Kind, err)
	}
	var f wire.Facts
	if err := m.Decode(&f); err != nil || f.Name != "cn1" {
		t.Fatalf("facts %+v, %v", f, err)
	}
	conn.Close()
	if err := s.result(t); err != nil {
		t.Errorf("ServeSrun after the launcher closed: %v, want nil", err)
	}
	// Ours, not the port: once closed, the kernel may hand the port to
	// another test's listener at once (a dial then connects).
	if listeningHere(t, s.ready.Addr) {
		t.Error("still listening after the session")
	}
}

// listeningHere reports whether this process holds a listening TCP
// socket on addr's port: a LISTEN line of /proc/self/net/tcp{,6} whose
// inode is one of this process's descriptors.
func listeningHere(t *testing.T, addr string) bool {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			ours[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	want := fmt.Sprintf(":%04X", p)
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(line)
			if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" && ours[fields[9]] {
				return true
			}
		}
	}
	return false
}

// TestSrunStartupCaps: the srun listener caps unauthenticated
// connections as the agent's server does (here 2 at most, from any
// source): a silent connection makes room for a new one, two that spoke
// and stall keep a third out, and once one of them hangs up the
// launcher logs in and gets its session. A silent connection is closed
// at the version timeout.
func TestSrunStartupCaps(t *testing.T) {
	t.Parallel()
	two := sshd.StartupCap{Start: 2, Rate: 100, Full: 2}
	s := startSrunLimited(t, t.Context(), time.Minute, sshd.StartupLimits{MaxStartups: two, MaxStartupsPerSource: two,
		VersionTimeout: 2 * agenttest.Deadline, LoginGraceTime: 2 * agenttest.Deadline})
	s1, s2 := dialFrom(t, "127.0.0.1", s.ready.Addr), dialFrom(t, "127.0.0.1", s.ready.Addr)
	if !banner(t, s1) || !banner(t, s2) {
		t.Fatal("the first two connections refused")
	}
	s3 := dialFrom(t, "127.0.0.1", s.ready.Addr)
	if !banner(t, s3) || !hungUp(t, s1) {
		t.Fatal("a third silent connection did not take the first one's place")
	}
	speak(t, s2, true)
	speak(t, s3, true)
	if banner(t, dialFrom(t, "127.0.0.1", s.ready.Addr)) {
		t.Fatal("a connection admitted beside two that spoke, cap 2")
	}
	if c, err := s.dial(s.launcher); err == nil {
		c.Close()
		t.Fatal("the launcher logged in beside two stalled connections, cap 2")
	}
	s2.Close()
	var c *ssh.Client
	waitFor(t, func() bool {
		var err error
		c, err = s.dial(s.launcher)
		return err == nil
	})
	defer c.Close()
	s.oneSession(t, c)

	ctx, cancel := context.WithCancel(t.Context())
	quick := startSrunLimited(t, ctx, time.Minute, sshd.StartupLimits{VersionTimeout: 200 * time.Millisecond})
	t.Cleanup(cancel) // before startSrun's cleanup waits for it
	if c := dialFrom(t, "127.0.0.1", quick.ready.Addr); !banner(t, c) || !hungUp(t, c) {
		t.Fatal("a silent connection outlived the version timeout")
	}
}

// TestSrunNoLauncher: without a session within the wait the agent gives
// up with ErrNoLauncher; a signal before the session ends it at once.
func TestSrunNoLauncher(t *testing.T) {
	t.Parallel()
	s := startSrun(t, t.Context(), 200*time.Millisecond)
	if err := s.result(t); !errors.Is(err, sshd.ErrNoLauncher) {
		t.Errorf("got %v, want ErrNoLauncher", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	s = startSrun(t, ctx, time.Hour)
	cancel()
	if err := s.result(t); !errors.Is(err, sshd.ErrNoLauncher) || !strings.Contains(err.Error(), "signal") {
		t.Errorf("got %v, want ErrNoLauncher naming the signal", err)
	}
}

// TestSrunSignalGrace: a signal during the session ends it only after
// the grace, which lets the ranks' exits reach the launcher first.
func TestSrunSignalGrace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	s := startSrun(t, ctx, time.Minute)
	c, err := s.dial(s.launcher)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := hello(t, c)
	t0 := time.Now()
	cancel()
	_ = s.result(t)
	if took := time.Since(t0); took < 200*time.Millisecond {
		t.Errorf("session ended %v after the signal, before the 200ms grace", took)
	}
	if _, err := conn.Recv(); err == nil {
		t.Error("session still open after ServeSrun returned")
	}
}

func TestParseLauncherKey(t *testing.T) {
	k, _ := sshd.NewEphemeralHostKey()
	line := string(ssh.MarshalAuthorizedKey(k.PublicKey()))
	if got, err := sshd.ParseLauncherKey(line); err != nil || string(got.Marshal()) != string(k.PublicKey().Marshal()) {
		t.Errorf("ParseLauncherKey(%q) = %v, %v", line, got, err)
	}
	for _, tt := range []struct{ v, want string }{
		{"", "is not set"},
		{"ssh-ed25519 !!!", wire.SrunKeyEnv},
		{line + line, "more than one key"},
	} {
		if _, err := sshd.ParseLauncherKey(tt.v); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseLauncherKey(%q) = %v, want an error containing %q", tt.v, err, tt.want)
		}
	}
}

// TestSrunReadyLineRoute: the reported address is the local end of the
// route to the launcher.
func TestSrunReadyLineRoute(t *testing.T) {
	k, _ := sshd.NewEphemeralHostKey()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	r, err := sshd.SrunReadyLine("cn1", l, k, "127.0.0.5")
	if err != nil {
		t.Fatal(err)
	}
	if r.Addr != "127.0.0.1:"+port && r.Addr != "127.0.0.5:"+port {
		t.Errorf("address %q, want the loopback route's source with port %s", r.Addr, port)
	}
}

// TestSrunJobCert: an agent started by srun takes a relay's job
// certificate signed by the step's one-time key (the agent tree under
// Slurm), from a source it allows, and gets the gangway session; a job
// certificate another key signed, one for another source, and a plain
// certificate of the launcher's key are refused.
func TestSrunJobCert(t *testing.T) {
	t.Parallel()
	s := startSrun(t, t.Context(), time.Minute)
	other, _ := sshd.NewEphemeralHostKey()
	spec := func(sources ...string) jobcert.Spec {
		return jobcert.Spec{User: "root", JobID: "j1", Relay: "cn0", Sources: sources, Lifetime: time.Hour, Now: time.Now()}
	}
	certSigner := func(by ssh.Signer, sp jobcert.Spec) ssh.Signer {
		t.Helper()
		b, err := jobcert.New(rand.Reader, []ssh.Signer{by}, sp)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := b.Signers()
		if err != nil || len(ss) != 1 {
			t.Fatalf("signers %v, %v", ss, err)
		}
		return ss[0]
	}
	for _, tc := range []struct {
		name   string
		signer ssh.Signer
	}{
		{"signed by another key", certSigner(other, spec("127.0.0.1"))},
		{"for another source", certSigner(s.launcher, spec("198.18.0.1"))},
	} {
		if c, err := s.dial(tc.signer); err == nil {
			c.Close()
			t.Errorf("a job certificate %s logged in", tc.name)
		}
	}
	plain := &ssh.Certificate{Key: other.PublicKey(), CertType: ssh.UserCert, ValidPrincipals: []string{"root"}, ValidBefore: ssh.CertTimeInfinity}
	if err := plain.SignCert(rand.Reader, s.launcher); err != nil {
		t.Fatal(err)
	}
	ps, err := ssh.NewCertSigner(plain, other)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.dial(ps); err == nil {
		c.Close()
		t.Error("a certificate of the launcher's key that is no job certificate logged in")
	}

	c, err := s.dial(certSigner(s.launcher, spec("127.0.0.1")))
	if err != nil {
		t.Fatalf("the relay's job certificate refused: %v", err)
	}
	defer c.Close()
	s.oneSession(t, c)
}

// hello opens the gangway session on c, says Hello and gets the facts.
func hello(t *testing.T, c *ssh.Client) *wire.Conn {
	t.Helper()
	ch, ok := subsystem(t, c)
	if !ok {
		t.Fatal("gangway subsystem refused")
	}
	conn := wire.NewConn(ch)
	if err := conn.Send(wire.KindHello, wire.Hello{Version: wire.Version, JobID: "j1", Host: "cn1"}); err != nil {
		t.Fatal(err)
	}
	if m, err := conn.Recv(); err != nil || m.Kind != wire.KindFacts {
		t.Fatalf("after hello: %v %v", m.Kind, err)
	}
	return conn
}

// oneSession is hello on c, then the session closed: ServeSrun must then
// return nil.
func (s *srunAgent) oneSession(t *testing.T, c *ssh.Client) {
	t.Helper()
	hello(t, c).Close()
	if err := s.result(t); err != nil {
		t.Errorf("ServeSrun after the session: %v, want nil", err)
	}
}

// TestListeningHere: the check TestSrunOneSession ends with sees a
// listener of this process, and not one closed.
func TestListeningHere(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if !listeningHere(t, addr) {
		t.Errorf("%s: an open listener not seen", addr)
	}
	l.Close()
	if listeningHere(t, addr) {
		t.Errorf("%s: a closed listener seen", addr)
	}
}
