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
	"unicode"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"

	"gangway/agent/wire"
	"gangway/hostfile"
	"gangway/internal/textx"
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
	caLines map[int]bool // known_hosts' @cert-authority lines
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
	if cfg.MPIOperator && !cfg.AcceptNewHosts {
		log.Warn("mpi-operator launcher pod: host keys not in known_hosts are accepted without being recorded, as the operator's images configure ssh (StrictHostKeyChecking no, UserKnownHostsFile /dev/null); a changed key is still refused",
			zap.String("known_hosts", d.khPath))
	}
	if cfg.Identity != "" {
		s, err := loadKey(cfg.Identity)
		if err != nil {
			return nil, fmt.Errorf("identity -i %s: %w", cfg.Identity, err)
		}
		d.signers = append(d.signers, withCert(cfg.Identity, s, log)...)
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
			d.signers = append(d.signers, withCert(p, s, log)...)
		} else if !errors.Is(err, os.ErrNotExist) {
			log.Warn("skipping identity", zap.String("file", p), zap.Error(err))
		}
	}
	if len(d.signers) == 0 {
		d.authErr = errors.New("no SSH identity: give -i FILE, run an ssh-agent, or create ~/.ssh/id_ed25519")
	}
	return d, nil
}

// maxKeyFile bounds a private key file's read: RSA-16384 in PEM is 13 KiB.
const maxKeyFile = 1 << 20

// loadKey reads a private key as OpenSSH's ssh does: a key file of
// this user's that group or others may access is refused (sshkey_perm_ok;
// root's own files included), naming the fix.
func loadKey(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: permissions %04o are too open: a private key must be readable by you alone (chmod 600 %s), as ssh requires", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// withCert returns the key s loaded from path, preceded by its user
// certificate when path-cert.pub holds one (as OpenSSH's ssh loads it):
// an agent that trusts the certificate's CA lets it in, and one that
// does not may still know the plain key.
func withCert(path string, s ssh.Signer, log *zap.Logger) []ssh.Signer {
	b, err := os.ReadFile(path + "-cert.pub")
	if err != nil {
		return []ssh.Signer{s}
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	cert, ok := pub.(*ssh.Certificate)
	if err != nil || !ok || cert.CertType != ssh.UserCert || string(cert.Key.Marshal()) != string(s.PublicKey().Marshal()) {
		log.Warn("skipping a certificate that is not a user certificate of its key", zap.String("file", path+"-cert.pub"), zap.Error(err))
		return []ssh.Signer{s}
	}
	cs, err := ssh.NewCertSigner(cert, s)
	if err != nil {
		log.Warn("skipping certificate", zap.String("file", path+"-cert.pub"), zap.Error(err))
		return []ssh.Signer{s}
	}
	return []ssh.Signer{cs, s}
}

func (d *sshDialer) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	conn, chans, reqs, ip, err := d.handshake(ctx, h)
	if err != nil {
		return nil, "", err
	}
	cc, err := openSubsystem(conn, chans, reqs)
	if errors.Is(err, errNoSubsystem) {
		return nil, "", permanent(fmt.Errorf("the SSH server on %s has no %q subsystem (is it a gangway agent? for a stock sshd use --transport ssh)", h.Name, wire.Subsystem))
	}
	if err != nil {
		return nil, "", err
	}
	return cc, ip, nil
}

// errNoSubsystem is a server's refusal of the subsystem request.
var errNoSubsystem = errors.New("subsystem request refused")

// openSubsystem opens a session channel on a new connection and starts
// the gangway subsystem on it, with keepalives. What the server may send
// unasked (global requests, channel opens, requests on the channel) is
// refused by one goroutine, as ssh.NewClient's handlers and
// ssh.DiscardRequests would in four: at a thousand hosts every goroutine
// per connection is a thousand stacks. It closes conn on failure; the
// error says whether opening the channel failed or the subsystem was
// refused (errNoSubsystem).
func openSubsystem(conn ssh.Conn, chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request) (*chanConn, error) {
	inc := make(chan (<-chan *ssh.Request), 1)
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		refuseIncoming(chans, reqs, inc)
	}()
	ch, in, err := conn.OpenChannel("session", nil)
	if err != nil {
		close(inc)
		conn.Close()
		<-refused
		return nil, fmt.Errorf("open session: %w", err)
	}
	inc <- in
	close(inc)
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{wire.Subsystem}))
	if err != nil || !ok {
		err = errors.Join(errNoSubsystem, err)
		ch.Close()
		conn.Close()
		<-refused
		return nil, err
	}
	cc := &chanConn{Channel: ch, client: conn, refused: refused}
	cc.stopKeepalive = keepalive(conn, cc.silent)
	return cc, nil
}

