// Command launcher starts a gang of ranks over gangway agents.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gangway-hpc/gangway/agent/proc"
)

func main() {
	if code, ok := proc.Supervise(os.Args); ok { // a local job's supervisor: this binary re-executed
		os.Exit(code)
	}
	// Nothing the launcher inherited reaches a child of its own (a local
	// job's supervisors, ssh, srun, mpirun): a shell's or CI runner's
	// stray fds are close-on-exec.
	proc.CloseOnExecInherited()
	os.Exit(run(os.Args[1:], launcherSignals()))
}

// launcherSignals are the signals the launcher acts on: SIGINT, SIGTERM
// and SIGHUP stop the job, SIGUSR1 dumps every rank's stacks, SIGPIPE
// stops it when stdout or stderr is broken. A launcher started with
// SIGHUP ignored (nohup) leaves it ignored: its job outlives the
// terminal, as the user asked. The relay lives as long as the process;
// os.Exit ends it.
func launcherSignals() <-chan os.Signal {
	raw := make(chan os.Signal, 4)
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE, syscall.SIGUSR1}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	signal.Notify(raw, sigs...)
	sig := make(chan os.Signal, 2)
	go relay(raw, sig, func() bool { return brokenOutput(1, 2) })
	return sig
}

// relay passes the launcher's signals on, but SIGPIPE only when stdout or
// stderr is broken (`launcher ... | head` closed it): with SIGPIPE
// caught, Go also delivers the SIGPIPE of a write to a socket whose peer
// has gone (an agent that ended the session), which is the job's
// business, not a reason to stop it.
func relay(raw <-chan os.Signal, sig chan<- os.Signal, broken func() bool) {
	for s := range raw {
		if s == syscall.SIGPIPE && !broken() {
			continue
		}
		sig <- s
	}
}

// brokenOutput reports whether any of fds is a pipe or socket whose
// reading end has gone: poll says POLLERR (a pipe) or POLLHUP (a socket).
func brokenOutput(fds ...int) bool {
	p := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		p[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	}
	if _, err := unix.Poll(p, 0); err != nil {
		return false
	}
	for _, q := range p {
		if q.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return true
		}
	}
	return false
}
