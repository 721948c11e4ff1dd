package sshd

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"github.com/gangway-hpc/gangway/agent/account"
	"github.com/gangway-hpc/gangway/agent/proc"
	"github.com/gangway-hpc/gangway/agent/wire"
	"github.com/gangway-hpc/gangway/internal/environ"
	"github.com/gangway-hpc/gangway/internal/osproc"
	"github.com/gangway-hpc/gangway/internal/syncx"
	"github.com/gangway-hpc/gangway/internal/textx"
)

// lostGrace is how long a stock session's command gets between SIGTERM
// and SIGKILL when its connection drops (agent.LostGrace, for a
// launcher session's ranks, is the same).
const lostGrace = 2 * time.Second

// maxEnvRequests is how many env requests a session accepts, as in sshd:
// a client cannot grow a session's environment without bound.
const maxEnvRequests = 128

// stockSession is one "session" channel of a stock SSH client: exec,
// shell (with or without a PTY) or the gangway subsystem.
type stockSession struct {
	srv    *Server
	log    *zap.Logger
	conn   ssh.Conn // the SSH connection the channel belongs to
	ch     ssh.Channel
	login  *loginInfo // who logged in, and how
	remote net.Addr
	local  net.Addr

	mu      sync.Mutex
	env     []string
	pty     *ptyReq
	cmd     *exec.Cmd
	exited  bool // cmd has exited (and may be reaped): no more signals
	started bool
	tty     *os.File // PTY master
}

type ptyReq struct {
	Term          string
	Cols, Rows    uint32
	Width, Height uint32
	Modes         string
}

// serve runs the request loop: env before the command, one exec, shell or
// subsystem, signals while it runs, false for anything else.
func (ss *stockSession) serve(ctx context.Context, reqs <-chan *ssh.Request) {
	defer ss.ch.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	refusedJob := 0
	for req := range reqs {
		if ss.login.jobOnly && req.Type != "subsystem" {
			// A job certificate opens the gangway subsystem only: no
			// command, shell, pty, environment or signal.
			refusedJob++
			ss.refuseForJob(refusedJob, req.Type)
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
			continue
		}
		ok := false
		switch req.Type {
		case "env":
			ok = ss.setEnv(req.Payload)
		case "pty-req":
			ok = ss.setPTY(req.Payload)
		case "window-change":
			ok = ss.resize(req.Payload)
		case "exec", "shell":
			command, parsed := execCommand(req)
			if parsed && ss.claim() {
				ss.auditCommand(req.Type, command)
				if req.WantReply {
					_ = req.Reply(true, nil)
				}
				wg.Go(func() {
					ss.run(ctx, req.Type == "shell", command)
					cancel()
				})
				continue
			}
		case "subsystem":
			if name, allowed := ss.subsystemAllowed(req.Payload); allowed && ss.claim() {
				ss.log.Info("subsystem", zap.String("subsystem", name))
				if req.WantReply {
					_ = req.Reply(true, nil)
				}
				wg.Go(func() {
					ss.srv.subsystem(ctx, subsystemConn{ss.ch, ss.conn}, ss.login)
					ss.ch.Close()
				})
				continue
			}
		case "signal":
			var s struct{ Signal string }
			if ssh.Unmarshal(req.Payload, &s) == nil {
				ok = ss.signal(s.Signal)
			}
		}
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
}

// setEnv takes an env request before the command starts, for a valid
// name --accept-env lets through, up to maxEnvRequests.
func (ss *stockSession) setEnv(payload []byte) bool {
	var kv struct{ Name, Value string }
	if ssh.Unmarshal(payload, &kv) != nil || ss.isStarted() || !wire.ValidEnvName(kv.Name) {
		return false
	}
	if !ss.srv.acceptsEnv(kv.Name) {
		ss.log.Debug("refused env request: not in --accept-env", zap.String("name", textx.Clip(kv.Name)))
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.env) >= maxEnvRequests {
		return false
	}
	ss.env = append(ss.env, kv.Name+"="+kv.Value)
	return true
}

// setPTY takes a pty-req before the command starts, unless the login's
// certificate lacks permit-pty.
func (ss *stockSession) setPTY(payload []byte) bool {
	var p ptyReq
	if ssh.Unmarshal(payload, &p) != nil || ss.isStarted() {
		return false
	}
	if ss.login.noPTY {
		ss.log.Debug("refused pty request: the certificate lacks permit-pty")
		return false
	}
	ss.mu.Lock()
	ss.pty = &p
	ss.mu.Unlock()
	return true
}

// resize applies a window-change to the session's PTY, if it has one.
func (ss *stockSession) resize(payload []byte) bool {
	var w struct{ Cols, Rows, Width, Height uint32 }
	if ssh.Unmarshal(payload, &w) != nil {
		return false
	}
	ss.mu.Lock()
	if ss.tty != nil {
		_ = setWinsize(ss.tty, w.Rows, w.Cols)
	}
	ss.mu.Unlock()
	return true
}

// execCommand is an exec request's command ("" for shell), and whether
// the request could be read.
func execCommand(req *ssh.Request) (string, bool) {
	if req.Type != "exec" {
		return "", true
	}
	var c struct{ Command string }
	if ssh.Unmarshal(req.Payload, &c) != nil {
		return "", false
	}
	return c.Command, true
}

// subsystemAllowed reads a subsystem request: its name, and whether this
// session may run it: the gangway subsystem only, not under a
// certificate that forces a command (a job certificate's force-command
// means this subsystem, and jobOnly stands for it), and only where the
// server runs launcher sessions (Server.Subsystem).
func (ss *stockSession) subsystemAllowed(payload []byte) (string, bool) {
	var s struct{ Name string }
	if ssh.Unmarshal(payload, &s) != nil || s.Name != wire.Subsystem {
		if ss.login.jobOnly {
			ss.log.Info("refused subsystem: a job certificate opens the gangway subsystem only", zap.String("name", textx.Clip(s.Name)))
		} else {
			ss.log.Debug("refused unknown subsystem", zap.String("name", textx.Clip(s.Name)))
		}
		return s.Name, false
	}
	if ss.login.forceCommand != "" {
		ss.log.Info("refused subsystem: the certificate forces a command", zap.String("subsystem", s.Name))
		return s.Name, false
	}
	if ss.srv.Subsystem == nil {
		ss.log.Debug("refused subsystem: this server runs no launcher sessions", zap.String("subsystem", s.Name))
		return s.Name, false
	}
	return s.Name, true
}

// refuseForJob logs a request a job certificate's login may not make:
// the session's first such request at info, the rest at debug.
func (ss *stockSession) refuseForJob(n int, request string) {
	log := ss.log.Debug
	if n == 1 {
		log = ss.log.Info
	}
	log("refused request: a job certificate opens the gangway subsystem only", zap.String("request", textx.Clip(request)),
		zap.String("job_id", textx.Clip(ss.login.jobID)))
}

func (ss *stockSession) isStarted() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.started
}