// refuseIncoming answers everything the server sends unasked with a
// refusal until the connection ends: channel opens, global requests, and
// requests on the session channel, which arrives on inc once open (inc
// closes without one when opening failed).
func refuseIncoming(chans <-chan ssh.NewChannel, reqs <-chan *ssh.Request, inc <-chan (<-chan *ssh.Request)) {
	var in <-chan *ssh.Request
	for chans != nil || reqs != nil || in != nil || inc != nil {
		select {
		case nc, ok := <-chans:
			if !ok {
				chans = nil
				continue
			}
			_ = nc.Reject(ssh.UnknownChannelType, fmt.Sprintf("unknown channel type: %v", nc.ChannelType()))
		case r, ok := <-reqs:
			if !ok {
				reqs = nil
				continue
			}
			_ = r.Reply(false, nil)
		case r, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		case c, ok := <-inc:
			inc = nil
			if ok {
				in = c
			}
		}
	}
}

// client opens an authenticated SSH connection to h's agent.
func (d *sshDialer) client(ctx context.Context, h hostfile.Host) (*ssh.Client, string, error) {
	conn, chans, reqs, ip, err := d.handshake(ctx, h)
	if err != nil {
		return nil, "", err
	}
	return ssh.NewClient(conn, chans, reqs), ip, nil
}

// handshake opens an authenticated SSH connection to h's agent.
func (d *sshDialer) handshake(ctx context.Context, h hostfile.Host) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
	fail := func(err error) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, string, error) {
		return nil, nil, nil, "", err
	}
	if d.authErr != nil {
		return fail(permanent(d.authErr))
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
	var banner strings.Builder // why an agent refused the login, if it says
	cc, chans, reqs, remote, err := connect(ctx, addr, func(c net.Conn) *ssh.ClientConfig {
		return &ssh.ClientConfig{
			User:              u,
			Auth:              []ssh.AuthMethod{ssh.PublicKeys(d.signers...)},
			HostKeyCallback:   d.hostKeyCallback(),
			HostKeyAlgorithms: d.hostKeyAlgorithms(addr, c.RemoteAddr()),
			BannerCallback: func(msg string) error {
				if banner.Len() < 4096 {
					banner.WriteString(msg)
				}
				return nil
			},
		}
	})
	if err != nil {
		if strings.Contains(err.Error(), "unable to authenticate") {
			if b := bannerText(banner.String()); b != "" {
				return fail(permanent(fmt.Errorf("authentication refused for user %s: %s", u, b)))
			}
			return fail(permanent(fmt.Errorf("authentication refused for user %s (is the public key in ~%s/.ssh/authorized_keys on the host, or in the agent's --authorized-keys?)", u, u)))
		}
		return fail(err)
	}
	ip := ""
	if ta, ok := remote.(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	return cc, chans, reqs, ip, nil
}

// connect dials addr and runs the SSH client handshake with the config
// that config makes for the connection. A peer that accepts and never
// answers must not hold the launcher: the whole handshake,
// authentication included, has HandshakeTimeout, and the connection is
// closed if ctx ends first. Errors: a failed dial as classify words it,
// ctx's, or the handshake's as "ADDR: ssh handshake: ..." (wrapping
// what the config's callbacks returned).
func connect(ctx context.Context, addr string, config func(net.Conn) *ssh.ClientConfig) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, net.Addr, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, nil, classify(addr, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(HandshakeTimeout))
	cc, chans, reqs, err := ssh.NewClientConn(c, addr, config(c))
	_ = c.SetDeadline(time.Time{})
	if !stop() {
		if cc != nil {
			cc.Close()
		}
		c.Close()
		return nil, nil, nil, nil, ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, nil, fmt.Errorf("%s: ssh handshake: %w", addr, err)
	}
	return cc, chans, reqs, c.RemoteAddr(), nil
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
func keepalive(c ssh.Conn, silent func()) (stop func()) {
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

// every calls tick every interval until tick returns false or the
// returned stop is called; tick sees quit close at stop. Ticks never
// overlap: the next is scheduled when one returns. No goroutine waits
// between ticks (each runs in its own, from a timer), since the launcher
// keeps two of these per host. stop waits for a tick under way and may
// be called more than once.
func every(interval time.Duration, tick func(quit <-chan struct{}) bool) (stop func()) {
	quit := make(chan struct{})
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
		running sync.WaitGroup // the scheduled or running tick
	)
	var run func()
	run = func() {
		defer running.Done()
		if !tick(quit) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			running.Add(1)
			t.Reset(interval)
		}
	}
	mu.Lock()
	running.Add(1)
	t = time.AfterFunc(interval, run)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			stopped = true
			if t.Stop() {
				running.Done() // it will not run
			}
			mu.Unlock()
			close(quit)
			running.Wait()
		})
	}
}

