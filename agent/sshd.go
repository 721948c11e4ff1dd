package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
)

// Server is the agent's SSH server: stock sessions for ssh and Open MPI's
// orted, and the gangway subsystem for the launcher.
type Server struct {
	Agent *Agent
	Log   *zap.Logger
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
	// DropCachesUsers may drop page caches besides root, when the
	// Agent's AllowDropCaches lets anyone.
	DropCachesUsers []string
	// Self is the account the agent runs as; nil means the process's own
	// (tests set it to try another agent's policy).
	Self *Account
	// StartupLimits cap the connections not yet authenticated and bound
	// how long they may take.
	StartupLimits
	// MaxSessions caps the open session channels of one connection (like
	// sshd's MaxSessions); more are refused. 0 means DefaultMaxSessions.
	MaxSessions int
	// UserLimits cap what one user holds at once.
	UserLimits

	conns    sync.WaitGroup
	startups *startups
	users    *users
	policy   loginPolicy
	authLog  limiter // refused logins and unusable key files
}

// DefaultMaxSessions is MaxSessions' default, sshd's.
const DefaultMaxSessions = 10

// LoadHostKey reads an OpenSSH private key, or creates an ed25519 key
// (mode 0600) at path when none exists, so the agent keeps its identity
// across restarts. A key that group or others may access is refused
// (ErrHostKeyModes), as sshd refuses it.
func LoadHostKey(path string) (ssh.Signer, error) {
	b, err := readHostKey(path)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		blk, err := ssh.MarshalPrivateKey(priv, "gangway agent host key")
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("host key dir: %w", err)
		}
		b = pem.EncodeToMemory(blk)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write host key: %w", err)
		}
		pub, _ := ssh.NewSignerFromKey(priv)
		if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(pub.PublicKey()), 0o644); err != nil {
			return nil, fmt.Errorf("write host key: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	return s, nil
}

// readHostKey reads the key file at path after checking its modes, on
// the file it opened (one lookup: the file checked is the file read).
func readHostKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	if err := checkHostKeyFile(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read host key: %w", err)
	}
	return b, nil
}

// LoadHostCert reads a host certificate (the -cert.pub file that
// `ssh-keygen -s CA -h` writes) for key and returns the signer that
// presents it. The certificate must be a host certificate of key's
// public key and valid now.
func LoadHostCert(path string, key ssh.Signer) (ssh.Signer, *ssh.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read host certificate: %w", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("host certificate %s: %w", path, err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, nil, fmt.Errorf("host certificate %s: a plain %s key, not a certificate", path, pub.Type())
	}
	if cert.CertType != ssh.HostCert {
		return nil, nil, fmt.Errorf("host certificate %s: a user certificate; sign with ssh-keygen -s CA -h", path)
	}
	if string(cert.Key.Marshal()) != string(key.PublicKey().Marshal()) {
		return nil, nil, fmt.Errorf("host certificate %s certifies %s, not the host key %s", path, ssh.FingerprintSHA256(cert.Key), ssh.FingerprintSHA256(key.PublicKey()))
	}
	now := uint64(time.Now().Unix())
	if now < cert.ValidAfter || (cert.ValidBefore != ssh.CertTimeInfinity && now >= cert.ValidBefore) {
		return nil, nil, fmt.Errorf("host certificate %s is not valid now (valid from %s to %s)", path, certTime(cert.ValidAfter), certTime(cert.ValidBefore))
	}
	s, err := ssh.NewCertSigner(cert, key)
	if err != nil {
		return nil, nil, fmt.Errorf("host certificate %s: %w", path, err)
	}
	return s, cert, nil
}

func certTime(t uint64) string {
	if t == ssh.CertTimeInfinity {
		return "forever"
	}
	return time.Unix(int64(t), 0).UTC().Format(time.RFC3339)
}

func (s *Server) config() *ssh.ServerConfig {
	self := s.Self
	if self == nil {
		self = selfAccount()
	}
	s.policy = loginPolicy{self: self, permitRoot: s.PermitRootLogin, allowUsers: s.AllowUsers, lookup: lookupAccount}
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
	log := s.Log.With(zap.String("remote", c.RemoteAddr().String()), zap.String("user", clip(sc.User())))
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { sc.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { ssh.DiscardRequests(reqs) })
	maxSessions := s.MaxSessions
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions
	}
	var open atomic.Int32
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

// subsystem serves the launcher protocol on a session channel, its ranks
// running as the login's user.
func (s *Server) subsystem(ctx context.Context, ch ssh.Channel, li *loginInfo) {
	login := Login{Account: li.account, NoDropCaches: s.dropCachesRefusal(li.account), users: s.users}
	if err := s.Agent.ServeLogin(ctx, ch, login); err != nil && !errors.Is(err, context.Canceled) {
		s.Log.Info("launcher session ended", zap.String("user", clip(li.account.Name)), zap.Error(err))
	}
}

// dropCachesRefusal says why a may not drop page caches, or "": root
// may, and so may the users in DropCachesUsers.
func (s *Server) dropCachesRefusal(a *Account) string {
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
	if li.method == "certificate" {
		f = append(f, zap.String("key_id", clip(li.keyID)), zap.Uint64("serial", li.serial), zap.String("ca_fingerprint", li.ca))
		if li.forceCommand != "" {
			f = append(f, zap.String("force_command", clip(li.forceCommand)))
		}
	} else {
		f = append(f, zap.String("file", li.source))
	}
	log.Info("login", f...)
}
