package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/hostfile"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/internal/syncx"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// The ssh transport (--transport ssh), for hosts that run only a stock
// sshd: the system ssh client starts `agent --stdio` there, and the
// session runs over its stdin and stdout.

var _ Dialer = (*sshExec)(nil)

// newSSHExec is the ssh kind's constructor.
func newSSHExec(o Options, _ []hostfile.Host, _ bool, log *zap.Logger) (Dialer, error) {
	s := &sshExec{cfg: o, log: log.Named("ssh")}
	s.sshCfg = sync.OnceValue(s.loadConfig)
	return s, nil
}

// sshExec reaches hosts that run only a stock sshd: it starts
// `agent --stdio` there through the system ssh client.
type sshExec struct {
	cfg Options
	log *zap.Logger
	// sshCfg is the configuration the system ssh reads, for the names
	// behind its aliases (the ssh client resolves them itself).
	sshCfg func() *sshConfig
	// noisyOnce: the warning that a host's shell printed before its
	// agent, once a launch.
	noisyOnce sync.Once
}

// loadConfig reads the ssh configuration the system ssh will read: -F's,
// else a -F in --ssh's words, else the default files. One that does not
// load is no configuration here (ssh will say what is wrong with it).
func (s *sshExec) loadConfig() *sshConfig {
	f := s.cfg.SSHConfig
	if words, err := textx.SplitShell(s.cfg.SSHCommand); f == "" && err == nil {
		for i, w := range words {
			if w == "-F" && i+1 < len(words) {
				f = words[i+1]
			}
		}
	}
	home, _ := os.UserHomeDir()
	c, err := loadSSHConfig(f, home, "")
	if err != nil {
		s.log.Debug("ssh config not read", zap.Error(err))
		return &sshConfig{}
	}
	return c
}

// PeerName is h's HostName in the ssh configuration, which the other
// hosts can resolve where an alias means nothing to them.
func (s *sshExec) PeerName(h hostfile.Host) string {
	hc, err := s.sshCfg().resolve(h.Name, hostDefaults{DefPort: 22})
	if err != nil {
		return h.Name
	}
	return hc.HostName
}

func (s *sshExec) Dial(ctx context.Context, h hostfile.Host) (io.ReadWriteCloser, string, error) {
	args, err := textx.SplitShell(s.cfg.SSHCommand) // never through a shell
	if err != nil {
		return nil, "", Permanent(fmt.Errorf("--ssh %q: %w", s.cfg.SSHCommand, err))
	}
	if len(args) == 0 {
		args = []string{"ssh"}
	}
	// The stream is the session's, byte for byte: no pty (a user's
	// RequestTTY would echo the launcher's frames back and translate
	// newlines), no escape character, and the command given here, not a
	// RemoteCommand of the user's configuration (tmux new -A, say), which
	// ssh refuses beside a command line.
	args = append(args, "-o", "BatchMode=yes", "-T", "-e", "none", "-o", "RemoteCommand=none")
	if s.cfg.SSHConfig != "" {
		args = append(args, "-F", s.cfg.SSHConfig)
	}
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
	args = append(args, target, remotePath(s.cfg.AgentPath), "--stdio", "--stdio-marker", "--name", shellQuote(h.Name))
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
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	stderr := &limitedWriter{n: 4096}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", args[0], err)
	}
	// Copied here, not by exec: a stream that ends before the agent
	// speaks is worded by what ssh said, which may still be on its way
	// when stdout ends (errDone).
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		_, _ = io.Copy(stderr, errPipe)
	}()
	ip := s.PeerName(h)
	if addrs, err := net.DefaultResolver.LookupHost(ctx, ip); err == nil && len(addrs) > 0 {
		ip = addrs[0]
	}
	// The user's shell on the host may print before it runs the agent (a
	// ~/.bashrc with a greeting or modules' banners): the session begins
	// after the agent's marker line.
	marked := wire.NewStdioReader(out, func(noise []byte) {
		if len(noise) > 0 {
			s.noisyOnce.Do(func() {
				s.log.Warn("the remote shell printed on stdout before the agent started (a ~/.bashrc that writes to stdout?); skipped",
					zap.String("host", h.Name), zap.String("printed", textx.ClipMore(noise, wire.MaxNoiseShown)))
			})
		}
	})
	return &procConn{cmd: cmd, in: in, out: marked, stderr: stderr, errDone: errDone, agentPath: s.cfg.AgentPath}, ip, nil
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
		return Permanent(fmt.Errorf("no agent binary at --agent-path %s on the host: install it there, or give its path (ssh said: %s)", agentPath, said))
	case strings.Contains(msg, "flag provided but not defined: -stdio-marker"):
		return Permanent(fmt.Errorf("the agent at --agent-path %s on the host is older than this launcher (it has no --stdio-marker): install this launcher's agent there", agentPath))
	case strings.Contains(low, "could not resolve hostname"):
		return Permanent(fmt.Errorf("no such host (ssh said: %s)", said))
	case strings.Contains(low, "host key verification failed"), strings.Contains(low, "remote host identification has changed"):
		return Permanent(fmt.Errorf("host key refused: check --known-hosts, or -accept-new-host-keys for a new host (ssh said: %s)", said))
	case strings.Contains(low, "permission denied (publickey"):
		return Permanent(fmt.Errorf("authentication refused: give -i FILE, or add the key to the host's authorized_keys (ssh said: %s)", said))
	case strings.Contains(low, "connection refused"), strings.Contains(low, "no route to host"), strings.Contains(low, "network is unreachable"):
		return Unreachable(fmt.Errorf("ssh: %s: %w", msg, io.ErrUnexpectedEOF))
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
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     io.Reader // stdout after the agent's marker
	stderr  *limitedWriter
	errDone <-chan struct{} // closed once ssh's stderr has ended
	once    sync.Once
	// agentPath is --agent-path, which ssh's message may name.
	agentPath string
}

func (p *procConn) Read(b []byte) (int, error) {
	n, err := p.out.Read(b)
	if n == 0 && (err == io.EOF || errors.Is(err, wire.ErrNoStdioMarker)) {
		// ssh's last words come on stderr as stdout ends: wait for them
		// (ssh exits; its stderr ends with it), a little.
		select {
		case <-p.errDone:
		case <-time.After(2 * time.Second):
		}
		if msg := strings.TrimSpace(p.stderr.String()); msg != "" {
			return 0, sshExecError(msg, p.agentPath)
		}
		if err != io.EOF {
			// The shell printed, and no agent followed, nor a word on
			// stderr: nothing retrying would change.
			return 0, Permanent(fmt.Errorf("no agent session began after what the remote shell printed: %w", err))
		}
	}
	return n, err
}

func (p *procConn) Write(b []byte) (int, error) { return p.in.Write(b) }

func (p *procConn) Close() error {
	p.once.Do(func() {
		p.in.Close()
		done := syncx.Done(func() { _ = p.cmd.Wait() })
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = osproc.KillGroup(p.cmd.Process.Pid, syscall.SIGKILL)
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
