package sshd

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"

	"github.com/gangway-hpc/gangway/agent/account"
)

// How a stock session's command is connected to its channel: a PTY, or
// three pipes.

// attachPTY gives cmd a new pseudo-terminal of p's size as its
// controlling terminal and stdio (owned by a, group tty, when cmd runs
// as another user), in a session of its own, and copies between the
// PTY's master and the channel. child is the PTY's slave, for the agent
// to close once cmd has started; closeIn closes the master.
func (ss *stockSession) attachPTY(cmd *exec.Cmd, p *ptyReq, a *account.Account, copiers, inputs *sync.WaitGroup) (child []*os.File, closeIn func(), err error) {
	master, slave, err := openPTY(p.Rows, p.Cols)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot allocate a pty: %w", err)
	}
	cred := a.Credential()
	if cred != nil {
		if err := chownTTY(slave, a); err != nil {
			slave.Close()
			master.Close()
			return nil, nil, fmt.Errorf("cannot give the pty to %s: %w", a.Name, err)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred}
	ss.mu.Lock()
	ss.tty = master
	ss.mu.Unlock()
	copiers.Go(func() { _, _ = io.Copy(ss.ch, master) })
	inputs.Go(func() { _, _ = io.Copy(master, ss.ch) }) // ends when the channel closes
	return []*os.File{slave}, func() { master.Close() }, nil
}

// attachPipes gives cmd pipes for its stdin, stdout and stderr, copied
// from and to the channel, and a session of its own, as sshd gives every
// session: the command never holds the agent's controlling terminal.
// child are the command's ends, for the agent to close once cmd has
// started; closeIn closes the agent's end of stdin.
func (ss *stockSession) attachPipes(cmd *exec.Cmd, cred *syscall.Credential, copiers, inputs *sync.WaitGroup) (child []*os.File, closeIn func(), err error) {
	c, ours, err := stdioPipes()
	if err != nil {
		return nil, nil, err
	}
	inW, outR, errR := ours[0], ours[1], ours[2]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c[0], c[1], c[2]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	// stdin: ends at the client's EOF; if the command exits first, the
	// write end is closed (closeIn) and the copy ends at the next write.
	inputs.Go(func() {
		_, _ = io.Copy(inW, ss.ch)
		inW.Close()
	})
	copiers.Go(func() { _, _ = io.Copy(ss.ch, outR); outR.Close() })
	copiers.Go(func() { _, _ = io.Copy(ss.ch.Stderr(), errR); errR.Close() })
	return c[:], func() { inW.Close() }, nil
}

// stdioPipes makes a command's stdin, stdout and stderr pipes: child
// holds the ends the command gets (stdin's read end, stdout's and
// stderr's write ends), ours the agent's. On an error (out of file
// descriptors) every pipe made so far is closed.
func stdioPipes() (child, ours [3]*os.File, err error) {
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			for j := range i {
				child[j].Close()
				ours[j].Close()
			}
			return child, ours, err
		}
		if i == 0 {
			child[i], ours[i] = r, w
		} else {
			child[i], ours[i] = w, r
		}
	}
	return child, ours, nil
}

// chownTTY gives a pty's slave to a, group tty, mode 0620, as sshd does.
func chownTTY(slave *os.File, a *account.Account) error {
	gid := int(a.Gid)
	if g, err := user.LookupGroup("tty"); err == nil {
		if n, err := strconv.Atoi(g.Gid); err == nil {
			gid = n
		}
	}
	if err := slave.Chown(int(a.Uid), gid); err != nil {
		return err
	}
	return slave.Chmod(0o620)
}
