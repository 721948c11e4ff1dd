package transport

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
)

// testServer is an SSH server on 127.0.0.1 that serves the gangway
// subsystem as an echo (or refuses it), and first tries what a server may
// send unasked: a global request and a channel open, whose answers it
// records.
type testServer struct {
	addr      string
	port      int
	refuse    bool
	global    chan bool  // the client's reply to a global request
	openErr   chan error // the client's answer to a channel open
	chanReply chan bool  // the client's reply to a request on the session channel
	ended     chan struct{}
}

func startTestServer(t *testing.T, refuse bool) (*testServer, Options) {
	t.Helper()
	dir := t.TempDir()
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	clientPub, clientPriv, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	idPath := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(idPath, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	authorized, _ := ssh.NewPublicKey(clientPub)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	khPath := filepath.Join(dir, "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(l.Addr().String())}, hostSigner.PublicKey())
	if err := os.WriteFile(khPath, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(authorized.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("unknown key")
	}}
	cfg.AddHostKey(hostSigner)
	s := &testServer{addr: "127.0.0.1", port: port, refuse: refuse, global: make(chan bool, 1), openErr: make(chan error, 1), chanReply: make(chan bool, 1), ended: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer close(s.ended)
		defer c.Close()
		conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		ok, _, _ := conn.SendRequest("test@gangway", true, nil)
		s.global <- ok
		_, _, err = conn.OpenChannel("x11", nil)
		s.openErr <- err
		for nc := range chans {
			ch, in, err := nc.Accept()
			if err != nil {
				return
			}
			r := <-in
			r.Reply(!s.refuse && r.Type == "subsystem", nil)
			if s.refuse {
				ch.Close()
				continue
			}
			go ssh.DiscardRequests(in)
			ok, _ := ch.SendRequest("test@gangway", true, nil)
			s.chanReply <- ok
			io.Copy(ch, ch)
			ch.Close()
		}
	})
	return s, Options{Kind: Agent, Port: port, Identity: idPath, KnownHosts: khPath}
}

// TestSSHDialerSession: the dialler's connection carries the subsystem's
// bytes both ways, refuses what the server sends unasked (a global
// request, a channel open, a request on the channel), and Close ends the
// connection.
func TestSSHDialerSession(t *testing.T) {
	s, tr := startTestServer(t, false)
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rwc, ip, err := d.Dial(t.Context(), hostfile.Host{Name: s.addr, Port: s.port})
	if err != nil {
		t.Fatal(err)
	}
	if ip != "127.0.0.1" {
		t.Errorf("reached on %q, want 127.0.0.1", ip)
	}
	if ok := <-s.global; ok {
		t.Error("a global request from the server was accepted")
	}
	var oce *ssh.OpenChannelError
	if err := <-s.openErr; !errors.As(err, &oce) || oce.Reason != ssh.UnknownChannelType {
		t.Errorf("channel open from the server: %v, want rejected as an unknown channel type", err)
	}
	if ok := <-s.chanReply; ok {
		t.Error("a request on the session channel was accepted")
	}
	c := wire.NewConn(rwc)
	if err := c.Send(wire.KindPing, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(); err != nil || m.Kind != wire.KindPing {
		t.Fatalf("echo: %v %v, want the ping back", m.Kind, err)
	}
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("close: %v", err)
	}
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("server still connected 10 s after Close")
	}
}

// TestSSHDialerNoSubsystem: a server without the gangway subsystem is a
// permanent failure that says so.
func TestSSHDialerNoSubsystem(t *testing.T) {
	s, tr := startTestServer(t, true)
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = d.Dial(t.Context(), hostfile.Host{Name: s.addr, Port: s.port})
	want := "the SSH server on 127.0.0.1 has no \"gangway\" subsystem (is it a gangway agent? for a stock sshd use --transport ssh)"
	if !errors.Is(err, ErrPermanent) || err.Error() != want {
		t.Fatalf("Dial: %v, want permanent %q", err, want)
	}
	<-s.global
	<-s.openErr
}

// TestSSHDialerNoSubsystemConfigPort: when the port came from the ssh
// configuration (a Port meant for sshd), the refusal says so.
func TestSSHDialerNoSubsystemConfigPort(t *testing.T) {
	s, tr := startTestServer(t, true)
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte("Host *\n Port "+strconv.Itoa(s.port)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.SSHConfig, tr.Port = cfg, 22122
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = d.Dial(t.Context(), hostfile.Host{Name: s.addr})
	want := fmt.Sprintf("use --transport ssh; port %d is the ssh config's Port for 127.0.0.1, -p overrides it)", s.port)
	if !errors.Is(err, ErrPermanent) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Dial: %v, want permanent, ending %q", err, want)
	}
	<-s.global
	<-s.openErr
}

