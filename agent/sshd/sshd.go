// Package sshd is the agent's SSH server: who may log in and as whom
// (authorized keys, user certificates and job certificates, the login
// policy, StrictModes checks of key files), the caps on connections not
// yet authenticated (MaxStartups, deadlines) and on what one user holds
// (UserLimits), the audit log of logins and commands, stock sessions
// (exec, shell, pty, env requests, signals) for ssh and Open MPI's
// orted, and the one accept loop that both Server and the srun mode's
// one-session server (ServeSrun) run.
//
// It does not run launcher sessions: it hands the gangway subsystem's
// channel to the function it is given (Server.Subsystem,
// SrunOptions.Session), which cmd/agent wires to package agent's Agent.
// So it must not import gangway/agent (the launcher session), and agent
// must not import it: both import agent/account, the accounts and logins
// they share. Besides that it imports agent/proc, agent/wire and
// internal/... only (.ci/check-imports.sh).
package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// Server is the agent's SSH server: stock sessions for ssh and Open MPI's
// orted, and the gangway subsystem for the launcher.
type Server struct {
	Log *zap.Logger
	// Subsystem serves the launcher's protocol (the gangway subsystem)
	// on a session channel for login, until the channel closes or ctx
	// ends; cmd/agent gives it agent.Agent.ServeLogin. nil refuses the
	// subsystem.
	Subsystem func(ctx context.Context, ch io.ReadWriteCloser, login account.Login) error
	// BaseEnv is the environment stock sessions start from, below the
	// user's identity, the connection's variables and the client's env
	// requests; nil means the agent's own (os.Environ()).
	BaseEnv []string
	// HostKey signs the handshake (LoadHostKey).
	HostKey ssh.Signer
	// HostCert, when set, is HostKey's host certificate as a signer
	// (LoadHostCert), offered beside the plain key so that clients
	// trusting its CA (@cert-authority in known_hosts) need no entry for
	// this host.
	HostCert ssh.Signer
	// AuthorizedKeys is an authorized_keys file for the agent's own user
	// (root, for a root service), read at every login so edits apply at
	// once, beside that user's ~/.ssh/authorized_keys. Every user's own
	// ~/.ssh/authorized_keys lets that user in.
	AuthorizedKeys string
	// TrustedUserCAKeys is a file of CA public keys (sshd's
	// TrustedUserCAKeys): user certificates they sign log in as the
	// certificates' principals. Read at every login; "" accepts none.
	TrustedUserCAKeys string
	// PermitRootLogin is PermitRootYes, PermitRootProhibitPassword (the
	// default, "") or PermitRootNo.
	PermitRootLogin string
	// AllowUsers, when not empty, are the only user names (shell-style
	// patterns) that may log in.
	AllowUsers []string
	// AcceptEnv are the patterns of the variables stock sessions take
	// from env requests; nil means DefaultAcceptEnv.
	AcceptEnv []string
	// DropCachesUsers may drop page caches besides root, when the agent
	// lets anyone (agent.Agent.AllowDropCaches).
	DropCachesUsers []string
	// StartupLimits cap the connections not yet authenticated and bound
	// how long they may take.
	StartupLimits
	// MaxSessions caps the open session channels of one connection (like
	// sshd's MaxSessions); more are refused. 0 means DefaultMaxSessions.
	MaxSessions int
	// UserLimits cap what one user holds at once.
	UserLimits

	// self is the account the agent runs as; nil means the process's own
	// (account.Self). Tests set it to try another agent's policy.
	self *account.Account

	conns    sync.WaitGroup
	startups *startups
	users    *users
	policy   loginPolicy
	authLog  limiter // refused logins and unusable key files
}

// DefaultMaxSessions is MaxSessions' default, sshd's.
const DefaultMaxSessions = 10

func (s *Server) config() *ssh.ServerConfig {
	self := s.self
	if self == nil {
		self = account.Self()
	}
	s.policy = loginPolicy{self: self, permitRoot: s.PermitRootLogin, allowUsers: s.AllowUsers, lookup: account.Lookup}
	s.authLog = limiter{period: refusalLogEvery, burst: authLogBurst}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: s.authorize,
		ServerVersion:     "SSH-2.0-gangway_agent",
	}
	cfg.AddHostKey(s.HostKey)
	if s.HostCert != nil {
		cfg.AddHostKey(s.HostCert)
	}
	return cfg
}

// authLogBurst is how many refused logins (and unusable key files) are
// logged per refusalLogEvery; the rest are counted in the next line.
const authLogBurst = 20

// Serve accepts connections on l until ctx ends, then closes every
// connection and waits for their sessions (and ranks) to end. Accept
// errors (out of file descriptors, say) never end it (acceptLoop).
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	cfg := s.config()
	s.startups = newStartups(s.StartupLimits)
	s.users = newUsers(s.UserLimits, s.Log)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer s.conns.Wait()
	return acceptLoop(ctx, l, s.Log, s.startups, &s.conns, func(c *startupConn) { s.serveConn(ctx, c, cfg) })
}

