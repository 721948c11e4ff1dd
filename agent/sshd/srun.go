package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/jobcert"
)

// The srun mode (`agent --srun`): the launcher's srun step starts one agent
// per node of a Slurm allocation. Such an agent trusts exactly one key, the
// launcher's one-time key from its environment (wire.SrunKeyEnv), and the
// job certificates that key signed for relays of the agent tree; listens
// on an ephemeral port with an ephemeral host key that never touches the
// disk; prints one wire.SrunReady line on its stdout (srun carries it to
// the launcher); serves exactly one launcher session; and exits. Slurm
// tracks it and every rank it starts as processes of the step, so ending
// the step (the launcher's srun exits, scancel, the time limit) ends them
// all, whatever the agent does.

// DefaultSrunWait is how long an agent started by srun waits for its
// launcher's session before it gives up and exits.
const DefaultSrunWait = 60 * time.Second

// SrunSignalGrace is how long a session of an agent started by srun goes
// on after the agent got SIGTERM or SIGINT. Slurm signals every process of
// the step at once (scancel, the time limit, a double Ctrl-C on srun), so
// the ranks get the signal themselves; meanwhile the session carries their
// exits to the launcher, which then reports them and ends the job. After
// the grace the session ends and stops what is left.
const SrunSignalGrace = 5 * time.Second

// ErrNoLauncher ends an agent started by srun whose launcher never opened
// its session.
var ErrNoLauncher = errors.New("no launcher session")

// SrunOptions configures ServeSrun.
type SrunOptions struct {
	Log *zap.Logger
	// Session serves the launcher's session on the gangway subsystem's
	// channel, until the channel closes or ctx ends; cmd/agent gives it
	// agent.Agent.ServeSession.
	Session  func(ctx context.Context, ch io.ReadWriteCloser) error
	Listener net.Listener  // where the launcher dials in (ServeSrun closes it)
	HostKey  ssh.Signer    // the agent's ephemeral host key (NewEphemeralHostKey)
	Launcher ssh.PublicKey // the only key that may log in
	// Wait bounds the time until the launcher's session starts; 0 means
	// DefaultSrunWait.
	Wait time.Duration
	// SignalGrace is SrunSignalGrace when 0.
	SignalGrace time.Duration
	// StartupLimits cap the connections not yet authenticated, as the
	// agent's server does (peers' preflight probes and anyone who can
	// reach the port, not only the launcher, connect).
	StartupLimits
}

// NewEphemeralHostKey makes an ed25519 host key that lives in memory only.
func NewEphemeralHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// ParseLauncherKey reads the launcher's public key from the value of
// wire.SrunKeyEnv.
func ParseLauncherKey(v string) (ssh.PublicKey, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("%s is not set: agent --srun is started by the launcher's srun step (launcher --transport slurm)", wire.SrunKeyEnv)
	}
	k, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", wire.SrunKeyEnv, err)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, fmt.Errorf("%s: holds more than one key", wire.SrunKeyEnv)
	}
	return k, nil
}

// SrunReadyLine is what an agent started by srun prints once l listens:
// its node name, the address the launcher should dial (the local address
// of the route to launchIP, srun's SLURM_LAUNCH_NODE_IPADDR, so the
// launcher dials the address it can reach; without it, the first global
// unicast address of an up interface) with l's port, and key's public half.
func SrunReadyLine(node string, l net.Listener, key ssh.Signer, launchIP string) (wire.SrunReady, error) {
	ta, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return wire.SrunReady{}, fmt.Errorf("listener on %v is not TCP", l.Addr())
	}
	ip, err := reportIP(launchIP)
	if err != nil {
		return wire.SrunReady{}, err
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key.PublicKey())))
	return wire.SrunReady{Node: node, Addr: net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port)), HostKey: pub}, nil
}

// reportIP is the address the launcher should dial: the source address
// of this host's route to the launcher, else the first global unicast
// address of an up, non-loopback interface.
func reportIP(launchIP string) (net.IP, error) {
	if ip := net.ParseIP(launchIP); ip != nil {
		// A UDP "connection" sends nothing: it only asks the kernel which
		// local address routes to ip.
		if c, err := net.Dial("udp", net.JoinHostPort(ip.String(), "9")); err == nil {
			la := c.LocalAddr().(*net.UDPAddr).IP
			c.Close()
			if !la.IsUnspecified() {
				return la, nil
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
				return n.IP, nil
			}
		}
	}
	return nil, errors.New("no address to report: no route to the launcher (SLURM_LAUNCH_NODE_IPADDR) and no global unicast address")
}

