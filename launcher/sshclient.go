package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"gangway/agent/wire"
	"gangway/hostfile"
)

// NewRemote builds the dialer for non-local hosts from the config.
func NewRemote(cfg Transport, log *zap.Logger) (Dialer, error) {
	if cfg.Kind == "ssh" {
		return &sshExec{cfg: cfg, log: log.Named("ssh")}, nil
	}
	return newSSHDialer(cfg, log.Named("ssh"))
}

// sshDialer reaches agents with x/crypto/ssh and opens the gangway
// subsystem.
type sshDialer struct {
	cfg     Transport
	log     *zap.Logger
	signers []ssh.Signer
	khPath  string
	khMu    sync.Mutex
	kh      ssh.HostKeyCallback // parsed known_hosts, nil until first use
	khErr   error
	user    string
	authErr error
}

func newSSHDialer(cfg Transport, log *zap.Logger) (*sshDialer, error) {
	d := &sshDialer{cfg: cfg, log: log}
	if u, err := user.Current(); err == nil {
		d.user = u.Username
	}
	home, _ := os.UserHomeDir()
	d.khPath = cfg.KnownHosts
	if d.khPath == "" {
		d.khPath = filepath.Join(home, ".ssh", "known_hosts")
	}
	if cfg.Identity != "" {
		s, err := loadKey(cfg.Identity)
		if err != nil {
			return nil, fmt.Errorf("identity -i %s: %w", cfg.Identity, err)
		}
		d.signers = append(d.signers, s)
		return d, nil
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if c, err := net.Dial("unix", sock); err == nil {
			if ss, err := sshagent.NewClient(c).Signers(); err == nil {
				d.signers = append(d.signers, ss...)
			}
		}
	}
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(home, ".ssh", n)
		if s, err := loadKey(p); err == nil {
			d.signers = append(d.signers, s)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("skipping identity", zap.String("file", p), zap.Error(err))
		}
	}
	if len(d.signers) == 0 {
		d.authErr = errors.New("no SSH identity: give -i FILE, run an ssh-agent, or create ~/.ssh/id_ed25519")
	}
	return d, nil
}

func loadKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// HostKeyError is a refused host key.
type HostKeyError struct {
	Host, Fingerprint string
	Mismatch          bool
	KnownHosts        string
}

func (e *HostKeyError) Error() string {
	if e.Mismatch {
		return fmt.Sprintf("HOST KEY MISMATCH for %s: it offered %s, which differs from the key in %s; if the host was reinstalled, remove its line from that file", e.Host, e.Fingerprint, e.KnownHosts)
	}
	return fmt.Sprintf("unknown host key for %s (%s): not in %s; verify it and add it, or pass --accept-new-host-keys", e.Host, e.Fingerprint, e.KnownHosts)
}

func (d *sshDialer) hostKeyCallback() ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		d.khMu.Lock()
		defer d.khMu.Unlock()
		// Parsed once per launch (re-read after we add a key): with a
		// thousand hosts, parsing the file per host under this lock was a
		// launcher-side O(hosts^2).
		if d.kh == nil && d.khErr == nil {
			d.kh, d.khErr = readKnownHosts(d.khPath, d.log)
		}
		cb, err := d.kh, d.khErr
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", d.khPath, err)
		}
		if err == nil {
			err = cb(hostname, remote, key)
			if err == nil {
				return nil
			}
		} else {
			err = &knownhosts.KeyError{}
		}
		var ke *knownhosts.KeyError
		fp := ssh.FingerprintSHA256(key)
		if errors.As(err, &ke) && len(ke.Want) > 0 {
			return permanent(&HostKeyError{Host: hostname, Fingerprint: fp, Mismatch: true, KnownHosts: d.khPath})
		}
		if !errors.As(err, &ke) {
			return err
		}
		if !d.cfg.AcceptNewHosts {
			return permanent(&HostKeyError{Host: hostname, Fingerprint: fp, KnownHosts: d.khPath})
		}
		line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
		if err := os.MkdirAll(filepath.Dir(d.khPath), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(d.khPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("record host key: %w", err)
		}
		defer f.Close()
		_, err = fmt.Fprintln(f, line)
		d.kh, d.khErr = nil, nil // re-read with the new key next time
		d.log.Info("trusting new host key", zap.String("host", hostname), zap.String("fingerprint", fp))
		return err
	}
}

