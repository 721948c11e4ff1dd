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
	// HandshakeTimeout bounds the time from TCP accept to authenticated
	// connection; 0 means 10s.
	HandshakeTimeout time.Duration
	// MaxStartups caps the connections not yet authenticated, in total;
	// MaxStartupsPerSource caps them per source address. A connection
	// over either cap is closed at once, before the SSH handshake (like
	// sshd's MaxStartups and PerSourceMaxStartups). 0 means the defaults,
	// DefaultMaxStartups and DefaultMaxStartupsPerSource.
	MaxStartups          int
	MaxStartupsPerSource int
	// MaxSessions caps the open session channels of one connection (like
	// sshd's MaxSessions); more are refused. 0 means DefaultMaxSessions.
	MaxSessions int

	conns    sync.WaitGroup
	startups startups
	policy   loginPolicy
	authLog  limiter // refused logins and unusable key files
}

// Defaults of the caps on unauthenticated connections and sessions.
const (
	DefaultMaxStartups          = 100
	DefaultMaxStartupsPerSource = 10
	DefaultMaxSessions          = 10
)

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
// errors (out of file descriptors, say) never end it: it backs off, from
// 5 ms doubling to 1 s, and tries again.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	cfg := s.config()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer s.conns.Wait()
	s.startups.init(s.MaxStartups, s.MaxStartupsPerSource)
	var bo acceptBackoff
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			d, first := bo.fail()
			if first {
				s.Log.Warn("accept failed; retrying with backoff", zap.Error(err))
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			continue
		}
		if n, took := bo.ok(); n > 0 {
			s.Log.Debug("accepting again", zap.Int("failures", n), zap.Duration("took", took))
		}
		src := sourceOf(c.RemoteAddr())
		if why := s.startups.admit(src); why != "" {
			c.Close()
			s.startups.refused(s.Log, src, why)
			continue
		}
		s.conns.Go(func() { s.serveConn(ctx, c, cfg, src) })
	}
}

// acceptBackoff spaces out accept retries: an episode starts at the
// first failure and ends at the next success.
type acceptBackoff struct {
	delay time.Duration
	n     int
	since time.Time
}

const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// fail counts a failure and returns how long to wait, and whether it
// starts an episode (the only failure worth a log line).
func (b *acceptBackoff) fail() (time.Duration, bool) {
	b.n++
	if b.n == 1 {
		b.delay, b.since = minAcceptBackoff, time.Now()
		return b.delay, true
	}
	b.delay = min(2*b.delay, maxAcceptBackoff)
	return b.delay, false
}

// ok ends an episode, returning its failures and length.
func (b *acceptBackoff) ok() (int, time.Duration) {
	n := b.n
	if n == 0 {
		return 0, 0
	}
	b.n = 0
	return n, time.Since(b.since)
}

// sourceOf is the address a connection came from, without its port.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

func (s *Server) serveConn(ctx context.Context, c net.Conn, cfg *ssh.ServerConfig, src string) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	hs := s.HandshakeTimeout
	if hs == 0 {
		hs = 10 * time.Second
	}
	_ = c.SetDeadline(time.Now().Add(hs))
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	s.startups.done(src)
	if err != nil {
		c.Close()
		s.Log.Debug("handshake failed", zap.String("remote", c.RemoteAddr().String()), zap.Error(err))
		return
	}
	_ = c.SetDeadline(time.Time{})
	li := loginOf(sc.Permissions)
	if li == nil || li.account == nil {
		sc.Close() // cannot happen: authorize always says who logged in
		return
	}
	log := s.Log.With(zap.String("remote", c.RemoteAddr().String()), zap.String("user", clip(sc.User())))
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
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		open.Add(1)
		wg.Go(func() {
			ss := &stockSession{srv: s, log: log, conn: sc, ch: ch, login: li, remote: c.RemoteAddr(), local: c.LocalAddr()}
			ss.serve(ctx, creqs)
			open.Add(-1) // the session and what it ran have ended
		})
	}
	// The connection is gone: sessions see their channels closed and end
	// their processes; wg.Wait (deferred) waits for that.
	cancel()
}

// subsystem serves the launcher protocol on a session channel, its ranks
// running as the login's user.
func (s *Server) subsystem(ctx context.Context, ch ssh.Channel, li *loginInfo) {
	login := Login{Account: li.account, NoDropCaches: s.dropCachesRefusal(li.account)}
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