// srunJobCert checks a relay's job certificate (jobcert) at an agent
// started by srun: a relay agent of the same step logging in on the
// launcher's behalf. The step's one-time key must have signed it; it
// must be what a job certificate is (jobcert.Check: the principal,
// validity, force-command the gangway subsystem, source-address allowing
// the client, which x/crypto checks too). Such an agent serves nothing
// but the one gangway session, so the certificate opens no more than the
// launcher's key does.
func srunJobCert(c ssh.ConnMetadata, cert *ssh.Certificate, launcher []byte) (*ssh.Permissions, error) {
	perms, err := checkJobCert(c, cert, func(k ssh.PublicKey) bool {
		return subtle.ConstantTimeCompare(k.Marshal(), launcher) == 1
	})
	if err != nil {
		return nil, fmt.Errorf("job certificate: %w", err)
	}
	return perms, nil
}

// ServeSrun serves the one launcher session of an agent started by srun:
// it accepts SSH connections on o.Listener, authenticated by o.Launcher's
// key or a relay's job certificate it signed (srunJobCert), and the first connection to open the gangway subsystem gets
// the session. It returns when that session ends (its error, nil when the
// launcher closed it), when no session started within o.Wait
// (ErrNoLauncher), or when ctx ends before a session started. Once the
// session runs, ctx ending (the agent's SIGTERM) ends it after
// o.SignalGrace. Every rank and connection is gone when it returns.
func ServeSrun(ctx context.Context, o SrunOptions) error {
	if o.Wait <= 0 {
		o.Wait = DefaultSrunWait
	}
	if o.SignalGrace <= 0 {
		o.SignalGrace = SrunSignalGrace
	}
	want := o.Launcher.Marshal()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(c ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if cert, ok := k.(*ssh.Certificate); ok && jobcert.Is(cert) {
				return srunJobCert(c, cert, want)
			}
			if subtle.ConstantTimeCompare(k.Marshal(), want) == 1 {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("not this job's launcher key")
		},
		ServerVersion: "SSH-2.0-gangway_agent",
	}
	cfg.AddHostKey(o.HostKey)

	// The server's life (listener and connections) and the session's are
	// apart from ctx: a signal must not cut the session off at once.
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &srunServer{log: o.Log, session: o.Session, cfg: cfg, claimed: make(chan struct{}), done: make(chan struct{})}
	st := newStartups(o.StartupLimits)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	context.AfterFunc(sctx, func() { o.Listener.Close() })
	wg.Go(func() {
		if err := acceptLoop(sctx, o.Listener, o.Log, st, &wg, func(c *startupConn) { s.serveConn(sctx, c) }); err != nil {
			o.Log.Debug("listener closed", zap.Error(err))
		}
	})

	wait := time.NewTimer(o.Wait)
	defer wait.Stop()
	select {
	case <-s.claimed:
	case <-wait.C:
		return fmt.Errorf("%w within %v", ErrNoLauncher, o.Wait)
	case <-ctx.Done():
		return fmt.Errorf("%w: stopped by a signal before the launcher came", ErrNoLauncher)
	}
	o.Log.Debug("launcher session started")
	select {
	case <-s.done:
	case <-ctx.Done():
		o.Log.Info("signalled; the session goes on for a grace period", zap.Duration("grace", o.SignalGrace))
		select {
		case <-s.done:
		case <-time.After(o.SignalGrace):
			stop() // closes every connection: the session ends and stops its ranks
			<-s.done
		}
	}
	return s.err
}

// srunServer is ServeSrun's SSH side.
type srunServer struct {
	log     *zap.Logger
	session func(ctx context.Context, ch io.ReadWriteCloser) error
	cfg     *ssh.ServerConfig
	once    sync.Once
	claimed chan struct{} // closed when a session starts
	done    chan struct{} // closed when it has ended; err is then set
	err     error
}

// claim gives the session to the first caller.
func (s *srunServer) claim() bool {
	ok := false
	s.once.Do(func() { ok = true; close(s.claimed) })
	return ok
}

func (s *srunServer) serveConn(ctx context.Context, c *startupConn) {
	sc, chans, reqs, err := handshake(c, s.cfg)
	if err != nil {
		// Peers' reachability probes (the preflight) land here too: they
		// connect and close without a word.
		s.log.Debug("handshake failed", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
		return
	}
	c.established()
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		wg.Go(func() { s.serveChannel(ctx, sc, ch, creqs) })
	}
}

// serveChannel accepts one request, the gangway subsystem, once per agent;
// anything else (exec, shell, pty, env, a second session) is refused.
func (s *srunServer) serveChannel(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	var session sync.WaitGroup
	defer session.Wait()
	started := false
	for req := range reqs {
		var sub struct{ Name string }
		ok := !started && req.Type == "subsystem" && ssh.Unmarshal(req.Payload, &sub) == nil && sub.Name == wire.Subsystem && s.claim()
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		if !ok {
			continue
		}
		started = true
		session.Go(func() {
			s.err = s.session(ctx, subsystemConn{ch, sc})
			close(s.done)
		})
	}
	if !started {
		ch.Close()
	}
}