// claim marks the session's one command as taken.
func (ss *stockSession) claim() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.started {
		return false
	}
	ss.started = true
	return true
}

func (ss *stockSession) signal(name string) bool {
	sig, err := proc.ParseSignal(name)
	if err != nil {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.cmd == nil || ss.cmd.Process == nil || ss.exited {
		// Once the command is reaped its pid, and so its group's id, may
		// name another process: as sshd, no signal after the exit.
		return false
	}
	return osproc.SignalGroup(ss.cmd.Process.Pid, sig) == nil
}

// auditCommand logs what a session runs.
func (ss *stockSession) auditCommand(kind, command string) {
	ss.mu.Lock()
	pty := ss.pty != nil
	ss.mu.Unlock()
	f := []zap.Field{zap.Bool("pty", pty)}
	if kind == "exec" {
		f = append(f, zap.String("command", textx.Clip(command)))
	}
	if ss.login.forceCommand != "" {
		f = append(f, zap.String("force_command", textx.Clip(ss.login.forceCommand)))
	}
	ss.log.Info(kind, f...)
}

// run executes the command through the user's shell, as sshd does, as
// the user who logged in and in their home directory, and reports
// exit-status or exit-signal. A certificate's force-command runs instead
// of what the client asked, which it finds in SSH_ORIGINAL_COMMAND. The
// process group is stopped when the connection drops while the command
// runs.
func (ss *stockSession) run(ctx context.Context, shell bool, command string) {
	a := ss.login.account
	cmd, pty := ss.command(shell, command)
	// copiers carry output to the client; inputs carry the client's stdin
	// and end when the channel closes, which run does last.
	var copiers, inputs sync.WaitGroup
	defer inputs.Wait()
	defer ss.ch.Close()
	var child []*os.File
	var closeIn func()
	var err error
	if pty != nil {
		child, closeIn, err = ss.attachPTY(cmd, pty, a, &copiers, &inputs)
	} else {
		child, closeIn, err = ss.attachPipes(cmd, a.Credential(), &copiers, &inputs)
	}
	if err != nil {
		ss.fail(err.Error())
		return
	}
	defer closeIn()
	err = proc.StartClean(cmd)
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		ss.fail(err.Error())
		return
	}
	werr := ss.wait(ctx, cmd)
	// After a normal exit the group is left alone, as OpenSSH's sshd does:
	// a daemon that forks and calls setsid (orted --daemonize, nohup jobs)
	// must not be killed in the window before setsid. Only a dropped
	// connection or a signal while the command runs stops the group.
	select {
	case <-syncx.Done(copiers.Wait):
	case <-time.After(2 * time.Second):
		// A process that left the group (a daemon) may keep the output
		// pipes open. Its copiers are not waited for: they end when it
		// closes them or exits, or at its next write once the channel is
		// closed below.
	}
	ss.exitStatus(cmd.ProcessState, werr)
}

