package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ssh"

	"gangway/agent/proc"
	"gangway/agent/wire"
	"gangway/internal/syncx"
)

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
	user   string
	remote net.Addr
	local  net.Addr

	mu      sync.Mutex
	env     []string
	pty     *ptyReq
	cmd     *exec.Cmd
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
	for req := range reqs {
		ok := false
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if ssh.Unmarshal(req.Payload, &kv) == nil && !ss.isStarted() && wire.ValidEnvName(kv.Name) {
				ss.mu.Lock()
				if ok = len(ss.env) < maxEnvRequests; ok {
					ss.env = append(ss.env, kv.Name+"="+kv.Value)
				}
				ss.mu.Unlock()
			}
		case "pty-req":
			var p ptyReq
			if ssh.Unmarshal(req.Payload, &p) == nil && !ss.isStarted() {
				ss.mu.Lock()
				ss.pty = &p
				ss.mu.Unlock()
				ok = true
			}
		case "window-change":
			var w struct{ Cols, Rows, Width, Height uint32 }
			if ssh.Unmarshal(req.Payload, &w) == nil {
				ss.mu.Lock()
				if ss.tty != nil {
					_ = setWinsize(ss.tty, w.Rows, w.Cols)
				}
				ss.mu.Unlock()
				ok = true
			}
		case "exec", "shell":
			var command string
			if req.Type == "exec" {
				var c struct{ Command string }
				if ssh.Unmarshal(req.Payload, &c) != nil {
					break
				}
				command = c.Command
			}
			if ss.claim() {
				ok = true
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
			var s struct{ Name string }
			if ssh.Unmarshal(req.Payload, &s) == nil && s.Name == wire.Subsystem && ss.claim() {
				if req.WantReply {
					_ = req.Reply(true, nil)
				}
				wg.Go(func() {
					ss.srv.subsystem(ctx, subsystemConn{ss.ch, ss.conn})
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
	if ss.cmd == nil || ss.cmd.Process == nil {
		return false
	}
	return syscall.Kill(-ss.cmd.Process.Pid, sig) == nil
}

// run executes the command through the user's shell, as sshd does, and
// reports exit-status or exit-signal. The process group is stopped when
// the connection drops while the command runs.
func (ss *stockSession) run(ctx context.Context, shell bool, command string) {
	u := lookupUser(ss.user)
	var cmd *exec.Cmd
	if shell {
		cmd = exec.Command(u.shell)
		cmd.Args = []string{"-" + filepath.Base(u.shell)}
	} else {
		cmd = exec.Command(u.shell, "-c", command)
	}
	cmd.Dir = u.home
	ss.mu.Lock()
	cmd.Env = ss.environ(u)
	pty := ss.pty
	ss.mu.Unlock()

	// copiers carry output to the client; inputs carry the client's stdin
	// and end when the channel closes, which run does last.
	var copiers, inputs sync.WaitGroup
	defer inputs.Wait()
	defer ss.ch.Close()
	var err error
	var closeAfterStart []*os.File
	if pty != nil {
		var master, slave *os.File
		if master, slave, err = openPTY(pty.Rows, pty.Cols); err != nil {
			ss.fail("cannot allocate a pty: " + err.Error())
			return
		}
		defer master.Close()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		closeAfterStart = append(closeAfterStart, slave)
		ss.mu.Lock()
		ss.tty = master
		ss.mu.Unlock()
		copiers.Go(func() { _, _ = io.Copy(ss.ch, master) })
		inputs.Go(func() { _, _ = io.Copy(master, ss.ch) }) // ends when the channel closes
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			ss.fail(err.Error())
			return
		}
		outR, outW, _ := os.Pipe()
		errR, errW, _ := os.Pipe()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		closeAfterStart = append(closeAfterStart, inR, outW, errW)
		// stdin: ends at the client's EOF; if the command exits first, the
		// write end is closed below and the copy ends at the next write.
		inputs.Go(func() {
			_, _ = io.Copy(inW, ss.ch)
			inW.Close()
		})
		defer inW.Close()
		copiers.Go(func() { _, _ = io.Copy(ss.ch, outR); outR.Close() })
		copiers.Go(func() { _, _ = io.Copy(ss.ch.Stderr(), errR); errR.Close() })
	}
	err = cmd.Start()
	for _, f := range closeAfterStart {
		f.Close()
	}
	if err != nil {
		ss.fail(err.Error())
		return
	}
	ss.mu.Lock()
	ss.cmd = cmd
	ss.mu.Unlock()
	pid := cmd.Process.Pid
	exited, stopped := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(stopped)
		_ = proc.StopGroup(pid, LostGrace, exited)
	})
	werr := cmd.Wait()
	close(exited)
	if !stop() {
		<-stopped // the group has had its SIGKILL
	}
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
// requests, then TERM for a PTY.
func (ss *stockSession) environ(u userInfo) []string {
	base := ss.srv.Agent.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	conn := []string{
		"USER=" + u.name, "LOGNAME=" + u.name, "HOME=" + u.home, "SHELL=" + u.shell,
		"SSH_CLIENT=" + hostPortSpaced(ss.remote) + " " + portOf(ss.local),
		"SSH_CONNECTION=" + hostPortSpaced(ss.remote) + " " + hostPortSpaced(ss.local),
	}
	var term []string
	if ss.pty != nil && ss.pty.Term != "" {
		term = []string{"TERM=" + ss.pty.Term}
	}
	return mergeEnv(base, conn, ss.env, term)
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

type userInfo struct{ name, home, shell string }

// lookupUser finds the login shell and home in /etc/passwd; the agent runs
// commands as itself, whatever user name the client gave.
func lookupUser(string) userInfo {
	u := userInfo{name: "root", home: "/", shell: "/bin/sh"}
	if cu, err := user.Current(); err == nil {
		u.name, u.home = cu.Username, cu.HomeDir
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return u
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) >= 7 && p[0] == u.name && p[6] != "" {
			if _, err := os.Stat(p[6]); err == nil {
				u.shell = p[6]
			}
		}
	}
	return u
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