// classify words a failed TCP connection to addr for a user: the address
// always, what it means, and whether retrying can help (a name that does
// not resolve cannot: it fails at once).
func classify(addr string, err error) error {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		return permanent(fmt.Errorf("%s: no such host (%q does not resolve)", addr, dns.Name))
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: connection refused (is the agent running, and on this port? -p/--port, or host:slots:port)", addr)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%s: no route to host (host down, or a firewall drops the port)", addr)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: no answer (host down, or a firewall drops the port)", addr)
	case errors.As(err, &dns):
		return fmt.Errorf("%s: cannot resolve %q: %v", addr, dns.Name, dns.Err)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	return fmt.Errorf("%s: %w", addr, err)
}

// chanConn closes the SSH client with the channel, and says so when it
// was the keepalives that ended it.
type chanConn struct {
	ssh.Channel
	client        ssh.Conn
	stopKeepalive func()
	refused       <-chan struct{} // closed when refuseIncoming has returned; nil: none runs
	wasSilent     atomic.Bool
}

// ErrSilent is why a session ends when its agent stopped answering
// keepalives.
var ErrSilent = errors.New("no answer to SSH keepalives")

// silentError is a read's error once the keepalives ended the session;
// it is ErrSilent, with how long the agent was silent.
type silentError struct{ after time.Duration }

func (e silentError) Error() string {
	return fmt.Sprintf("%v for %v (host hung, stopped or cut off)", ErrSilent, e.after)
}

func (e silentError) Unwrap() error { return ErrSilent }

func (c *chanConn) silent() { c.wasSilent.Store(true) }

func (c *chanConn) Read(b []byte) (int, error) {
	n, err := c.Channel.Read(b)
	if err != nil && c.wasSilent.Load() {
		err = silentError{KeepaliveTimeout}
	}
	return n, err
}

func (c *chanConn) Close() error {
	c.Channel.Close()
	err := c.client.Close()
	c.stopKeepalive()
	if c.refused != nil {
		<-c.refused // the connection has ended, so its channels have closed
	}
	return err
}

// sshExec reaches hosts that run only a stock sshd: it starts
// `agent --stdio` there through the system ssh client.
type sshExec struct {
	cfg Transport
	log *zap.Logger
}

func (s *sshExec) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	args, err := textx.SplitShell(s.cfg.SSHCommand) // never through a shell
	if err != nil {
		return nil, "", permanent(fmt.Errorf("--ssh %q: %w", s.cfg.SSHCommand, err))
	}
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
	args = append(args, target, remotePath(s.cfg.AgentPath), "--stdio", "--name", shellQuote(h.Name))
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
	return &procConn{cmd: cmd, in: in, out: out, stderr: stderr, agentPath: s.cfg.AgentPath}, ip, nil
}

// sshExecError words what the system ssh said when the stream ended
// before the agent spoke; failures retrying cannot fix (the agent binary
// missing at --agent-path, authentication, the host key, a name that does
// not resolve) are permanent.
func sshExecError(msg, agentPath string) error {
	low := strings.ToLower(msg)
	said := strings.Join(strings.Fields(msg), " ")
	switch {
	case agentPath != "" && strings.Contains(msg, agentPath) &&
		(strings.Contains(low, "no such file") || strings.Contains(low, "not found") || strings.Contains(low, "permission denied")):
		return permanent(fmt.Errorf("no agent binary at --agent-path %s on the host: install it there, or give its path (ssh said: %s)", agentPath, said))
	case strings.Contains(low, "could not resolve hostname"):
		return permanent(fmt.Errorf("no such host (ssh said: %s)", said))
	case strings.Contains(low, "host key verification failed"), strings.Contains(low, "remote host identification has changed"):
		return permanent(fmt.Errorf("host key refused: check --known-hosts, or -accept-new-host-keys for a new host (ssh said: %s)", said))
	case strings.Contains(low, "permission denied (publickey"):
		return permanent(fmt.Errorf("authentication refused: give -i FILE, or add the key to the host's authorized_keys (ssh said: %s)", said))
	}
	return fmt.Errorf("ssh: %s: %w", msg, io.ErrUnexpectedEOF)
}

// remotePath is --agent-path for the remote shell: quoted, but a leading
// "~/" left for that shell to expand to the remote home, as users write it.
func remotePath(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return "~/" + shellQuote(rest)
	}
	return shellQuote(p)
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
	// agentPath is --agent-path, which ssh's message may name.
	agentPath string
}

func (p *procConn) Read(b []byte) (int, error) {
	n, err := p.out.Read(b)
	if err == io.EOF && n == 0 {
		if msg := strings.TrimSpace(p.stderr.String()); msg != "" {
			return 0, sshExecError(msg, p.agentPath)
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

// bannerText makes an agent's authentication banner safe to print: one
// paragraph of printable text, at most 512 bytes.
func bannerText(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case !unicode.IsPrint(r):
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:512], "") + "..."
	}
	return s
}