// command is what run starts for the client's request: the login
// shell, as a login shell for shell or with -c command (the
// certificate's force-command instead, the client's command then in
// SSH_ORIGINAL_COMMAND), in the user's home (else /, saying why), with
// the session's environment; and the session's PTY request, or nil.
func (ss *stockSession) command(shell bool, command string) (*exec.Cmd, *ptyReq) {
	a := ss.login.account
	var extra []string
	if forced := ss.login.forceCommand; forced != "" {
		if !shell {
			extra = []string{"SSH_ORIGINAL_COMMAND=" + command}
		}
		shell, command = false, forced
	}
	var cmd *exec.Cmd
	if shell {
		cmd = exec.Command(a.Shell)
		cmd.Args = []string{"-" + filepath.Base(a.Shell)}
	} else {
		cmd = exec.Command(a.Shell, "-c", command)
	}
	cmd.Dir = a.Home
	if err := a.Enter(a.Home); err != nil {
		// As sshd: the session starts in / and says why.
		_, _ = io.WriteString(ss.ch.Stderr(), "Could not chdir to home directory "+a.Home+": "+err.Error()+"\n")
		cmd.Dir = "/"
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cmd.Env = ss.environ(a, extra)
	return cmd, ss.pty
}

// wait waits for cmd, started, to exit and reaps it. When ctx ends first
// (the connection dropped) its process group is stopped: SIGTERM, and
// SIGKILL after lostGrace. The command's pid, and so its group's id, is
// its own until it is reaped: every signal to the group is sent, or
// refused (exited), between its exit and the reap.
func (ss *stockSession) wait(ctx context.Context, cmd *exec.Cmd) error {
	ss.mu.Lock()
	ss.cmd = cmd
	ss.mu.Unlock()
	pid := cmd.Process.Pid
	exited, stopped := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		_ = osproc.StopGroup(pid, lostGrace, exited)
	})
	_ = proc.WaitExited(pid)
	ss.mu.Lock()
	ss.exited = true
	ss.mu.Unlock()
	close(exited)
	if !stop() {
		<-stopped // the group has had its SIGKILL
	}
	return cmd.Wait()
}

func (ss *stockSession) exitStatus(ps *os.ProcessState, err error) {
	if ps == nil {
		ss.sendStatus(255)
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		msg := struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{sshSignalName(ws.Signal()), ws.CoreDump(), "", ""}
		_, _ = ss.ch.SendRequest("exit-signal", false, ssh.Marshal(&msg))
		_ = ss.ch.CloseWrite()
		return
	}
	ss.sendStatus(uint32(ps.ExitCode()))
}

// sshSignalName is the name exit-signal carries: without the SIG prefix
// (RFC 4254 6.10), "SIG<n>" for a signal proc has no name for.
func sshSignalName(s syscall.Signal) string {
	if n := proc.SignalName(s); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return "SIG" + strconv.Itoa(int(s))
}

func (ss *stockSession) sendStatus(code uint32) {
	_, _ = ss.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
	_ = ss.ch.CloseWrite()
}

func (ss *stockSession) fail(msg string) {
	_, _ = io.WriteString(ss.ch.Stderr(), "agent: "+msg+"\n")
	ss.sendStatus(255)
}

// environ is what sshd would give: the agent's environment with the
// user's identity and the connection on top, then the client's env
// requests (those --accept-env lets through), then TERM for a PTY, then
// extra (SSH_ORIGINAL_COMMAND).
func (ss *stockSession) environ(a *account.Account, extra []string) []string {
	base := ss.srv.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	conn := append(a.Identity(),
		"SSH_CLIENT="+hostPortSpaced(ss.remote)+" "+portOf(ss.local),
		"SSH_CONNECTION="+hostPortSpaced(ss.remote)+" "+hostPortSpaced(ss.local),
	)
	var term []string
	if ss.pty != nil && ss.pty.Term != "" {
		term = []string{"TERM=" + ss.pty.Term}
	}
	return environ.Merge(base, conn, ss.env, term, extra)
}

// acceptsEnv reports whether stock sessions take the variable name from
// an env request (AcceptEnv).
func (s *Server) acceptsEnv(name string) bool {
	patterns := s.AcceptEnv
	if patterns == nil {
		patterns = DefaultAcceptEnv
	}
	return matchAny(patterns, name)
}

func hostPortSpaced(a net.Addr) string {
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h + " " + p
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// subsystemConn is the launcher's session channel; closing it closes the
// whole SSH connection first (a launcher opens one session per
// connection), so that nothing of the session stays blocked writing to a
// peer that stopped reading, as behind a network partition.
type subsystemConn struct {
	ssh.Channel
	conn ssh.Conn
}

func (c subsystemConn) Close() error {
	if c.conn != nil {
		c.conn.Close()
	}
	return c.Channel.Close()
}
