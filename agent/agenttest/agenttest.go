// Package agenttest starts gangway agents in this process on loopback
// addresses for tests (StartLocal), each an SSH server (agent/sshd) that
// hands launcher sessions to an Agent (agent), wired as cmd/agent wires
// them: for the server's and the agent's own tests, and the launcher's
// end-to-end tests through cmd/internal/e2e. It imports no launcher and
// no cmd/ package.
//
// Every cluster gets its own block of loopback addresses 127.0.B.1,
// 127.0.B.2, ... (B from 10 to 250, chosen per call) and every agent an
// ephemeral port, so parallel tests and test processes do not clash and
// each host has a distinct address (MASTER_ADDR, HOROVOD_HOSTNAME).
//
// Agents serve until the test's cleanup, which stops them and waits until
// every session, and so every rank, has ended.
//
// Ranks run under supervisors (this test binary re-executed) when the
// test binary's TestMain calls proc.Supervise first, as cmd/agent's main
// does; otherwise they start directly.
package agenttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/gangway-hpc/gangway/agent"
	"github.com/gangway-hpc/gangway/agent/agenttest/sshtest"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/sshd"
)

// Deadline bounds every wait of this package: generous, for a loaded
// two-core machine.
const Deadline = 60 * time.Second

// Host is one agent of a Cluster.
type Host struct {
	Addr    string // loopback address, 127.0.B.i
	Port    int
	Name    string // --name: agent1, agent2...
	HostKey string // host key file (created by sshd.LoadHostKey)
	HostPub ssh.PublicKey
	hostKey ssh.Signer
	// HostCert is the host certificate file (WithHostCA), or "".
	HostCert string

	// Agent and Server are set for in-process agents (StartLocal): the
	// launcher sessions and the SSH server that hands them over, wired as
	// cmd/agent wires them.
	Agent  *agent.Agent
	Server *sshd.Server
}

// HostPort is "addr:port", the address clients dial.
func (h *Host) HostPort() string { return net.JoinHostPort(h.Addr, strconv.Itoa(h.Port)) }

// Cluster is a set of agents sharing one client key.
type Cluster struct {
	Hosts []*Host
	Keys  sshtest.Keys // Keys.ClientKey is authorised on every agent
	// KnownHosts trusts every agent's host key at its address and port.
	KnownHosts string
	Dir        string
	block      int
}

// Option configures StartLocal.
type Option func(*options)

type options struct {
	agent    func(i int, a *agent.Agent)
	server   func(i int, s *sshd.Server)
	hostCert func(t testing.TB, h *Host) string
}

// WithAgent lets a test adjust each in-process agent before it serves
// (i counts from 0).
func WithAgent(f func(i int, a *agent.Agent)) Option {
	return func(o *options) { o.agent = f }
}

// WithServer lets a test adjust each in-process agent's SSH server
// (HandshakeTimeout, AuthorizedKeys...) before it serves.
func WithServer(f func(i int, s *sshd.Server)) Option {
	return func(o *options) { o.server = f }
}

// WithHostCA has each agent present a host certificate that the CA
// private key file caKey signs with ssh-keygen -s, naming the agent's
// address as its principal.
func WithHostCA(caKey string) Option {
	return WithHostCert(func(t testing.TB, h *Host) string {
		SSHKeygen(t, "-q", "-s", caKey, "-h", "-I", h.Name, "-n", h.Addr, "-V", "-5m:+1h", h.HostKey+".pub")
		return h.HostKey + "-cert.pub"
	})
}

// WithHostCert has each agent present the host certificate that sign
// makes for it (its key is h.HostKey, its public key h.HostKey+".pub")
// and returns the certificate file.
func WithHostCert(sign func(t testing.TB, h *Host) (certFile string)) Option {
	return func(o *options) { o.hostCert = sign }
}

var blocks atomic.Uint32

// nextBlock picks the third octet of a cluster's addresses; the process
// id spreads test processes that run at the same time.
func nextBlock() int {
	n := blocks.Add(1) + uint32(os.Getpid())*7
	return 10 + int(n%241)
}

// RankEnv is added to the environment of StartLocal's agents (and of the
// processes cmd/internal/e2e starts) so that race-enabled test binaries
// running as ranks do not sleep a second at exit.
func RankEnv() []string {
	return []string{"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
}

// NewCluster prepares a cluster of n agents without starting them: their
// addresses, names and host keys, and the cluster's client key. Whoever
// starts the agents sets each Host.Port, then calls WriteKnownHosts.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 || n > 250 {
		t.Fatalf("agenttest: %d agents: want 1 to 250", n)
	}
	dir := t.TempDir()
	keys, err := sshtest.GenKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Keys: keys, Dir: dir, block: nextBlock(), KnownHosts: filepath.Join(dir, "known_hosts")}
	for i := range n {
		h := &Host{
			Addr:    fmt.Sprintf("127.0.%d.%d", c.block, i+1),
			Name:    fmt.Sprintf("agent%d", i+1),
			HostKey: filepath.Join(dir, fmt.Sprintf("agent%d", i+1), "ssh_host_ed25519_key"),
		}
		s, err := sshd.LoadHostKey(h.HostKey)
		if err != nil {
			t.Fatal(err)
		}
		h.hostKey, h.HostPub = s, s.PublicKey()
		c.Hosts = append(c.Hosts, h)
	}
	return c
}

// StartLocal starts n agents in this process on 127.0.B.1..n, each with
// its own host key and the cluster's authorized_keys, serving until the
// test's cleanup.
func StartLocal(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	c := NewCluster(t, n)
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	for i, h := range c.Hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h.Addr, "0"))
		if err != nil {
			t.Fatalf("agenttest: listen on %s: %v", h.Addr, err)
		}
		h.Port = l.Addr().(*net.TCPAddr).Port
		h.Agent = &agent.Agent{Name: h.Name, Version: "agenttest", Log: log.Named(h.Name), BaseEnv: append(os.Environ(), RankEnv()...),
			Supervisor: proc.SupervisorExecutable()}
		if o.agent != nil {
			o.agent(i, h.Agent)
		}
		h.Server = &sshd.Server{Subsystem: h.Agent.ServeLogin, BaseEnv: h.Agent.BaseEnv, Log: log.Named(h.Name + ".sshd"),
			HostKey: h.hostKey, AuthorizedKeys: c.Keys.AuthorizedKeys}
		if o.hostCert != nil {
			h.HostCert = o.hostCert(t, h)
			s, _, err := sshd.LoadHostCert(h.HostCert, h.hostKey)
			if err != nil {
				t.Fatal(err)
			}
			h.Server.HostCert = s
		}
		if o.server != nil {
			o.server(i, h.Server)
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
		done := make(chan error, 1)
		go func() { done <- h.Server.Serve(ctx, l) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("agent %s: serve: %v", h.Name, err)
				}
			case <-time.After(Deadline):
				t.Errorf("agent %s did not stop within %v", h.Name, Deadline)
			}
		})
	}
	c.WriteKnownHosts(t)
	return c
}

// WriteKnownHosts writes c.KnownHosts, trusting every host's key at its
// address and port.
func (c *Cluster) WriteKnownHosts(t testing.TB) {
	t.Helper()
	var b strings.Builder
	for _, h := range c.Hosts {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.HostPort())}, h.HostPub))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(c.KnownHosts, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Unused returns an address in the cluster's block and a port on which
// nothing listens (the port was free a moment ago), for tests of hosts
// that never come up.
func (c *Cluster) Unused(t testing.TB) (addr string, port int) {
	t.Helper()
	addr = fmt.Sprintf("127.0.%d.253", c.block)
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return addr, port
}