func (d *sshDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	client, ip, err := d.client(ctx, h)
	if err != nil {
		return nil, "", err
	}
	ch, in, err := client.OpenChannel("session", nil)
	if err != nil {
		client.Close()
		return nil, "", fmt.Errorf("open session: %w", err)
	}
	go ssh.DiscardRequests(in)
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil || !ok {
		ch.Close()
		client.Close()
		return nil, "", permanent(fmt.Errorf("the SSH server on %s has no %q subsystem (is it a gangway agent? for a stock sshd use --transport ssh)", h.Name, wire.Subsystem))
	}
	cc := &chanConn{Channel: ch, client: client}
	cc.stopKeepalive = keepalive(client, cc.silent)
	return cc, ip, nil
}

// client opens an authenticated SSH connection to h's agent.
func (d *sshDialer) client(ctx context.Context, h hostfile.Host) (*ssh.Client, string, error) {
	if d.authErr != nil {
		return nil, "", permanent(d.authErr)
	}
	port := h.Port
	if port == 0 {
		port = d.cfg.Port
	}
	addr := net.JoinHostPort(h.Name, strconv.Itoa(port))
	u := h.User
	if u == "" {
		u = d.user
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", classify(err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	// A peer that accepts and never answers must not hold the launcher:
	// the whole handshake, authentication included, has a deadline.
	_ = c.SetDeadline(time.Now().Add(HandshakeTimeout))
	cc, chans, reqs, err := ssh.NewClientConn(c, addr, &ssh.ClientConfig{
		User:            u,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(d.signers...)},
		HostKeyCallback: d.hostKeyCallback(),
	})
	_ = c.SetDeadline(time.Time{})
	if !stop() {
		if cc != nil {
			cc.Close()
		}
		c.Close()
		return nil, "", ctx.Err()
	}
	if err != nil {
		c.Close()
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, "", permanent(fmt.Errorf("authentication refused for user %s (is the public key in the agent's authorized_keys?)", u))
		}
		return nil, "", err
	}
	ip := ""
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	return ssh.NewClient(cc, chans, reqs), ip, nil
}

// Keepalive timing: an agent that stops answering (host hung, agent
// stopped, network cut without a reset) is declared lost after
// KeepaliveTimeout without a reply to a keepalive sent every
// KeepaliveInterval.
var (
	KeepaliveInterval = 5 * time.Second
	KeepaliveTimeout  = 15 * time.Second
	// HandshakeTimeout bounds an SSH handshake with an agent.
	HandshakeTimeout = 20 * time.Second
)

// keepalive closes c when it stops answering keepalive requests, after
// calling silent (which may be nil); the returned function stops it and
// waits for its goroutines.
func keepalive(c *ssh.Client, silent func()) (stop func()) {
	return every(KeepaliveInterval, func(quit <-chan struct{}) bool {
		reply := make(chan error, 1)
		var req sync.WaitGroup
		req.Go(func() {
			_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		})
		select {
		case err := <-reply:
			return err == nil
		case <-time.After(KeepaliveTimeout):
			if silent != nil {
				silent()
			}
			c.Close() // unblocks the request; the job sees the session end
		case <-quit:
			c.Close()
		}
		req.Wait()
		return false
	})
}

// every calls tick every interval, from one goroutine, until tick returns
// false or the returned stop is called; tick sees quit close at stop.
// stop waits for the goroutine and may be called more than once.
func every(interval time.Duration, tick func(quit <-chan struct{}) bool) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if !tick(quit) {
					return
				}
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(quit); wg.Wait() }) }
}

func classify(err error) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("connection refused (no agent listening)")
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("timeout")
	}
	return err
}

// chanConn closes the SSH client with the channel, and says so when it
// was the keepalives that ended it.
type chanConn struct {
	ssh.Channel
	client        *ssh.Client
	stopKeepalive func()
	wasSilent     atomic.Bool
}

// ErrSilent is why a session ends when its agent stopped answering
// keepalives.
var ErrSilent = errors.New("no answer to SSH keepalives")

func (c *chanConn) silent() { c.wasSilent.Store(true) }

func (c *chanConn) Read(b []byte) (int, error) {
	n, err := c.Channel.Read(b)
	if err != nil && c.wasSilent.Load() {
		err = fmt.Errorf("%w for %v (host hung, stopped or cut off)", ErrSilent, KeepaliveTimeout)
	}
	return n, err
}

