package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	// AuthorizedKeys is the authorized_keys file, read at every login so
	// edits apply at once.
	AuthorizedKeys string
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
}

// Defaults of the caps on unauthenticated connections and sessions.
const (
	DefaultMaxStartups          = 100
	DefaultMaxStartupsPerSource = 10
	DefaultMaxSessions          = 10
)

// LoadHostKey reads an OpenSSH private key, or creates an ed25519 key
// (mode 0600) at path when none exists, so the agent keeps its identity
// across restarts.
func LoadHostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
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
		return nil, fmt.Errorf("read host key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("host key %s: %w", path, err)
	}
	return s, nil
}

// authorized reads the authorized_keys file into a map keyed by the
// marshalled public key. A key's value is "" when it may log in, or the
// first option of its line that the agent cannot enforce (command=,
// from=, restrict, no-pty...): such a key is refused rather than given
// the full access its line means to deny.
func authorized(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for len(b) > 0 {
		pub, _, opts, rest, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			break // no more keys (comments and blank lines are skipped by the parser)
		}
		if k := string(pub.Marshal()); !seen(keys, k) {
			keys[k] = unenforced(opts) // the first line of a key decides, as in sshd
		}
		b = rest
	}
	return keys, nil
}

func seen(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// unenforced returns the first option the agent cannot honour. The
// allowed ones only take away what the agent never offers.
func unenforced(opts []string) string {
	for _, o := range opts {
		switch strings.ToLower(o) {
		case "no-port-forwarding", "no-agent-forwarding", "no-x11-forwarding", "no-user-rc":
		default:
			return o
		}
	}
	return ""
}

func (s *Server) config() *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			keys, err := authorized(s.AuthorizedKeys)
			if err != nil {
				s.Log.Warn("cannot read authorized keys", zap.String("file", s.AuthorizedKeys), zap.Error(err))
				return nil, errors.New("no authorized keys")
			}
			bad, ok := keys[string(key.Marshal())]
			if !ok {
				s.Log.Info("refused key", zap.String("remote", c.RemoteAddr().String()), zap.String("user", c.User()), zap.String("fingerprint", ssh.FingerprintSHA256(key)))
				return nil, fmt.Errorf("unknown public key for %q", c.User())
			}
			if bad != "" {
				s.Log.Warn("refused key: its authorized_keys option cannot be enforced by the agent", zap.String("remote", c.RemoteAddr().String()), zap.String("fingerprint", ssh.FingerprintSHA256(key)), zap.String("option", bad), zap.String("file", s.AuthorizedKeys))
				return nil, fmt.Errorf("public key for %q has option %s, which the agent cannot enforce", c.User(), bad)
			}
			return &ssh.Permissions{Extensions: map[string]string{"fp": ssh.FingerprintSHA256(key)}}, nil
		},
		ServerVersion: "SSH-2.0-gangway_agent",
	}
	cfg.AddHostKey(s.HostKey)
	return cfg
}

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
	log := s.Log.With(zap.String("remote", c.RemoteAddr().String()), zap.String("user", sc.User()))
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
			ss := &stockSession{srv: s, log: log, conn: sc, ch: ch, user: sc.User(), remote: c.RemoteAddr(), local: c.LocalAddr()}
			ss.serve(ctx, creqs)
			open.Add(-1) // the session and what it ran have ended
		})
	}
	// The connection is gone: sessions see their channels closed and end
	// their processes; wg.Wait (deferred) waits for that.
	cancel()
}

// subsystem serves the launcher protocol on a session channel.
func (s *Server) subsystem(ctx context.Context, ch ssh.Channel) {
	if err := s.Agent.ServeSession(ctx, ch); err != nil && !errors.Is(err, context.Canceled) {
		s.Log.Info("launcher session ended", zap.Error(err))
	}
}