// TestSSHDialerConfigAlias: a name that only the ssh configuration knows
// (Host node1 / HostName 127.0.0.1, with the Port there) is dialed at its
// HostName and Port, not looked up itself; the config's Port wins over
// the default --port but not over a given one.
func TestSSHDialerConfigAlias(t *testing.T) {
	s, tr := startTestServer(t, false)
	cfg := filepath.Join(t.TempDir(), "config")
	text := "Host node1\n    HostName " + s.addr + "\n    Port " + strconv.Itoa(s.port) + "\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.SSHConfig, tr.Port = cfg, 22122
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	h := hostfile.Host{Name: "node1"}
	if got := d.PeerName(h); got != s.addr {
		t.Errorf("PeerName %q, want the HostName %s", got, s.addr)
	}
	trGiven := tr
	trGiven.PortGiven = true
	given, err := NewAgentDialer(trGiven, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if hc, err := given.target(h); err != nil || hc.Port != 22122 {
		t.Errorf("with -p given: %+v %v, want port 22122", hc, err)
	}
	rwc, ip, err := d.Dial(t.Context(), h)
	if err != nil {
		t.Fatal(err)
	}
	defer rwc.Close()
	if ip != "127.0.0.1" {
		t.Errorf("reached on %q, want 127.0.0.1", ip)
	}
	<-s.global
	<-s.openErr
	<-s.chanReply
}

// TestSSHDialerConfigHostKeys: UserKnownHostsFile and
// StrictHostKeyChecking accept-new in the ssh configuration apply when no
// --known-hosts or --accept-new-host-keys is given: the unknown key is
// recorded in the config's file, under the HostName and port.
func TestSSHDialerConfigHostKeys(t *testing.T) {
	s, tr := startTestServer(t, false)
	dir := t.TempDir()
	kh := filepath.Join(dir, "kh")
	cfg := filepath.Join(dir, "config")
	text := "Host node1\n HostName " + s.addr + "\n Port " + strconv.Itoa(s.port) +
		"\n UserKnownHostsFile " + kh + " /dev/null\n StrictHostKeyChecking accept-new\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.SSHConfig, tr.KnownHosts = cfg, ""
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rwc, _, err := d.Dial(t.Context(), hostfile.Host{Name: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	rwc.Close()
	b, err := os.ReadFile(kh)
	if want := "[127.0.0.1]:" + strconv.Itoa(s.port) + " ssh-ed25519 "; err != nil || !strings.HasPrefix(string(b), want) {
		t.Errorf("%s: %q %v, want a line starting %q", kh, b, err, want)
	}
	<-s.global
	<-s.openErr
}

// TestSSHDialerEncryptedIdentityFile: an IdentityFile whose key is
// encrypted stands for the ssh-agent's key with the same public key, as
// with ssh (the usual laptop: keys with passphrases, loaded into an
// agent), IdentitiesOnly included.
func TestSSHDialerEncryptedIdentityFile(t *testing.T) {
	s, tr := startTestServer(t, false)
	dir := t.TempDir()
	b, err := os.ReadFile(tr.Identity)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKeyWithPassphrase(raw, "", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	enc := filepath.Join(dir, "id_work")
	if err := os.WriteFile(enc, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	keyring := sshagent.NewKeyring()
	if err := keyring.Add(sshagent.AddedKey{PrivateKey: raw}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // the dialer keeps its agent connection open
	t.Cleanup(wg.Wait)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_ = sshagent.ServeAgent(keyring, c)
			})
		}
	})
	t.Setenv("SSH_AUTH_SOCK", sock)
	cfg := filepath.Join(dir, "config")
	text := "Host node1\n HostName " + s.addr + "\n Port " + strconv.Itoa(s.port) + "\n IdentityFile " + enc + "\n IdentitiesOnly yes\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	tr.SSHConfig, tr.Identity = cfg, ""
	d, err := NewAgentDialer(tr, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	rwc, _, err := d.Dial(t.Context(), hostfile.Host{Name: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	rwc.Close()
	<-s.global
	<-s.openErr
}

// TestAgentDialerNoSuchHost: a name that does not resolve fails for good
// at once, except in an mpi-operator launcher pod, where a worker pod's
// DNS record appears only once the pod is up: there it is retried
// (ErrUnreachable) until --start-timeout.
func TestAgentDialerNoSuchHost(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(id, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, op := range []bool{false, true} {
		o := Options{Kind: Agent, Port: 22122, Identity: id, KnownHosts: filepath.Join(t.TempDir(), "known_hosts"), MPIOperator: op}
		d, err := NewAgentDialer(o, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = d.Dial(t.Context(), hostfile.Host{Name: "gw-no-such-worker.invalid"})
		if !strings.Contains(err.Error(), `no such host ("gw-no-such-worker.invalid" does not resolve)`) ||
			errors.Is(err, ErrPermanent) == op || errors.Is(err, ErrUnreachable) != op {
			t.Errorf("mpi-operator %v: %v (permanent %v, unreachable %v)", op, err, errors.Is(err, ErrPermanent), errors.Is(err, ErrUnreachable))
		}
	}
}