func (c *chanConn) Close() error {
	c.Channel.Close()
	err := c.client.Close()
	c.stopKeepalive()
	return err
}

// sshExec reaches hosts that run only a stock sshd: it starts
// `agent --stdio` there through the system ssh client.
type sshExec struct {
	cfg Transport
	log *zap.Logger
}

func (s *sshExec) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	args := strings.Fields(s.cfg.SSHCommand)
	if len(args) == 0 {
		args = []string{"ssh"}
	}
	args = append(args, "-o", "BatchMode=yes")
	if h.Port != 0 {
		args = append(args, "-p", strconv.Itoa(h.Port))
	}
	if s.cfg.Identity != "" {
		args = append(args, "-i", s.cfg.Identity)
	}
	if s.cfg.KnownHosts != "" {
		args = append(args, "-o", "UserKnownHostsFile="+s.cfg.KnownHosts)
	}
	if s.cfg.AcceptNewHosts {
		args = append(args, "-o", "StrictHostKeyChecking=accept-new")
	}
	target := h.Name
	if h.User != "" {
		target = h.User + "@" + h.Name
	}
	args = append(args, target, s.cfg.AgentPath, "--stdio", "--name", shellQuote(h.Name))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	stderr := &limitedWriter{n: 4096}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", args[0], err)
	}
	ip := h.Name
	if addrs, err := net.DefaultResolver.LookupHost(ctx, h.Name); err == nil && len(addrs) > 0 {
		ip = addrs[0]
	}
	return &procConn{cmd: cmd, in: in, out: out, stderr: stderr}, ip, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// procConn is a child process's stdin/stdout as one stream.
type procConn struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    io.ReadCloser
	stderr *limitedWriter
	once   sync.Once
}

func (p *procConn) Read(b []byte) (int, error) {
	n, err := p.out.Read(b)
	if err == io.EOF && n == 0 {
		if msg := strings.TrimSpace(p.stderr.String()); msg != "" {
			return 0, fmt.Errorf("ssh: %s: %w", msg, io.ErrUnexpectedEOF)
		}
	}
	return n, err
}
func (p *procConn) Write(b []byte) (int, error) { return p.in.Write(b) }
func (p *procConn) Close() error {
	p.once.Do(func() {
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return nil
}

type limitedWriter struct {
	mu sync.Mutex
	w  strings.Builder
	n  int
}

func (l *limitedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rem := l.n - l.w.Len(); rem > 0 {
		l.w.Write(b[:min(len(b), rem)])
	}
	return len(b), nil
}

// readKnownHosts parses a known_hosts file as OpenSSH does: a line that
// does not parse is skipped with a warning naming the file and the line,
// and the others still count.
func readKnownHosts(path string, log *zap.Logger) (ssh.HostKeyCallback, error) {
	cb, err := knownhosts.New(path)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return cb, err
	}
	b, rerr := os.ReadFile(path)
	if rerr != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	// Drop one bad line at a time (knownhosts names the first), for at
	// most as many rounds as there are lines.
	for range lines {
		n, ok := badLine(err)
		if !ok || n < 1 || n > len(lines) {
			return nil, err
		}
		log.Warn("skipping a known_hosts line that does not parse", zap.String("file", path), zap.Int("line", n), zap.Error(err))
		lines[n-1] = "# " + lines[n-1] // keeps the numbering of the rest
		if cb, err = knownHostsFrom(lines); err == nil {
			return cb, nil
		}
	}
	return nil, err
}

// badLine finds N in knownhosts' "knownhosts: FILE:N: ..." parse errors.
func badLine(err error) (int, bool) {
	msg := err.Error()
	for i := strings.Index(msg, ":"); i >= 0; {
		rest := msg[i+1:]
		j := strings.Index(rest, ":")
		if j < 0 {
			return 0, false
		}
		if n, err := strconv.Atoi(rest[:j]); err == nil {
			return n, true
		}
		i += 1 + j
	}
	return 0, false
}

// knownHostsFrom builds a callback from lines through a private
// temporary file (knownhosts reads files only).
func knownHostsFrom(lines []string) (ssh.HostKeyCallback, error) {
	f, err := os.CreateTemp("", "gangway-known-hosts-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(strings.Join(lines, "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return knownhosts.New(f.Name())
}
