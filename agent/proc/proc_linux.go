//go:build linux

package proc

import (
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	// A session of its own (and so a process group whose id is its pid),
	// as sshd gives every session: no rank holds the agent's controlling
	// terminal, so none can open /dev/tty and push input into the shell
	// that started the agent (TIOCSTI), or be stopped by its job control.
	// Pdeathsig fires when the thread that forked the child exits; Go's
	// threads live as long as the process, so in practice it fires when the
	// agent dies, which is what we want. The agent's own cleanup is the
	// primary mechanism; this is the backstop for SIGKILL of the agent.
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// setPdeathsig sets the signal the child gets when the thread that forked
// it exits.
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) { attr.Pdeathsig = sig }

// startWithAffinity starts cmd with the given CPU set and an empty
// signal mask (startClean).
func startWithAffinity(cmd *exec.Cmd, cpus []int) error {
	return startClean(cpus, cmd.Start)
}
