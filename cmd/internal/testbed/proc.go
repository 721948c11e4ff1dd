package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gangway-hpc/gangway/internal/osproc"
)

// Command returns a command that runs name inside host's namespace
// (`ip netns exec <ns> name args...`; ip execs name, so the PID is name's).
// It runs in its own process group, and ctx cancellation SIGKILLs the whole
// group, so it can be used like exec.CommandContext. WaitDelay is 5s so a
// grandchild holding the output pipes cannot hang Wait. A bad host index
// makes Start fail.
func (b *Bed) Command(ctx context.Context, host int, name string, args ...string) *exec.Cmd {
	h, err := b.host(host)
	ns := h.NS
	if err != nil {
		ns = "<none>"
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	if err != nil {
		cmd.Err = err
	}
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return osproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Start starts a long-running process inside host's namespace, tracked by
// the bed: Close stops it. Its stdout and stderr are kept (the last 64 KiB)
// for Proc.Output.
func (b *Bed) Start(ctx context.Context, host int, name string, args ...string) (*Proc, error) {
	return b.StartCmd(b.Command(ctx, host, name, args...))
}

// StartCmd starts and tracks cmd, which must come from Command (possibly
// with Env, Dir, Stdin, Stdout or Stderr set). Output not directed
// elsewhere is kept for Proc.Output.
//
// When the process exits, whatever is left of its process group is
// SIGKILLed before the process is reaped, so no grandchild outlives it.
func (b *Bed) StartCmd(cmd *exec.Cmd) (*Proc, error) {
	return b.startCmd(cmd, strings.Join(cmd.Args[min(3, len(cmd.Args)):min(5, len(cmd.Args))], " "))
}

// startCmd is StartCmd with a description for messages ("<ns> <name>").
func (b *Bed) startCmd(cmd *exec.Cmd, desc string) (*Proc, error) {
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		return nil, fmt.Errorf("testbed %s: StartCmd %v: command not made by Bed.Command", b.prefix, cmd.Args)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return nil, fmt.Errorf("testbed %s: start %v: bed is closed", b.prefix, cmd.Args)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), desc: desc}
	if cmd.Stdout == nil {
		cmd.Stdout = &p.out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &p.out
	}
	// Never signal a reaped leader's group: its PGID may be reused.
	cmd.Cancel = func() error { return p.signal(syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testbed %s: start %s: %w", b.prefix, p.desc, err)
	}
	p.Pid = cmd.Process.Pid
	go p.wait()
	b.procs = append(b.procs, p)
	return p, nil
}

// Proc is a process started by Bed.Start.
type Proc struct {
	Pid int

	cmd  *exec.Cmd
	desc string // "<ns> <name>"
	out  Tail
	done chan struct{}
	err  error // from Wait; set before done is closed

	mu     sync.Mutex
	exited bool // leader has exited; never signal its group again

	stopOnce sync.Once
	stopErr  error
}

// String describes the process: "pid 123 (gwt3h0 sleep)".
func (p *Proc) String() string { return fmt.Sprintf("pid %d (%s)", p.Pid, p.desc) }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and returns exec.Cmd.Wait's error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Output returns the last 64 KiB of the process's kept stdout and stderr.
func (p *Proc) Output() string { return p.out.String() }

// wait owns the reaping: it blocks until the leader exits without reaping
// it (so its PGID cannot be reused), kills what is left of the group, then
// reaps.
func (p *Proc) wait() {
	defer close(p.done)
	if waitExited(p.Pid) == nil {
		p.mu.Lock()
		p.exited = true
		_ = osproc.KillGroup(p.Pid, syscall.SIGKILL)
		p.mu.Unlock()
	}
	p.err = p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
}

// signal sends sig to the process group unless the leader has exited.
func (p *Proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	return osproc.KillGroup(p.Pid, sig)
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, waits for
// the process, and then checks /proc until no member of its group is left
// (zombies included) and the process itself is gone. Later calls return
// the first call's result. Stop's error is about stopping; the process's
// own exit status is Wait's.
func (p *Proc) Stop(grace time.Duration) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(grace) })
	return p.stopErr
}

func (p *Proc) stop(grace time.Duration) error {
	// p.signal does nothing once the leader has exited, so the SIGKILL
	// that follows an exit within the grace never reaches a reused group.
	if err := osproc.Shutdown(p.signal, grace, p.done); err != nil {
		return fmt.Errorf("stop %s: %w", p, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stop %s: still running 10s after SIGKILL", p)
	}
	return waitGroupGone(p.Pid, 10*time.Second)
}

// waitGroupGone polls /proc until process pid is gone and no process is
// left in process group pgid = pid. Orphaned members are reaped by init,
// which can take a second or more; a zombie that outlives timeout is
// reported as left un-reaped.
func waitGroupGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left, err := groupMembers(pid)
		if err != nil {
			return err
		}
		if st, err := osproc.ReadStat(pid); err == nil && st.State == 'Z' {
			left = append(left, st) // reused PIDs are never zombies of ours
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var s []string
			for _, st := range left {
				s = append(s, st.String())
			}
			return fmt.Errorf("process group %d: left after %v: %s", pid, timeout, strings.Join(s, ", "))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// groupMembers lists the processes whose process group is pgid.
func groupMembers(pgid int) ([]osproc.Stat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var members []osproc.Stat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := osproc.ReadStat(pid)
		if err != nil {
			continue // exited while we looked
		}
		if st.Pgrp == pgid {
			members = append(members, st)
		}
	}
	return members, nil
}

// procComm returns the command name of pid, for messages.
func procComm(pid int) string {
	if st, err := osproc.ReadStat(pid); err == nil {
		return st.Comm
	}
	return "?"
}

func killPid(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Tail keeps the last Max bytes written to it (64 KiB when Max is 0);
// it is safe for concurrent writers.
type Tail struct {
	Max int
	mu  sync.Mutex
	buf []byte
}

const tailMax = 64 << 10

func (t *Tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	limit := t.Max
	if limit <= 0 {
		limit = tailMax
	}
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