func (s *Server) serveConn(ctx context.Context, c *startupConn, cfg *ssh.ServerConfig) {
	sc, chans, reqs, err := handshake(c, cfg)
	if err != nil {
		s.Log.Debug("handshake failed", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
		return
	}
	li := loginOf(sc.Permissions)
	if li == nil || li.account == nil {
		c.established()
		sc.Close() // cannot happen: authorize always says who logged in
		return
	}
	log := s.Log.With(zap.String("remote", c.RemoteAddr().String()), zap.String("user", textx.Clip(sc.User())))
	release, err := s.users.acquire(li.account, userConnections)
	if err != nil {
		// Still a startup, under its login grace deadline: the client
		// hears why when it opens a channel, then the connection ends.
		refuseConn(sc, chans, reqs, err.Error())
		c.s.done(c)
		return
	}
	defer release()
	c.established()
	auditLogin(log, li)
	t0 := time.Now()
	defer func() { log.Info("logout", zap.Duration("duration", time.Since(t0))) }()
	server := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var open atomic.Int32
	stop := context.AfterFunc(ctx, func() {
		if server.Err() != nil && open.Load() > 0 {
			// The server is stopping: its sessions get a moment to say
			// so on their channels (a launcher session tells its
			// launcher why) before the connection closes under them.
			t := time.NewTimer(wire.LastWords)
			<-t.C
		}
		sc.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	maxSessions := s.MaxSessions
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions
	}
	refused := 0
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		if int(open.Load()) >= maxSessions {
			_ = nc.Reject(ssh.ResourceShortage, fmt.Sprintf("too many sessions on this connection (at most %d, the agent's --max-sessions)", maxSessions))
			if refused++; refused == 1 {
				log.Warn("refused a session: too many on one connection", zap.Int("max_sessions", maxSessions))
			}
			continue
		}
		done, err := s.users.acquire(li.account, userSessions)
		if err != nil {
			_ = nc.Reject(ssh.ResourceShortage, err.Error())
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			done()
			continue
		}
		open.Add(1)
		wg.Go(func() {
			defer done()
			ss := &stockSession{srv: s, log: log, conn: sc, ch: ch, login: li, remote: c.RemoteAddr(), local: c.LocalAddr()}
			ss.serve(ctx, creqs)
			open.Add(-1) // the session and what it ran have ended
		})
	}
	// The connection is gone: sessions see their channels closed and end
	// their processes; wg.Wait (deferred) waits for that.
	cancel()
}

// refuseConn tells a connection the agent will not serve why, as the
// refusal of the first channel it opens (ssh prints "open failed:
// resource shortage: WHY", the launcher's error carries it), and closes
// it. Its deadline (the login grace) bounds the wait.
func refuseConn(sc *ssh.ServerConn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, why string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer sc.Close()
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		_ = nc.Reject(ssh.ResourceShortage, why)
		// Let the refusal reach the client before the connection ends:
		// its reply to anything (here the keepalive's) comes after it.
		_, _, _ = sc.SendRequest("keepalive@openssh.com", true, nil)
		return
	}
}

// subsystem serves the launcher protocol on a session channel
// (Subsystem), its ranks running as the login's user, its job counted
// against the user's MaxUserJobs.
func (s *Server) subsystem(ctx context.Context, ch io.ReadWriteCloser, li *loginInfo) {
	login := account.Login{Account: li.account, NoDropCaches: s.dropCachesRefusal(li.account),
		TakeJob: func() (func(), error) { return s.users.acquire(li.account, userJobs) }, JobID: li.jobID}
	if err := s.Subsystem(ctx, ch, login); err != nil && !errors.Is(err, context.Canceled) {
		s.Log.Info("launcher session ended", zap.String("user", textx.Clip(li.account.Name)), zap.Error(err))
	}
}

// dropCachesRefusal says why a may not drop page caches, or "": root
// may, and so may the users in DropCachesUsers.
func (s *Server) dropCachesRefusal(a *account.Account) string {
	if a.Uid == 0 || slices.Contains(s.DropCachesUsers, a.Name) {
		return ""
	}
	return "user " + a.Name + " may not drop page caches on this agent: only root may, and the users named in the agent's --drop-caches-users"
}

// auditLogin logs an accepted login: who, with which key or certificate,
// found where.
func auditLogin(log *zap.Logger, li *loginInfo) {
	f := []zap.Field{zap.String("method", li.method), zap.String("key_type", li.keyType), zap.String("fingerprint", li.fingerprint),
		zap.Uint32("uid", li.account.Uid)}
	switch li.method {
	case "certificate":
		f = append(f, zap.String("key_id", textx.Clip(li.keyID)), zap.Uint64("serial", li.serial), zap.String("ca_fingerprint", li.ca))
		if li.forceCommand != "" {
			f = append(f, zap.String("force_command", textx.Clip(li.forceCommand)))
		}
	case "job-certificate":
		f = append(f, zap.String("job_id", textx.Clip(li.jobID)), zap.String("relay", textx.Clip(li.relay)),
			zap.String("signer_fingerprint", li.ca), zap.String("file", li.source),
			zap.String("key_id", textx.Clip(li.keyID)), zap.Uint64("serial", li.serial))
	default:
		f = append(f, zap.String("file", li.source))
	}
	log.Info("login", f...)
}
